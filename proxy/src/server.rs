//! Building and running `airlock serve`: data directory, CA, ledger, policy, recovery, and
//! the listeners; which of them one process runs is its role ([`crate::role`]).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use airlock_dataplane::policy_store::PolicyStore;
use airlock_ledger::RunState;
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::config::{ServeConfig, ADDRESSES_FILE, ADMIN_TOKEN_FILE, INSTANCE_ID_FILE};
use crate::role::Role;
use airlock_control::{Control, ControlInputs};
use airlock_dataplane::fence::{parse_source, Fence};
use airlock_dataplane::{DataPlane, DataPlaneInputs, Limits};
use airlock_net::ca::{write_private_file, CertificateAuthority};
use airlock_net::dial::Dialer;
use airlock_net::upstream::{client, client_tls};

mod ledger;

/// Errors starting the server; each names the file or address at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The data directory cannot be created or written.
    #[error("cannot use data directory {path}: {problem}")]
    DataDir {
        /// The directory or file.
        path: String,
        /// What is wrong with it, in the operator's terms (see [`data_problem`]).
        problem: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The policy file is invalid.
    #[error(transparent)]
    Policy(#[from] airlock_policy::PolicyError),
    /// The CA cannot be created or loaded.
    #[error(transparent)]
    Ca(#[from] airlock_net::ca::CaError),
    /// The ledger cannot be opened (another airlock may hold it).
    #[error("cannot open the ledger in {path} (is another airlock using this data directory?)")]
    Ledger {
        /// The ledger directory.
        path: String,
        /// The cause.
        #[source]
        source: airlock_ledger::LedgerError,
    },
    /// The PostgreSQL store of `--store` cannot be opened: a malformed URL, TLS asked
    /// for, an unreachable server, a refused login or a newer schema (the message names
    /// `USER@HOST:PORT/DATABASE`, never the password).
    #[error("--store: {source}")]
    Store {
        /// The cause.
        #[source]
        source: airlock_ledger::PgOpenError,
    },
    /// The PostgreSQL store opened but its first reads failed.
    #[error("the ledger {place} (--store) failed at start")]
    StoreRead {
        /// `postgres USER@HOST:PORT/DATABASE`.
        place: String,
        /// The cause.
        #[source]
        source: airlock_ledger::LedgerError,
    },
    /// A listener cannot bind.
    #[error("cannot listen on {}: {problem}", bind_named(.addr, .flag))]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The flag that sets it: `--listen`, `--admin`, `--transparent` or `--dns`.
        flag: &'static str,
        /// What is wrong, in the operator's terms (see [`bind_problem`]).
        problem: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The upstream TLS configuration is invalid.
    #[error(transparent)]
    Upstream(#[from] airlock_net::upstream::UpstreamError),
    /// A credential's value cannot be read from its source.
    #[error(transparent)]
    Credential(#[from] airlock_dataplane::credentials::CredentialError),
    /// A reviewer token cannot be used.
    #[error(transparent)]
    Reviewer(#[from] airlock_control::ui::ReviewerError),
    /// The notification webhook is invalid.
    #[error(transparent)]
    Notify(#[from] airlock_control::notify::NotifyError),
    /// The policy cannot be loaded for another reason.
    #[error(transparent)]
    Load(airlock_dataplane::policy_store::LoadError),
}

/// How long a graceful shutdown waits for requests in flight.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// A built server, listening, not yet serving.
pub struct Server {
    role: Role,
    data: Arc<DataPlane>,
    control: Arc<Control>,
    /// The proxy listener; `None` with `--role control`.
    proxy: Option<TcpListener>,
    admin: TcpListener,
    fence: Arc<Fence>,
    fence_socket: Option<tokio::net::UnixListener>,
    transparent: Option<TcpListener>,
    dns: Option<(tokio::net::UdpSocket, TcpListener)>,
    /// `--retain`: prune finished runs older than this periodically.
    retain: Option<std::time::Duration>,
}

fn data_err(path: &Path) -> impl FnOnce(std::io::Error) -> StartError + '_ {
    move |source| StartError::DataDir {
        path: path.display().to_string(),
        problem: data_problem(path, &source),
        source,
    }
}

/// What is wrong with the data path `path` that failed with `error`: a regular file where a
/// directory must be (named, with the path it blocks), a directory the user running
/// airlock may not write, a read-only file system; otherwise the system's message.
pub fn data_problem(path: &Path, error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::AlreadyExists | ErrorKind::NotADirectory => {
            // The nearest existing ancestor (or the path itself) that is not a directory.
            match path
                .ancestors()
                .find(|p| p.exists() && !p.is_dir())
            {
                Some(file) if file == path => "it exists and is not a directory; pass --data a directory (or a path that does not exist yet)".to_owned(),
                Some(file) => format!(
                    "{} is a file, not a directory, so nothing can be created under it; pass --data another path",
                    file.display()
                ),
                None => error.to_string(),
            }
        }
        ErrorKind::PermissionDenied => format!(
            "permission denied: the user running airlock cannot create or write it; pass --data a directory it owns ({error})"
        ),
        ErrorKind::ReadOnlyFilesystem => {
            "the file system is read-only; pass --data a writable directory".to_owned()
        }
        _ => error.to_string(),
    }
}

/// How a bind error names `addr`: `the default proxy address 127.0.0.1:8080 (--listen)`
/// when it is the flag's default (the user may never have typed the flag), else
/// `ADDR (given by FLAG)`.
fn bind_named(addr: &SocketAddr, flag: &str) -> String {
    let defaults = ServeConfig::new(Default::default(), Default::default());
    match flag {
        "--listen" if *addr == defaults.listen => {
            format!("the default proxy address {addr} (--listen)")
        }
        "--admin" if *addr == defaults.admin => {
            format!("the default admin address {addr} (--admin)")
        }
        _ => format!("{addr} (given by {flag})"),
    }
}

/// Binds a TCP listener on `addr`, naming `flag` in the error.
async fn bind(addr: SocketAddr, flag: &'static str) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| bind_err(addr, flag, source))
}

fn bind_err(addr: SocketAddr, flag: &'static str, source: std::io::Error) -> StartError {
    StartError::Bind {
        addr,
        flag,
        problem: bind_problem(addr, flag, &source),
        source,
    }
}

/// What is wrong with binding `addr` (set by `flag`), in the operator's terms: a port
/// another process holds, an address not on this machine, a privileged port.
pub fn bind_problem(addr: SocketAddr, flag: &str, error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::AddrInUse => format!(
            "port {} is already in use by another process (another airlock?); stop it or pass {flag} another address",
            addr.port()
        ),
        ErrorKind::AddrNotAvailable => format!(
            "{} is not an address of this machine; pass {flag} one of its addresses",
            addr.ip()
        ),
        ErrorKind::PermissionDenied => format!(
            "permission denied (ports below 1024 need privileges); pass {flag} a higher port"
        ),
        _ => error.to_string(),
    }
}

/// Reads the admin token from `dir`, creating a random one (mode 0600) on first start.
pub fn load_or_create_admin_token(dir: &Path) -> Result<String, StartError> {
    let path = dir.join(ADMIN_TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => Ok(token.trim().to_owned()),
        _ => {
            use rand::RngCore;
            let mut bytes = [0u8; 32];
            rand::thread_rng().fill_bytes(&mut bytes);
            let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            write_private_file(&path, format!("{token}\n").as_bytes()).map_err(data_err(&path))?;
            Ok(token)
        }
    }
}

/// The id of this instance as the holder of release leases: read from the data
/// directory's `instance-id`, or created there (`ctl_` and 24 random hex digits). Kept
/// across restarts, so that an instance restarting after a crash takes its own leases
/// over at once instead of waiting for them to expire; each control instance on a shared
/// store needs its own data directory, hence its own id.
///
/// Errors: [`StartError::DataDir`] when the file cannot be written.
pub fn load_or_create_instance_id(dir: &Path) -> Result<String, StartError> {
    let path = dir.join(INSTANCE_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_owned()),
        _ => {
            use rand::RngCore;
            let mut bytes = [0u8; 12];
            rand::thread_rng().fill_bytes(&mut bytes);
            let id: String = std::iter::once("ctl_".to_owned())
                .chain(bytes.iter().map(|b| format!("{b:02x}")))
                .collect();
            write_private_file(&path, format!("{id}\n").as_bytes()).map_err(data_err(&path))?;
            Ok(id)
        }
    }
}

impl From<airlock_dataplane::policy_store::LoadError> for StartError {
    fn from(error: airlock_dataplane::policy_store::LoadError) -> Self {
        match error {
            airlock_dataplane::policy_store::LoadError::Policy(error) => StartError::Policy(error),
            airlock_dataplane::policy_store::LoadError::Credential(error) => {
                StartError::Credential(error)
            }
            other => StartError::Load(other),
        }
    }
}

impl Server {
    /// Prepares the data directory, loads the policy and CA, opens the ledger, recovers
    /// interrupted releases (control and all roles: `releasing` -> `unknown`, except those
    /// of runs whose release lease is live: the takeover sweeper finishes those, at once for
    /// this instance's own leases) and binds the role's listeners: the admin (or,
    /// `--role proxy`, ops) listener always, the proxy, transparent and DNS listeners and
    /// the fence socket unless `--role control`.
    pub async fn build(config: ServeConfig) -> Result<Self, StartError> {
        let role = config.role;
        std::fs::create_dir_all(&config.data_dir).map_err(data_err(&config.data_dir))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&config.data_dir, std::fs::Permissions::from_mode(0o700))
                .map_err(data_err(&config.data_dir))?;
        }
        let data_dir =
            std::fs::canonicalize(&config.data_dir).map_err(data_err(&config.data_dir))?;
        let policy = Arc::new(PolicyStore::load(
            &config.policy_path,
            config.baseline_path.as_deref(),
            &data_dir,
        )?);
        let ca = Arc::new(CertificateAuthority::load_or_create(&data_dir)?);
        let admin_token = load_or_create_admin_token(&data_dir)?;
        let instance_id = load_or_create_instance_id(&data_dir)?;
        let opened = ledger::open(&config, &data_dir)?;
        let ledger = opened.ledger.clone();
        if role.serves_control() {
            let recovered = ledger
                .recover()
                .map_err(|source| ledger::read_failed(&opened, source))?;
            for effect in &recovered {
                warn!(effect.id = %effect.id, run.id = %effect.run_id, url = %effect.url,
                      "effect was being released when airlock stopped; marked unknown, not re-sent");
            }
        }
        let proxy = match role.serves_proxy() {
            true => Some(bind(config.listen, "--listen").await?),
            false => None,
        };
        let admin = bind(config.admin, "--admin").await?;
        // A control instance has no proxy listener: the data plane's own address is the
        // one --listen names (unbound), and sandboxes are sent to --advertise-proxy.
        let proxy_addr = match &proxy {
            Some(proxy) => proxy
                .local_addr()
                .map_err(|source| bind_err(config.listen, "--listen", source))?,
            None => config.listen,
        };
        let admin_addr = admin
            .local_addr()
            .map_err(|source| bind_err(config.admin, "--admin", source))?;
        // Subscribed first: a run another instance closes while the runs are read is heard.
        let changes = ledger.subscribe();
        let runs = ledger
            .runs()
            .map_err(|source| ledger::read_failed(&opened, source))?;
        let fence = Fence::new();
        for run in runs
            .iter()
            .filter(|run| matches!(run.state, RunState::Open | RunState::Sealed))
        {
            if let Some(source) = run.source.as_deref().and_then(|s| parse_source(s).ok()) {
                let _ = fence.bind_source(source, run.id.clone(), |_| true);
            }
        }
        let closed = runs
            .into_iter()
            .filter(|run| !matches!(run.state, RunState::Open | RunState::Sealed))
            .map(|run| run.id)
            .collect();
        let transparent = match config.transparent.filter(|_| role.serves_proxy()) {
            Some(addr) => Some(bind(addr, "--transparent").await?),
            None => None,
        };
        let dns = match config.dns.filter(|_| role.serves_proxy()) {
            Some(addr) => {
                let udp = tokio::net::UdpSocket::bind(addr)
                    .await
                    .map_err(|source| bind_err(addr, "--dns", source))?;
                let tcp = bind(addr, "--dns").await?;
                Some((udp, tcp))
            }
            None => None,
        };
        let tls = client_tls(config.upstream_ca.as_deref())?;
        let review = airlock_control::ui::Review {
            reviewers: airlock_control::ui::load_reviewers(&admin_token, &config.reviewer_tokens)?,
            base_url: config
                .ui_base_url
                .clone()
                .unwrap_or_else(|| {
                    format!("http://{}", airlock_control::env::reachable(admin_addr))
                })
                .trim_end_matches('/')
                .to_owned(),
            notifier: match config
                .notify_webhook
                .as_ref()
                .filter(|_| role.serves_control())
            {
                Some(url) => Some(airlock_control::notify::Notifier::new(url, tls.clone())?),
                None => None,
            },
            sign_in_links: Default::default(),
        };
        let mut own = vec![admin_addr];
        own.extend(proxy.as_ref().map(|_| proxy_addr));
        own.extend(transparent.as_ref().and_then(|l| l.local_addr().ok()));
        own.extend(dns.as_ref().and_then(|(_, tcp)| tcp.local_addr().ok()));
        let dialer = Dialer::new(policy.clone(), own, config.connect_timeout)
            .with_static_answers(config.resolve.clone());
        let tunnel_dialer = dialer.clone();
        let data = DataPlane::new(DataPlaneInputs {
            ledger,
            policy,
            ca,
            upstream_http1: client(dialer.clone(), {
                let mut http1 = tls.clone();
                http1.alpn_protocols = vec![b"http/1.1".to_vec()];
                http1
            }),
            upstream: client(dialer, tls),
            dialer: tunnel_dialer,
            limits: Limits {
                stage_body_bytes: config.stage_body_limit,
                release_timeout: config.release_timeout,
                header_read_timeout: config.header_read_timeout,
                idle_timeout: config.idle_timeout,
                keep_alive_timeout: config.keep_alive_timeout,
                auth_timeout: config.auth_timeout,
                body_read_timeout: config.body_read_timeout,
            },
            proxy_addr,
            connections: airlock_net::limits::Connections::new(
                config.max_connections,
                config.max_connections_per_run,
                config.max_unauthenticated_connections,
            ),
            closed_runs: closed,
            changes,
        });
        let control = Control::new(ControlInputs {
            data: data.clone(),
            admin_token,
            advertised: {
                let mut advertised = airlock_control::env::Advertised::local(
                    proxy_addr,
                    &data_dir.join(airlock_net::ca::CA_CERT_FILE),
                );
                if let Some((host, port)) = config.advertise_proxy.clone() {
                    advertised.host = host;
                    advertised.port = port;
                }
                match config.advertise_ca.clone() {
                    Some(ca) => advertised.ca_file = ca,
                    // The sandbox files are for run environments, which control renders.
                    None if !role.serves_control() => {}
                    None => crate::sandbox_files::write(
                        &data_dir,
                        data.ca().cert_pem(),
                        &mut advertised,
                    ),
                }
                advertised
            },
            admin_addr,
            data_dir,
            danger_allow_snapshot_commands: config.danger_allow_snapshot_commands,
            workspace_step_timeout: config.workspace_step_timeout,
            review,
            fence: fence.clone(),
            release_lease: airlock_control::release::lease::LeaseSettings {
                holder: instance_id,
                ttl: config.release_lease_ttl,
            },
        });
        data.set_auto_review(Arc::new(airlock_control::runs::AutoReview::new(&control)));
        let fence_socket = match role.serves_proxy() {
            true => bind_fence_socket(&control.fence_socket()),
            false => None,
        };
        Ok(Self {
            role,
            data,
            control,
            proxy,
            admin,
            fence,
            fence_socket,
            transparent,
            dns,
            retain: config.retain,
        })
    }

    /// The proxy listener's address (with `--role control`, which binds none, the unbound
    /// `--listen` address).
    pub fn proxy_addr(&self) -> SocketAddr {
        self.data.proxy_addr()
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.control.admin_addr()
    }

    /// The admin bearer token.
    pub fn admin_token(&self) -> &str {
        self.control.admin_token()
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        self.data.ca().cert_pem()
    }

    /// Serves both listeners until the future is dropped. First writes `addresses.json`
    /// in the data directory, and finishes any commit whose decision was written before a
    /// restart.
    pub async fn run(self) {
        self.run_until(std::future::pending()).await;
    }

    /// Serves until `shutdown` completes, then shuts down gracefully: stops accepting,
    /// waits up to [`SHUTDOWN_GRACE`] for requests in flight (staging included) to be
    /// answered, and flushes the ledger.
    pub async fn run_until(self, shutdown: impl std::future::Future<Output = ()>) {
        let data = self.data.clone();
        tokio::select! {
            () = self.serve() => {}
            () = shutdown => {
                // The accept loops were dropped with `serve`: nothing new is accepted.
                // Connections already accepted run on in their own tasks.
                info!("shutting down: no new connections; waiting for requests in flight");
                let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
                while data.requests_in_flight() > 0 && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                let left = data.requests_in_flight();
                if left > 0 {
                    warn!(requests = left, "shutdown grace ran out with requests still in flight");
                }
                match data.ledger().flush() {
                    Ok(()) => info!("ledger flushed; stopped"),
                    Err(error) => warn!(error = %error, "flushing the ledger at shutdown failed"),
                }
            }
        }
    }

    async fn serve(self) {
        let Self {
            role,
            data,
            control,
            proxy,
            admin,
            fence,
            fence_socket,
            transparent,
            dns,
            retain,
        } = self;
        let addresses = serde_json::json!({
            "role": role.as_str(),
            "proxy": proxy.as_ref().map(|_| data.proxy_addr().to_string()),
            "admin": format!("http://{}", control.admin_addr()),
            "fence_socket": fence_socket.as_ref().map(|_| control.fence_socket().display().to_string()),
            "transparent": transparent.as_ref().and_then(|l| l.local_addr().ok()).map(|a| a.to_string()),
            "dns": dns.as_ref().and_then(|(udp, _)| udp.local_addr().ok()).map(|a| a.to_string()),
            "pid": std::process::id(),
        });
        let path = control.data_dir().join(ADDRESSES_FILE);
        if let Err(error) = std::fs::write(&path, format!("{addresses}\n")) {
            warn!(error = %error, path = %path.display(), "cannot write the addresses file");
        }
        info!(role = role.as_str(), proxy = %proxy.as_ref().map_or("none (--role control)".to_owned(), |_| data.proxy_addr().to_string()), admin = %control.admin_addr(),
              policy.revision = data.policy().current().revision(), data = %control.data_dir().display(),
              "airlock listening");
        let _watch = AbortOnDrop(data.policy().watch());
        if let (Some(retain), true) = (retain, role.serves_control()) {
            airlock_control::retention::spawn_retain(&control, retain);
        }
        let (router, sweeper) = crate::role::start_control(role, control);
        let _sweeper = sweeper.map(AbortOnDrop);
        let fenced = {
            let (data, fence) = (data.clone(), fence.clone());
            async move {
                if let Some(socket) = fence_socket {
                    airlock_dataplane::fence::serve(data, fence, socket).await;
                }
            }
        };
        let operator = {
            let data = data.clone();
            async move {
                let transparent = async {
                    if let Some(listener) = transparent {
                        info!(addr = ?listener.local_addr().ok(), "transparent listener (--transparent)");
                        airlock_dataplane::fence::operator::serve_transparent(
                            data.clone(),
                            fence.clone(),
                            listener,
                        )
                        .await;
                    }
                };
                let dns = async {
                    if let Some((udp, tcp)) = dns {
                        info!(addr = ?udp.local_addr().ok(), "DNS for source-bound runs (--dns)");
                        airlock_dataplane::fence::operator::serve_dns(
                            data.clone(),
                            fence.clone(),
                            udp,
                            tcp,
                        )
                        .await;
                    }
                };
                tokio::join!(transparent, dns);
            }
        };
        let proxy = async move {
            if let Some(proxy) = proxy {
                airlock_dataplane::listener::serve(data, proxy).await;
            }
        };
        let admin_server = async move {
            if let Err(error) = axum::serve(admin, router).await {
                warn!(error = %error, "admin listener stopped");
            }
        };
        tokio::join!(proxy, admin_server, fenced, operator);
    }
}

/// Binds the fence socket (mode 0600), replacing a stale one: the ledger's lock already
/// keeps a second server off this data directory. A socket that cannot be bound (a path
/// past the 108-byte limit of `sun_path`) is logged, and fenced runs then fail closed.
fn bind_fence_socket(path: &Path) -> Option<tokio::net::UnixListener> {
    let _ = std::fs::remove_file(path);
    match tokio::net::UnixListener::bind(path) {
        Ok(listener) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
            }
            Some(listener)
        }
        Err(error) => {
            warn!(error = %error, path = %path.display(),
                  "cannot bind the fence socket; `airlock run --network isolated` will not reach this server");
            None
        }
    }
}

/// Aborts a background task when dropped (the policy watcher stops with the server).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
