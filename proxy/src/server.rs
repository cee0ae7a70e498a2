//! Building and running `airlock serve`: data directory, CA, ledger, policy, recovery, and
//! the two listeners.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use crate::policy_store::PolicyStore;
use airlock_ledger::{Ledger, RunState};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::ca::{write_private_file, CertificateAuthority};
use crate::config::{ServeConfig, ADDRESSES_FILE, ADMIN_TOKEN_FILE, LEDGER_DIR};
use crate::dial::Dialer;
use crate::upstream::{client, client_tls, UpstreamClient};

/// Errors starting the server; each names the file or address at fault.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data directory cannot be created or written.
    #[error("cannot use data directory {path}")]
    DataDir {
        /// The directory or file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The policy file is invalid.
    #[error(transparent)]
    Policy(#[from] airlock_policy::PolicyError),
    /// The CA cannot be created or loaded.
    #[error(transparent)]
    Ca(#[from] crate::ca::CaError),
    /// The ledger cannot be opened (another airlock may hold it).
    #[error("cannot open the ledger in {path} (is another airlock using this data directory?)")]
    Ledger {
        /// The ledger directory.
        path: String,
        /// The cause.
        #[source]
        source: airlock_ledger::LedgerError,
    },
    /// A listener cannot bind.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The upstream TLS configuration is invalid.
    #[error(transparent)]
    Upstream(#[from] crate::upstream::UpstreamError),
    /// A credential's value cannot be read from its source.
    #[error(transparent)]
    Credential(#[from] crate::credentials::CredentialError),
    /// A reviewer token cannot be used.
    #[error(transparent)]
    Reviewer(#[from] crate::ui::ReviewerError),
    /// The notification webhook is invalid.
    #[error(transparent)]
    Notify(#[from] crate::notify::NotifyError),
}

/// How long a graceful shutdown waits for requests in flight.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Limits applied to proxied requests.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest stageable body, in bytes.
    pub stage_body_bytes: u64,
    /// Timeout of one release request.
    pub release_timeout: std::time::Duration,
    /// How long a client may take to send a request head.
    pub header_read_timeout: std::time::Duration,
    /// Spliced and upgraded connections idle (no byte either way) this long are closed.
    pub idle_timeout: std::time::Duration,
    /// HTTP client connections with no request in flight and no byte either way this long
    /// are closed gracefully ([`crate::keepalive`]).
    pub keep_alive_timeout: std::time::Duration,
    /// Proxy-listener connections not authenticated this long after accept are closed.
    pub auth_timeout: std::time::Duration,
}

/// State shared by the listeners, the admin API and the commit authority.
pub struct Shared {
    /// The durable ledger.
    pub ledger: Arc<Ledger>,
    /// The policy in force (hot-reloadable; take one snapshot per decision).
    pub policy: Arc<PolicyStore>,
    /// The CA and leaf cache.
    pub ca: Arc<CertificateAuthority>,
    /// The pooled upstream client (h2 or HTTP/1.1 by ALPN).
    pub upstream: UpstreamClient,
    /// An upstream client that offers only HTTP/1.1, for protocol upgrades (WebSocket).
    pub upstream_http1: UpstreamClient,
    /// Limits.
    pub limits: Limits,
    /// The admin bearer token.
    pub admin_token: String,
    /// Where the proxy listener listens.
    pub proxy_addr: SocketAddr,
    /// Where sandboxes reach the proxy and find the CA (`--advertise-proxy`,
    /// `--advertise-ca`; by default the listener and the data directory's `ca.pem`).
    pub advertised: crate::env::Advertised,
    /// Where the admin listener listens.
    pub admin_addr: SocketAddr,
    /// The data directory (absolute).
    pub data_dir: std::path::PathBuf,
    /// The lineage worker.
    pub lineage: crate::lineage::LineageWorker,
    /// Proxied requests being handled now (until their response has been sent).
    pub in_flight: std::sync::atomic::AtomicUsize,
    /// Counters for `/metrics`.
    pub metrics: crate::metrics::Metrics,
    /// Placeholders issued per run, cached for the per-request search. Loads and
    /// invalidations both happen under this lock, so a load can never put back a list
    /// older than an invalidation.
    pub placeholders: std::sync::Mutex<
        std::collections::HashMap<
            airlock_ledger::RunId,
            Arc<Vec<airlock_ledger::IssuedPlaceholder>>,
        >,
    >,
    /// Runs that accept no more requests, reads included: a commit was decided or the run
    /// was aborted. (A sealed run still passes reads; it only refuses new effects.)
    pub closed_runs: std::sync::RwLock<std::collections::HashSet<airlock_ledger::RunId>>,
    /// Whether admin clients may have the server run snapshot commands (`cmd` driver).
    pub danger_allow_snapshot_commands: bool,
    /// One lock per run being committed, so a run is never released by two tasks while
    /// other runs commit freely.
    pub commit_locks: std::sync::Mutex<
        std::collections::HashMap<airlock_ledger::RunId, Arc<tokio::sync::Mutex<()>>>,
    >,
    /// The SSRF-checked dialer, for `tunnel` rules (the upstream clients hold their own
    /// clones).
    pub dialer: Dialer,
    /// Per-run state of rule obligations: request windows, upload totals, run profiles.
    pub enforce: crate::enforce::Enforcer,
    /// Reviewers (named tokens), notifications and the review UI's URL.
    pub review: crate::ui::Review,
    /// Open client connections of the proxy listener, globally and per run.
    pub connections: crate::limits::Connections,
}

impl Shared {
    /// Whether `run` was closed by a commit decision or an abort.
    pub fn is_closed(&self, run: &airlock_ledger::RunId) -> bool {
        self.closed_runs
            .read()
            .map(|set| set.contains(run))
            .unwrap_or(true)
    }

    /// Closes `run` to all further requests.
    pub fn close_run(&self, run: &airlock_ledger::RunId) {
        if let Ok(mut set) = self.closed_runs.write() {
            set.insert(run.clone());
        }
    }

    /// The commit lock of `run`.
    pub fn commit_lock(&self, run: &airlock_ledger::RunId) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.commit_locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(run.clone()).or_default().clone()
    }
}

/// A built server, listening, not yet serving.
pub struct Server {
    shared: Arc<Shared>,
    proxy: TcpListener,
    admin: TcpListener,
}

fn data_err(path: &Path) -> impl FnOnce(std::io::Error) -> StartError + '_ {
    move |source| StartError::DataDir {
        path: path.display().to_string(),
        source,
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

impl From<crate::policy_store::LoadError> for StartError {
    fn from(error: crate::policy_store::LoadError) -> Self {
        match error {
            crate::policy_store::LoadError::Policy(error) => StartError::Policy(error),
            crate::policy_store::LoadError::Credential(error) => StartError::Credential(error),
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
        let ledger_path = data_dir.join(LEDGER_DIR);
        let ledger = Arc::new(
            Ledger::open_with_cache(&ledger_path, config.ledger_cache_bytes).map_err(|source| {
                StartError::Ledger {
                    path: ledger_path.display().to_string(),
                    source,
                }
            })?,
        );
        let recovered = ledger.recover().map_err(|source| StartError::Ledger {
            path: ledger_path.display().to_string(),
            source,
        })?;
        for effect in &recovered {
            warn!(effect.id = %effect.id, run.id = %effect.run_id, url = %effect.url,
                  "effect was being released when airlock stopped; marked unknown, not re-sent");
        }
        let proxy = TcpListener::bind(config.listen)
            .await
            .map_err(|source| StartError::Bind {
                addr: config.listen,
                source,
            })?;
        let admin = TcpListener::bind(config.admin)
            .await
            .map_err(|source| StartError::Bind {
                addr: config.admin,
                source,
            })?;
        let proxy_addr = proxy.local_addr().map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
        let admin_addr = admin.local_addr().map_err(|source| StartError::Bind {
            addr: config.admin,
            source,
        })?;
        let closed = ledger
            .runs()
            .map_err(|source| StartError::Ledger {
                path: ledger_path.display().to_string(),
                source,
            })?
            .into_iter()
            .filter(|run| !matches!(run.state, RunState::Open | RunState::Sealed))
            .map(|run| run.id)
            .collect();
        let tls = client_tls(config.upstream_ca.as_deref())?;
        let review = crate::ui::Review {
            reviewers: crate::ui::load_reviewers(&admin_token, &config.reviewer_tokens)?,
            base_url: config
                .ui_base_url
                .clone()
                .unwrap_or_else(|| format!("http://{}", crate::env::reachable(admin_addr)))
                .trim_end_matches('/')
                .to_owned(),
            notifier: match &config.notify_webhook {
                Some(url) => Some(crate::notify::Notifier::new(url, tls.clone())?),
                None => None,
            },
        };
        let dialer = Dialer::new(
            policy.clone(),
            vec![proxy_addr, admin_addr],
            config.connect_timeout,
        )
        .with_static_answers(config.resolve.clone());
        let tunnel_dialer = dialer.clone();
        let shared = Arc::new(Shared {
            ledger: ledger.clone(),
            policy,
            ca,
            upstream_http1: client(dialer.clone(), {
                let mut http1 = tls.clone();
                http1.alpn_protocols = vec![b"http/1.1".to_vec()];
                http1
            }),
            upstream: client(dialer, tls),
            limits: Limits {
                stage_body_bytes: config.stage_body_limit,
                release_timeout: config.release_timeout,
                header_read_timeout: config.header_read_timeout,
                idle_timeout: config.idle_timeout,
                keep_alive_timeout: config.keep_alive_timeout,
                auth_timeout: config.auth_timeout,
            },
            admin_token,
            proxy_addr,
            advertised: {
                let mut advertised = crate::env::Advertised::local(
                    proxy_addr,
                    &data_dir.join(crate::ca::CA_CERT_FILE),
                );
                if let Some((host, port)) = config.advertise_proxy.clone() {
                    advertised.host = host;
                    advertised.port = port;
                }
                if let Some(ca) = config.advertise_ca.clone() {
                    advertised.ca_file = ca;
                }
                advertised
            },
            admin_addr,
            data_dir,
            closed_runs: std::sync::RwLock::new(closed),
            commit_locks: std::sync::Mutex::default(),
            danger_allow_snapshot_commands: config.danger_allow_snapshot_commands,
            lineage: crate::lineage::LineageWorker::start(ledger.clone()),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            metrics: crate::metrics::Metrics::default(),
            placeholders: std::sync::Mutex::default(),
            dialer: tunnel_dialer,
            enforce: crate::enforce::Enforcer::default(),
            review,
            connections: crate::limits::Connections::new(
                config.max_connections,
                config.max_connections_per_run,
                config.max_unauthenticated_connections,
            ),
        });
        Ok(Self {
            shared,
            proxy,
            admin,
        })
    }

    /// The proxy listener's address.
    pub fn proxy_addr(&self) -> SocketAddr {
        self.shared.proxy_addr
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.shared.admin_addr
    }

    /// The admin bearer token.
    pub fn admin_token(&self) -> &str {
        &self.shared.admin_token
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        self.shared.ca.cert_pem()
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
        let shared = self.shared.clone();
        tokio::select! {
            () = self.serve() => {}
            () = shutdown => {
                // The accept loops were dropped with `serve`: nothing new is accepted.
                // Connections already accepted run on in their own tasks.
                info!("shutting down: no new connections; waiting for requests in flight");
                let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
                while shared.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0
                    && tokio::time::Instant::now() < deadline
                {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                let left = shared.in_flight.load(std::sync::atomic::Ordering::SeqCst);
                if left > 0 {
                    warn!(requests = left, "shutdown grace ran out with requests still in flight");
                }
                match shared.ledger.flush() {
                    Ok(()) => info!("ledger flushed; stopped"),
                    Err(error) => warn!(error = %error, "flushing the ledger at shutdown failed"),
                }
            }
        }
    }

    async fn serve(self) {
        let shared = self.shared;
        let addresses = serde_json::json!({
            "proxy": shared.proxy_addr.to_string(),
            "admin": format!("http://{}", shared.admin_addr),
            "pid": std::process::id(),
        });
        let path = shared.data_dir.join(ADDRESSES_FILE);
        if let Err(error) = std::fs::write(&path, format!("{addresses}\n")) {
            warn!(error = %error, path = %path.display(), "cannot write the addresses file");
        }
        info!(proxy = %shared.proxy_addr, admin = %shared.admin_addr,
              policy.revision = shared.policy.current().revision(), data = %shared.data_dir.display(),
              "airlock listening");
        resume_commits(&shared);
        let _watch = AbortOnDrop(shared.policy.watch());
        crate::workspace::resume_all(&shared);
        info!(url = %format!("{}/login", shared.review.base_url), "review UI (sign in with a reviewer token; `airlock ui` prints a sign-in link)");
        let admin = crate::admin::router(shared.clone());
        let proxy = crate::listener::serve(shared.clone(), self.proxy);
        let admin_server = async move {
            if let Err(error) = axum::serve(self.admin, admin).await {
                warn!(error = %error, "admin listener stopped");
            }
        };
        tokio::join!(proxy, admin_server);
    }
}

/// Finishes commits that were decided before a restart (DESIGN.md: decisions already
/// written are finished). Effects that were mid-release are already `unknown`.
fn resume_commits(shared: &Arc<Shared>) {
    let runs = match shared.ledger.runs() {
        Ok(runs) => runs,
        Err(error) => {
            warn!(error = %error, "cannot list runs to resume commits");
            return;
        }
    };
    for run in runs.into_iter().filter(|r| r.state == RunState::Committing) {
        let shared = shared.clone();
        info!(run.id = %run.id, "resuming a commit decided before the restart");
        tokio::spawn(async move {
            if let Err(error) = crate::release::commit(&shared, &run.id, false, "recovery").await {
                warn!(run.id = %run.id, error = %error, "resuming the commit failed");
            }
        });
    }
}

/// Aborts a background task when dropped (the policy watcher stops with the server).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
