//! Inside the fence, before the command starts: `lo`, routes, nftables and mounts.

use std::io::Write as _;
use std::process::{Child, Command, Stdio};

use airlock_net::fence::{POOL_BASE, POOL_PREFIX};

use crate::{FenceError, Mount, Network, RELAY_PORT};

/// The fence's nftables ruleset (isolated): TCP to any address but the fence's own
/// loopback is redirected to the relay; UDP to anything but loopback (airlock's DNS is
/// on `127.0.0.1:53`) is rejected, so QUIC falls back to TCP at once; ICMP out is
/// dropped. The filter's policy accepts: replies of redirected connections are addressed
/// to the fence's own `198.18.0.1`, and nothing can leave `lo` in any case.
pub(crate) fn ruleset() -> String {
    format!(
        "table inet airlock_fence {{
  chain nat_output {{
    type nat hook output priority -100; policy accept;
    ip daddr 127.0.0.0/8 return
    meta nfproto ipv4 meta l4proto tcp redirect to :{RELAY_PORT}
  }}
  chain output {{
    type filter hook output priority 0; policy accept;
    ip daddr 127.0.0.0/8 accept
    ip6 daddr ::1 accept
    meta l4proto udp reject
    meta l4proto {{ icmp, ipv6-icmp }} drop
  }}
}}
"
    )
}

/// A tool started with its input fed, not yet waited for.
struct Started {
    program: &'static str,
    args: &'static [&'static str],
    child: Child,
}

/// Starts `program` with `stdin` fed (then closed).
fn start(
    program: &'static str,
    args: &'static [&'static str],
    stdin: &str,
) -> Result<Started, FenceError> {
    let mut child = Command::new(crate::host::tool(program))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| FenceError::Setup(format!("cannot run {program}: {e}")))?;
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin.as_bytes());
    }
    Ok(Started {
        program,
        args,
        child,
    })
}

impl Started {
    /// Waits for the tool, failing with its stderr.
    fn finish(self) -> Result<(), FenceError> {
        let Started {
            program,
            args,
            child,
        } = self;
        let output = child
            .wait_with_output()
            .map_err(|e| FenceError::Setup(format!("{program}: {e}")))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(FenceError::Setup(format!(
                "{program} {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            )))
        }
    }
}

/// The fence's network being set up by `ip` and `nft` (started by [`network`]); PID 1
/// builds the rest of the fence meanwhile and calls [`PendingNetwork::finish`] before anything
/// can use the network.
#[must_use = "the network is set up only once finish() succeeded"]
pub(crate) struct PendingNetwork(Vec<Started>);

impl PendingNetwork {
    /// Waits for `ip` and `nft`.
    ///
    /// # Errors
    /// [`FenceError::Setup`] naming the tool that failed and its stderr (the first one
    /// that failed; both are always waited for).
    pub(crate) fn finish(self) -> Result<(), FenceError> {
        let mut first = Ok(());
        for started in self.0 {
            let result = started.finish();
            if first.is_ok() {
                first = result;
            }
        }
        first
    }
}

/// Starts bringing `lo` up; in `isolated`, adding the pool's first address and a default
/// route over `lo` (so a connection to any address reaches the redirect instead of
/// failing with ENETUNREACH), and installing [`ruleset`]. `ip` and `nft` run at once (the
/// ruleset names no address or link), and beside the rest of PID 1's setup, so their
/// start-up (about 10 ms) no longer adds up.
///
/// # Errors
/// [`FenceError::Setup`] when a tool cannot be started; its own failure is reported by
/// [`PendingNetwork::finish`].
pub(crate) fn network(network: Network) -> Result<PendingNetwork, FenceError> {
    let mut batch = String::from("link set lo up\n");
    if network == Network::Isolated {
        let first = std::net::Ipv4Addr::from(u32::from(POOL_BASE) + 1);
        batch.push_str(&format!("address add {first}/{POOL_PREFIX} dev lo\n"));
        batch.push_str("route add default dev lo\n");
    }
    let mut started = vec![start("ip", &["-batch", "-"], &batch)?];
    if network == Network::Isolated {
        match start("nft", &["-f", "-"], &ruleset()) {
            Ok(nft) => started.push(nft),
            Err(error) => {
                let _ = PendingNetwork(started).finish();
                return Err(error);
            }
        }
    }
    Ok(PendingNetwork(started))
}

/// Lets the command bind ports below 1024 on the fence's loopback (it holds no
/// capability over the fence's network namespace, and a test server on port 80 is
/// common). Best effort: a kernel without the sysctl keeps its default.
pub(crate) fn low_ports() {
    let _ = std::fs::write("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0");
}

/// Covers each directory of `dirs` with an empty tmpfs and each file of `files` with
/// `/dev/null`, so the command cannot reach what they held. `$XDG_RUNTIME_DIR`, when a
/// covered directory held it, is made again (empty, mode 0700) for programs that need it.
pub(crate) fn hide(
    dirs: &[std::path::PathBuf],
    files: &[std::path::PathBuf],
) -> Result<(), FenceError> {
    use rustix::mount::{mount, MountFlags};
    for dir in dirs {
        mount(
            "tmpfs",
            dir,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            Some(c"mode=0755"),
        )
        .map_err(|e| FenceError::Setup(format!("cannot hide {}: {e}", dir.display())))?;
    }
    for file in files {
        rustix::mount::mount_bind("/dev/null", file)
            .map_err(|e| FenceError::Setup(format!("cannot hide {}: {e}", file.display())))?;
    }
    if let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR").map(std::path::PathBuf::from) {
        if dirs.iter().any(|d| runtime.starts_with(d)) {
            let _ = std::fs::create_dir_all(&runtime);
            use std::os::unix::fs::PermissionsExt as _;
            let _ = std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700));
        }
    }
    Ok(())
}

/// Bind-mounts each source over its target (the mount namespace is private: `unshare`
/// makes propagation private, so nothing shows outside the fence).
pub(crate) fn mounts(mounts: &[Mount]) -> Result<(), FenceError> {
    for mount in mounts {
        rustix::mount::mount_bind(&mount.source, &mount.target).map_err(|e| {
            FenceError::Setup(format!(
                "cannot mount {} over {}: {e}",
                mount.source.display(),
                mount.target.display()
            ))
        })?;
    }
    Ok(())
}

/// `/proc` and `/sys` paths covered as runc's default `maskedPaths` covers them: files
/// with `/dev/null`, directories with an empty read-only tmpfs. They show the host's
/// kernel (memory, keys, timers, devices), which a fence has no need of.
pub const MASKED: [&str; 11] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// `/proc` paths bound read-only onto themselves, as runc's default `readonlyPaths`:
/// the kernel's settings (`/proc/sys`) and triggers (`/proc/sysrq-trigger`).
pub const READ_ONLY: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Masks [`MASKED`] and binds [`READ_ONLY`] read-only, each that exists, after the fence's
/// own settings are written. The command's mount namespace inherits them locked: it cannot
/// unmount or remount them.
pub(crate) fn mask_proc() -> Result<(), FenceError> {
    use rustix::mount::{mount, mount_bind, mount_remount, MountFlags};
    for path in MASKED {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        let result = if meta.is_dir() {
            mount(
                "tmpfs",
                path,
                "tmpfs",
                MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                Some(c"size=0,mode=0555"),
            )
        } else {
            mount_bind("/dev/null", path)
        };
        result.map_err(|e| {
            FenceError::Setup(format!(
                "cannot mask {path}: {e} (PID 1 holds capabilities: {})",
                crate::idmap::capable()
            ))
        })?;
    }
    for path in READ_ONLY {
        if std::fs::symlink_metadata(path).is_err() {
            continue;
        }
        mount_bind(path, path)
            .and_then(|()| {
                mount_remount(
                    path,
                    MountFlags::BIND
                        | MountFlags::RDONLY
                        | MountFlags::NOSUID
                        | MountFlags::NODEV
                        | MountFlags::NOEXEC,
                    c"",
                )
            })
            .map_err(|e| FenceError::Setup(format!("cannot make {path} read-only: {e}")))?;
    }
    Ok(())
}
