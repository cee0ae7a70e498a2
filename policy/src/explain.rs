//! Tools for policy authors: why a request gets its decision (`explain`), and rules that
//! can never decide anything (`lints`).

mod flows;

use serde::Serialize;

pub use flows::{FlowExplanation, FlowMatch};

use crate::eval::{Check, Context};
use crate::matcher::{CanonicalPath, Host};
use crate::{Action, Decision, Mode, Policy, RequestFacts, Rule};

/// How one rule fared for a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RuleOutcome {
    /// The rule matched and decided.
    Matched,
    /// The rule did not match: the first condition that failed.
    Mismatch {
        /// `scheme`, `host`, `port`, `profiles`, `method`, `path`, `query`, `headers`,
        /// `json`, `graphql`, `jsonrpc`, or `action` (a tunnel rule, which decides
        /// CONNECTs only).
        field: &'static str,
    },
    /// An earlier rule decided first.
    NotReached,
    /// The rule could not be evaluated and denied (fail closed): the reason code.
    Failed {
        /// `body_too_large`, `body_unparseable` or `query_unparseable`.
        reason_code: &'static str,
    },
    /// The rule is in audit mode and matched (or failed): recorded, and evaluation went on.
    Audited,
}

/// One rule's line in an explanation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleTrace {
    /// The rule's id.
    pub id: String,
    /// What the rule does.
    pub action: Action,
    /// How it fared.
    #[serde(flatten)]
    pub outcome: RuleOutcome,
    /// Why, when the matcher can say more than its name (query, headers, body matchers,
    /// profiles, failures).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// True for a rule of the operator's baseline (evaluated first).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub baseline: bool,
}

/// Every rule considered for a request, in order, and the decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// The decision, exactly as [`Policy::decide`] gives it.
    pub decision: Decision,
    /// The rules in evaluation order.
    pub rules: Vec<RuleTrace>,
    /// The `[[flow]]` rules that could apply to the request ([`Policy::explain_flows`]).
    pub flows: FlowExplanation,
}

/// A rule that can never decide a request, or a credential no rule uses (then `rule` is
/// `credential.NAME` and `index` is 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lint {
    /// The rule's id.
    pub rule: String,
    /// Its 1-based position in the file.
    pub index: usize,
    /// Why it is a problem, and what to do.
    pub message: String,
}

impl Rule {
    /// Whether this rule matches every request `later` could match: same host pattern and
    /// ports, no narrower scheme, a method condition that includes `later`'s (none, the
    /// same preset, a superset list, or `write` over a list of non-read methods), the same
    /// path pattern or none, and no other condition of its own.
    fn covers(&self, later: &Rule) -> bool {
        self.host.includes(&later.host)
            && self.port == later.port
            && (self.scheme.is_none() || self.scheme == later.scheme)
            && method_covers(self.method.as_ref(), later.method.as_ref())
            && (self.path.is_none() || self.path == later.path)
            && self.query.is_none()
            && self.headers.is_none()
            && self.body.is_none()
            && self.profiles.is_none()
            && self.mode == Mode::Enforce
            && (self.action == Action::Tunnel) == (later.action == Action::Tunnel)
    }
}

/// Whether every request `later` matches on method is matched by `earlier`.
fn method_covers(
    earlier: Option<&crate::matcher::MethodMatcher>,
    later: Option<&crate::matcher::MethodMatcher>,
) -> bool {
    use crate::matcher::MethodMatcher::{List, Read, Write};
    match (earlier, later) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(Read), Some(Read)) | (Some(Write), Some(Write)) => true,
        (Some(List(a)), Some(List(b))) => b.iter().all(|m| a.contains(m)),
        // A listed method that can never be a read (PUT, DELETE, …) is a write with or
        // without a body; a POST may be a read by protocol (git fetch, GraphQL query).
        (Some(Write), Some(List(b))) => b
            .iter()
            .all(|m| !matches!(m.as_str(), "GET" | "HEAD" | "OPTIONS" | "TRACE" | "POST")),
        _ => false,
    }
}

impl Policy {
    /// Explains the decision for `request`: every rule in order, whether it matched, the
    /// first condition that failed when it did not, and the decision.
    pub fn explain(&self, request: &RequestFacts<'_>) -> Explanation {
        let decision = self.decide(request);
        let host = Host::parse(request.host);
        let path = CanonicalPath::parse(request.path).ok();
        let cx = match (&host, &path) {
            (Some(host), Some(path)) => Some(Context::new(request, host, path)),
            _ => None,
        };
        let mut decided = false;
        let mut rules = Vec::with_capacity(self.baseline.len() + self.rules.len());
        let all = self
            .baseline
            .iter()
            .map(|rule| (rule, true))
            .chain(self.rules.iter().map(|rule| (rule, false)));
        for (rule, baseline) in all {
            let mut detail = None;
            let outcome = if decided {
                RuleOutcome::NotReached
            } else if rule.action == Action::Tunnel && !baseline {
                detail = Some("a tunnel rule decides CONNECTs only".to_owned());
                RuleOutcome::Mismatch { field: "action" }
            } else {
                match (&cx, &host) {
                    (Some(cx), _) => {
                        let check = rule.check(cx);
                        let audited = rule.mode == Mode::Audit && !baseline;
                        match check {
                            Check::Mismatch { field, detail: why } => {
                                detail = why;
                                RuleOutcome::Mismatch { field }
                            }
                            _ if audited => RuleOutcome::Audited,
                            Check::Match => {
                                decided = true;
                                RuleOutcome::Matched
                            }
                            Check::NeedsBody => {
                                decided = true;
                                detail = Some("the body was not given (--data FILE)".to_owned());
                                RuleOutcome::Failed {
                                    reason_code: crate::reason_code::BODY_UNPARSEABLE,
                                }
                            }
                            Check::Fail { code, problem } => {
                                decided = true;
                                detail = Some(problem);
                                RuleOutcome::Failed { reason_code: code }
                            }
                        }
                    }
                    (None, None) => RuleOutcome::Mismatch { field: "host" },
                    (None, Some(_)) => RuleOutcome::NotReached,
                }
            };
            rules.push(RuleTrace {
                id: rule.id.clone(),
                action: rule.action,
                outcome,
                detail,
                baseline,
            });
        }
        let flows = self.explain_flows(&decision, request.host);
        Explanation {
            decision,
            rules,
            flows,
        }
    }

    /// Errors of `airlock policy check` (it exits 1 on any): rules that can never decide
    /// (an earlier rule already matches everything they could, or a `jsonrpc` matcher on
    /// `method = "read"`) and credentials no rule injects. A body matcher without
    /// `limit.body_bytes` decides as written and is a warning ([`Policy::warnings`]).
    pub fn lints(&self) -> Vec<Lint> {
        let mut out = Vec::new();
        for (index, rule) in self.rules.iter().enumerate() {
            if let Some(earlier) = self.rules[..index]
                .iter()
                .find(|earlier| earlier.covers(rule))
            {
                out.push(Lint {
                    rule: rule.id.clone(),
                    index: index + 1,
                    message: format!(
                        "never reached: rule \"{}\" before it matches every request it could match; move it above \"{}\" or remove it",
                        earlier.id, earlier.id
                    ),
                });
            }
        }
        out.extend(self.body_lints());
        for credential in self.credentials() {
            if !self
                .rules
                .iter()
                .any(|rule| rule.inject() == Some(credential.name()))
            {
                out.push(Lint {
                    rule: format!("credential.{}", credential.name()),
                    index: 0,
                    message: format!(
                        "credential \"{}\" is never used: no rule injects it; add inject = \"{}\" to a rule or remove it",
                        credential.name(),
                        credential.name()
                    ),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scheme;

    const POLICY: &str = r#"
version = 1
[[rule]]
id = "all-api"
host = "api.example.com"
action = "pass"
[[rule]]
id = "api-posts"
host = "api.example.com"
method = ["POST"]
action = "stage"
[[rule]]
id = "hooks"
host = "hooks.example.com"
method = ["POST"]
path = "/deliver/**"
action = "stage"
"#;

    fn facts<'a>(host: &'a str, method: &'a str, path: &'a str) -> RequestFacts<'a> {
        RequestFacts::new(Scheme::Https, host, 443, method, path, method == "POST")
    }

    #[test]
    fn explain_names_the_first_failing_condition_and_the_winner() {
        let policy = Policy::from_toml_str(POLICY, "<inline>").expect("policy");
        let explanation = policy.explain(&facts("hooks.example.com", "POST", "/other"));
        let outcomes: Vec<_> = explanation
            .rules
            .iter()
            .map(|r| r.outcome.clone())
            .collect();
        assert_eq!(
            outcomes,
            vec![
                RuleOutcome::Mismatch { field: "host" },
                RuleOutcome::Mismatch { field: "host" },
                RuleOutcome::Mismatch { field: "path" },
            ]
        );
        assert_eq!(explanation.decision.action, Action::Deny);
        let explanation = policy.explain(&facts("api.example.com", "POST", "/x"));
        assert_eq!(explanation.rules[0].outcome, RuleOutcome::Matched);
        assert_eq!(explanation.rules[1].outcome, RuleOutcome::NotReached);
        assert_eq!(explanation.decision.rule.as_deref(), Some("all-api"));
    }

    #[test]
    fn a_rule_behind_a_broader_one_is_linted() {
        let policy = Policy::from_toml_str(POLICY, "<inline>").expect("policy");
        let lints = policy.lints();
        assert_eq!(lints.len(), 1);
        assert_eq!(lints[0].rule, "api-posts");
        assert_eq!(lints[0].index, 2);
        assert!(lints[0].message.contains("all-api"));
    }

    #[test]
    fn a_rule_under_an_earlier_one_with_a_wider_method_set_is_never_reached() {
        let lint = |first: &str, second: &str| {
            let text = format!(
                "version = 1\n[[rule]]\nid = \"first\"\nhost = \"x.example\"\n{first}\naction = \"stage\"\n[[rule]]\nid = \"second\"\nhost = \"x.example\"\n{second}\naction = \"pass\"\n"
            );
            let policy = Policy::from_toml_str(&text, "<test>").expect("policy");
            policy.lints().iter().any(|l| l.rule == "second")
        };
        // (first rule's conditions, second rule's conditions, second never reached?)
        let table = [
            ("method = [\"POST\"]", "method = [\"POST\"]", true),
            ("method = [\"POST\", \"PUT\"]", "method = [\"PUT\"]", true),
            ("method = \"write\"", "method = [\"PUT\", \"DELETE\"]", true),
            // A POST may be a git fetch or a GraphQL query: a read, not a write.
            (
                "method = \"write\"",
                "method = [\"POST\", \"DELETE\"]",
                false,
            ),
            ("method = \"write\"", "method = [\"GET\"]", false),
            ("method = \"read\"", "method = [\"GET\"]", false),
            ("method = [\"POST\"]", "method = [\"POST\", \"PUT\"]", false),
            (
                "method = [\"POST\"]\npath = \"/a/**\"",
                "method = [\"POST\"]\npath = \"/a/**\"",
                true,
            ),
            (
                "method = [\"POST\"]\npath = \"/a/**\"",
                "method = [\"POST\"]\npath = \"/b\"",
                false,
            ),
            (
                "method = [\"POST\"]",
                "method = [\"POST\"]\npath = \"/b\"",
                true,
            ),
        ];
        for (first, second, shadowed) in table {
            assert_eq!(lint(first, second), shadowed, "{first} / {second}");
        }
    }
}
