//! End-to-end tests of airlock: the real binary, real clients, loopback origins.

mod adapters;
mod auth;
mod bad_input;
mod binding;
mod cases;
mod cli;
mod containment;
mod crash;
mod credentials;
mod durability;
mod flows;
mod limits;
mod lineage;
mod matchers;
mod outcomes;
mod pass;
mod protocols;
mod reload;
mod run;
mod ssrf;
mod stage;
mod tls;
mod tunnel;
mod ui;
mod websocket;
