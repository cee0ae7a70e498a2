//! The fence's PID 1 (`airlock fence-init SPEC`, started by `unshare` from
//! [`launch`](crate::launch)): setup, the relay, the command, then the leftovers.
//!
//! As PID 1 of its PID namespace it cannot be killed from inside (the kernel ignores
//! signals to a namespace's init that it has no handler for), and when it exits the
//! kernel kills every process left in the namespace.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::{TcpListener, UdpSocket};

use crate::relay::{self, Counts, Upstream};
use crate::{FenceError, Network, Report, Spec, DNS_PORT, RELAY_PORT};

/// Runs the fence from the spec in [`SPEC_VAR`](crate::launch::SPEC_VAR) and returns the
/// exit code for the process: the command's, or 125 when the fence could not be set up
/// (the report says why).
pub async fn run() -> i32 {
    let started = Instant::now();
    let spec = match read_spec() {
        Ok(spec) => spec,
        Err(error) => {
            eprintln!("airlock fence: {error}");
            return 125;
        }
    };
    if spec.root.as_ref().is_some_and(|r| r.shift) && !crate::idmap::capable() {
        // Root's fence is mapped from outside (`fence-root`), maybe after this process was
        // executed, and then it holds no capability in its namespace: once mapped, it is
        // root there, and executing itself again gives it root's capabilities
        // (capabilities(7)). Whether it holds them is what counts, not whether the map is
        // there yet: the map may have been written just after the exec.
        let error = match crate::idmap::wait_for_own_map() {
            Ok(()) => {
                use std::os::unix::process::CommandExt as _;
                std::process::Command::new("/proc/self/exe")
                    .arg("fence-init")
                    .exec()
                    .to_string()
            }
            Err(error) => error.to_string(),
        };
        eprintln!("airlock fence: {error}");
        return 125;
    }
    // Opened now, then unlinked: `airlock run` holds its own handle, so no path leads to
    // the file any more, neither for this fence's command nor for another run's.
    let mut report_file = match std::fs::OpenOptions::new().write(true).open(&spec.report) {
        Ok(file) => file,
        Err(error) => {
            eprintln!(
                "airlock fence: cannot write the report {}: {error}",
                spec.report.display()
            );
            return 125;
        }
    };
    let _ = std::fs::remove_file(&spec.report);
    let counts = Arc::new(Counts::default());
    let mut report = Report::default();
    let code = match fence(&spec, counts.clone(), started, &mut report).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("airlock fence: {error}");
            report.error = Some(error.to_string());
            125
        }
    };
    report.relayed_connections = counts.connections.load(Ordering::Relaxed);
    report.relayed_dns_queries = counts.dns_queries.load(Ordering::Relaxed);
    report.relay_failures = counts.failures.load(Ordering::Relaxed);
    report.relay_limited = counts.limited.load(Ordering::Relaxed);
    if let Ok(json) = serde_json::to_vec_pretty(&report) {
        use std::io::Write as _;
        let _ = report_file
            .write_all(&json)
            .and_then(|()| report_file.sync_all());
    }
    code
}

/// The spec in [`SPEC_VAR`](crate::launch::SPEC_VAR).
///
/// # Errors
/// [`FenceError`] when it is missing or not valid JSON.
pub fn read_spec() -> Result<Spec, FenceError> {
    let text = std::env::var(crate::launch::SPEC_VAR).map_err(|_| {
        FenceError::Setup(format!(
            "no spec in {}: fence-init is started by `airlock run`",
            crate::launch::SPEC_VAR
        ))
    })?;
    serde_json::from_str(&text).map_err(|source| FenceError::Json {
        what: "fence spec",
        source,
    })
}

async fn bind(addr: (std::net::Ipv4Addr, u16)) -> Result<TcpListener, FenceError> {
    TcpListener::bind(addr).await.map_err(|e| {
        FenceError::Setup(format!(
            "the relay cannot listen on {}:{}: {e}",
            addr.0, addr.1
        ))
    })
}

async fn fence(
    spec: &Spec,
    counts: Arc<Counts>,
    started: Instant,
    report: &mut Report,
) -> Result<i32, FenceError> {
    // `ip` and `nft` run while the view is built; both are waited for before the view is
    // entered (pivot_root moves every process of the namespace) and before the relay.
    let network = crate::setup::network(spec.network)?;
    crate::setup::low_ports();
    let mut view = Ok(());
    let user_root = spec.root.as_ref().filter(|r| !r.shift);
    if let Some(root) = user_root {
        // An ordinary user's fence builds its overlay view here, in its own namespaces;
        // root's was built outside by `airlock fence-root`.
        view = crate::root::build_user_view(root);
    }
    network.finish()?;
    if let Some(root) = user_root {
        if let Err(error) = view.and_then(|()| crate::root::enter_user_view(root)) {
            eprintln!(
                "airlock fence: writes outside the workspace are not captured in this run \
                 and reach the host as your user: {error}"
            );
            report.outside_unavailable = Some(error.to_string());
        }
    }
    crate::setup::mask_proc()?;
    crate::setup::mounts(&spec.mounts)?;
    crate::setup::hide(&spec.hide, &spec.hide_files)?;
    let mut own = Vec::new();
    if spec.network == Network::Isolated {
        let upstream = Upstream {
            socket: spec.socket.clone(),
            run: spec.run.clone(),
            token: spec.token.clone(),
            counts,
        };
        let loopback = std::net::Ipv4Addr::LOCALHOST;
        let captured = bind((loopback, RELAY_PORT)).await?;
        let dns_tcp = bind((loopback, DNS_PORT)).await?;
        let dns_udp = UdpSocket::bind((loopback, DNS_PORT)).await.map_err(|e| {
            FenceError::Setup(format!("the relay cannot listen on udp 127.0.0.1:53: {e}"))
        })?;
        own.push(format!("127.0.0.1:{RELAY_PORT}"));
        own.push(format!("127.0.0.1:{DNS_PORT}"));
        tokio::spawn(relay::transparent(captured, upstream.clone()));
        tokio::spawn(relay::dns_tcp(dns_tcp, upstream.clone()));
        tokio::spawn(relay::dns_udp(dns_udp, upstream.clone()));
        if let Some(port) = spec.proxy_port {
            let proxy = bind((loopback, port)).await?;
            own.push(format!("127.0.0.1:{port}"));
            tokio::spawn(relay::proxy(proxy, upstream));
        }
    }
    report.setup_ms = started.elapsed().as_secs_f64() * 1000.0;
    // The command runs in a user and mount namespace of its own, nested in the fence's:
    // root there holds no capability over the fence's network namespace (it cannot flush
    // the rules or change routes), and the fence's mounts (the hidden data directory,
    // /proc) are locked under it, so it cannot unmount them to see what they cover.
    // Under root the command's namespace is made by the fence's uid 1, which is the
    // subordinate range's first id, and maps it to root: the command's root is not host
    // root. The command is started through `airlock fence-exec`, which sets
    // no_new_privs and the syscall filter, and executes it.
    let exe = std::env::current_exe()
        .map_err(|e| FenceError::Setup(format!("cannot find airlock's binary: {e}")))?;
    let mut command = tokio::process::Command::new(crate::host::tool("unshare"));
    if spec.root.as_ref().is_some_and(|r| r.shift) {
        command.uid(1).gid(1);
    }
    command
        .args(["--user", "--map-root-user", "--mount", "--"])
        .arg(&exe)
        .args(["fence-exec", "--"])
        .arg(&spec.program)
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .envs(&spec.env)
        .kill_on_drop(false);
    for name in crate::launch::SCRUBBED_VARS {
        command.env_remove(name);
    }
    if spec.network == Network::Offline {
        for name in airlock_net::config::PROXY_VARS {
            command.env_remove(name);
        }
    }
    let status = match command.spawn() {
        Ok(mut child) => child.wait().await,
        Err(error) => {
            let message = format!("cannot start {}: {error}", spec.program);
            eprintln!("airlock: {message}");
            report.error = Some(message);
            return Ok(127);
        }
    };
    report.left_running = crate::leftovers::scan(&own);
    for leftover in &report.left_running {
        eprintln!(
            "airlock fence: killing pid {} left running by the command: {}",
            leftover.pid, leftover.command
        );
    }
    let status = status.map_err(|e| FenceError::Setup(format!("waiting for the command: {e}")))?;
    use std::os::unix::process::ExitStatusExt as _;
    report.exit_code = status.code();
    report.signal = status.signal();
    // Exiting PID 1 kills the leftovers (the kernel sends SIGKILL to the namespace).
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// `airlock fence-exec -- PROGRAM ARGS…`: the last step before the command, inside its
/// own user and mount namespace. Sets `no_new_privs` and the syscall filter
/// ([`crate::seccomp`]), then
/// executes the program; returns only on failure (125 for the fence's, 127 when the
/// program cannot be executed).
pub fn exec(args: &[String]) -> i32 {
    let args = match args.first().map(String::as_str) {
        Some("--") => &args[1..],
        _ => args,
    };
    let Some((program, rest)) = args.split_first() else {
        eprintln!("airlock fence: fence-exec needs a command");
        return 125;
    };
    if let Err(error) = crate::seccomp::install() {
        eprintln!("airlock fence: {error}");
        return 125;
    }
    use std::os::unix::process::CommandExt as _;
    let error = std::process::Command::new(program).args(rest).exec();
    eprintln!("airlock: cannot start {program}: {error}");
    127
}
