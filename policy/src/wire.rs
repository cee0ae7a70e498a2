//! The policy file as written: serde structs that reject unknown keys.
//!
//! Nothing here is validated beyond its TOML type; `lib.rs` compiles these
//! into [`crate::Policy`], which cannot hold an invalid rule.

use serde::Deserialize;

/// An airlock policy file (TOML). Rules are tried top-down; the first match wins; then
/// `default` applies. Reference: docs/policy.md.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "airlock policy")]
pub(crate) struct PolicyFile {
    /// Format version; required, must be 1.
    // Optional here so a missing version gets our message.
    #[schemars(required, range(min = 1, max = 1))]
    pub(crate) version: Option<i64>,
    /// What happens to a request no rule matches (default: deny).
    pub(crate) default: Option<WireAction>,
    /// CIDRs of private or special-purpose addresses any rule's destination may resolve to
    /// (loopback and airlock's own listeners can be named only for tests).
    #[serde(default)]
    pub(crate) allow_private: Vec<String>,
    /// The rules, in evaluation order.
    #[serde(default, rename = "rule")]
    pub(crate) rules: Vec<WireRule>,
    /// `mode = "enforce"` (default) or `"audit"`: see [`crate::Mode`].
    pub(crate) mode: Option<WireMode>,
    /// `[credential.NAME]` tables, by name.
    #[serde(default)]
    pub(crate) credential: std::collections::BTreeMap<String, WireCredential>,
    /// `[[flow]]` rules over lineage: which data may reach which hosts (docs/policy.md#flow-rules).
    #[serde(default, rename = "flow")]
    pub(crate) flows: Vec<crate::flow::WireFlow>,
}

/// One `[[rule]]` table.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Rule")]
pub(crate) struct WireRule {
    /// Stable id used in logs, 403 bodies, tests and the ledger; unique; required.
    #[schemars(required)]
    pub(crate) id: Option<String>,
    /// Destination host, or a list of them meaning "any of these": each exact
    /// (`api.example.com`), an IP literal, `*.example.com` (one more label) or
    /// `**.example.com` (one or more); required.
    #[schemars(required)]
    pub(crate) host: Option<WireHosts>,
    /// Port or ports (default: 443 for https, 80 for http).
    pub(crate) port: Option<WirePorts>,
    /// `http` or `https` (default: either).
    pub(crate) scheme: Option<WireScheme>,
    /// `"read"`, `"write"`, a method or a list of methods (default: any).
    pub(crate) method: Option<WireMethods>,
    /// Segment-aware glob on the decoded path: `*` one segment, `**` any number.
    pub(crate) path: Option<String>,
    /// What a matching request gets; required.
    #[schemars(required)]
    pub(crate) action: Option<WireAction>,
    /// A sentence for logs and 403 bodies.
    pub(crate) reason: Option<String>,
    /// CIDRs this rule's destinations may resolve to although private.
    pub(crate) allow_private: Option<Vec<String>>,
    /// The synthetic response of a stage rule: an adapter's name or a template table.
    pub(crate) respond: Option<WireRespondField>,
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
    /// `inject = "NAME"`: the credential this rule adds (see `[credential.NAME]`).
    pub(crate) inject: Option<String>,
    /// `labels = ["secret"]`: every read this pass rule lets through carries these labels,
    /// which `[[flow]]` rules name in `from`.
    pub(crate) labels: Option<Vec<String>>,
    /// `idempotency_key = "Idempotency-Key"`, stage rules only: the origin honours an
    /// idempotency key in this header (Stripe-style APIs; most origins do not), and every
    /// release attempt sends the effect's stable key in it.
    pub(crate) idempotency_key: Option<String>,
    /// `retry_unknown = "never"` (default) or `"idempotent"`, with `idempotency_key`: an
    /// effect whose outcome is unknown may be retried, since the origin deduplicates by
    /// the key.
    pub(crate) retry_unknown: Option<WireRetryUnknown>,
}

/// `retry_unknown` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "RetryUnknown")]
pub(crate) enum WireRetryUnknown {
    Never,
    Idempotent,
}

/// `respond = "github"` (an adapter by name) or a `[rule.respond]` table (a template).
///
/// Deserialised by hand rather than `untagged`, so a mistake inside the table keeps
/// toml's own message (unknown key, wrong type) instead of "did not match any variant".
#[derive(Debug)]
pub(crate) enum WireRespondField {
    Adapter(String),
    Template(WireRespond),
}

impl<'de> Deserialize<'de> for WireRespondField {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = WireRespondField;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an adapter name (like \"github\") or a [rule.respond] table")
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(WireRespondField::Adapter(value.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                WireRespond::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(WireRespondField::Template)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl schemars::JsonSchema for WireRespondField {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RespondField".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let table = generator.subschema_for::<WireRespond>();
        schemars::json_schema!({
            "description": "An adapter by name (docs/adapters.md), or a [rule.respond] template table.",
            "anyOf": [
                { "type": "string", "enum": crate::ADAPTERS },
                table,
            ]
        })
    }
}

/// A JSON matcher value: a string (glob on string values), a number or a boolean (equality).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(
    untagged,
    expecting = "a string (glob), an integer, a float or a boolean"
)]
#[schemars(rename = "Scalar")]
pub(crate) enum WireScalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// `graphql = { operation, name }`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Graphql")]
pub(crate) struct WireGraphql {
    pub(crate) operation: Option<String>,
    pub(crate) name: Option<String>,
}

/// `jsonrpc = { method, tool }`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "JsonRpc")]
pub(crate) struct WireJsonRpc {
    pub(crate) method: Option<String>,
    pub(crate) tool: Option<String>,
}

/// `limit = { ... }`; all optional, all positive integers.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Limit")]
pub(crate) struct WireLimit {
    pub(crate) body_bytes: Option<i64>,
    pub(crate) requests_per_minute: Option<i64>,
    pub(crate) upload_bytes_per_run: Option<i64>,
    pub(crate) query_bytes: Option<i64>,
}

/// `mode` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "Mode")]
pub(crate) enum WireMode {
    Enforce,
    Audit,
}

/// `review` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "Review")]
pub(crate) enum WireReview {
    Required,
    Auto,
}

/// `[rule.respond]`: the synthetic response of a stage rule.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Respond")]
pub(crate) struct WireRespond {
    /// HTTP status (default 202).
    pub(crate) status: Option<i64>,
    /// Content-Type of the body.
    pub(crate) content_type: Option<String>,
    /// Extra response headers.
    #[serde(default)]
    pub(crate) headers: std::collections::BTreeMap<String, String>,
    /// Body template; `{{placeholder:KIND:POINTER}}` tokens stand for origin-assigned values.
    pub(crate) body: Option<String>,
}

/// `host = "api.example.com"` or `host = ["pypi.org", "files.pythonhosted.org"]`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged, expecting = "a host glob or a list of host globs")]
#[schemars(rename = "Hosts")]
pub(crate) enum WireHosts {
    One(String),
    Many(Vec<String>),
}

impl WireHosts {
    pub(crate) fn into_vec(self) -> Vec<String> {
        match self {
            WireHosts::One(host) => vec![host],
            WireHosts::Many(hosts) => hosts,
        }
    }
}

/// `port = 443` or `port = [443, 8443]`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged, expecting = "a port number or a list of port numbers")]
#[schemars(rename = "Ports")]
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
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(
    untagged,
    expecting = "\"read\", \"write\", a method name or a list of method names"
)]
#[schemars(rename = "Methods")]
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

/// What a request gets: `pass` (forwarded now), `stage` (held as an effect until commit;
/// the client gets a synthetic answer), `deny` (403), `tunnel` (CONNECT without
/// interception; host-level rules only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "Action")]
pub(crate) enum WireAction {
    Pass,
    Stage,
    Deny,
    Tunnel,
}

/// `scheme` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "Scheme")]
pub(crate) enum WireScheme {
    Http,
    Https,
}

/// One `[credential.NAME]` table.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Credential")]
pub(crate) struct WireCredential {
    pub(crate) source: Option<WireSource>,
    pub(crate) bind: Option<WireBind>,
    pub(crate) place: Option<WirePlace>,
    pub(crate) placeholder: Option<bool>,
}

/// `source = { env = "VAR" }`, `{ file = "PATH" }` or `{ command = ["prog", "arg"] }`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Source")]
pub(crate) struct WireSource {
    pub(crate) env: Option<String>,
    pub(crate) file: Option<String>,
    pub(crate) command: Option<Vec<String>>,
}

/// `bind = { hosts = [...], methods = [...], paths = [...] }`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Bind")]
pub(crate) struct WireBind {
    pub(crate) hosts: Option<Vec<String>>,
    pub(crate) methods: Option<WireMethods>,
    pub(crate) paths: Option<Vec<String>>,
}

/// `place = { header = "authorization", format = "Bearer {}" }`, `{ basic = "user" }` or
/// `{ query = "param" }`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Place")]
pub(crate) struct WirePlace {
    pub(crate) header: Option<String>,
    pub(crate) format: Option<String>,
    pub(crate) basic: Option<String>,
    pub(crate) query: Option<String>,
}
