//! The command line's shape: subcommands, flags and their environment variables.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{ENV_ADMIN, ENV_DATA, ENV_TOKEN};

/// airlock: an effect-staging egress proxy for AI-agent sandboxes.
#[derive(Debug, Parser)]
#[command(
    name = "airlock",
    version,
    about,
    long_about = None,
    after_help = "Flags follow their subcommand: `airlock serve --data DIR …`, `airlock effects RUN --data DIR`. \
                  AIRLOCK_DATA=DIR names the data directory once for every command."
)]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) command: Command,
}

/// Where the admin API is and how to authenticate to it.
#[derive(Debug, clap::Args)]
pub(crate) struct AdminArgs {
    /// Admin API base URL [default: the running server's, from DATA/addresses.json]
    #[arg(long = "admin", env = ENV_ADMIN, value_name = "URL")]
    pub(crate) admin: Option<String>,
    /// Admin bearer token [default: DATA/admin.token]
    #[arg(long, env = ENV_TOKEN, hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Data directory of the server
    #[arg(long, env = ENV_DATA, default_value = "airlock-data", value_name = "DIR")]
    pub(crate) data: PathBuf,
    /// Print JSON instead of tables
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(super) enum Command {
    /// Run the proxy and admin listeners
    Serve(Box<ServeArgs>),
    /// Run a command as one transaction: snapshot, run, verify, then keep or roll back
    /// files and effects together
    Run(Box<crate::cli::run::RunArgs>),
    /// Print the admin API's OpenAPI 3.1 document (what `GET /v1/openapi.json` serves and
    /// docs/openapi.json holds)
    Openapi,
    /// Internal: PID 1 of the fence `airlock run` starts with `unshare` (docs/containment.md)
    #[command(name = "fence-init", hide = true)]
    FenceInit,
    /// Take a savepoint of a run: a workspace snapshot and the ledger position
    Savepoint {
        /// The run
        run: String,
        /// The savepoint's name [default: sp1, sp2, …]
        name: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Roll a run back to a savepoint: files restored, later effects discarded
    RollbackTo {
        /// The run
        run: String,
        /// The savepoint
        savepoint: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Print a one-time sign-in link to the review UI (it signs one browser in, within 5
    /// minutes; the token never goes in the URL)
    Ui {
        /// Print only the URL
        #[arg(long)]
        url_only: bool,
        /// A link that signs in as this token's holder instead (admin role only)
        #[arg(long = "for", value_name = "NAME")]
        for_name: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Print the audit log: who did what (decisions, commits, aborts, policy reloads,
    /// prunes, token changes), newest first
    Audit {
        /// Only the entries about this run
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        /// Most entries to print
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Oldest first
        #[arg(long)]
        oldest_first: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Create, list, show, export or prune runs
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// List a run's effects
    Effects {
        /// The run
        run: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Show one effect (request, headers with credentials redacted, body, flow rules,
    /// lineage, release), or one run (`run_…`, as `airlock runs show`)
    Show {
        /// The effect (`eff_…`) or run (`run_…`)
        effect: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Approve effects for release at commit
    Approve {
        /// The effects
        #[arg(required = true)]
        effects: Vec<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Reject effects: they are never sent
    Reject {
        /// The effects
        #[arg(required = true)]
        effects: Vec<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Seal a run: it stages no more effects
    Seal {
        /// The run
        run: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Commit a run: release its approved effects once, parents before dependents, each origin in staging order
    Commit {
        /// The run
        run: String,
        /// Approve the undecided effects first: the ones it lists (or the ones `--expect` names), and only those
        #[arg(long)]
        approve_pending: bool,
        /// Commit only if the run's staged and approved effects are still the ones `airlock effects RUN` listed with this `SEQ:sha256:HEX`
        #[arg(long, value_name = "SEQ:DIGEST")]
        expect: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Send again a failed effect of which provably nothing reached the origin (dial
    /// refused, TLS verification failed, the policy refused it), or an unknown one whose
    /// rule says retry_unknown = "idempotent"; RUN retries every such effect of the run.
    /// Once per attempt, recorded with who asked
    Retry {
        /// The effect (`eff_…`) or run (`run_…`)
        target: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Record what a reviewer found at the origin for an unknown effect: --delivered
    /// counts it released (its dependents follow), --not-delivered makes it retriable
    Settle {
        /// The unknown effect
        effect: String,
        /// The origin has the effect
        #[arg(
            long,
            conflicts_with = "not_delivered",
            required_unless_present = "not_delivered"
        )]
        delivered: bool,
        /// The origin does not have the effect
        #[arg(long)]
        not_delivered: bool,
        /// What was checked, kept with the decision
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
        /// A real value the origin assigned, for dependents that carry its placeholder:
        /// NAME is the placeholder's JSON pointer (e.g. /number); repeatable, with --delivered
        #[arg(long = "value", value_name = "NAME=VALUE", requires = "delivered", value_parser = parse_value)]
        values: Vec<(String, String)>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Abort a run: discard its pending effects; nothing is sent
    Abort {
        /// The run
        run: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Print shell exports that route a sandbox through a run
    Env {
        /// The run
        run: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// The CA certificate clients must trust
    Ca {
        #[command(subcommand)]
        command: CaCommand,
    },
    /// Run the end-to-end demo on loopback with embedded defaults
    Demo,
    /// Check, test, explain, diff, replay or reload a policy, or print its JSON Schema
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Stage approximate compensations (close the PR, delete the message, …) for a
    /// committed run's released effects, in reverse order, in a new run for review
    Compensate {
        /// The committed or partially committed run
        run: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum PolicyCommand {
    /// Parse a policy strictly and list rules that can never decide anything
    Check {
        /// The policy file
        file: PathBuf,
        /// Print JSON
        #[arg(long)]
        json: bool,
        /// Fail on advisory warnings too (over-broad wildcards, pass rules that pass
        /// writes, wide or pointless allow_private, a pass default)
        #[arg(long)]
        strict: bool,
    },
    /// Run a table of requests against a policy: expected action, rule and reason code,
    /// and which rules no case reaches
    Test {
        /// The policy file
        file: PathBuf,
        /// The cases file (TOML, `[[case]]` tables; see docs/policy.md)
        cases: PathBuf,
        /// Fail when a rule is reached by no case
        #[arg(long)]
        require_coverage: bool,
    },
    /// Show every rule considered for one request, why it matched or not, and the decision
    Explain {
        /// The policy file
        file: PathBuf,
        /// The request carries a body (a GET with a body is a write)
        #[arg(long)]
        body: bool,
        /// Print JSON
        #[arg(long)]
        json: bool,
        /// A request header, `NAME:VALUE` (repeatable)
        #[arg(long = "header", value_name = "NAME:VALUE")]
        headers: Vec<String>,
        /// The request body, read from FILE (implies --body; for json/graphql/jsonrpc matchers)
        #[arg(long, value_name = "FILE")]
        data: Option<PathBuf>,
        /// The profile of the run making the request
        #[arg(long)]
        profile: Option<String>,
        /// Request method, e.g. POST
        method: String,
        /// Absolute URL, e.g. https://api.example.com/repos/o/r/pulls
        url: String,
    },
    /// Show what changing OLD into NEW widens (deny -> stage -> pass) and narrows, by
    /// deciding probe requests built from both files' rules
    Diff {
        /// The policy in force
        old: PathBuf,
        /// The candidate policy
        new: PathBuf,
        /// Print JSON
        #[arg(long)]
        json: bool,
        /// Exit non-zero when anything widens (a gate for policy changes in CI)
        #[arg(long)]
        fail_on_widen: bool,
    },
    /// Re-decide every request a past run made (its reads, effects and denials, from the
    /// ledger through the admin API) under a candidate policy; show what would change
    Replay {
        /// The candidate policy
        file: PathBuf,
        /// The run to replay
        #[arg(long)]
        run: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Print the JSON Schema of the policy file format (docs/policy.schema.json)
    Schema,
    /// Validate FILE and swap it in on the running server (POST /v1/policy); an invalid
    /// file changes nothing
    Reload {
        /// The policy file
        file: PathBuf,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum RunsCommand {
    /// Create a run and print its id, token and proxy URL
    Create {
        /// Policy profile of the run
        #[arg(long)]
        profile: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List runs, newest first (every page of GET /v1/runs)
    List {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Write a run's whole record as NDJSON (one JSON object per line with a `kind`:
    /// run, decision, read, effect, release, placeholder, edge, denial, workspace, end;
    /// docs/admin-api.md, "Export and prune"), from GET /v1/runs/{id}/export
    Export {
        /// The run
        run: String,
        /// Write to FILE instead of standard output
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Remove every record of the finished runs (committed, aborted, or partially
    /// committed with nothing left in flight) that finished longer ago than DURATION
    Prune {
        /// How long ago a run must have finished: `7d`, `12h`, `30m`, `0s` (every
        /// finished run)
        #[arg(long, value_name = "DURATION")]
        finished_before: humantime::Duration,
        /// Export each run to DIR/RUN.ndjson before removing it (a run whose export
        /// fails is kept)
        #[arg(long, value_name = "DIR")]
        export_to: Option<PathBuf>,
        /// List the runs that would be removed; remove nothing
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Show one run
    Show {
        /// The run
        run: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum CaCommand {
    /// Print the CA certificate (PEM)
    Export {
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(Debug, clap::Args)]
pub(super) struct ServeArgs {
    /// Log format on stderr: `text` (human lines) or `json` (one JSON object per line,
    /// for log shippers; docs/architecture.md "Logs and metrics" lists the fields)
    #[arg(long, value_enum, env = "AIRLOCK_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub(super) log_format: LogFormat,
    /// What this process runs (docs/fleet.md): `proxy` (proxy, transparent and DNS
    /// listeners, staging, journal, lineage; --admin serves only /healthz and /metrics),
    /// `control` (admin API, review UI, commit authority, notifications, recovery; no proxy
    /// listener, needs --advertise-proxy) or `all` (both, one process)
    #[arg(long, value_enum, env = "AIRLOCK_ROLE", default_value_t = crate::role::Role::All)]
    pub(super) role: crate::role::Role,
    /// Data directory: CA, admin token, ledger (created on first start)
    #[arg(long, env = ENV_DATA, default_value = "airlock-data", value_name = "DIR")]
    pub(super) data: PathBuf,
    /// Keep the ledger in this PostgreSQL database instead of DATA/ledger, shared by every
    /// airlock given the same URL: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE; for
    /// verified TLS add ?sslmode=verify-full&sslrootcert=CA.pem (or sslrootcert=system).
    /// The CA and tokens stay in --data; see docs/fleet.md#postgresql-store
    #[arg(
        long,
        env = "AIRLOCK_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub(super) store: Option<String>,
    /// Connections to the --store database this process keeps (besides one listening for
    /// other processes' changes)
    #[arg(long, default_value_t = airlock_ledger::postgres::DEFAULT_CONNECTIONS, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub(super) store_connections: usize,
    /// Policy file (TOML; see docs/policy.md)
    #[arg(long, value_name = "FILE")]
    pub(super) policy: PathBuf,
    /// Proxy listener address
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(super) listen: SocketAddr,
    /// Admin listener address (with --role proxy: the ops listener, /healthz and /metrics only)
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub(super) admin: SocketAddr,
    /// Extra CA certificates (PEM) trusted for origins, beside the webpki roots
    #[arg(long, value_name = "FILE")]
    pub(super) upstream_ca: Option<PathBuf>,
    /// Largest request body that can be staged, in bytes
    #[arg(long, default_value_t = crate::config::DEFAULT_STAGE_BODY_LIMIT)]
    pub(super) stage_body_limit: u64,
    /// Seconds an origin has to answer a released effect, response body included; past it
    /// the effect's outcome is unknown (the request may have reached the origin)
    #[arg(long, default_value_t = 60, value_name = "SECONDS", value_parser = seconds())]
    pub(super) release_timeout: u64,
    /// Seconds a run's release lease lasts unless renewed (every third of it): when this
    /// instance dies mid-release, another control instance on the same store (or this one
    /// restarted on another data directory) takes the run over after at most this long
    /// plus a third, and marks the effect that was in flight `unknown`
    #[arg(long, default_value_t = 10, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(super) release_lease_ttl: u64,
    /// Seconds a client may take to send a request head, on the proxy listener and the
    /// admin (or ops) listener
    #[arg(long, default_value_t = 30, value_name = "SECONDS", value_parser = seconds())]
    pub(super) header_read_timeout: u64,
    /// Let admin clients have this server run shell commands (the cmd snapshot driver of
    /// `airlock run`): anyone holding the admin token can then run any command as this user
    #[arg(long)]
    pub(super) danger_allow_snapshot_commands: bool,
    /// A directory under which runner tokens may attach workspaces (repeatable): the
    /// server snapshots and restores them as its own user, so without one a runner
    /// attaches none, and only with the dir driver (docs/admin-api.md#roles)
    #[arg(
        long = "runner-workspace-root",
        value_name = "DIR",
        env = "AIRLOCK_RUNNER_WORKSPACE_ROOTS",
        value_delimiter = ','
    )]
    pub(super) runner_workspace_roots: Vec<PathBuf>,
    /// Seconds each workspace step of `airlock run` may take (snapshot, diff, rollback,
    /// keep, residue check) before it ends with an error naming the step and the path it
    /// was processing
    #[arg(long, default_value_t = airlock_control::snapshot::DEFAULT_STEP_TIMEOUT.as_secs(),
          value_name = "SECONDS", value_parser = seconds())]
    pub(super) workspace_step_timeout: u64,
    /// Answer DNS for HOST with these addresses instead of the system resolver
    /// (HOST=IP[,IP…], repeatable; like curl's --resolve). The answers go through the same
    /// checks as any other: private and special-purpose addresses still need allow_private
    #[arg(long, value_name = "HOST=IP[,IP]", value_parser = airlock_net::dial::parse_resolve)]
    pub(super) resolve: Vec<(String, Vec<std::net::IpAddr>)>,
    /// Operator baseline policy (TOML, deny rules only): evaluated before the project
    /// policy, which cannot override it
    #[arg(long, value_name = "FILE")]
    pub(super) baseline: Option<PathBuf>,
    /// A named reviewer token, NAME=FILE (repeatable): its holder reads runs, approves,
    /// rejects, seals, commits, aborts, retries, settles and compensates, in the review UI
    /// or the API, and every action records NAME (docs/admin-api.md#roles)
    #[arg(long = "reviewer-token", value_name = "NAME=FILE", env = "AIRLOCK_REVIEWER_TOKENS", value_delimiter = ',', value_parser = |s: &str| airlock_control::access::parse_token_arg(airlock_control::access::Role::Reviewer, s))]
    pub(super) reviewer_tokens: Vec<airlock_control::access::TokenFile>,
    /// A named viewer token, NAME=FILE (repeatable): read only
    #[arg(long = "viewer-token", value_name = "NAME=FILE", env = "AIRLOCK_VIEWER_TOKENS", value_delimiter = ',', value_parser = |s: &str| airlock_control::access::parse_token_arg(airlock_control::access::Role::Viewer, s))]
    pub(super) viewer_tokens: Vec<airlock_control::access::TokenFile>,
    /// A named runner token, NAME=FILE (repeatable): what `airlock run` and an
    /// orchestrator need (create runs, read their env, drive their workspace, seal, abort),
    /// never approve, reject or commit
    #[arg(long = "runner-token", value_name = "NAME=FILE", env = "AIRLOCK_RUNNER_TOKENS", value_delimiter = ',', value_parser = |s: &str| airlock_control::access::parse_token_arg(airlock_control::access::Role::Runner, s))]
    pub(super) runner_tokens: Vec<airlock_control::access::TokenFile>,
    /// A named admin token, NAME=FILE (repeatable): everything, as DATA/admin.token (the
    /// admin named `admin`)
    #[arg(long = "admin-token", value_name = "NAME=FILE", env = "AIRLOCK_ADMIN_TOKENS", value_delimiter = ',', value_parser = |s: &str| airlock_control::access::parse_token_arg(airlock_control::access::Role::Admin, s))]
    pub(super) admin_tokens: Vec<airlock_control::access::TokenFile>,
    /// Webhook told (POST JSON {run, pending, link}) when a run is sealed with effects
    /// waiting for review; sent by airlock directly, not through the proxy
    #[arg(long, value_name = "URL")]
    pub(super) notify_webhook: Option<String>,
    /// Base URL of the review UI for links in notifications [default: http://ADMIN]
    #[arg(long, value_name = "URL")]
    pub(super) ui_base_url: Option<String>,
    /// Seconds a tunnel (`action = "tunnel"`) or upgraded (WebSocket) connection may go
    /// with no byte either way before both sides are closed
    #[arg(long, default_value_t = 600, value_name = "SECONDS", value_parser = seconds())]
    pub(super) idle_timeout: u64,
    /// Most concurrent client connections one run may hold (CONNECT tunnels and upgraded
    /// connections included); past it requests get 429 too_many_connections
    #[arg(long, default_value_t = airlock_net::limits::DEFAULT_MAX_CONNECTIONS_PER_RUN, value_name = "N")]
    pub(super) max_connections_per_run: usize,
    /// Most open client connections on the proxy listener in all; past it a new connection
    /// gets 429 too_many_connections and is closed
    #[arg(long, default_value_t = airlock_net::limits::DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    pub(super) max_connections: usize,
    /// Most open connections on the admin listener (the ops listener with --role proxy);
    /// past it a new connection gets 429 too_many_connections and is closed. Each also
    /// has --header-read-timeout to send a request head, and to send the next one
    #[arg(long, default_value_t = airlock_control::admin_listener::DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    pub(super) admin_max_connections: usize,
    /// DNS queries one run may make a second, inside airlock run's fence and on --dns
    /// (bursts of twice as many); past it a query is not answered. 0: no limit
    #[arg(long, default_value_t = airlock_dataplane::DEFAULT_DNS_QUERIES_PER_SECOND, value_name = "N")]
    pub(super) dns_queries_per_second: u32,
    /// Take connections redirected here by a fence you built (nftables `redirect` or
    /// `dnat`; the original destination comes from SO_ORIGINAL_DST). Each belongs to the
    /// open run whose `source` (POST /v1/runs {"source": CIDR}) holds its source address;
    /// see docs/containment.md
    #[arg(long, value_name = "ADDR")]
    pub(super) transparent: Option<std::net::SocketAddr>,
    /// Answer DNS here (UDP and TCP) for sources bound to runs, as inside `airlock run`'s
    /// fence: names some rule could allow get pool addresses, the rest NXDOMAIN
    #[arg(long, value_name = "ADDR")]
    pub(super) dns: Option<std::net::SocketAddr>,
    /// HOST:PORT sandboxes dial for the proxy, written into run environments (`airlock
    /// env`) when it differs from --listen (a container or network namespace)
    #[arg(long, value_name = "HOST:PORT", value_parser = airlock_control::env::parse_advertised_proxy)]
    pub(super) advertise_proxy: Option<(String, u16)>,
    /// The CA certificate's path as sandboxes see it, written into run environments
    /// [default: DATA/ca.pem]
    #[arg(long, value_name = "PATH")]
    pub(super) advertise_ca: Option<PathBuf>,
    /// Seconds an HTTP client connection (plain, or HTTP/1.1 or h2 intercepted in a
    /// CONNECT tunnel) may sit with no request in flight and no byte either way before it
    /// is closed gracefully (h2 GOAWAY); a request waiting on its origin or streaming is in
    /// flight and never cut. An idle HTTP/1.1 connection is also closed by
    /// --header-read-timeout, which hyper runs while it waits for the next request head
    #[arg(long, default_value_t = airlock_net::limits::keepalive::DEFAULT_KEEP_ALIVE_TIMEOUT.as_secs(), value_name = "SECONDS", value_parser = seconds())]
    pub(super) keep_alive_timeout: u64,
    /// Most open client connections that have not authenticated yet (no request with valid
    /// Proxy-Authorization); past it a new connection evicts the oldest of them, which is
    /// closed as if its --auth-timeout had passed
    #[arg(long, default_value_t = airlock_net::limits::DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS, value_name = "N")]
    pub(super) max_unauthenticated_connections: usize,
    /// Seconds a client connection may stay open without authenticating (a request with
    /// valid Proxy-Authorization) before it is closed
    #[arg(long, default_value_t = airlock_net::limits::keepalive::DEFAULT_AUTH_TIMEOUT.as_secs(), value_name = "SECONDS", value_parser = seconds())]
    pub(super) auth_timeout: u64,
    /// Seconds a client may take in all to send a request body airlock reads whole (a
    /// staged body, one a body matcher reads, one searched for placeholders), besides the
    /// 30 s it may pause between parts; past it 408 body_timeout and nothing is staged
    #[arg(long, default_value_t = airlock_dataplane::request::DEFAULT_BODY_READ_TIMEOUT.as_secs(), value_name = "SECONDS", value_parser = seconds())]
    pub(super) body_read_timeout: u64,
    /// MiB of the ledger kept in memory (its page cache; older pages are read back from
    /// disk when needed). The ledger grows with every read and effect, and airlock's
    /// resident memory with it: this bounds the cache's share, which is most of that
    /// growth (sled's per-page bookkeeping still grows with the ledger's size). Does not
    /// apply to --store
    #[arg(long, default_value_t = airlock_ledger::DEFAULT_CACHE_BYTES >> 20, value_name = "MIB",
          value_parser = clap::value_parser!(u64).range(1..=1024 * 1024))]
    pub(super) ledger_cache_mib: u64,
    /// MiB of free space the ledger's file system must keep: below it staging is refused
    /// (507 `ledger_low_space`) before anything is written, and /healthz answers 503.
    /// 0 turns the floor off. Does not apply to --store (PostgreSQL watches its own disk)
    #[arg(long, default_value_t = airlock_ledger::DEFAULT_MIN_FREE_BYTES >> 20, value_name = "MIB",
          value_parser = clap::value_parser!(u64).range(0..=1024 * 1024))]
    pub(super) ledger_min_free_mib: u64,
    /// Remove every finished run (committed, aborted, or partially committed with
    /// nothing left in flight) that finished longer ago than DURATION (`7d`, `12h`,
    /// `30m`), checking every tenth of it (1 s to 10 min), as `airlock runs prune
    /// --finished-before DURATION` does; each pruned run is logged. Unset: runs are kept
    /// (docs/architecture.md, "Retention")
    #[arg(long, value_name = "DURATION")]
    pub(super) retain: Option<humantime::Duration>,
    /// The `--…` flags set on the command line or through their environment variable (not
    /// defaults), filled in from clap's matches for [`crate::role::check_flags`].
    #[arg(skip)]
    pub(super) given: Vec<String>,
}

/// How `airlock serve` writes its log lines to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum LogFormat {
    /// One human-readable line per event (ANSI colours on a terminal).
    Text,
    /// One JSON object per line (tracing-subscriber's JSON layer): `timestamp`, `level`,
    /// `message` and the event's fields at the top level.
    Json,
}

/// Parses `NAME=VALUE` of `airlock settle --value`.
fn parse_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!(
            "{text:?} is not NAME=VALUE (NAME: the placeholder's JSON pointer, like /number)"
        )),
    }
}

/// Longest timeout the CLI takes, in seconds: ten years, far past any sensible deadline and
/// far from the overflow of adding a `Duration` to an `Instant`.
pub(super) const MAX_TIMEOUT_SECS: u64 = 10 * 365 * 24 * 3600;

/// Parser of a timeout in whole seconds, 0 (taken as 1) to [`MAX_TIMEOUT_SECS`].
pub(super) fn seconds() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(0..=MAX_TIMEOUT_SECS)
}
