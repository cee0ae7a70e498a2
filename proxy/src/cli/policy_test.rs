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
//! `rule`, `reason_code`, `audit` (ids of audit-mode rules that must have matched),
//! `inject` and `obligations` (`{ strip, review, limit, redact }`, only the keys given are
//! checked) are optional; `rule = ""` expects the default. A case with
//! `method = "CONNECT"` and `url = "https://host:port"` is decided as a CONNECT; its
//! `expect.action` is `tunnel`, `deny` or `intercept`.
//!
//! A case can also test `[[flow]]` rules: `read` (one table or a list) describes reads the
//! run made before the request, and `expect_flows` the flows the request, staged, must
//! violate (`[]`: none), with `expect_flow_action` (`block`, `review` or `none`: the
//! strongest). The real lineage pipeline decides, offline: an in-memory ledger and run, each
//! read journaled with its rule's labels and analysed by the lineage worker, the request
//! staged and analysed, then the flow decision the proxy would make.
//!
//! ```toml
//! [[case]]
//! name = "a secret read does not leave in a webhook"
//! read = { url = "https://vault.example/v1/db", body = '{"password": "…"}', content_type = "application/json" }
//! method = "POST"
//! url = "https://ci.hooks.example/deliver"
//! data = '{"note": "…"}'
//! expect = { action = "stage" }     # optional when expect_flows is given
//! expect_flows = ["no-secrets-out"]
//! expect_flow_action = "block"
//! ```

use std::path::Path;

use airlock_policy::{ConnectDecision, Policy, RequestBody, RequestFacts, RuleOutcome, Scheme};
use anyhow::{anyhow, Context as _};
use serde::Deserialize;

use airlock_net::authority::Target;

mod flows;

use flows::{flow_mismatches, read_rule, CaseRead, OneOrMany, StagedRequest};

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
    /// The decision the request must get (optional for a flow case).
    expect: Option<Expect>,
    /// Reads the run made before the request (flow cases).
    read: Option<OneOrMany<CaseRead>>,
    /// The flows the request, staged after the reads, must violate (`[]`: none).
    expect_flows: Option<Vec<String>>,
    /// The strongest action of those flows: `block`, `review` or `none`.
    expect_flow_action: Option<String>,
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
    /// The deciding rule's obligations; only the keys given are checked.
    obligations: Option<ExpectObligations>,
}

/// `expect.obligations = { strip = [...], review = "auto", limit = {...}, redact = [...] }`:
/// the obligations of the deciding rule (none for the default). Only the keys given are
/// checked; `strip` and `redact` as sets (header names in any case), `limit` key by key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectObligations {
    strip: Option<Vec<String>>,
    review: Option<String>,
    limit: Option<ExpectLimit>,
    redact: Option<Vec<String>>,
}

/// The `limit` keys a case may check (docs/policy.md "Obligations of the winning rule").
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectLimit {
    body_bytes: Option<u64>,
    requests_per_minute: Option<u64>,
    upload_bytes_per_run: Option<u64>,
    query_bytes: Option<u64>,
}

/// What differs between the deciding rule's obligations and `want`, one entry each.
fn obligation_mismatches(
    rule: Option<&airlock_policy::Rule>,
    want: &ExpectObligations,
) -> Vec<String> {
    use airlock_policy::{Limits, Redaction, Review};
    let mut wrong = Vec::new();
    let set =
        |items: Vec<String>| -> std::collections::BTreeSet<String> { items.into_iter().collect() };
    if let Some(expected) = &want.strip {
        let actual = set(rule.map_or_else(Vec::new, |r| {
            r.strip().iter().map(|h| h.to_ascii_lowercase()).collect()
        }));
        let expected = set(expected.iter().map(|h| h.to_ascii_lowercase()).collect());
        if actual != expected {
            wrong.push(format!(
                "obligations.strip {actual:?} (expected {expected:?})"
            ));
        }
    }
    if let Some(expected) = &want.redact {
        let actual = set(rule.map_or_else(Vec::new, |r| {
            r.redact()
                .iter()
                .map(|redaction| match redaction {
                    Redaction::JsonPointer(pointer) => pointer.clone(),
                    Redaction::Header(name) => format!("header:{name}"),
                })
                .collect()
        }));
        let expected = set(expected
            .iter()
            .map(|entry| match entry.strip_prefix("header:") {
                Some(name) => format!("header:{}", name.to_ascii_lowercase()),
                None => entry.clone(),
            })
            .collect());
        if actual != expected {
            wrong.push(format!(
                "obligations.redact {actual:?} (expected {expected:?})"
            ));
        }
    }
    if let Some(expected) = &want.review {
        let actual = match rule.map_or(Review::Required, |r| r.review()) {
            Review::Required => "required",
            Review::Auto => "auto",
        };
        if actual != expected {
            wrong.push(format!("obligations.review {actual} (expected {expected})"));
        }
    }
    if let Some(expected) = &want.limit {
        let limits = rule.map_or_else(Limits::default, |r| *r.limits());
        let show = |value: Option<u64>| value.map_or_else(|| "none".to_owned(), |v| v.to_string());
        for (name, actual, expected) in [
            ("body_bytes", limits.body_bytes, expected.body_bytes),
            (
                "requests_per_minute",
                limits.requests_per_minute.map(u64::from),
                expected.requests_per_minute,
            ),
            (
                "upload_bytes_per_run",
                limits.upload_bytes_per_run,
                expected.upload_bytes_per_run,
            ),
            ("query_bytes", limits.query_bytes, expected.query_bytes),
        ] {
            if expected.is_some() && actual != expected {
                wrong.push(format!(
                    "obligations.limit.{name} {} (expected {})",
                    show(actual),
                    show(expected)
                ));
            }
        }
    }
    wrong
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
pub async fn run(policy: &Policy, cases_path: &Path) -> anyhow::Result<Outcome> {
    let text = std::fs::read_to_string(cases_path)
        .with_context(|| format!("cannot read {}", cases_path.display()))?;
    let file: CasesFile =
        toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", cases_path.display()))?;
    let mut failures = Vec::new();
    let mut covered = std::collections::HashSet::new();
    for case in &file.cases {
        let flow_case = case.expect_flows.is_some() || case.expect_flow_action.is_some();
        if case.expect.is_none() && !flow_case {
            return Err(anyhow!(
                "{}: case {:?}: give `expect`, `expect_flows` (or `expect_flow_action`), or both",
                cases_path.display(),
                case.name
            ));
        }
        if case.read.is_some() && !flow_case {
            return Err(anyhow!(
                "{}: case {:?}: `read` is for flow cases: add `expect_flows` or `expect_flow_action`",
                cases_path.display(),
                case.name
            ));
        }
        if let Some(unknown) = case
            .expect_flows
            .iter()
            .flatten()
            .find(|id| !policy.flows().iter().any(|f| f.id() == id.as_str()))
        {
            let known: Vec<&str> = policy.flows().iter().map(|f| f.id()).collect();
            return Err(anyhow!(
                "{}: case {:?}: expect_flows names {unknown:?}, which is no flow of the policy (its flows: {})",
                cases_path.display(),
                case.name,
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            ));
        }
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
            let Some(expect) = &case.expect else {
                return Err(anyhow!(
                    "{}: case {:?}: a CONNECT case needs `expect` (flows decide staged effects)",
                    cases_path.display(),
                    case.name
                ));
            };
            let mut wrong = Vec::new();
            if action != expect.action {
                wrong.push(format!("action {action} (expected {})", expect.action));
            }
            if let Some(want) = &expect.rule {
                let actual = rule.clone().unwrap_or_default();
                if &actual != want {
                    wrong.push(format!("rule {actual:?} (expected {want:?})"));
                }
            }
            if let Some(want) = &expect.reason_code {
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
        if let Some(expect) = &case.expect {
            wrong.extend(decision_mismatches(policy, decision, expect));
        }
        if flow_case {
            let want = case.expect_flows.as_deref();
            let reads = case.read.as_ref().map(OneOrMany::as_slice).unwrap_or(&[]);
            for read in reads {
                if let Some(rule) = read_rule(policy, read, case.profile.as_deref()) {
                    covered.insert(rule);
                }
            }
            let effect = StagedRequest {
                method: &method,
                url: &case.url,
                headers: &case.headers,
                body: body_bytes.unwrap_or_default(),
                decision,
            };
            wrong.extend(
                flow_mismatches(
                    policy,
                    reads,
                    &effect,
                    case.profile.as_deref(),
                    want,
                    case.expect_flow_action.as_deref(),
                )
                .await,
            );
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

/// What differs between `decision` and `expect`, one entry each.
fn decision_mismatches(
    policy: &Policy,
    decision: &airlock_policy::Decision,
    expect: &Expect,
) -> Vec<String> {
    let mut wrong = Vec::new();
    if decision.action.as_str() != expect.action {
        wrong.push(format!(
            "action {} (expected {})",
            decision.action.as_str(),
            expect.action
        ));
    }
    if let Some(rule) = &expect.rule {
        let actual = decision.rule.clone().unwrap_or_default();
        if &actual != rule {
            wrong.push(format!("rule {actual:?} (expected {rule:?})"));
        }
    }
    if let Some(code) = &expect.reason_code {
        if decision.reason_code != code {
            wrong.push(format!(
                "reason_code {} (expected {code})",
                decision.reason_code
            ));
        }
    }
    if let Some(want) = &expect.audit {
        let actual: Vec<String> = decision
            .audit
            .iter()
            .map(|m| m.rule.clone().unwrap_or_default())
            .collect();
        if &actual != want {
            wrong.push(format!("audit {actual:?} (expected {want:?})"));
        }
    }
    if let Some(expected) = &expect.inject {
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
    if let Some(want) = &expect.obligations {
        let rule = decision.rule.as_deref().and_then(|id| policy.rule(id));
        wrong.extend(obligation_mismatches(rule, want));
    }
    wrong
}
