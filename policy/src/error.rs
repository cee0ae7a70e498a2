//! Load-time errors: every message names its origin, and a rule error names the rule.

use std::fmt;

/// A policy that could not be read, parsed or compiled.
///
/// Every variant carries the origin (a file path or `"<inline>"`), so the
/// one-line message is enough to find the problem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The policy file could not be read.
    #[error("{origin}: cannot read policy file")]
    Read {
        /// The path that was read.
        origin: String,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not valid TOML, or does not have the policy's shape
    /// (unknown key, wrong type, unknown enum value).
    #[error("{origin}: {message}")]
    Parse {
        /// Where the text came from.
        origin: String,
        /// toml's message, including line and column.
        message: String,
    },
    /// A top-level field is invalid.
    #[error("{origin}: field \"{field}\": {problem}")]
    Field {
        /// Where the text came from.
        origin: String,
        /// The top-level key.
        field: &'static str,
        /// What is wrong, lower-case, no trailing period.
        problem: String,
    },
    /// A field of one `[[rule]]` is invalid.
    #[error("{origin}: {}: field \"{field}\": {problem}", rule_label(.index, .id))]
    Rule {
        /// Where the text came from.
        origin: String,
        /// 1-based position of the rule in the file.
        index: usize,
        /// The rule's id, when it has a valid one.
        id: Option<String>,
        /// The key inside the rule.
        field: &'static str,
        /// What is wrong, lower-case, no trailing period.
        problem: String,
    },
    /// A field of one `[[flow]]` is invalid.
    #[error("{origin}: {}: field \"{field}\": {problem}", flow_label(.index, .id))]
    Flow {
        /// Where the text came from.
        origin: String,
        /// 1-based position of the flow in the file.
        index: usize,
        /// The flow's id, when it has a valid one.
        id: Option<String>,
        /// The key inside the flow.
        field: &'static str,
        /// What is wrong, lower-case, no trailing period.
        problem: String,
    },
    /// A field of one `[credential.NAME]` table is invalid.
    #[error("{origin}: credential \"{name}\": field \"{field}\": {problem}")]
    Credential {
        /// Where the text came from.
        origin: String,
        /// The credential's name (the `NAME` of `[credential.NAME]`).
        name: String,
        /// The key inside the table.
        field: &'static str,
        /// What is wrong, lower-case, no trailing period.
        problem: String,
    },
}

impl PolicyError {
    /// The file path or `"<inline>"` the error refers to.
    pub fn origin(&self) -> &str {
        match self {
            PolicyError::Read { origin, .. }
            | PolicyError::Parse { origin, .. }
            | PolicyError::Field { origin, .. }
            | PolicyError::Rule { origin, .. }
            | PolicyError::Flow { origin, .. }
            | PolicyError::Credential { origin, .. } => origin,
        }
    }
}

fn rule_label<'a>(index: &usize, id: &'a Option<String>) -> RuleLabel<'a> {
    RuleLabel {
        index: *index,
        id: id.as_deref(),
    }
}

fn flow_label(index: &usize, id: &Option<String>) -> String {
    match id {
        Some(id) => format!("flow \"{id}\" (#{index})"),
        None => format!("flow #{index}"),
    }
}

/// `rule "id" (#2)`, or `rule #2` when the rule has no usable id.
struct RuleLabel<'a> {
    index: usize,
    id: Option<&'a str>,
}

impl fmt::Display for RuleLabel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.id {
            Some(id) => write!(f, "rule \"{id}\" (#{})", self.index),
            None => write!(f, "rule #{}", self.index),
        }
    }
}

/// A problem found while compiling one field, before it is given its context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldProblem {
    pub(crate) field: &'static str,
    pub(crate) problem: String,
}

impl FieldProblem {
    pub(crate) fn new(field: &'static str, problem: impl Into<String>) -> Self {
        FieldProblem {
            field,
            problem: problem.into(),
        }
    }
}
