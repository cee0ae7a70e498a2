//! End-to-end tests of airlock: the real binary, real clients, loopback origins.

mod adapters;
mod auth;
mod bad_input;
mod binding;
mod cases;
mod cli;
mod clients;
mod containment;
mod crash;
mod credentials;
mod flows;
mod limits;
mod lineage;
mod matchers;
mod outcomes;
mod pass;
mod protocols;
mod readme;
mod reload;
mod run;
mod ssrf;
mod stage;
mod tls;
mod tunnel;
mod ui;
mod websocket;
