//! `airlock policy test FILE CASES.toml`: a table of requests with the decision each must
//! get, and the rules no case reaches.
//!
//! ```toml
//! [[case]]
//! name = "reads of the API pass"
//! method = "GET"
//! url = "https://api.example.com/repos/o/r"
//! body = false                      # optional: the request carries a body
//! expect = { action = "pass", rule = "api-read", reason_code = "rule_pass" }
//! ```
//! `rule` and `reason_code` are optional; `rule = ""` expects the default.

use std::path::Path;

use airlock_policy::{Policy, RequestFacts, RuleOutcome, Scheme};
use anyhow::{anyhow, Context as _};
use serde::Deserialize;

use crate::handle::Target;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesFile {
    #[serde(rename = "case")]
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    method: String,
    url: String,
    #[serde(default)]
    body: bool,
    expect: Expect,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    action: String,
    rule: Option<String>,
    reason_code: Option<String>,
    /// The credential the deciding rule injects; `""` = none.
    inject: Option<String>,
}

/// The outcome of a cases file: failures (one line each) and rules no case reached.
pub struct Outcome {
    /// Cases run.
    pub cases: usize,
    /// One line per failed case.
    pub failures: Vec<String>,
    /// Ids of rules no case matched.
    pub uncovered: Vec<String>,
}

/// Runs the cases in `cases_path` against `policy`.
pub fn run(policy: &Policy, cases_path: &Path) -> anyhow::Result<Outcome> {
    let text = std::fs::read_to_string(cases_path)
        .with_context(|| format!("cannot read {}", cases_path.display()))?;
    let file: CasesFile =
        toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", cases_path.display()))?;
    let mut failures = Vec::new();
    let mut covered = std::collections::HashSet::new();
    for case in &file.cases {
        let uri: http::Uri = case.url.parse().map_err(|e| {
            anyhow!(
                "{}: case {:?}: {:?} is not a URL ({e})",
                cases_path.display(),
                case.name,
                case.url
            )
        })?;
        let scheme = match uri.scheme_str() {
            Some("http") => Scheme::Http,
            Some("https") => Scheme::Https,
            _ => {
                return Err(anyhow!(
                    "{}: case {:?}: the URL needs http:// or https://",
                    cases_path.display(),
                    case.name
                ))
            }
        };
        let default_port = if scheme == Scheme::Https { 443 } else { 80 };
        let target = uri
            .authority()
            .and_then(|a| Target::parse(scheme, a.as_str(), default_port))
            .ok_or_else(|| {
                anyhow!(
                    "{}: case {:?}: the URL names no valid host",
                    cases_path.display(),
                    case.name
                )
            })?;
        let method = case.method.to_ascii_uppercase();
        let explanation = policy.explain(&RequestFacts {
            scheme,
            host: &target.host,
            port: target.port,
            method: &method,
            path: uri.path(),
            has_body: case.body,
        });
        for rule in &explanation.rules {
            if rule.outcome == RuleOutcome::Matched {
                covered.insert(rule.id.clone());
            }
        }
        let decision = &explanation.decision;
        let mut wrong = Vec::new();
        if decision.action.as_str() != case.expect.action {
            wrong.push(format!(
                "action {} (expected {})",
                decision.action.as_str(),
                case.expect.action
            ));
        }
        if let Some(rule) = &case.expect.rule {
            let actual = decision.rule.clone().unwrap_or_default();
            if &actual != rule {
                wrong.push(format!("rule {actual:?} (expected {rule:?})"));
            }
        }
        if let Some(code) = &case.expect.reason_code {
            if decision.reason_code != code {
                wrong.push(format!(
                    "reason_code {} (expected {code})",
                    decision.reason_code
                ));
            }
        }
        if let Some(expected) = &case.expect.inject {
            let actual = decision
                .rule
                .as_deref()
                .and_then(|id| policy.rule(id))
                .and_then(|rule| rule.inject())
                .unwrap_or_default();
            if actual != expected {
                wrong.push(format!("inject {actual:?} (expected {expected:?})"));
            }
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "case {:?} ({} {}): {}",
                case.name,
                method,
                case.url,
                wrong.join(", ")
            ));
        }
    }
    let uncovered = policy
        .rules()
        .iter()
        .map(|r| r.id().to_owned())
        .filter(|id| !covered.contains(id))
        .collect();
    Ok(Outcome {
        cases: file.cases.len(),
        failures,
        uncovered,
    })
}
