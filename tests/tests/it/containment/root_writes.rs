//! Issue 35, continued: under root's fence the agent still writes what it needs outside
//! the workspace (`~/.cache`, `pip install`, `npm install -g`), all of it in the run's
//! layer and none on the host, and `--keep-outside` brings back only what it names, only
//! when the run is kept. The helpers are `root`'s.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::root::{root_fence, unique, written, Restore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_fence_the_agent_still_writes_its_cache_and_pip_installs_from_a_local_source() {
    let test = "root_fence_the_agent_still_writes_its_cache_and_pip_installs_from_a_local_source";
    let Some(fenced) = root_fence(test).await else {
        return;
    };
    // A wheel made here (a zip: the module, METADATA, WHEEL, RECORD), so pip needs
    // neither an index nor setuptools to install it.
    let module = unique("mod").replace('-', "_");
    let wheel = fenced
        .fx
        .dir
        .path()
        .join(format!("{module}-1.0-py3-none-any.whl"));
    let build = format!(
        "import zipfile\n\
         m, d = '{module}', '{module}-1.0.dist-info'\n\
         with zipfile.ZipFile('{w}', 'w') as z:\n\
         \x20   z.writestr(m + '/__init__.py', 'VALUE = 42\\n')\n\
         \x20   z.writestr(d + '/METADATA', 'Metadata-Version: 2.1\\nName: ' + m + '\\nVersion: 1.0\\n')\n\
         \x20   z.writestr(d + '/WHEEL', 'Wheel-Version: 1.0\\nGenerator: airlock-tests\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
         \x20   z.writestr(d + '/RECORD', m + '/__init__.py,,\\n' + d + '/METADATA,,\\n' + d + '/WHEEL,,\\n' + d + '/RECORD,,\\n')\n",
        w = wheel.display()
    );
    let built = Command::new("python3")
        .args(["-c", &build])
        .output()
        .expect("python3");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let pkg = wheel;
    let script = format!(
        "mkdir -p $HOME/.cache/agent && echo cached > $HOME/.cache/agent/x && cat $HOME/.cache/agent/x > cache.txt; \
         python3 -m pip install --no-index --break-system-packages {pkg} > pip.log 2>&1; echo $? > pip.code; \
         python3 -c 'import {module}; print({module}.VALUE)' > import.txt 2>&1; true",
        pkg = pkg.display()
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert_eq!(fenced.read("cache.txt"), "cached");
    let home = fenced.fx.dir.path().join("home");
    assert!(
        !home.join(".cache/agent").exists(),
        "the cache reached the host"
    );
    let written = written(&ran);
    assert!(
        written.iter().any(|p| p.ends_with(".cache/agent/x")),
        "{written:?}"
    );
    let pip_ok = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if pip_ok {
        assert_eq!(fenced.read("pip.code"), "0", "{}", fenced.read("pip.log"));
        assert_eq!(
            fenced.read("import.txt"),
            "42",
            "{}",
            fenced.read("pip.log")
        );
        let host = Command::new("python3")
            .args(["-c", &format!("import {module}")])
            .output()
            .expect("python3");
        assert!(
            !host.status.success(),
            "the package was installed on the host"
        );
        assert!(
            written.iter().any(|p| p.contains(&module)),
            "the install is listed: {written:?}"
        );
    } else {
        eprintln!("{test}: no pip here; pip install not tried");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_fence_npm_installs_a_local_package_globally_into_the_layer_only() {
    let test = "root_fence_npm_installs_a_local_package_globally_into_the_layer_only";
    if !Command::new("npm")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        assert!(!airlock_tests::in_ci(), "{test} needs npm in CI");
        eprintln!("SKIPPED {test}: no npm");
        return;
    }
    let Some(fenced) = root_fence(test).await else {
        return;
    };
    // A package packed here (`npm pack` of a directory), installed from its tarball offline.
    let name = format!("airlock-npm-probe-{}", std::process::id());
    let pkg = fenced.fx.dir.path().join("npmpkg");
    std::fs::create_dir_all(&pkg).expect("pkg");
    std::fs::write(
        pkg.join("package.json"),
        format!(r#"{{"name":"{name}","version":"1.0.0","bin":{{"{name}":"cli.js"}}}}"#),
    )
    .expect("package.json");
    std::fs::write(
        pkg.join("cli.js"),
        "#!/usr/bin/env node\nconsole.log('npm-ok')\n",
    )
    .expect("cli.js");
    let packed = Command::new("npm")
        .args(["pack", "--silent"])
        .current_dir(&pkg)
        .env("HOME", fenced.fx.dir.path().join("home"))
        .output()
        .expect("npm pack");
    assert!(
        packed.status.success(),
        "{}",
        String::from_utf8_lossy(&packed.stderr)
    );
    let tarball = pkg.join(format!("{name}-1.0.0.tgz"));
    let prefix = Command::new("npm")
        .args(["prefix", "-g"])
        .output()
        .expect("npm prefix");
    let prefix = String::from_utf8_lossy(&prefix.stdout).trim().to_owned();
    let bin = Path::new(&prefix).join("bin").join(&name);
    let _restore = Restore::new(&bin);
    let script = format!(
        "npm install -g --offline --no-audit --no-fund {} > npm.log 2>&1; echo $? > npm.code; \
         {name} > ran.txt 2>&1; true",
        tarball.display()
    );
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    assert_eq!(fenced.read("npm.code"), "0", "{}", fenced.read("npm.log"));
    assert_eq!(
        fenced.read("ran.txt"),
        "npm-ok",
        "{}",
        fenced.read("npm.log")
    );
    assert!(
        bin.symlink_metadata().is_err(),
        "{} reached the host",
        bin.display()
    );
    let written = written(&ran);
    assert!(
        written.contains(&bin.display().to_string()),
        "{} not in written_outside: {written:?}",
        bin.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_fence_keep_outside_copies_only_the_named_path_and_only_when_the_run_is_kept() {
    let test = "root_fence_keep_outside_copies_only_the_named_path_and_only_when_the_run_is_kept";
    let Some(fenced) = root_fence(test).await else {
        return;
    };
    let kept = PathBuf::from("/usr/local/bin").join(unique("kept"));
    let other = PathBuf::from("/usr/local/bin").join(unique("other"));
    let (_kept, _other) = (Restore::new(&kept), Restore::new(&other));
    let script = format!(
        "echo kept > {k}; echo other > {o}",
        k = kept.display(),
        o = other.display()
    );
    let keep = kept.display().to_string();
    // A failed run is rolled back: nothing is copied.
    let failed = fenced
        .run(
            "isolated",
            &["--keep-outside", &keep],
            &format!("{script}; exit 3"),
        )
        .await;
    assert!(!failed.out.status.success());
    assert!(!kept.exists(), "a rolled-back run kept {}", kept.display());
    let ran = fenced
        .run("isolated", &["--keep-outside", &keep], &script)
        .await;
    ran.assert_success();
    assert_eq!(
        std::fs::read_to_string(&kept).unwrap_or_default(),
        "kept\n",
        "{:#}",
        ran.report["written_outside"]
    );
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(&kept).expect("kept");
    assert_eq!(
        (meta.uid(), meta.gid()),
        (0, 0),
        "the subordinate ids are shifted back to root's"
    );
    assert!(
        !other.exists(),
        "{} was not named, yet kept",
        other.display()
    );
    assert_eq!(ran.report["written_outside"]["kept"][0], keep);
}
