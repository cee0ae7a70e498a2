//! airlock's network layer, under every plane: bodies and their digests, the data plane's
//! errors and their responses, header and connection limits with keep-alive, authorities,
//! the SSRF-checked dialer, the upstream client and the CA.
//!
//! Nothing here knows a run's policy decisions or the ledger's records beyond their
//! types; the data plane (`airlock-dataplane`) builds the request path on it. [`config`]
//! sits here, at the bottom, because every plane names the same environment variables
//! and data-directory files (one place names them all).

pub mod authority;
pub mod body;
pub mod ca;
pub mod config;
pub mod dial;
pub mod digest;
pub mod failure;
pub mod fence;
pub mod headers;
pub mod limits;
pub mod linger;
pub mod prefixed;
pub mod respond;
pub mod strict_head;
pub mod upstream;
