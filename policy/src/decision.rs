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
}

impl Action {
    /// The lower-case name used in policy files, logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Pass => "pass",
            Action::Stage => "stage",
            Action::Deny => "deny",
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
}

impl Decision {
    /// The decision of a matched rule.
    pub(crate) fn from_rule(action: Action, id: &str, reason: Option<&str>) -> Decision {
        let (reason_code, verb) = match action {
            Action::Pass => (reason_code::RULE_PASS, "allowed"),
            Action::Stage => (reason_code::RULE_STAGE, "staged"),
            Action::Deny => (reason_code::RULE_DENY, "denied"),
        };
        Decision {
            action,
            rule: Some(id.to_owned()),
            reason: reason.map_or_else(|| format!("{verb} by rule \"{id}\""), str::to_owned),
            reason_code,
        }
    }

    /// The decision when no rule matched `what` (e.g. `POST https://x:443/y`).
    pub(crate) fn from_default(action: Action, what: &str) -> Decision {
        let reason_code = match action {
            Action::Pass => reason_code::DEFAULT_PASS,
            Action::Stage => reason_code::DEFAULT_STAGE,
            Action::Deny => reason_code::DEFAULT_DENY,
        };
        let verb = match action {
            Action::Deny => "allows",
            Action::Pass | Action::Stage => "matches",
        };
        Decision {
            action,
            rule: None,
            reason: format!("no rule {verb} {what}; default is {action}"),
            reason_code,
        }
    }

    /// A path refused before rules are consulted.
    pub(crate) fn non_canonical_path(problem: &str) -> Decision {
        Decision {
            action: Action::Deny,
            rule: None,
            reason: format!("{problem}; refusing a path the origin may read differently"),
            reason_code: reason_code::NON_CANONICAL_PATH,
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
}
