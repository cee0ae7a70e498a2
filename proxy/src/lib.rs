//! airlock: an effect-staging egress proxy for AI-agent sandboxes — reads pass, side
//! effects are staged in a durable ledger and released only when a run is committed.
//!
//! `main.rs` is a thin CLI over this library; tests and the demo run [`Server`] in-process
//! or as the `airlock` binary.

pub mod adapters;
pub mod admin;
pub mod authority;
pub mod body;
pub mod ca;
pub mod cli;
pub mod client;
pub mod compensate;
pub mod config;
pub mod credentials;
pub mod demo;
pub mod denials;
pub mod dial;
pub mod enforce;
pub mod env;
pub mod forward;
pub mod handle;
pub mod headers;
pub mod keepalive;
pub mod limits;
pub mod lineage;
pub mod linger;
pub mod listener;
pub mod manifest;
pub mod metrics;
pub mod notify;
pub mod origin;
pub mod policy_store;
pub mod prefixed;
pub mod release;
pub mod respond;
pub mod run;
pub mod server;
pub mod snapshot;
pub mod stage;
pub mod tunnel;
pub mod ui;
pub mod upgrade;
pub mod upstream;
pub mod workspace;

pub use config::ServeConfig;
pub use server::{Server, StartError};
