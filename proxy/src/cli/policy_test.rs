//! `airlock policy test FILE CASES.toml`: a table of requests with the decision each must
//! get, and the rules no case reaches.
//!
//! ```toml
//! [[case]]
//! name = "reads of the API pass"
//! method = "GET"
//! url = "https://api.example.com/repos/o/r"
//! body = false                      # optional: the request carries a body
//! data = '{"action": "opened"}'     # optional: the body itself (for json/graphql/jsonrpc)
//! headers = { "x-github-event" = "push" }  # optional
//! profile = "ci"                    # optional: the run's profile
//! expect = { action = "pass", rule = "api-read", reason_code = "rule_pass" }
//! ```
//! `rule`, `reason_code` and `audit` (ids of audit-mode rules that must have matched) are
//! optional; `rule = ""` expects the default. A case with
//! `method = "CONNECT"` and `url = "https://host:port"` is decided as a CONNECT; its
//! `expect.action` is `tunnel`, `deny` or `intercept`.

use std::path::Path;

use airlock_policy::{ConnectDecision, Policy, RequestBody, RequestFacts, RuleOutcome, Scheme};
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
    /// Request headers, `{ "x-github-event" = "push" }`.
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    /// The request body, as text (implies `body = true`).
    data: Option<String>,
    /// The profile of the run making the request.
    profile: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    action: String,
    rule: Option<String>,
    reason_code: Option<String>,
    /// Ids of the audit-mode rules that must have matched (`""`: the default, in a
    /// policy in audit mode), in order.
    audit: Option<Vec<String>>,
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
        let header_pairs: Vec<(&str, &str)> = case
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        let body_bytes = case.data.as_deref().map(str::as_bytes);
        if method == "CONNECT" {
            let connect =
                policy.decide_connect_for(&target.host, target.port, case.profile.as_deref());
            let (action, rule, code) = match &connect {
                ConnectDecision::Intercept => ("intercept", None, ""),
                ConnectDecision::Deny(d) | ConnectDecision::Tunnel(d) => {
                    (d.action.as_str(), d.rule.clone(), d.reason_code)
                }
            };
            if let Some(rule) = &rule {
                covered.insert(rule.clone());
            }
            let mut wrong = Vec::new();
            if action != case.expect.action {
                wrong.push(format!("action {action} (expected {})", case.expect.action));
            }
            if let Some(want) = &case.expect.rule {
                let actual = rule.clone().unwrap_or_default();
                if &actual != want {
                    wrong.push(format!("rule {actual:?} (expected {want:?})"));
                }
            }
            if let Some(want) = &case.expect.reason_code {
                if code != want {
                    wrong.push(format!("reason_code {code} (expected {want})"));
                }
            }
            if !wrong.is_empty() {
                failures.push(format!(
                    "case {:?} (CONNECT {}): {}",
                    case.name,
                    target.authority(),
                    wrong.join(", ")
                ));
            }
            continue;
        }
        let explanation = policy.explain(&RequestFacts {
            query: uri.query().unwrap_or(""),
            headers: &header_pairs,
            body: body_bytes.map_or(RequestBody::NotRead, RequestBody::Read),
            profile: case.profile.as_deref(),
            ..RequestFacts::new(
                scheme,
                &target.host,
                target.port,
                &method,
                uri.path(),
                case.body || body_bytes.is_some(),
            )
        });
        for rule in &explanation.rules {
            if matches!(
                rule.outcome,
                RuleOutcome::Matched | RuleOutcome::Audited | RuleOutcome::Failed { .. }
            ) {
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
        if let Some(want) = &case.expect.audit {
            let actual: Vec<String> = decision
                .audit
                .iter()
                .map(|m| m.rule.clone().unwrap_or_default())
                .collect();
            if &actual != want {
                wrong.push(format!("audit {actual:?} (expected {want:?})"));
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
