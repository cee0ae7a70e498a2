//! airlock's data plane: the proxy listener and the request path — run identity, CONNECT
//! and interception, the policy decision, obligations and limits, pass, stage, deny,
//! tunnel and upgrade, credentials, and the lineage worker.
//!
//! [`DataPlane`] is its one handle; the control plane (`airlock-control`) reaches it only
//! through its methods.

pub mod bound;
pub mod credentials;
pub mod denials;
pub mod enforce;
pub mod fence;
pub mod flows;
pub mod forward;
pub mod gaps;
pub mod handle;
pub mod inflight;
pub mod lineage;
pub mod listener;
pub mod manifest;
pub mod metrics;
mod plane;
pub mod policy_store;
pub mod request;
pub mod secrets;
pub mod sessions;
pub mod stage;
mod staged_lists;
mod staged_reads;
pub mod tunnel;
pub mod upgrade;

pub use plane::{DataPlane, DataPlaneInputs, Limits, DEFAULT_DNS_QUERIES_PER_SECOND};
