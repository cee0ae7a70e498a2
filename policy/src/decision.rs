//! The one output of policy evaluation: an [`Action`] with the rule and reason behind it.

use std::fmt;

use serde::Serialize;

/// What airlock does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Forward to the origin now.
    Pass,
    /// Hold as a staged effect; the client gets a synthetic answer.
    Stage,
    /// Refuse with 403.
    Deny,
    /// CONNECT only: splice bytes to the origin without intercepting TLS (host level
    /// only; [`crate::Policy::decide`] never returns it).
    Tunnel,
}

impl Action {
    /// The lower-case name used in policy files, logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Pass => "pass",
            Action::Stage => "stage",
            Action::Deny => "deny",
            Action::Tunnel => "tunnel",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Stable `reason_code` values carried by a [`Decision`].
pub mod reason_code {
    /// A rule with `action = "pass"` matched.
    pub const RULE_PASS: &str = "rule_pass";
    /// A rule with `action = "stage"` matched.
    pub const RULE_STAGE: &str = "rule_stage";
    /// A rule with `action = "deny"` matched.
    pub const RULE_DENY: &str = "rule_deny";
    /// No rule matched and the default is `pass`.
    pub const DEFAULT_PASS: &str = "default_pass";
    /// No rule matched and the default is `stage`.
    pub const DEFAULT_STAGE: &str = "default_stage";
    /// No rule matched and the default is `deny`.
    pub const DEFAULT_DENY: &str = "default_deny";
    /// The path has an encoded slash, a dot segment or another spelling an
    /// origin may read differently; refused before any rule is consulted.
    pub const NON_CANONICAL_PATH: &str = "non_canonical_path";
    /// A rule with `action = "tunnel"` matched a CONNECT.
    pub const RULE_TUNNEL: &str = "rule_tunnel";
    /// A deny rule of the operator's baseline file matched; no project rule can override it.
    pub const BASELINE_DENY: &str = "baseline_deny";
    /// A rule with a body matcher was reached and the body was over its
    /// `limit.body_bytes` (fail closed, invariant 6).
    pub const BODY_TOO_LARGE: &str = "body_too_large";
    /// A rule with a body matcher was reached and the body could not be parsed the way
    /// the matcher needs, or was not read (fail closed, invariant 6).
    pub const BODY_UNPARSEABLE: &str = "body_unparseable";
    /// A rule with a `query` matcher was reached and the query string has malformed
    /// percent-encoding or is not UTF-8 once decoded (fail closed, invariant 6).
    pub const QUERY_UNPARSEABLE: &str = "query_unparseable";
    /// The policy is in audit mode: the request would have been denied and passes instead.
    pub const AUDIT_PASS: &str = "audit_pass";
}

/// A rule in audit mode that matched, or the decision an audit-mode policy overrode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditMatch {
    /// The rule's id (`None`: the policy default).
    pub rule: Option<String>,
    /// What it would have done.
    pub action: Action,
    /// The reason code it would have given.
    pub reason_code: &'static str,
}

/// The outcome for one request: exactly one action, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// What to do.
    pub action: Action,
    /// The id of the rule that decided, or `None` when the default (or an
    /// invariant such as path canonicality) applied.
    pub rule: Option<String>,
    /// A human sentence for logs and 403 bodies: the rule's `reason`, or a
    /// generated one.
    pub reason: String,
    /// A stable machine code; see [`reason_code`].
    pub reason_code: &'static str,
    /// Rules in audit mode that matched on the way (they did not decide), and, in a
    /// policy with `mode = "audit"`, the denial that was turned into a pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audit: Vec<AuditMatch>,
}

impl Decision {
    /// The decision of a matched rule.
    pub(crate) fn from_rule(action: Action, id: &str, reason: Option<&str>) -> Decision {
        let (reason_code, verb) = match action {
            Action::Pass => (reason_code::RULE_PASS, "allowed"),
            Action::Stage => (reason_code::RULE_STAGE, "staged"),
            Action::Deny => (reason_code::RULE_DENY, "denied"),
            Action::Tunnel => (reason_code::RULE_TUNNEL, "tunneled"),
        };
        Decision {
            action,
            rule: Some(id.to_owned()),
            reason: reason.map_or_else(|| format!("{verb} by rule \"{id}\""), str::to_owned),
            reason_code,
            audit: Vec::new(),
        }
    }

    /// The decision when no rule matched `what` (e.g. `POST https://x:443/y`).
    pub(crate) fn from_default(action: Action, what: &str) -> Decision {
        let reason_code = match action {
            Action::Pass => reason_code::DEFAULT_PASS,
            Action::Stage => reason_code::DEFAULT_STAGE,
            Action::Deny | Action::Tunnel => reason_code::DEFAULT_DENY,
        };
        let verb = match action {
            Action::Deny | Action::Tunnel => "allows",
            Action::Pass | Action::Stage => "matches",
        };
        Decision {
            action,
            rule: None,
            reason: format!("no rule {verb} {what}; default is {action}"),
            reason_code,
            audit: Vec::new(),
        }
    }

    /// A path refused before rules are consulted.
    pub(crate) fn non_canonical_path(problem: &str) -> Decision {
        Decision {
            action: Action::Deny,
            rule: None,
            reason: format!("{problem}; refusing a path the origin may read differently"),
            reason_code: reason_code::NON_CANONICAL_PATH,
            audit: Vec::new(),
        }
    }

    /// A rule that could not be evaluated (fail closed): deny naming it.
    pub(crate) fn failed(id: &str, reason_code: &'static str, problem: &str) -> Decision {
        Decision {
            action: Action::Deny,
            rule: Some(id.to_owned()),
            reason: format!("rule \"{id}\" cannot be evaluated: {problem}"),
            reason_code,
            audit: Vec::new(),
        }
    }

    /// A deny of the operator's baseline.
    pub(crate) fn baseline(id: &str, reason: Option<&str>) -> Decision {
        Decision {
            action: Action::Deny,
            rule: Some(id.to_owned()),
            reason: reason.map_or_else(
                || format!("denied by baseline rule \"{id}\" (set by the operator)"),
                str::to_owned,
            ),
            reason_code: reason_code::BASELINE_DENY,
            audit: Vec::new(),
        }
    }
}

/// The answer to a CONNECT, given before the tunnel is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectDecision {
    /// Open the tunnel, terminate TLS and decide each inner request with
    /// [`crate::Policy::decide`].
    Intercept,
    /// Refuse the CONNECT; no inner request could be allowed.
    Deny(Decision),
    /// Splice bytes to the origin without interception (a `tunnel` rule; the decision
    /// names it).
    Tunnel(Decision),
}
