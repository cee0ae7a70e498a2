//! An unprivileged user to run airlock as, for the tests of an ordinary user's fence
//! (issue 35: "also as an unprivileged user that `.ci/run` creates").
//!
//! `.ci/run` creates the user `airlock-ci` (no password, no sudo); `AIRLOCK_TEST_USER`
//! names another. The tests run as root (CI does) and start `airlock serve` and `airlock
//! run` as that user: the binary is copied where the user can execute it, and the test's
//! directory is given to the user.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// An unprivileged user: its name and ids.
#[derive(Debug, Clone)]
pub struct TestUser {
    /// The login name.
    pub name: String,
    /// Its uid (never 0).
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
}

fn id(flag: &str, name: &str) -> Option<u32> {
    let out = Command::new("id").args([flag, name]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The user the tests run airlock as: `AIRLOCK_TEST_USER`, else `airlock-ci`.
///
/// # Errors
/// Why there is none: the tests are not root (they cannot switch users), the user does
/// not exist, or it is root.
pub fn test_user() -> Result<TestUser, String> {
    named(&std::env::var("AIRLOCK_TEST_USER").unwrap_or_else(|_| "airlock-ci".to_owned()))
}

/// The user `name`, as [`test_user`] checks it.
///
/// # Errors
/// As [`test_user`]'s.
pub fn named(name: &str) -> Result<TestUser, String> {
    use std::os::unix::fs::MetadataExt as _;
    if std::fs::metadata("/proc/self").map_or(true, |m| m.uid() != 0) {
        return Err("the tests are not root, so they cannot run airlock as another user".into());
    }
    let name = name.to_owned();
    match (id("-u", &name), id("-g", &name)) {
        (Some(uid), Some(gid)) if uid != 0 => Ok(TestUser { name, uid, gid }),
        (Some(_), Some(_)) => Err(format!("{name} is root")),
        _ => Err(format!(
            "no user {name} (`.ci/run` creates it: useradd --create-home {name})"
        )),
    }
}

/// A copy of [`crate::airlock_bin`] the user can execute: in `$TMPDIR/airlock-test-bin-SIZE-MTIME/`
/// (mode 0755, owned by root), made once per build and shared by the tests that need it.
pub fn user_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let bin = crate::airlock_bin();
        let meta = std::fs::metadata(&bin).expect("airlock binary");
        let dir = std::env::temp_dir().join(format!(
            "airlock-test-bin-{}-{}",
            meta.size(),
            meta.mtime_nsec() + meta.mtime() * 1_000_000_000
        ));
        let copy = dir.join("airlock");
        if !copy.exists() {
            std::fs::create_dir_all(&dir).expect("binary directory");
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                .expect("binary directory mode");
            let partial = dir.join(format!("airlock.{}", std::process::id()));
            std::fs::copy(&bin, &partial).expect("copy the airlock binary");
            std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))
                .expect("binary mode");
            std::fs::rename(&partial, &copy).expect("place the airlock binary");
        }
        copy
    })
    .clone()
}

/// Gives `dir` and everything in it to `user` (`chown -R`).
pub fn give(dir: &Path, user: &TestUser) {
    let status = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", user.uid, user.gid))
        .arg(dir)
        .status()
        .expect("chown");
    assert!(status.success(), "chown -R {} failed", dir.display());
}
