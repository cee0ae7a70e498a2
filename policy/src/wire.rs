//! The policy file as written: serde structs that reject unknown keys.
//!
//! Nothing here is validated beyond its TOML type; `lib.rs` compiles these
//! into [`crate::Policy`], which cannot hold an invalid rule.

use serde::Deserialize;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyFile {
    /// Required; must be 1. Optional here so a missing version gets our message.
    pub(crate) version: Option<i64>,
    pub(crate) default: Option<WireAction>,
    #[serde(default)]
    pub(crate) allow_private: Vec<String>,
    #[serde(default, rename = "rule")]
    pub(crate) rules: Vec<WireRule>,
    /// `mode = "enforce"` (default) or `"audit"`: see [`crate::Mode`].
    pub(crate) mode: Option<WireMode>,
}

/// One `[[rule]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireRule {
    pub(crate) id: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) port: Option<WirePorts>,
    pub(crate) scheme: Option<WireScheme>,
    pub(crate) method: Option<WireMethods>,
    pub(crate) path: Option<String>,
    pub(crate) action: Option<WireAction>,
    pub(crate) reason: Option<String>,
    pub(crate) allow_private: Option<Vec<String>>,
    pub(crate) respond: Option<WireRespond>,
    /// `query = { state = "open" }`: decoded query parameter globs.
    pub(crate) query: Option<std::collections::BTreeMap<String, String>>,
    /// `headers = { "x-github-event" = "push" }`: header value globs.
    pub(crate) headers: Option<std::collections::BTreeMap<String, String>>,
    /// `json = { "/action" = "opened" }`: JSON pointer equals/glob.
    pub(crate) json: Option<std::collections::BTreeMap<String, WireScalar>>,
    /// `graphql = { operation = "mutation", name = "createPullRequest" }`.
    pub(crate) graphql: Option<WireGraphql>,
    /// `jsonrpc = { method = "tools/call", tool = "create_issue" }`.
    pub(crate) jsonrpc: Option<WireJsonRpc>,
    /// `mode = "enforce"` (default) or `"audit"`.
    pub(crate) mode: Option<WireMode>,
    /// Header names removed before forwarding or staging.
    pub(crate) strip: Option<Vec<String>>,
    /// `limit = { body_bytes, requests_per_minute, upload_bytes_per_run, query_bytes }`.
    pub(crate) limit: Option<WireLimit>,
    /// `redact = ["/password", "header:authorization"]`.
    pub(crate) redact: Option<Vec<String>>,
    /// `review = "required"` (default) or `"auto"`, stage rules only.
    pub(crate) review: Option<WireReview>,
    /// `profiles = ["ci"]`: the rule applies only to runs created with one of them.
    pub(crate) profiles: Option<Vec<String>>,
}

/// A JSON matcher value: a string (glob on string values), a number or a boolean (equality).
#[derive(Debug, Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "a string (glob), an integer, a float or a boolean"
)]
pub(crate) enum WireScalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// `graphql = { operation, name }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireGraphql {
    pub(crate) operation: Option<String>,
    pub(crate) name: Option<String>,
}

/// `jsonrpc = { method, tool }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireJsonRpc {
    pub(crate) method: Option<String>,
    pub(crate) tool: Option<String>,
}

/// `limit = { ... }`; all optional, all positive integers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireLimit {
    pub(crate) body_bytes: Option<i64>,
    pub(crate) requests_per_minute: Option<i64>,
    pub(crate) upload_bytes_per_run: Option<i64>,
    pub(crate) query_bytes: Option<i64>,
}

/// `mode` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WireMode {
    Enforce,
    Audit,
}

/// `review` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WireReview {
    Required,
    Auto,
}

/// `[rule.respond]`: the synthetic response of a stage rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireRespond {
    pub(crate) status: Option<i64>,
    pub(crate) content_type: Option<String>,
    #[serde(default)]
    pub(crate) headers: std::collections::BTreeMap<String, String>,
    pub(crate) body: Option<String>,
}

/// `port = 443` or `port = [443, 8443]`.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "a port number or a list of port numbers")]
pub(crate) enum WirePorts {
    One(i64),
    Many(Vec<i64>),
}

impl WirePorts {
    pub(crate) fn into_vec(self) -> Vec<i64> {
        match self {
            WirePorts::One(port) => vec![port],
            WirePorts::Many(ports) => ports,
        }
    }
}

/// `method = "read"`, `method = "POST"` or `method = ["POST", "PUT"]`.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "\"read\", \"write\", a method name or a list of method names"
)]
pub(crate) enum WireMethods {
    One(String),
    Many(Vec<String>),
}

impl WireMethods {
    pub(crate) fn into_vec(self) -> Vec<String> {
        match self {
            WireMethods::One(method) => vec![method],
            WireMethods::Many(methods) => methods,
        }
    }
}

/// `action` / `default` as written; `tunnel` parses so the loader can refuse it clearly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WireAction {
    Pass,
    Stage,
    Deny,
    Tunnel,
}

/// `scheme` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WireScheme {
    Http,
    Https,
}
