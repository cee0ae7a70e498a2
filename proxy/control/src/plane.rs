//! [`Control`]: the control plane's one handle, with private fields. The composition root
//! builds it from [`ControlInputs`] over the data plane it reaches through
//! [`DataPlane`]'s methods.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use airlock_dataplane::fence::Fence;
use airlock_dataplane::policy_store::PolicyStore;
use airlock_dataplane::DataPlane;
use airlock_ledger::{RunId, Store};

use crate::env::Advertised;
use crate::ui::Review;

/// What the composition root hands the control plane.
pub struct ControlInputs {
    /// The data plane whose runs this control plane decides.
    pub data: Arc<DataPlane>,
    /// The admin bearer token.
    pub admin_token: String,
    /// Where sandboxes reach the proxy and find the CA (`--advertise-proxy`,
    /// `--advertise-ca`; by default the listener and the data directory's `ca.pem`).
    pub advertised: Advertised,
    /// Where the admin listener listens.
    pub admin_addr: SocketAddr,
    /// The data directory (absolute).
    pub data_dir: PathBuf,
    /// Whether admin clients may have the server run snapshot commands (`cmd` driver).
    pub danger_allow_snapshot_commands: bool,
    /// Where non-admin tokens may attach workspaces (`--runner-workspace-root`).
    pub runner_workspace_roots: Vec<PathBuf>,
    /// Time limit of each workspace step of `airlock run` (snapshot, diff, rollback, keep,
    /// residue check); [`crate::snapshot::DEFAULT_STEP_TIMEOUT`] by default.
    pub workspace_step_timeout: std::time::Duration,
    /// Reviewers (named tokens), notifications and the review UI's URL.
    pub review: Review,
    /// The fence's names and counts, shared with the fence socket's accept loop.
    pub fence: Arc<Fence>,
    /// This instance's holder id and the TTL of the release leases it takes
    /// ([`crate::release::lease`]).
    pub release_lease: crate::release::lease::LeaseSettings,
}

/// The control plane: the admin API, the review UI, the commit authority and the
/// workspace decision.
pub struct Control {
    pub(crate) data: Arc<DataPlane>,
    pub(crate) admin_token: String,
    pub(crate) advertised: Advertised,
    pub(crate) admin_addr: SocketAddr,
    pub(crate) data_dir: PathBuf,
    pub(crate) danger_allow_snapshot_commands: bool,
    pub(crate) runner_workspace_roots: Vec<PathBuf>,
    pub(crate) workspace_step_timeout: std::time::Duration,
    /// One lock per run being committed, so a run is never released by two tasks of this
    /// instance while other runs commit freely; across instances the store's release
    /// lease serialises them ([`crate::release::lease`]).
    commit_locks: Mutex<HashMap<RunId, Arc<tokio::sync::Mutex<()>>>>,
    pub(crate) review: Review,
    pub(crate) fence: Arc<Fence>,
    /// Each run's bound proxy port (`crate::bound_ports`).
    pub(crate) bound_ports: Mutex<HashMap<RunId, u16>>,
    /// The release histogram (`crate::metrics`).
    pub(crate) metrics: crate::metrics::ControlMetrics,
    /// Holder id and TTL of release leases.
    pub(crate) lease: crate::release::lease::LeaseSettings,
    /// The admin listener's connection counts (`crate::admin_listener`).
    pub(crate) admin_connections: Arc<crate::admin_listener::Stats>,
}

impl Control {
    /// Builds the control plane.
    pub fn new(inputs: ControlInputs) -> Arc<Self> {
        Arc::new(Self {
            data: inputs.data,
            admin_token: inputs.admin_token,
            advertised: inputs.advertised,
            admin_addr: inputs.admin_addr,
            data_dir: inputs.data_dir,
            danger_allow_snapshot_commands: inputs.danger_allow_snapshot_commands,
            runner_workspace_roots: inputs.runner_workspace_roots,
            workspace_step_timeout: inputs.workspace_step_timeout,
            commit_locks: Mutex::default(),
            review: inputs.review,
            fence: inputs.fence,
            bound_ports: Mutex::default(),
            metrics: crate::metrics::ControlMetrics::default(),
            lease: inputs.release_lease,
            admin_connections: Arc::default(),
        })
    }

    /// Everyone with a token, each with a role (the first is `admin`).
    pub fn principals(&self) -> &[crate::access::Principal] {
        &self.review.principals
    }

    /// The admin listener's connection counts, which [`crate::admin_listener::serve`]
    /// keeps and `/metrics` shows.
    pub fn admin_connections(&self) -> &Arc<crate::admin_listener::Stats> {
        &self.admin_connections
    }

    /// The admin bearer token.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// Where the admin listener listens.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The data directory (absolute).
    pub fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }

    /// The fence socket in the data directory, where fence relays reach the data plane.
    pub fn fence_socket(&self) -> PathBuf {
        self.data_dir.join(airlock_net::config::FENCE_SOCKET_FILE)
    }

    /// The durable ledger (the data plane's).
    pub(crate) fn ledger(&self) -> &Arc<dyn Store> {
        self.data.ledger()
    }

    /// The policy in force (the data plane's; take one snapshot per decision).
    pub(crate) fn policy(&self) -> &Arc<PolicyStore> {
        self.data.policy()
    }

    /// The data plane.
    pub fn data(&self) -> &Arc<DataPlane> {
        &self.data
    }

    /// The review UI's base URL (no trailing slash).
    pub fn ui_base_url(&self) -> &str {
        &self.review.base_url
    }

    /// Closes `run` to all further requests (a commit was decided or it was aborted).
    pub(crate) fn close_run(&self, run: &RunId) {
        self.data.close_run(run);
    }

    /// The commit lock of `run`.
    pub(crate) fn commit_lock(&self, run: &RunId) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.commit_locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(run.clone()).or_default().clone()
    }
}
