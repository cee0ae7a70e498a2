//! Configuration of `airlock serve` (the environment variables and data-directory files
//! it names are in [`airlock_net::config`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use airlock_net::config::*;

/// Default staging body limit: 10 MiB.
pub const DEFAULT_STAGE_BODY_LIMIT: u64 = 10 * 1024 * 1024;

/// Everything `airlock serve` needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// What this process runs: the data plane, the control plane or both
    /// ([`crate::role::Role`], `--role`) [default: both].
    pub role: crate::role::Role,
    /// Data directory: CA, admin token, ledger.
    pub data_dir: PathBuf,
    /// The policy file.
    pub policy_path: PathBuf,
    /// Proxy listener address (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Admin listener address (port 0 picks a free port).
    pub admin: SocketAddr,
    /// Extra CA certificates (PEM) trusted for origins, beside the webpki roots.
    pub upstream_ca: Option<PathBuf>,
    /// Largest request body that can be staged, in bytes.
    pub stage_body_limit: u64,
    /// Timeout for connecting to an origin.
    pub connect_timeout: Duration,
    /// Timeout for one release request (whole exchange).
    pub release_timeout: Duration,
    /// How long a run's release lease lasts unless renewed (`--release-lease-ttl`; 10 s
    /// by default; renewed every third of it). It bounds how long a run an instance was
    /// releasing when it died waits before another instance takes it over.
    pub release_lease_ttl: Duration,
    /// How long a client may take to send a request head (stops slow-header clients).
    pub header_read_timeout: Duration,
    /// Lets admin API clients have the server run shell commands (the `cmd` snapshot
    /// driver of `airlock run`). Gives up: the admin token then lets its holder run any
    /// command as the server's user. `airlock run`'s embedded server sets it, for the
    /// commands its own user gave.
    pub danger_allow_snapshot_commands: bool,
    /// Directories under which a non-admin token (a runner's) may attach a workspace
    /// (`--runner-workspace-root`); none: non-admins attach no workspace. An admin attaches
    /// anywhere.
    pub runner_workspace_roots: Vec<PathBuf>,
    /// Time limit of each workspace step of `airlock run` (snapshot, diff, rollback, keep,
    /// residue check), `--workspace-step-timeout`; 10 minutes by default.
    pub workspace_step_timeout: Duration,
    /// Static DNS answers (`--resolve HOST=IP,…`): these hosts are never looked up; their
    /// addresses are checked like any resolver's answers.
    pub resolve: Vec<(String, Vec<std::net::IpAddr>)>,
    /// The operator's baseline policy file (deny rules only, evaluated first and not
    /// overridable by the project policy), when one is given.
    pub baseline_path: Option<PathBuf>,
    /// Named tokens, each of one role (`--admin-token`, `--runner-token`,
    /// `--reviewer-token`, `--viewer-token NAME=FILE`), beside the admin token (the admin
    /// named `admin`): each holder calls the API or signs in to the review UI with their
    /// own token, may take their role's actions only, and is recorded by name in the
    /// audit log (docs/admin-api.md#roles).
    pub tokens: Vec<airlock_control::access::TokenFile>,
    /// Webhook told (POST JSON `{run, pending, link}`) when a run is sealed with effects
    /// waiting for review.
    pub notify_webhook: Option<String>,
    /// Base URL of the review UI for links in notifications [default: `http://ADMIN`].
    pub ui_base_url: Option<String>,
    /// Spliced (`tunnel`) and upgraded (WebSocket) connections with no byte either way
    /// for this long are closed on both sides [default: 10 min].
    pub idle_timeout: Duration,
    /// Most concurrent client connections one run may hold; past it 429
    /// `too_many_connections` [default: 256].
    pub max_connections_per_run: usize,
    /// Most open client connections on the proxy listener in all [default: 4096].
    pub max_connections: usize,
    /// Most open connections on the admin (or ops) listener; past it a new connection gets
    /// one 429 `too_many_connections` and is closed [default:
    /// [`airlock_control::admin_listener::DEFAULT_MAX_CONNECTIONS`]].
    pub admin_max_connections: usize,
    /// DNS queries one run may make a second over the fence socket and `--dns` (0: no
    /// limit) [default: [`airlock_dataplane::DEFAULT_DNS_QUERIES_PER_SECOND`]].
    pub dns_queries_per_second: u32,
    /// `HOST:PORT` sandboxes dial for the proxy, when not the listener's own address.
    pub advertise_proxy: Option<(String, u16)>,
    /// The transparent listener (`--transparent ADDR`) for fences operators build.
    pub transparent: Option<SocketAddr>,
    /// airlock's DNS for source-bound runs (`--dns ADDR`, UDP and TCP).
    pub dns: Option<SocketAddr>,
    /// The CA certificate's path as sandboxes see it, when not the data directory's.
    pub advertise_ca: Option<PathBuf>,
    /// HTTP client connections (plain, and HTTP/1.1 or h2 intercepted in tunnels) with no
    /// request in flight and no byte either way for this long are closed gracefully
    /// [default: 5 min].
    pub keep_alive_timeout: Duration,
    /// Most open proxy-listener connections that have not authenticated yet; past it a new
    /// connection gets 429 `too_many_connections` [default: 256].
    pub max_unauthenticated_connections: usize,
    /// Proxy-listener connections that have not authenticated this long after accept are
    /// closed [default: 10 s].
    pub auth_timeout: Duration,
    /// How long, in all, a client may take to send a body airlock reads whole (staging, a
    /// body matcher, the placeholder search), besides the 30 s pause limit; past it 408
    /// `body_timeout` [default: 120 s].
    pub body_read_timeout: Duration,
    /// Bytes of ledger pages kept in memory (sled's page cache), counted by their size on
    /// disk; sled's per-page bookkeeping comes on top and grows with the ledger
    /// [default: 64 MiB].
    pub ledger_cache_bytes: u64,
    /// Free bytes the ledger's file system must keep; below it staging is refused
    /// (`--ledger-min-free-mib`, 0 for none) [default: 64 MiB].
    pub ledger_min_free_bytes: u64,
    /// Prune finished runs that finished longer ago than this, periodically
    /// (`--retain`; [`airlock_control::retention::spawn_retain`]); `None` keeps every run
    /// [default: none].
    pub retain: Option<Duration>,
    /// The PostgreSQL store to keep the ledger in instead of the sled ledger in `data_dir`
    /// (`--store postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`); the CA and tokens stay
    /// in `data_dir` [default: none, the sled ledger].
    pub store_url: Option<String>,
    /// Connections the PostgreSQL store keeps, besides its listener (`--store-connections`)
    /// [default: 8].
    pub store_connections: usize,
}

impl ServeConfig {
    /// A configuration with the documented defaults: proxy on 127.0.0.1:8080, admin on
    /// 127.0.0.1:8081, 10 MiB staging limit, 10 s connect timeout, 60 s release timeout, 10 s release lease TTL,
    /// 30 s header read timeout, 10 min idle timeout on spliced and upgraded connections,
    /// 5 min keep-alive timeout on HTTP connections, 10 s to authenticate, 120 s to send a
    /// body airlock reads whole, 256 connections
    /// a run, 256 unauthenticated and 4096 in all, a 64 MiB ledger cache.
    pub fn new(data_dir: PathBuf, policy_path: PathBuf) -> Self {
        Self {
            role: crate::role::Role::All,
            data_dir,
            policy_path,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin: SocketAddr::from(([127, 0, 0, 1], 8081)),
            upstream_ca: None,
            stage_body_limit: DEFAULT_STAGE_BODY_LIMIT,
            connect_timeout: Duration::from_secs(10),
            release_timeout: Duration::from_secs(60),
            release_lease_ttl: airlock_control::release::lease::LeaseSettings::DEFAULT_TTL,
            header_read_timeout: Duration::from_secs(30),
            danger_allow_snapshot_commands: false,
            runner_workspace_roots: Vec::new(),
            workspace_step_timeout: airlock_control::snapshot::DEFAULT_STEP_TIMEOUT,
            resolve: Vec::new(),
            baseline_path: None,
            tokens: Vec::new(),
            notify_webhook: None,
            ui_base_url: None,
            idle_timeout: airlock_net::limits::DEFAULT_IDLE_TIMEOUT,
            max_connections_per_run: airlock_net::limits::DEFAULT_MAX_CONNECTIONS_PER_RUN,
            max_connections: airlock_net::limits::DEFAULT_MAX_CONNECTIONS,
            admin_max_connections: airlock_control::admin_listener::DEFAULT_MAX_CONNECTIONS,
            dns_queries_per_second: airlock_dataplane::DEFAULT_DNS_QUERIES_PER_SECOND,
            advertise_proxy: None,
            transparent: None,
            dns: None,
            advertise_ca: None,
            keep_alive_timeout: airlock_net::limits::keepalive::DEFAULT_KEEP_ALIVE_TIMEOUT,
            max_unauthenticated_connections:
                airlock_net::limits::DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS,
            auth_timeout: airlock_net::limits::keepalive::DEFAULT_AUTH_TIMEOUT,
            body_read_timeout: airlock_dataplane::request::DEFAULT_BODY_READ_TIMEOUT,
            ledger_cache_bytes: airlock_ledger::DEFAULT_CACHE_BYTES,
            ledger_min_free_bytes: airlock_ledger::DEFAULT_MIN_FREE_BYTES,
            retain: None,
            store_url: None,
            store_connections: airlock_ledger::postgres::DEFAULT_CONNECTIONS,
        }
    }
}
