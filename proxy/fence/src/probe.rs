//! Whether a fence can be made here ([`probe`]), and the probe's memory for the boot.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::host::{is_root, mapped_flags, tool};
use crate::Network;

/// Why a fence cannot be made on this machine, naming what is missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// How [`probe`]'s refusal for missing idmapped mounts begins.
const IDMAP_UNAVAILABLE: &str = "idmapped mounts are unavailable here";

impl Unavailable {
    /// Whether the namespaces could be made but root's fence could not (no idmapped
    /// mounts): then the run must not fall back to `env`, where the command would be host
    /// root too, but be refused, naming `--allow-host-root`.
    pub fn is_idmap(&self) -> bool {
        self.0.starts_with(IDMAP_UNAVAILABLE)
    }
}

fn on_path(program: &str) -> bool {
    tool(program).is_absolute()
}

/// Runs `program args` with `stdin` fed; `Err` with its stderr when it fails.
fn run_with_input(program: &str, args: &[&str], stdin: &str) -> Result<(), String> {
    let mut child = Command::new(tool(program))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if let Some(mut input) = child.stdin.take() {
        use std::io::Write as _;
        let _ = input.write_all(stdin.as_bytes());
    }
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
    }
}

/// Checks that a fence of `network` can be made here: `unshare` (util-linux), `ip`
/// (iproute2) and, for `isolated`, `nft` (nftables) are on `PATH`, and the kernel lets
/// this process make the fence's namespaces, its rules and the command's nested
/// namespace (user namespaces must be enabled). As root it first installs the rules once
/// in a throwaway network namespace: that loads the nftables modules, which a user
/// namespace cannot. A success is remembered for the boot (`probe_marker`).
///
/// # Errors
/// [`Unavailable`] naming the missing program or the kernel's refusal.
pub fn probe(network: Network, checks: &Checks<'_>) -> Result<(), Unavailable> {
    let mut needed = vec![("unshare", "util-linux"), ("ip", "iproute2")];
    if network == Network::Isolated {
        needed.push(("nft", "nftables"));
    }
    for (program, package) in needed {
        if !on_path(program) {
            return Err(Unavailable(format!(
                "`{program}` is not on PATH (install {package})"
            )));
        }
    }
    let remap = is_root() && !checks.host_root;
    let marker = probe_marker(network, remap, checks.state_dir);
    if marker
        .as_ref()
        .is_some_and(|m| m.symlink_metadata().is_ok())
    {
        return Ok(());
    }
    if remap {
        let temp = std::env::temp_dir();
        let mut paths = vec![Path::new("/"), temp.as_path()];
        paths.extend(checks.workspace);
        crate::idmap::probe(&paths).map_err(|why| {
            Unavailable(format!(
                "{IDMAP_UNAVAILABLE} ({why}), so the command cannot run as a non-root host uid while it writes the workspace; Linux 5.12+ and a filesystem that takes them (ext4, xfs, btrfs, tmpfs) are needed, or --allow-host-root, which runs the command as host root (docs/containment.md)"
            ))
        })?;
    }
    if network == Network::Isolated && is_root() {
        run_with_input(
            "unshare",
            &["--net", "nft", "-f", "-"],
            &crate::setup::ruleset(),
        )
        .map_err(|why| {
            Unavailable(format!(
                "nftables cannot install the fence's rules ({why}); the kernel needs \
                     nf_tables with nat and redirect"
            ))
        })?;
    }
    // The whole fence in miniature: the namespaces, lo, the rules (isolated) and the
    // command's nested namespace.
    // By absolute path: `nft` and `ip` live in /usr/sbin, which an ordinary user's PATH
    // often lacks.
    let (ip, nft, unshare) = (tool("ip"), tool("nft"), tool("unshare"));
    let nested = format!(
        "exec '{}' --user --map-root-user --mount /bin/true",
        unshare.display()
    );
    let inner = match network {
        Network::Isolated => format!(
            "'{}' link set lo up && '{}' -f - && {nested}",
            ip.display(),
            nft.display()
        ),
        _ => format!("'{}' link set lo up && {nested}", ip.display()),
    };
    let flags = mapped_flags();
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend(["--", "/bin/sh", "-c", &inner]);
    run_with_input("unshare", &args, &crate::setup::ruleset()).map_err(|why| {
        Unavailable(format!(
            "the kernel refused the fence's namespaces or rules ({why}); enable user \
             namespaces (user.max_user_namespaces > 0; kernel.unprivileged_userns_clone=1 on \
             Debian kernels; kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu) and \
             nf_tables with nat, or allow unshare in the container (docs/containment.md)"
        ))
    })?;
    if let Some(marker) = &marker {
        // A new file only, never through a symlink: O_CREAT | O_EXCL | O_NOFOLLOW.
        use std::os::unix::fs::OpenOptionsExt as _;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(marker);
    }
    Ok(())
}

/// What [`probe`] checks beyond the tools and namespaces.
#[derive(Debug, Clone, Copy, Default)]
pub struct Checks<'a> {
    /// `--allow-host-root`: under root, the command may run as host root (today's
    /// single-id mapping), so idmapped mounts are not needed.
    pub host_root: bool,
    /// Where the probe's memory may be kept when `$XDG_RUNTIME_DIR` is not usable (the
    /// data directory); `None` keeps none there.
    pub state_dir: Option<&'a Path>,
    /// The workspace, whose filesystem must take idmapped mounts under root.
    pub workspace: Option<&'a Path>,
}

/// Whether `dir` is a directory (not a symlink) that only this user can write: owned by
/// the effective user, not writable by group or others.
fn private_to_user(dir: &Path) -> bool {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    dir.symlink_metadata().is_ok_and(|m| {
        m.is_dir()
            && m.uid() == rustix::process::geteuid().as_raw()
            && m.permissions().mode() & 0o022 == 0
    })
}

/// The file that says a fence of this kind was made on this boot by this user, so later
/// runs skip the probe (~20 ms): in `$XDG_RUNTIME_DIR`, or else in `state_dir` (the data
/// directory), each only when it is a directory only this user can write, so no other
/// user can plant a file or a symlink there; `None` when neither is, or the boot cannot
/// be told apart (the probe then runs every time). A fence that stopped working since
/// fails its step: it never runs the command unfenced.
fn probe_marker(network: Network, remap: bool, state_dir: Option<&Path>) -> Option<PathBuf> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let user = rustix::process::geteuid().as_raw();
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute() && private_to_user(dir));
    let dir = runtime.or_else(|| state_dir.filter(|d| private_to_user(d)).map(Path::to_owned))?;
    Some(dir.join(format!(
        "airlock-fence-probed-{}-{user}-{}{}",
        boot.trim(),
        network.as_str(),
        if remap { "-idmap" } else { "" }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_directory_must_be_the_users_alone() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("dir");
        let private = dir.path().join("private");
        std::fs::create_dir(&private).expect("mkdir");
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        assert!(private_to_user(&private));
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        assert!(!private_to_user(&shared), "a directory others can write");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&private, &link).expect("symlink");
        assert!(!private_to_user(&link), "a symlink to a private directory");
        let marker = probe_marker(Network::Isolated, true, Some(&shared));
        assert!(
            marker.as_ref().is_none_or(|m| !m.starts_with(&shared)),
            "a marker in a shared directory: {marker:?}"
        );
    }
}
