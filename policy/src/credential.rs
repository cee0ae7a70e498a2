//! `[credential.NAME]`: secrets airlock adds to requests, never the sandbox.
//!
//! The policy holds only each credential's *spec*: where its value comes from (an
//! environment variable, a file or a command, read by airlock when it starts, never by
//! this crate), where it may go (`bind`: hosts, optionally methods and paths, with the
//! same matchers as rules) and how it is placed on a request (a header with a format,
//! HTTP Basic, or a query parameter). Secret values never enter a [`crate::Policy`].
//!
//! Load-time guarantees: every `inject` names a known credential; a deny rule injects
//! nothing; and a rule that injects can only match requests inside the credential's
//! `bind` (its host pattern is covered by a bind host pattern, its methods and paths by
//! the bind's, when the bind narrows them).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::error::FieldProblem;
use crate::matcher::{CanonicalPath, Host, HostPattern, MethodMatcher, PathPattern, ReadCheck};
use crate::wire::{WireCredential, WirePlace, WireSource};
use crate::{Action, PolicyError, RequestFacts, Rule};

/// The `{}` in a header `format` that stands for the secret.
const SECRET_SLOT: &str = "{}";

/// Where airlock reads a credential's value when it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialSource {
    /// `{ env = "VAR" }`: airlock's own environment variable `VAR`.
    Env(String),
    /// `{ file = "PATH" }`: the file's contents, trailing newlines removed.
    File(PathBuf),
    /// `{ command = ["prog", "arg"] }`: the command's standard output, trailing newlines
    /// removed; it must exit 0. Run directly, no shell.
    Command(Vec<String>),
}

impl fmt::Display for CredentialSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialSource::Env(var) => write!(f, "environment variable {var}"),
            CredentialSource::File(path) => write!(f, "file {}", path.display()),
            CredentialSource::Command(argv) => write!(f, "command {argv:?}"),
        }
    }
}

/// How a credential's value is put on a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// `{ header = "authorization", format = "Bearer {}" }`: the header (lower-case) is
    /// set to `format` with `{}` replaced by the secret, replacing any value the client
    /// sent. `format` defaults to `"{}"`.
    Header {
        /// Header name, lower-case.
        name: String,
        /// The value template, with exactly one `{}`.
        format: String,
    },
    /// `{ basic = "username" }`: `Authorization: Basic base64(username:secret)`
    /// (RFC 7617), replacing any client-sent `Authorization`.
    Basic {
        /// The user name; the secret is the password.
        username: String,
    },
    /// `{ query = "param" }`: the query parameter is set to the percent-encoded secret,
    /// replacing any occurrence the client sent.
    Query {
        /// The parameter name.
        param: String,
    },
}

impl Placement {
    /// The header value for a [`Placement::Header`] with `secret` in its slot.
    pub fn header_value(format: &str, secret: &str) -> String {
        format.replacen(SECRET_SLOT, secret, 1)
    }
}

/// The requests a credential may ever be added to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub(crate) hosts: Vec<HostPattern>,
    pub(crate) methods: Option<MethodMatcher>,
    pub(crate) paths: Vec<PathPattern>,
}

/// One compiled `[credential.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    name: String,
    source: CredentialSource,
    bind: Bind,
    place: Placement,
    placeholder: bool,
}

impl Credential {
    /// The name (`NAME` of `[credential.NAME]`), as rules' `inject` give it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the value is read from at start.
    pub fn source(&self) -> &CredentialSource {
        &self.source
    }

    /// How the value is put on a request.
    pub fn place(&self) -> &Placement {
        &self.place
    }

    /// Whether each run gets an opaque per-run stand-in for this credential.
    pub fn placeholder(&self) -> bool {
        self.placeholder
    }

    /// The bind's host patterns as written (normalised), for messages and the manifest.
    pub fn bind_hosts(&self) -> Vec<String> {
        self.bind.hosts.iter().map(ToString::to_string).collect()
    }

    /// Whether `host` (as a client spelled it) is one of the bind's hosts.
    pub fn binds_host(&self, host: &str) -> bool {
        Host::parse(host).is_some_and(|host| self.bind.hosts.iter().any(|p| p.matches(&host)))
    }

    /// Whether the request is inside the bind: host, and methods and paths when the bind
    /// names them. A non-canonical path is never inside.
    pub fn binds(&self, request: &RequestFacts<'_>) -> bool {
        if !self.binds_host(request.host) {
            return false;
        }
        let Ok(path) = CanonicalPath::parse(request.path) else {
            return false;
        };
        // A method that only the body could tell (a GraphQL query) is outside a
        // methods bind unless the body was read: fail closed.
        if self.bind.methods.as_ref().is_some_and(|m| {
            m.check(request, &path, crate::DEFAULT_BODY_MATCH_BYTES) != ReadCheck::Read
        }) {
            return false;
        }
        self.bind.paths.is_empty() || self.bind.paths.iter().any(|p| p.matches(&path))
    }

    /// Why `rule` could match a request outside this credential's bind, or `None` when it
    /// cannot.
    fn reach_problem(&self, rule: &Rule) -> Option<String> {
        if let Some(host) = rule
            .host
            .iter()
            .find(|host| !self.bind.hosts.iter().any(|bound| bound.covers(host)))
        {
            return Some(format!(
                "the rule's host \"{host}\" reaches beyond credential \"{}\"'s bind hosts {:?}; narrow the rule's host or widen bind.hosts",
                self.name,
                self.bind_hosts()
            ));
        }
        if let Some(bound) = &self.bind.methods {
            let covered = rule.method.as_ref().is_some_and(|m| bound.covers(m));
            if !covered {
                return Some(format!(
                    "the rule's methods reach beyond credential \"{}\"'s bind.methods; give the rule a \"method\" inside them",
                    self.name
                ));
            }
        }
        if !self.bind.paths.is_empty() {
            let covered = rule
                .path
                .as_ref()
                .is_some_and(|p| self.bind.paths.iter().any(|bound| bound.covers(p)));
            if !covered {
                return Some(format!(
                    "the rule's path {} reaches beyond credential \"{}\"'s bind.paths {:?}; give the rule a \"path\" inside one of them",
                    rule.path
                        .as_ref()
                        .map_or_else(|| "(any)".to_owned(), |p| format!("\"{p}\"")),
                    self.name,
                    self.bind.paths.iter().map(ToString::to_string).collect::<Vec<_>>()
                ));
            }
        }
        None
    }
}

/// Compiles every `[credential.NAME]` table.
pub(crate) fn compile_all(
    wire: BTreeMap<String, WireCredential>,
    origin: &str,
) -> Result<BTreeMap<String, Credential>, PolicyError> {
    let mut out = BTreeMap::new();
    for (name, table) in wire {
        let credential = compile(&name, table).map_err(|problem| PolicyError::Credential {
            origin: origin.to_owned(),
            name: name.clone(),
            field: problem.field,
            problem: problem.problem,
        })?;
        out.insert(name, credential);
    }
    Ok(out)
}

fn compile(name: &str, wire: WireCredential) -> Result<Credential, FieldProblem> {
    if !crate::valid_id(name) {
        return Err(FieldProblem::new(
            "name",
            "not a valid name: use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit",
        ));
    }
    let source = compile_source(wire.source.ok_or_else(|| {
        FieldProblem::new(
            "source",
            "required: { env = \"VAR\" }, { file = \"PATH\" } or { command = [\"prog\", \"arg\"] }",
        )
    })?)?;
    let bind = wire.bind.ok_or_else(|| {
        FieldProblem::new("bind", "required: bind = { hosts = [\"api.example.com\"] }")
    })?;
    let hosts = bind.hosts.unwrap_or_default();
    if hosts.is_empty() {
        return Err(FieldProblem::new(
            "bind",
            "hosts is required and may not be empty: name the hosts this credential may ever go to",
        ));
    }
    let hosts = hosts
        .iter()
        .map(|host| HostPattern::parse(host))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|p| FieldProblem::new("bind", format!("hosts: {p}")))?;
    let methods = bind
        .methods
        .map(|m| MethodMatcher::parse(m.into_vec()))
        .transpose()
        .map_err(|p| FieldProblem::new("bind", format!("methods: {p}")))?;
    let paths = match bind.paths {
        None => Vec::new(),
        Some(paths) if paths.is_empty() => {
            return Err(FieldProblem::new(
                "bind",
                "paths is empty and would match nothing; remove it to allow every path",
            ))
        }
        Some(paths) => paths
            .iter()
            .map(|p| PathPattern::parse(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|p| FieldProblem::new("bind", format!("paths: {p}")))?,
    };
    let place = compile_place(
        wire.place
            .ok_or_else(|| FieldProblem::new("place", "required: { header = \"authorization\", format = \"Bearer {}\" }, { basic = \"username\" } or { query = \"param\" }"))?,
    )?;
    Ok(Credential {
        name: name.to_owned(),
        source,
        bind: Bind {
            hosts,
            methods,
            paths,
        },
        place,
        placeholder: wire.placeholder.unwrap_or(false),
    })
}

fn compile_source(wire: WireSource) -> Result<CredentialSource, FieldProblem> {
    let source = match (wire.env, wire.file, wire.command) {
        (Some(var), None, None) => {
            if var.is_empty() || var.contains('=') || var.contains('\0') {
                return Err(FieldProblem::new(
                    "source",
                    format!("env {var:?} is not an environment variable name"),
                ));
            }
            CredentialSource::Env(var)
        }
        (None, Some(path), None) => {
            if path.is_empty() {
                return Err(FieldProblem::new("source", "file is empty: give a path"));
            }
            CredentialSource::File(PathBuf::from(path))
        }
        (None, None, Some(argv)) => {
            if argv.first().is_none_or(String::is_empty) {
                return Err(FieldProblem::new(
                    "source",
                    "command must name a program: command = [\"prog\", \"arg\"]",
                ));
            }
            CredentialSource::Command(argv)
        }
        _ => {
            return Err(FieldProblem::new(
                "source",
                "give exactly one of env, file or command",
            ))
        }
    };
    Ok(source)
}

fn compile_place(wire: WirePlace) -> Result<Placement, FieldProblem> {
    match (wire.header, wire.basic, wire.query) {
        (Some(header), None, None) => {
            let name = header.to_ascii_lowercase();
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
            {
                return Err(FieldProblem::new(
                    "place",
                    format!("\"{header}\" is not a header name"),
                ));
            }
            if name.starts_with("airlock-")
                || name.starts_with("proxy-")
                || matches!(
                    name.as_str(),
                    "host"
                        | "content-length"
                        | "transfer-encoding"
                        | "connection"
                        | "te"
                        | "upgrade"
                )
            {
                return Err(FieldProblem::new(
                    "place",
                    format!("header \"{header}\" cannot carry a credential: it frames or routes the request"),
                ));
            }
            let format = wire.format.unwrap_or_else(|| SECRET_SLOT.to_owned());
            if format.matches(SECRET_SLOT).count() != 1 {
                return Err(FieldProblem::new(
                    "place",
                    format!(
                        "format {format:?} must hold exactly one \"{{}}\" where the secret goes"
                    ),
                ));
            }
            if format.chars().any(char::is_control) {
                return Err(FieldProblem::new(
                    "place",
                    "format may not hold control characters",
                ));
            }
            Ok(Placement::Header { name, format })
        }
        (None, Some(username), None) if wire.format.is_none() => {
            if username.contains(':') || username.chars().any(char::is_control) {
                return Err(FieldProblem::new(
                    "place",
                    "basic: the user name may not hold ':' or control characters (RFC 7617 section 2)",
                ));
            }
            Ok(Placement::Basic { username })
        }
        (None, None, Some(param)) if wire.format.is_none() => {
            if param.is_empty() || param.bytes().any(|b| b"&=#".contains(&b) || b <= b' ') {
                return Err(FieldProblem::new(
                    "place",
                    format!("query {param:?} is not a plain query parameter name"),
                ));
            }
            Ok(Placement::Query { param })
        }
        (None, _, _) if wire.format.is_some() => Err(FieldProblem::new(
            "place",
            "format only goes with header: { header = \"authorization\", format = \"Bearer {}\" }",
        )),
        _ => Err(FieldProblem::new(
            "place",
            "give exactly one of header (with an optional format), basic or query",
        )),
    }
}

/// Checks a rule's `inject` against the credentials: known name, not on a deny rule, and
/// the rule cannot reach outside the credential's bind.
pub(crate) fn check_inject(
    inject: Option<String>,
    rule: &Rule,
    credentials: &BTreeMap<String, Credential>,
) -> Result<Option<String>, FieldProblem> {
    let Some(name) = inject else {
        return Ok(None);
    };
    let Some(credential) = credentials.get(&name) else {
        let known: Vec<&str> = credentials.keys().map(String::as_str).collect();
        return Err(FieldProblem::new(
            "inject",
            format!("unknown credential \"{name}\"; the file defines {known:?}"),
        ));
    };
    if rule.action == Action::Deny {
        return Err(FieldProblem::new(
            "inject",
            "a deny rule sends nothing, so it injects nothing; remove inject",
        ));
    }
    if let Some(problem) = credential.reach_problem(rule) {
        return Err(FieldProblem::new("inject", problem));
    }
    Ok(Some(name))
}

impl Credential {
    /// The bind (hosts, methods, paths), for `policy diff`'s reach comparison.
    pub(crate) fn bind(&self) -> &Bind {
        &self.bind
    }
}
