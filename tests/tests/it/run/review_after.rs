//! Reviewing after an embedded run, and start-up errors that say what to fix (issue 21,
//! item 8): the summary prints the exact `airlock serve` command that brings the held
//! effects back for review, and that command works; a taken port names its flag; a bad
//! data directory names its path and the problem.

use std::process::{Command, Stdio};

use airlock_tests::{airlock_bin, loopback_policy, ok_origin, Fixture};

use super::{agent_script, output, sh_command, workspace, write_policy};

/// The shell words of `line` (POSIX single quotes only, as `airlock run` prints them).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut started) = (false, false);
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                started = true;
            }
            c if c.is_whitespace() && !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item8_embedded_run_prints_the_review_command_and_it_serves_the_held_effect() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let ws = workspace(&fx);
    let script = agent_script(origin.addr().port());
    let out = output(sh_command(&fx, &policy, &[], &ws, &script)).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "run failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let serve = stdout
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("airlock serve --data "))
        .unwrap_or_else(|| panic!("no review command in the summary:\n{stdout}"))
        .to_owned();
    let data = std::path::absolute(fx.data_dir()).expect("absolute");
    assert!(
        serve.contains(&data.display().to_string()),
        "{serve} names {}",
        data.display()
    );
    let ca = fx.dir.path().join("origin-ca.pem");
    assert!(
        serve.contains(&format!("--upstream-ca {}", ca.display())),
        "{serve} carries the run's --upstream-ca, or a commit could not verify the origin"
    );
    let run = stdout
        .lines()
        .find_map(|line| {
            let line = line.trim();
            line.strip_prefix("airlock commit ")
                .map(|rest| rest.split_whitespace().next().unwrap_or("").to_owned())
        })
        .unwrap_or_else(|| panic!("no commit command in the summary:\n{stdout}"));

    // The printed command, as printed (only the listeners moved to free ports), serves
    // the run's held effect for review.
    let words = shell_words(&serve);
    assert_eq!(words[0], "airlock");
    let mut server = Command::new(airlock_bin())
        .args(&words[1..])
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the printed airlock serve");
    let effects = airlock_tests::poll_until(std::time::Duration::from_secs(30), || {
        let (run, data) = (run.clone(), data.clone());
        async move {
            let listed = Command::new(airlock_bin())
                .args(["effects", &run, "--json", "--data"])
                .arg(&data)
                .env_remove("AIRLOCK_ADMIN")
                .env_remove("AIRLOCK_TOKEN")
                .output()
                .ok()?;
            listed
                .status
                .success()
                .then(|| String::from_utf8_lossy(&listed.stdout).into_owned())
        }
    })
    .await;
    let _ = server.kill();
    let _ = server.wait();
    let effects = effects.expect("airlock effects answered through the printed server");
    assert!(
        effects.contains("/hook") && effects.contains("staged"),
        "{effects}"
    );
    assert!(origin.received().is_empty(), "the held effect was not sent");
}

/// Starts `airlock serve` with `args` and returns its stderr once it exits (it must).
fn failed_start(fx: &Fixture, args: &[&str]) -> String {
    let policy = write_policy(fx, &loopback_policy(1));
    let out = Command::new(airlock_bin())
        .arg("serve")
        .arg("--policy")
        .arg(&policy)
        .args(args)
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .output()
        .expect("run airlock serve");
    assert!(!out.status.success(), "airlock serve started with {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn item8_a_taken_port_names_listen_or_admin() {
    let fx = Fixture::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let data = fx.data_dir();
    let data = data.to_str().expect("utf-8");
    for flag in ["--listen", "--admin"] {
        let other = if flag == "--listen" {
            "--admin"
        } else {
            "--listen"
        };
        let stderr = failed_start(&fx, &["--data", data, flag, &addr, other, "127.0.0.1:0"]);
        assert!(
            stderr.contains(&format!("cannot listen on {addr} (given by {flag})"))
                && stderr.contains("already in use")
                && stderr.contains(&format!("pass {flag} another address")),
            "{flag}: {stderr}"
        );
    }
}

#[test]
fn item8_data_directory_errors_name_the_path_and_the_problem() {
    let fx = Fixture::new();
    let file = fx.dir.path().join("a-regular-file");
    std::fs::write(&file, "not a directory").expect("write");
    let listeners = ["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"];

    let mut args = vec!["--data", file.to_str().expect("utf-8")];
    args.extend(listeners);
    let stderr = failed_start(&fx, &args);
    assert!(
        stderr.contains(&format!("cannot use data directory {}", file.display()))
            && stderr.contains("exists and is not a directory"),
        "{stderr}"
    );

    let under = file.join("data");
    let mut args = vec!["--data", under.to_str().expect("utf-8")];
    args.extend(listeners);
    let stderr = failed_start(&fx, &args);
    assert!(
        stderr.contains(&format!("cannot use data directory {}", under.display()))
            && stderr.contains(&format!("{} is a file, not a directory", file.display())),
        "{stderr}"
    );
}
