//! `airlock run --snapshot overlay`: the command and verify run on an overlayfs mount in
//! their own mount namespace (in the fence); a failed verify drops the upper directory,
//! a passing run merges it into the workspace; where the overlay cannot be made, the run
//! says why and names `dir` instead of falling back (docs/run.md, "The overlay driver").
//! Needs root, as the driver does.

use std::process::Command;

use airlock_tests::{loopback_policy, ok_origin, Fixture};

use super::{agent_script, json_report, output, sh_command, tree, workspace, write_policy};

/// The file part of the agent, plus a directory replaced whole and a new symlink.
const FILES: &str = "echo changed >> README && echo new > added.txt && mkdir -p out/deep \
                     && echo x > out/deep/f && rm delete-me && chmod 600 src/main.txt \
                     && rm -rf src && mkdir src && echo other > src/other.txt \
                     && ln -s added.txt link2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_overlay_driver_rolls_back_a_failed_verify_and_merges_a_passing_run() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let ws = workspace(&fx);
    let before = tree(&ws);

    // Verify sees the command's writes (it runs on the same overlay), and fails.
    let script = agent_script(origin.addr().port());
    let command = sh_command(
        &fx,
        &policy,
        &[
            "--json",
            "--snapshot",
            "overlay",
            // overlayfs takes no idmapped mount: under root the fence needs this flag.
            "--allow-host-root",
            "--verify",
            "test -f added.txt && exit 3",
        ],
        &ws,
        &script,
    );
    let out = output(command).await;
    let report = json_report(&out);
    assert_eq!(out.status.code(), Some(3), "{report:#}");
    assert_eq!(report["decision"]["kind"], "rollback", "{report:#}");
    assert_eq!(report["rollback_unverified"], false, "{report:#}");
    let changes = &report["decision"]["changes"];
    assert!(
        changes["added"]
            .as_array()
            .expect("the test's own setup or step")
            .contains(&"added.txt".into()),
        "{changes:#}"
    );
    assert!(
        changes["deleted"]
            .as_array()
            .expect("the test's own setup or step")
            .contains(&"delete-me".into()),
        "{changes:#}"
    );
    assert_eq!(tree(&ws), before, "the rollback left the workspace changed");

    // The same files, verified: merged into the workspace as a plain run would leave it.
    let twin = fx.dir.path().join("twin");
    std::fs::create_dir_all(&twin).expect("the test's own setup or step");
    let copied = Command::new("cp")
        .args([
            "-a",
            &format!("{}/.", ws.display()),
            &twin.display().to_string(),
        ])
        .status()
        .expect("the test's own setup or step");
    assert!(copied.success());
    let plain = Command::new("sh")
        .args(["-c", FILES])
        .current_dir(&twin)
        .status()
        .expect("the test's own setup or step");
    assert!(plain.success());
    let command = sh_command(
        &fx,
        &policy,
        &[
            "--json",
            "--snapshot",
            "overlay",
            // overlayfs takes no idmapped mount: under root the fence needs this flag.
            "--allow-host-root",
            "--verify",
            "test -f src/other.txt && test ! -e delete-me",
        ],
        &ws,
        FILES,
    );
    let out = output(command).await;
    let report = json_report(&out);
    assert!(out.status.success(), "{report:#}");
    assert_eq!(report["decision"]["kind"], "keep", "{report:#}");
    let outcome = report["decision"]["outcome"].as_str().unwrap_or("");
    assert!(
        outcome.contains("merged into the workspace and checked"),
        "{outcome}"
    );
    assert_eq!(tree(&ws), tree(&twin));
}

/// Unmounts the directory when dropped (lazily).
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_overlay_driver_unavailable_says_why_and_names_dir_without_falling_back() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    // The workspace on a tmpfs of its own: not the data directory's filesystem.
    let ws = fx.dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("the test's own setup or step");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&ws)
        .status()
        .expect("the test's own setup or step");
    assert!(
        mounted.success(),
        "mount a tmpfs on the test's own directory"
    );
    let _tmpfs = Mounted(ws.clone());
    std::fs::write(ws.join("README"), "read me\n").expect("the test's own setup or step");
    let command = sh_command(
        &fx,
        &policy,
        &["--snapshot", "overlay", "--allow-host-root"],
        &ws,
        "echo ran > ran.txt",
    );
    let out = output(command).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("different filesystem"), "{stderr}");
    assert!(stderr.contains("--snapshot dir"), "{stderr}");
    assert!(
        !ws.join("ran.txt").exists(),
        "the command ran without its overlay"
    );
}

/// `--scope root` (docs/run.md, "The whole filesystem: `--scope root`"): the agent also
/// writes outside the workspace (a directory of the test standing for `/opt/cache`) and
/// stages its webhook through the fence. A failed verify drops it all; a passing run
/// merges the workspace and reports the outside write, unapplied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_overlay_root_scope_drops_writes_outside_the_workspace_and_reports_them_on_keep() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let ws = workspace(&fx);
    let before = tree(&ws);
    let cache = fx.dir.path().join("opt-cache");
    std::fs::create_dir_all(&cache).expect("the test's own setup or step");
    let script = format!(
        "echo cached > {}/x && {}",
        cache.display(),
        agent_script(origin.addr().port())
    );
    // overlayfs takes no idmapped mount: under root the fence needs --allow-host-root.
    let root = [
        "--json",
        "--snapshot",
        "overlay",
        "--scope",
        "root",
        "--allow-host-root",
    ];
    let verify = format!(
        "test -f {}/x && test -f added.txt && exit 3",
        cache.display()
    );
    let args: Vec<&str> = root.iter().copied().chain(["--verify", &verify]).collect();
    let out = output(sh_command(&fx, &policy, &args, &ws, &script)).await;
    let report = json_report(&out);
    // Verify saw the command's write outside the workspace, and failed.
    assert_eq!(out.status.code(), Some(3), "{report:#}");
    assert_eq!(report["decision"]["kind"], "rollback", "{report:#}");
    assert_eq!(report["rollback_unverified"], false, "{report:#}");
    assert_eq!(report["containment"]["network"], "isolated", "{report:#}");
    assert_eq!(tree(&ws), before, "the rollback left the workspace changed");
    assert!(
        !cache.join("x").exists(),
        "the write outside the workspace reached the host"
    );

    let args: Vec<&str> = root
        .iter()
        .copied()
        .chain(["--verify", "test -f added.txt"])
        .collect();
    let out = output(sh_command(&fx, &policy, &args, &ws, &script)).await;
    let report = json_report(&out);
    assert!(out.status.success(), "{report:#}");
    assert_eq!(report["decision"]["kind"], "keep", "{report:#}");
    let outcome = report["decision"]["outcome"].as_str().unwrap_or("");
    assert!(
        outcome.contains("merged into the workspace and checked"),
        "{outcome}"
    );
    assert!(
        outcome.contains("outside the workspace was NOT applied"),
        "{outcome}"
    );
    let line = format!(
        "not applied: {}/x (written outside the workspace)",
        cache.display()
    );
    let residue = report["decision"]["residue"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        residue.contains(&line.clone().into()),
        "{line} not in {residue:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("added.txt")).expect("merged"),
        "new\n"
    );
    assert!(
        !cache.join("x").exists(),
        "the keep applied a write outside the workspace"
    );
    // The webhook went through the fence (its socket passed through the overlay).
    let effects = report["effects"].as_array().cloned().unwrap_or_default();
    assert_eq!(effects.len(), 1, "{report:#}");
}
