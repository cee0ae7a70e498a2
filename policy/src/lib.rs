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

use std::fmt;
use std::net::IpAddr;
use std::path::Path;

use ipnet::IpNet;
use sha2::{Digest, Sha256};

mod author_lints;
mod body;
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
pub use obligation::{Limits, Mode, Redaction, Review, REDACTED};
pub use respond::{Part, PlaceholderKind, Respond};

use error::FieldProblem;
use matcher::{Host, HostPattern, MethodMatcher, PathPattern, PortMatcher};
use wire::{PolicyFile, WireAction, WireRule, WireScheme};

/// The adapters a stage rule may name with `respond = "NAME"` (docs/adapters.md).
pub const ADAPTERS: &[&str] = &["webhook", "github", "graphql", "slack", "git"];

/// Number of hex characters of the sha256 kept as the policy revision.
const REVISION_HEX_LEN: usize = 12;

/// The URL scheme a request was made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP (absolute-form request to the proxy).
    Http,
    /// HTTPS (an inner request of an intercepted CONNECT).
    Https,
}

impl Scheme {
    /// `"http"` or `"https"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// 80 for http, 443 for https: the ports a rule without `port` matches.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What policy needs to know about one HTTP request.
///
/// Values may arrive as the client spelled them: the host in any case, with a
/// trailing dot or as a bracketed IPv6 literal; the path still percent-encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFacts<'a> {
    /// The scheme of the request.
    pub scheme: Scheme,
    /// The destination host (the one authority; see `docs/policy.md` invariant 2).
    pub host: &'a str,
    /// The destination port.
    pub port: u16,
    /// The request method, e.g. `"GET"`.
    pub method: &'a str,
    /// The request path without the query, as sent (percent-encoded).
    pub path: &'a str,
    /// True when the request framing carries a body (a GET with a body is a write).
    pub has_body: bool,
    /// The raw query string without the `?` (`""` when there is none), still encoded.
    pub query: &'a str,
    /// The request's header lines as sent (names in any case; values as text, bytes
    /// that are not UTF-8 replaced by U+FFFD so that no line is left out).
    pub headers: &'a [(&'a str, &'a str)],
    /// The request body, when the proxy read it for a body matcher (see
    /// [`Policy::body_limit`]).
    pub body: RequestBody<'a>,
    /// The profile of the run making the request (`POST /v1/runs {"profile": …}`).
    pub profile: Option<&'a str>,
}

impl<'a> RequestFacts<'a> {
    /// Facts with no query, no headers, body not read and no profile: the line only.
    pub fn new(
        scheme: Scheme,
        host: &'a str,
        port: u16,
        method: &'a str,
        path: &'a str,
        has_body: bool,
    ) -> RequestFacts<'a> {
        RequestFacts {
            scheme,
            host,
            port,
            method,
            path,
            has_body,
            query: "",
            headers: &[],
            body: RequestBody::NotRead,
            profile: None,
        }
    }
}

/// What the proxy knows of a request's body when it asks for a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestBody<'a> {
    /// Not read: a rule with a body matcher reached with this denies
    /// (`body_unparseable`), so callers read the body when [`Policy::body_limit`] says so.
    #[default]
    NotRead,
    /// The whole body (after any `Content-Encoding` was removed).
    Read(&'a [u8]),
    /// The body was longer than [`Policy::body_limit`]; a body matcher reached with this
    /// denies (`body_too_large`).
    TooLarge,
}

/// One compiled `[[rule]]`.
#[derive(Debug, Clone)]
pub struct Rule {
    id: String,
    host: HostPattern,
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
        let mut policy = compile(file, origin)?;
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

/// Checks the whole file and builds the policy (revision filled in by the caller).
fn compile(mut file: PolicyFile, origin: &str) -> Result<Policy, PolicyError> {
    let field_error = |problem: FieldProblem| PolicyError::Field {
        origin: origin.to_owned(),
        field: problem.field,
        problem: problem.problem,
    };
    match file.version {
        Some(1) => {}
        Some(other) => {
            return Err(field_error(FieldProblem::new(
                "version",
                format!("unsupported version {other}; this airlock reads version 1"),
            )))
        }
        None => {
            return Err(field_error(FieldProblem::new(
                "version",
                "required; write `version = 1` at the top of the file",
            )))
        }
    }
    let default = match file.default {
        None | Some(WireAction::Deny) => Action::Deny,
        Some(WireAction::Pass) => Action::Pass,
        Some(WireAction::Stage) => Action::Stage,
        Some(WireAction::Tunnel) => {
            return Err(field_error(FieldProblem::new(
                "default",
                "\"tunnel\" cannot be the default; use \"deny\", \"stage\" or \"pass\"",
            )))
        }
    };
    let allow_private = parse_nets(&file.allow_private).map_err(field_error)?;
    let credentials = credential::compile_all(std::mem::take(&mut file.credential), origin)?;

    let mut rules: Vec<Rule> = Vec::with_capacity(file.rules.len());
    for (position, mut wire) in file.rules.into_iter().enumerate() {
        let index = position + 1;
        let raw_id = wire.id.clone();
        // Checked once the rule is compiled: its reach must stay inside the credential's bind.
        let inject = wire.inject.take();
        let rule_error = |problem: FieldProblem| PolicyError::Rule {
            origin: origin.to_owned(),
            index,
            id: raw_id.clone().filter(|id| valid_id(id)),
            field: problem.field,
            problem: problem.problem,
        };
        let mut rule = compile_rule(wire, &rules).map_err(rule_error)?;
        rule.inject = credential::check_inject(inject, &rule, &credentials).map_err(rule_error)?;
        rules.push(rule);
    }
    let mut flows: Vec<Flow> = Vec::with_capacity(file.flows.len());
    for (position, wire) in file.flows.into_iter().enumerate() {
        let raw_id = wire.id.clone();
        let flow =
            flow::compile_flow(wire, &rules, &flows).map_err(|problem| PolicyError::Flow {
                origin: origin.to_owned(),
                index: position + 1,
                id: raw_id.filter(|id| valid_id(id)),
                field: problem.field,
                problem: problem.problem,
            })?;
        flows.push(flow);
    }
    Ok(Policy {
        rules,
        default,
        allow_private,
        revision: String::new(),
        mode: Mode::from_wire(file.mode),
        baseline: Vec::new(),
        credentials,
        flows,
    })
}

fn compile_rule(mut wire: WireRule, earlier: &[Rule]) -> Result<Rule, FieldProblem> {
    let id = wire
        .id
        .take()
        .ok_or_else(|| FieldProblem::new("id", "required"))?;
    if !valid_id(&id) {
        return Err(FieldProblem::new(
            "id",
            format!(
                "\"{id}\" is not a valid id: use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"
            ),
        ));
    }
    if let Some(first) = earlier.iter().position(|rule| rule.id == id) {
        return Err(FieldProblem::new(
            "id",
            format!("duplicate id; first used by rule #{}", first + 1),
        ));
    }
    let action = match wire.action {
        None => {
            return Err(FieldProblem::new(
                "action",
                "required: \"pass\", \"stage\", \"deny\" or \"tunnel\"",
            ))
        }
        Some(WireAction::Pass) => Action::Pass,
        Some(WireAction::Stage) => Action::Stage,
        Some(WireAction::Deny) => Action::Deny,
        Some(WireAction::Tunnel) => Action::Tunnel,
    };
    if action == Action::Tunnel {
        extra::check_tunnel(&wire)?;
    }
    let extra = extra::compile_extra(&mut wire, action)?;
    let labels = flow::compile_labels(wire.labels.take(), action)?;
    let host = wire
        .host
        .ok_or_else(|| FieldProblem::new("host", "required"))
        .and_then(|host| HostPattern::parse(&host).map_err(|p| FieldProblem::new("host", p)))?;
    let port = PortMatcher::parse(wire.port.map(wire::WirePorts::into_vec))
        .map_err(|p| FieldProblem::new("port", p))?;
    let scheme = wire.scheme.map(|scheme| match scheme {
        WireScheme::Http => Scheme::Http,
        WireScheme::Https => Scheme::Https,
    });
    let method = wire
        .method
        .map(|method| MethodMatcher::parse(method.into_vec()))
        .transpose()
        .map_err(|p| FieldProblem::new("method", p))?;
    let path = wire
        .path
        .map(|path| PathPattern::parse(&path))
        .transpose()
        .map_err(|p| FieldProblem::new("path", p))?;
    let allow_private = match wire.allow_private {
        None => Vec::new(),
        Some(_) if action == Action::Deny => {
            return Err(FieldProblem::new(
                "allow_private",
                "has no effect on a deny rule; put it on the pass or stage rule that needs it",
            ))
        }
        Some(nets) => parse_nets(&nets)?,
    };
    let (respond, adapter) = match wire.respond {
        None => (None, None),
        Some(_) if action != Action::Stage => {
            return Err(FieldProblem::new(
                "respond",
                "only a stage rule answers with a synthetic response",
            ))
        }
        Some(wire::WireRespondField::Template(respond)) => (Some(compile_respond(respond)?), None),
        Some(wire::WireRespondField::Adapter(name)) => {
            if !ADAPTERS.contains(&name.as_str()) {
                return Err(FieldProblem::new(
                    "respond",
                    format!(
                        "unknown adapter \"{name}\"; known adapters: {}",
                        ADAPTERS.join(", ")
                    ),
                ));
            }
            (None, Some(name))
        }
    };
    Ok(Rule {
        query: extra.query,
        headers: extra.headers,
        body: extra.body,
        mode: extra.mode,
        strip: extra.strip,
        limits: extra.limits,
        redact: extra.redact,
        review: extra.review,
        profiles: extra.profiles,
        respond,
        id,
        host,
        port,
        scheme,
        method,
        path,
        action,
        reason: wire.reason,
        allow_private,
        inject: None,
        adapter,
        labels,
    })
}

fn compile_respond(wire: wire::WireRespond) -> Result<Respond, FieldProblem> {
    let status = match wire.status {
        None => 202,
        Some(status @ 200..=299) => status as u16,
        Some(other) => {
            return Err(FieldProblem::new(
                "respond",
                format!(
                    "status {other} is not a 2xx status; a staged effect is answered as accepted"
                ),
            ))
        }
    };
    let mut headers = std::collections::BTreeMap::new();
    for (name, value) in wire.headers {
        let lower = name.to_ascii_lowercase();
        if lower.is_empty()
            || !lower
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
        {
            return Err(FieldProblem::new(
                "respond",
                format!("\"{name}\" is not a header name"),
            ));
        }
        if lower.starts_with("airlock-")
            || matches!(
                lower.as_str(),
                "content-length" | "transfer-encoding" | "connection"
            )
        {
            return Err(FieldProblem::new(
                "respond",
                format!("header \"{name}\" is set by airlock itself"),
            ));
        }
        headers.insert(lower, value);
    }
    let body = wire
        .body
        .map(|text| respond::parse_template(&text))
        .transpose()
        .map_err(|problem| FieldProblem::new("respond", format!("body: {problem}")))?;
    Ok(Respond {
        status,
        content_type: wire
            .content_type
            .unwrap_or_else(|| "application/json".to_owned()),
        headers,
        body,
    })
}

/// `[a-z0-9][a-z0-9._-]*`
pub(crate) fn valid_id(id: &str) -> bool {
    let mut bytes = id.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

/// CIDRs, or bare addresses meaning a single host.
fn parse_nets(raw: &[String]) -> Result<Vec<IpNet>, FieldProblem> {
    raw.iter()
        .map(|text| {
            text.parse::<IpNet>()
                .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    FieldProblem::new(
                        "allow_private",
                        format!("\"{text}\" is not a CIDR (like \"10.0.0.0/8\") or IP address"),
                    )
                })
        })
        .collect()
}

/// The JSON Schema (draft 2020-12) of the policy file format, generated from the types the
/// loader parses, so it cannot drift from them. `docs/policy.schema.json` holds a copy
/// that a test keeps equal.
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(wire::PolicyFile);
    serde_json::to_value(&schema).unwrap_or_default()
}
