//! The host as the fence's other modules see it: whether this process is root, where the
//! fence's tools are, and `unshare`'s namespace flags. A leaf: it uses no other module of
//! the crate, so the probe, the id maps and the setup can share it with the launch.

use std::path::PathBuf;

/// Whether the process is root (its effective uid is 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `unshare`'s namespace flags: user, network, mount, PID (with a fresh `/proc`), IPC
/// (SysV IPC and POSIX message queues of its own), UTS (its own host name) and cgroup (its
/// own view of `/proc/self/cgroup`). As an ordinary user `--map-root-user` is added: the
/// caller is root inside. Under root the namespace is mapped from outside
/// (the `root` module).
pub(crate) const UNSHARE_FLAGS: [&str; 10] = [
    "--user",
    "--net",
    "--mount",
    "--pid",
    "--ipc",
    "--uts",
    "--cgroup",
    "--fork",
    "--kill-child",
    "--mount-proc",
];

/// [`UNSHARE_FLAGS`] with `--map-root-user`, as an ordinary user starts the fence.
pub(crate) fn mapped_flags() -> Vec<String> {
    let mut flags: Vec<String> = UNSHARE_FLAGS.iter().map(|f| (*f).to_owned()).collect();
    flags.insert(1, "--map-root-user".to_owned());
    flags
}

/// Where the fence's tools are looked for before `PATH`: system directories only root can
/// write, so a directory early on a user's `PATH` cannot stand in for `unshare`, `ip` or
/// `nft` (which run with the fence's privileges).
const SYSTEM_DIRS: [&str; 4] = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// The absolute path of `program`: the first of the system directories (`/usr/sbin`,
/// `/usr/bin`, `/sbin`, `/bin`) that holds it, else the first on `PATH`, else the bare
/// name (which then fails to start with a clear error).
pub fn tool(program: &str) -> PathBuf {
    let system = SYSTEM_DIRS.iter().map(PathBuf::from);
    let path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default();
    system
        .chain(path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| PathBuf::from(program))
}
