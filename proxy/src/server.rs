//! Building and running `airlock serve`: data directory, CA, ledger, policy, recovery, and
//! the listeners; which of them one process runs is its role ([`crate::role`]).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use airlock_dataplane::policy_store::PolicyStore;
use airlock_ledger::RunState;
use tokio::net::TcpListener;
use tracing::warn;

use crate::config::{ServeConfig, ADMIN_TOKEN_FILE, INSTANCE_ID_FILE};
use crate::role::Role;
use airlock_control::{Control, ControlInputs};
use airlock_dataplane::fence::{parse_source, Fence};
use airlock_dataplane::{DataPlane, DataPlaneInputs, Limits};
use airlock_net::ca::{write_private_file, CertificateAuthority};
use airlock_net::dial::Dialer;
use airlock_net::upstream::{client, client_tls};

mod ledger;
mod serve;
mod start_error;

use start_error::{bind, bind_err, data_err};
pub use start_error::{bind_problem, data_problem, StartError};

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
    /// `--admin-max-connections` and `--header-read-timeout` of the admin listener.
    admin_limits: airlock_control::admin_listener::AdminLimits,
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
        let run_tokens = airlock_ledger::RunTokens::load_or_create(&data_dir)?;
        let rewritten = ledger
            .hash_plaintext_tokens(&run_tokens)
            .map_err(|source| ledger::read_failed(&opened, source))?;
        if rewritten > 0 {
            tracing::info!(
                runs = rewritten,
                "plaintext run tokens in the ledger rewritten as keyed hashes"
            );
        }
        tracing::info!(key_id = %run_tokens.key_id(), "run token key (DATA/run-token.key; every instance on a shared store needs the same)");
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
            principals: airlock_control::access::load_principals(&admin_token, &config.tokens)?,
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
        // Runs a killed predecessor left with reads in flight: what those reads carried
        // was never journaled, so flows hold the runs' effects as unanalysed.
        let (reads_in_flight, cut_off) =
            airlock_dataplane::inflight::InFlightReads::open(&data_dir)
                .map_err(data_err(&data_dir))?;
        for run in &cut_off {
            tracing::warn!(run.id = %run, "a read of this run was cut off when airlock last stopped; flows hold its effects as unanalysed");
            airlock_dataplane::gaps::flag_lineage_incomplete(
                &*ledger,
                run,
                "airlock stopped (killed or crashed) while a read of this run was streaming: what it carried was never journaled or analysed; flows hold the run's effects as unanalysed".to_owned(),
            );
        }
        let data = DataPlane::new(DataPlaneInputs {
            reads_in_flight: Some(reads_in_flight),
            ledger,
            run_tokens,
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
                dns_queries_per_second: config.dns_queries_per_second,
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
        // Effects whose analysis a stopped predecessor never wrote are analysed again now,
        // in the background, so the review shows their flows before the commit does.
        {
            let data = data.clone();
            tokio::task::spawn_blocking(move || match data.analyse_unanalysed() {
                Ok(0) => {}
                Ok(queued) => tracing::info!(
                    effects = queued,
                    "effects without a stored analysis queued for lineage analysis"
                ),
                Err(error) => {
                    tracing::warn!(error = %error, "cannot look for effects without a stored analysis")
                }
            });
        }
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
            runner_workspace_roots: config.runner_workspace_roots.clone(),
            workspace_step_timeout: config.workspace_step_timeout,
            review,
            fence: fence.clone(),
            release_lease: airlock_control::release::lease::LeaseSettings {
                holder: instance_id,
                ttl: config.release_lease_ttl,
            },
        });
        data.set_auto_review(Arc::new(airlock_control::runs::AutoReview::new(&control)));
        if role.serves_control() {
            // The tokens this server knows, in the audit log when they changed since the
            // last start (issue 36).
            let recording = control.clone();
            let _ = tokio::task::spawn_blocking(move || {
                airlock_control::access::audit::record_tokens_blocking(
                    &recording,
                    recording.principals(),
                )
            })
            .await;
        }
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
            admin_limits: airlock_control::admin_listener::AdminLimits {
                max_connections: config.admin_max_connections,
                header_read_timeout: config.header_read_timeout,
            },
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
