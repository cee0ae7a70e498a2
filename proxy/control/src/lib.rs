//! airlock's control plane: the commit authority (release and compensations), the
//! workspace decision and its snapshot drivers, reviewers and notifications, the admin API
//! and the review UI.
//!
//! [`Control`] is its one handle; it reaches the data plane through
//! [`airlock_dataplane::DataPlane`]'s methods.

pub mod access;
pub mod admin;
pub mod admin_listener;
mod bound_ports;
pub mod compensate;
pub mod env;
pub mod flows;
pub mod metrics;
pub mod notify;
pub mod outcomes;
mod plane;
pub mod release;
mod released;
pub mod retention;
pub mod runs;
pub mod snapshot;
pub mod ui;
pub mod visible;

pub use plane::{Control, ControlInputs};
