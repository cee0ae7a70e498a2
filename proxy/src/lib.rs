//! airlock: an effect-staging egress proxy for AI-agent sandboxes — reads pass, side
//! effects are staged in a durable ledger and released only when a run is committed.
//!
//! This crate is the composition root ([`Server`] builds the data plane, the control plane
//! and their listeners; nothing but the tests depends on it) and the command line
//! (`main.rs` is a thin CLI over [`cli`]), with `airlock run` and the demo.

pub mod cli;
pub mod client;
pub mod config;
pub mod demo;
pub mod render;
pub mod role;
mod sandbox_files;
pub mod server;

pub use config::ServeConfig;
pub use server::{Server, StartError};
