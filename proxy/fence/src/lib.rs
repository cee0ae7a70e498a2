//! airlock's fence: runs a command in network, mount and PID namespaces whose only route
//! out is airlock's fence socket (docs/containment.md).
//!
//! The namespace has only `lo`. Outside the fence, [`launch`] prepares the files the
//! fence mounts and the `unshare` command line; inside, [`init`] is the namespace's PID 1:
//! it brings `lo` up, routes every address to it, installs the nftables rules that send
//! each TCP connection to the relay, bind-mounts the resolver and CA files, relays
//! connections and DNS queries to airlock over the fence socket, runs the command, and
//! lists and kills what the command left running. Breaking any of it from inside makes
//! connections fail; none can leave, because no interface leads anywhere.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

mod host;
pub mod idmap;
pub mod init;
pub mod launch;
pub mod leftovers;
pub mod probe;
mod relay;
pub mod root;
pub mod seccomp;
mod setup;
pub mod trust;

pub use launch::{probe, Prepared, Unavailable};
pub use leftovers::Leftover;

/// Port inside the fence where captured TCP connections arrive (the nftables redirect's
/// target on `127.0.0.1`).
pub const RELAY_PORT: u16 = 15001;

/// Port inside the fence where airlock's DNS answers (`127.0.0.1`, UDP and TCP).
pub const DNS_PORT: u16 = 53;

/// How a run's command reaches the network (`airlock run --network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// In the fence: captured connections, airlock's DNS, run identity from the fence.
    Isolated,
    /// No fence: proxy variables only, which a client may ignore.
    Env,
    /// In a fence with no route at all: only the command's own loopback.
    Offline,
}

impl Network {
    /// `isolated`, `env` or `offline`.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Isolated => "isolated",
            Network::Env => "env",
            Network::Offline => "offline",
        }
    }
}

/// A file bind-mounted over a path inside the fence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// The file mounted (outside the fence's view, but on the same filesystem).
    pub source: PathBuf,
    /// The path it covers inside the fence.
    pub target: PathBuf,
}

/// What the fence's PID 1 is told to do, handed over by [`launch`] as JSON in
/// `AIRLOCK_FENCE_SPEC` (never written to a file: it holds the run's token).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// `isolated` or `offline` (`env` runs no fence).
    pub network: Network,
    /// airlock's fence socket.
    pub socket: PathBuf,
    /// The run.
    pub run: String,
    /// The run's proxy token, sent in each hello.
    pub token: String,
    /// The port the proxy variables name (`127.0.0.1:PORT` inside the fence too).
    pub proxy_port: Option<u16>,
    /// The command.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Variables set for the command (on top of the fence's own environment).
    pub env: BTreeMap<String, String>,
    /// Files mounted over system paths (resolver, hosts, CA bundles) and the fence
    /// socket's own mount (so the data directory can be hidden).
    pub mounts: Vec<Mount>,
    /// Directories covered with an empty tmpfs once the mounts are made: airlock's data
    /// directory, the fence's private directory (the report), and host service
    /// sockets a command could use to act outside the fence (systemd, D-Bus, Docker).
    pub hide: Vec<PathBuf>,
    /// Files covered with `/dev/null` (service sockets that are files, e.g. Docker's).
    pub hide_files: Vec<PathBuf>,
    /// Where PID 1 writes its [`Report`] (opened before the private directory is hidden).
    pub report: PathBuf,
    /// The run's layer and the view over it ([`root`]): under root (without
    /// `--allow-host-root`) with the command's subordinate ranges, built by `airlock
    /// fence-root`; as an ordinary user (whose command keeps the user's own, non-zero,
    /// id) with no idmap, built by the fence's PID 1. `None` when the run has no layer
    /// (`--allow-host-root`).
    #[serde(default)]
    pub root: Option<root::RootSpec>,
}

/// What the fence's PID 1 reports when the command has ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Time from PID 1's start to the command's start (namespace setup, relay), in ms.
    pub setup_ms: f64,
    /// The command's exit code; `None` when a signal ended it or it could not start.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Why the fence or the command could not start, when one could not.
    pub error: Option<String>,
    /// Processes still running in the fence when the command ended (all killed).
    pub left_running: Vec<Leftover>,
    /// Connections the relay carried to airlock (both kinds).
    pub relayed_connections: u64,
    /// DNS messages the relay carried to airlock over UDP, plus DNS connections over TCP.
    pub relayed_dns_queries: u64,
    /// Connections or queries dropped because airlock could not be reached.
    pub relay_failures: u64,
    /// Connections or queries the relay dropped at its own limits: out of descriptors, or
    /// past the connections it carries at once (reported on stderr as they happen).
    #[serde(default)]
    pub relay_limited: u64,
    /// As an ordinary user: why the overlay over the host's filesystems could not be
    /// built ([`root::enter_user_view`]), so what the command wrote outside the workspace
    /// reached the host (as the user) and is not in the run's layer. `None` when it was
    /// built, and under root (whose fence refuses to start without its view).
    #[serde(default)]
    pub outside_unavailable: Option<String>,
}

/// Why the fence could not be set up or reported.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// A file of the fence could not be written or read.
    #[error("{what} {path}: {source}")]
    File {
        /// What the file is.
        what: &'static str,
        /// Its path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A setup step inside the fence failed.
    #[error("fence setup: {0}")]
    Setup(String),
    /// The spec or the report is not valid JSON.
    #[error("{what}: {source}")]
    Json {
        /// What was parsed.
        what: &'static str,
        /// The error.
        source: serde_json::Error,
    },
    /// The Java truststore could not be built.
    #[error("java truststore: {0}")]
    Truststore(String),
}
