//! Pure policy for airlock: rules in, one Decision out.
//!
//! A policy is TOML text (see `docs/policy.md`) compiled by [`Policy::from_toml_str`]
//! or [`Policy::load`] into typed matchers. [`Policy::decide`] answers one
//! HTTP request, [`Policy::decide_connect`] answers a CONNECT before the
//! tunnel opens (intercept, tunnel or deny), [`Policy::body_limit`] tells the proxy
//! whether (and how far) to read a body for a body matcher first, and
//! [`Policy::allows_private`] tells the dialer whether a resolved private address was
//! opted in. Evaluation: the operator's baseline denies ([`Policy::with_baseline`]),
//! then rules top-down, first match wins (audit-mode rules are recorded and passed
//! over), then the default (`deny` unless the file says otherwise). The winning rule's
//! obligations are accessors on [`Rule`] (`strip`, `limits`, `redact`, `review`).
//!
//! The crate does no I/O beyond reading the policy file in [`Policy::load`].

use std::net::IpAddr;
use std::path::Path;

use ipnet::IpNet;
use sha2::{Digest, Sha256};

mod author_lints;
mod body;
mod compile;
mod content;
mod credential;
mod decision;
mod diff;
mod error;
mod eval;
mod explain;
mod extra;
mod flow;
mod graphql;
mod matcher;
mod names;
mod obligation;
mod request;
mod respond;
mod warnings;
mod wire;

pub use body::DEFAULT_BODY_MATCH_BYTES;
pub use credential::{Credential, CredentialSource, Placement};
pub use decision::{reason_code, Action, AuditMatch, ConnectDecision, Decision};
pub use diff::{Change, ChangeKind, CredentialChange, FlowChange, PolicyDiff, PrivateChange};
pub use error::PolicyError;
pub use explain::{Explanation, FlowExplanation, FlowMatch, Lint, RuleOutcome, RuleTrace};
pub use flow::{
    EdgeClass, Flow, FlowAction, FlowEdge, FlowSource, FlowTarget, FlowTo, FlowVerdict, CREDENTIAL,
    PLACEHOLDER_OF, UNANALYSED,
};
pub use obligation::{Idempotency, Limits, Mode, Redaction, Review, REDACTED};
pub use request::{effective_method, RequestBody, RequestFacts, Scheme, METHOD_OVERRIDE_HEADERS};
pub use respond::{Part, PlaceholderKind, Respond};

pub(crate) use compile::valid_id;
use matcher::{Host, HostSet, MethodMatcher, PathPattern, PortMatcher};
use wire::PolicyFile;

/// The adapters a stage rule may name with `respond = "NAME"` (docs/adapters.md).
pub const ADAPTERS: &[&str] = &["webhook", "github", "graphql", "slack", "git", "mcp"];

/// Number of hex characters of the sha256 kept as the policy revision.
const REVISION_HEX_LEN: usize = 12;

/// One compiled `[[rule]]`.
#[derive(Debug, Clone)]
pub struct Rule {
    id: String,
    host: HostSet,
    port: PortMatcher,
    scheme: Option<Scheme>,
    method: Option<MethodMatcher>,
    path: Option<PathPattern>,
    action: Action,
    reason: Option<String>,
    allow_private: Vec<IpNet>,
    respond: Option<Respond>,
    query: Option<content::QueryMatcher>,
    headers: Option<content::HeaderMatcher>,
    body: Option<body::BodyMatcher>,
    mode: Mode,
    strip: Vec<String>,
    limits: Limits,
    redact: Vec<Redaction>,
    review: Review,
    profiles: Option<Vec<String>>,
    idempotency: Option<Idempotency>,
    inject: Option<String>,
    adapter: Option<String>,
    labels: Vec<String>,
}

impl Rule {
    /// The adapter a stage rule names with `respond = "NAME"` (one of [`ADAPTERS`]), if
    /// any. `None` means the `webhook` adapter, with the rule's `[rule.respond]` template
    /// when it has one.
    pub fn adapter(&self) -> Option<&str> {
        self.adapter.as_deref()
    }

    /// Whether the rule matches JSON-RPC calls (`jsonrpc = {…}`): a stage rule with one and
    /// no `respond` adapter is answered by the `mcp` adapter.
    pub fn has_jsonrpc(&self) -> bool {
        self.body.as_ref().is_some_and(|body| body.has_jsonrpc())
    }

    /// The synthetic response of a stage rule, when it declares one.
    pub fn respond(&self) -> Option<&Respond> {
        self.respond.as_ref()
    }

    /// The credential this rule injects (`inject = "NAME"`), when it injects one. The
    /// loader guarantees it names a credential of the policy and that the rule stays
    /// inside its bind.
    pub fn inject(&self) -> Option<&str> {
        self.inject.as_deref()
    }

    /// The origin's idempotency key header and whether `unknown` effects may be re-sent
    /// (`idempotency_key`, `retry_unknown`; stage rules only), when the rule says the
    /// origin honours one.
    pub fn idempotency(&self) -> Option<&Idempotency> {
        self.idempotency.as_ref()
    }

    /// The labels every read this pass rule lets through carries (`labels = [...]`;
    /// empty for other rules), which `[[flow]]` rules name in `from`.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// The rule's stable id, as used in logs, 403 bodies and the ledger.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What the rule does when it matches.
    pub fn action(&self) -> Action {
        self.action
    }

    /// The rule's `reason`, if it has one.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The CIDRs this rule opts in for its destinations.
    pub fn allow_private(&self) -> &[IpNet] {
        &self.allow_private
    }

    /// Whether a CONNECT to `host:port` by a run of `profile` could reach this rule.
    /// CONNECT counts as https, except that a `scheme = "http"` rule without `port` means 80.
    fn matches_connect(&self, host: &Host, port: u16, profile: Option<&str>) -> bool {
        let connect_scheme = self.scheme.unwrap_or(Scheme::Https);
        self.host.matches(host)
            && self.port.matches(connect_scheme, port)
            && self.applies_to_profile(profile)
    }

    /// Whether any request to `host:port`, of any scheme the rule allows, could match.
    fn matches_destination(&self, host: &Host, port: u16) -> bool {
        let port_matches = match self.scheme {
            Some(scheme) => self.port.matches(scheme, port),
            None => self.port.matches(Scheme::Https, port) || self.port.matches(Scheme::Http, port),
        };
        port_matches && self.host.matches(host)
    }

    /// True when only host and port decide the rule (no method, path, query, header or
    /// body condition).
    fn is_host_level(&self) -> bool {
        self.method.is_none()
            && self.path.is_none()
            && self.query.is_none()
            && self.headers.is_none()
            && self.body.is_none()
    }
}

/// A compiled policy: rules in order, the default action, top-level
/// `allow_private` networks and the revision of the text it came from.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Vec<Rule>,
    default: Action,
    allow_private: Vec<IpNet>,
    revision: String,
    mode: Mode,
    baseline: Vec<Rule>,
    credentials: std::collections::BTreeMap<String, Credential>,
    flows: Vec<Flow>,
}

impl Policy {
    /// Parses and compiles policy text; `origin` names the source in errors (a path or `"<inline>"`).
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Policy, PolicyError> {
        let file: PolicyFile = toml::from_str(text).map_err(|error| PolicyError::Parse {
            origin: origin.to_owned(),
            message: error.to_string().trim_end().to_owned(),
        })?;
        let mut policy = compile::compile(file, origin)?;
        policy.revision = revision_of(text);
        Ok(policy)
    }

    /// Reads and compiles the policy file at `path`; errors name the path.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            origin: origin.clone(),
            source,
        })?;
        Policy::from_toml_str(&text, &origin)
    }

    /// short hex revision: first 12 hex chars of sha256 of the policy text
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// The action taken when no rule matches.
    pub fn default_action(&self) -> Action {
        self.default
    }

    /// Top-level `allow_private` networks.
    pub fn allow_private(&self) -> &[IpNet] {
        &self.allow_private
    }

    /// True when some allow_private CIDR (top level, or of any rule that matches host:port) contains ip.
    ///
    /// A rule without `port` counts for its scheme's default port (both 80
    /// and 443 when it has no `scheme`).
    pub fn allows_private(&self, host: &str, port: u16, ip: IpAddr) -> bool {
        if self.allow_private.iter().any(|net| net.contains(&ip)) {
            return true;
        }
        let Some(host) = Host::parse(host) else {
            return false;
        };
        self.rules.iter().any(|rule| {
            rule.allow_private.iter().any(|net| net.contains(&ip))
                && rule.matches_destination(&host, port)
        })
    }

    /// The compiled rules, in evaluation order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rule with this id.
    pub fn rule(&self, id: &str) -> Option<&Rule> {
        self.rules.iter().find(|rule| rule.id == id)
    }

    /// The `[credential.NAME]` specs, by name (no secret values: airlock reads those at
    /// start).
    pub fn credentials(&self) -> impl Iterator<Item = &Credential> {
        self.credentials.values()
    }

    /// The credential named `name`.
    pub fn credential(&self, name: &str) -> Option<&Credential> {
        self.credentials.get(name)
    }
}

fn display_host(host: Option<&Host>) -> String {
    host.map_or_else(|| "<invalid host>".to_owned(), Host::to_string)
}

fn revision_of(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    hex.truncate(REVISION_HEX_LEN);
    hex
}

/// The JSON Schema (draft 2020-12) of the policy file format, generated from the types the
/// loader parses, so it cannot drift from them. `docs/policy.schema.json` holds a copy
/// that a test keeps equal.
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(wire::PolicyFile);
    serde_json::to_value(&schema).unwrap_or_default()
}
