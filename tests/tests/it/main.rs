//! End-to-end tests of airlock: the real binary, real clients, loopback origins.

mod adapters;
mod auth;
mod bad_input;
mod cases;
mod cli;
mod crash;
mod lineage;
mod pass;
mod protocols;
mod run;
mod stage;
mod tls;
mod websocket;
