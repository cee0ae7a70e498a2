//! Building and running `airlock serve`: data directory, CA, ledger, policy, recovery, and
//! the two listeners.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use airlock_dataplane::policy_store::PolicyStore;
use airlock_ledger::RunState;
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::config::{ServeConfig, ADDRESSES_FILE, ADMIN_TOKEN_FILE};
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
    #[error("cannot listen on {addr} (given by {flag}): {problem}")]
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
    data: Arc<DataPlane>,
    control: Arc<Control>,
    proxy: TcpListener,
    admin: TcpListener,
    fence: Arc<Fence>,
    fence_socket: Option<tokio::net::UnixListener>,
    transparent: Option<TcpListener>,
    dns: Option<(tokio::net::UdpSocket, TcpListener)>,
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
    /// interrupted releases (`releasing` -> `unknown`) and binds both listeners.
    pub async fn build(config: ServeConfig) -> Result<Self, StartError> {
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
        let opened = ledger::open(&config, &data_dir)?;
        let ledger = opened.ledger.clone();
        let recovered = ledger
            .recover()
            .map_err(|source| ledger::read_failed(&opened, source))?;
        for effect in &recovered {
            warn!(effect.id = %effect.id, run.id = %effect.run_id, url = %effect.url,
                  "effect was being released when airlock stopped; marked unknown, not re-sent");
        }
        let proxy = bind(config.listen, "--listen").await?;
        let admin = bind(config.admin, "--admin").await?;
        let proxy_addr = proxy
            .local_addr()
            .map_err(|source| bind_err(config.listen, "--listen", source))?;
        let admin_addr = admin
            .local_addr()
            .map_err(|source| bind_err(config.admin, "--admin", source))?;
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
        let transparent = match config.transparent {
            Some(addr) => Some(bind(addr, "--transparent").await?),
            None => None,
        };
        let dns = match config.dns {
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
            notifier: match &config.notify_webhook {
                Some(url) => Some(airlock_control::notify::Notifier::new(url, tls.clone())?),
                None => None,
            },
            sign_in_links: Default::default(),
        };
        let mut own = vec![proxy_addr, admin_addr];
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
        });
        data.set_auto_review(Arc::new(airlock_control::runs::AutoReview::new(&control)));
        let fence_socket = bind_fence_socket(&control.fence_socket());
        Ok(Self {
            data,
            control,
            proxy,
            admin,
            fence,
            fence_socket,
            transparent,
            dns,
        })
    }

    /// The proxy listener's address.
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
            data,
            control,
            proxy,
            admin,
            fence,
            fence_socket,
            transparent,
            dns,
        } = self;
        let addresses = serde_json::json!({
            "proxy": data.proxy_addr().to_string(),
            "admin": format!("http://{}", control.admin_addr()),
            "fence_socket": control.fence_socket().display().to_string(),
            "transparent": transparent.as_ref().and_then(|l| l.local_addr().ok()).map(|a| a.to_string()),
            "dns": dns.as_ref().and_then(|(udp, _)| udp.local_addr().ok()).map(|a| a.to_string()),
            "pid": std::process::id(),
        });
        let path = control.data_dir().join(ADDRESSES_FILE);
        if let Err(error) = std::fs::write(&path, format!("{addresses}\n")) {
            warn!(error = %error, path = %path.display(), "cannot write the addresses file");
        }
        info!(proxy = %data.proxy_addr(), admin = %control.admin_addr(),
              policy.revision = data.policy().current().revision(), data = %control.data_dir().display(),
              "airlock listening");
        airlock_control::runs::resume_commits(&control);
        let _watch = AbortOnDrop(data.policy().watch());
        airlock_control::runs::workspace::resume_all(&control);
        info!(url = %format!("{}/login", control.ui_base_url()), "review UI (sign in with a reviewer token; `airlock ui` prints a sign-in link)");
        let router = airlock_control::admin::router(control);
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
        let proxy = airlock_dataplane::listener::serve(data, proxy);
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
