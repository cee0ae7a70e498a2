//! The flow cases of `airlock policy test`: their reads, and the run of each through the real
//! lineage pipeline, offline, to check `expect_flows` and `expect_flow_action`.

use airlock_policy::{Policy, RequestFacts, Scheme};
use serde::Deserialize;

use airlock_net::authority::Target;

/// `read = { … }` or `read = [{ … }, …]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    pub(super) fn as_slice(&self) -> &[T] {
        match self {
            OneOrMany::One(one) => std::slice::from_ref(one),
            OneOrMany::Many(many) => many,
        }
    }
}

/// One read of a flow case: a request the policy must pass, and the response it got.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CaseRead {
    /// Default `GET`.
    method: Option<String>,
    url: String,
    /// The response body, as text.
    body: String,
    /// The response's `Content-Type`.
    content_type: Option<String>,
    /// Other response headers (a `set-cookie` makes a credential edge).
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
}

/// The request of a flow case, as it would be staged.
pub(super) struct StagedRequest<'a> {
    pub(super) method: &'a str,
    pub(super) url: &'a str,
    pub(super) headers: &'a std::collections::BTreeMap<String, String>,
    pub(super) body: &'a [u8],
    pub(super) decision: &'a airlock_policy::Decision,
}

/// The scheme, host and port of a case's URL.
fn parse_url(url: &str) -> Result<(http::Uri, Scheme, Target), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL ({e})"))?;
    let scheme = match uri.scheme_str() {
        Some("http") => Scheme::Http,
        Some("https") => Scheme::Https,
        _ => return Err(format!("{url:?} needs http:// or https://")),
    };
    let target = uri
        .authority()
        .and_then(|a| Target::parse(scheme, a.as_str(), scheme.default_port()))
        .ok_or_else(|| format!("{url:?} names no valid host"))?;
    Ok((uri, scheme, target))
}

/// How the policy decides a flow case's read (a bodiless request).
fn decide_read(
    policy: &Policy,
    read: &CaseRead,
    profile: Option<&str>,
) -> Result<airlock_policy::Decision, String> {
    let (uri, scheme, target) = parse_url(&read.url)?;
    let method = read.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
    Ok(policy.decide(&RequestFacts {
        query: uri.query().unwrap_or(""),
        profile,
        ..RequestFacts::new(
            scheme,
            &target.host,
            target.port,
            &method,
            uri.path(),
            false,
        )
    }))
}

/// The rule that passes a flow case's read, if one does.
pub(super) fn read_rule(policy: &Policy, read: &CaseRead, profile: Option<&str>) -> Option<String> {
    decide_read(policy, read, profile)
        .ok()
        .filter(|d| d.action == airlock_policy::Action::Pass)
        .and_then(|d| d.rule)
}

/// Runs a flow case through the real lineage pipeline, offline, and says what differs from
/// `want` (the flow ids) and `want_action`: an in-memory ledger and run; each read, which
/// a rule must pass, journaled with that rule's labels and analysed by a lineage worker;
/// the request, which the policy must stage, staged and analysed; then the flow decision
/// the proxy makes ([`airlock_dataplane::flows::check_effect`]).
pub(super) async fn flow_mismatches(
    policy: &Policy,
    reads: &[CaseRead],
    request: &StagedRequest<'_>,
    profile: Option<&str>,
    want: Option<&[String]>,
    want_action: Option<&str>,
) -> Vec<String> {
    use airlock_dataplane::lineage::{Job, LineageWorker};
    use airlock_ledger::{Header, HeaderText, MemoryStore, NewEffect, Read, Store};

    let mut wrong = Vec::new();
    let mut passed = Vec::new();
    for read in reads {
        match decide_read(policy, read, profile) {
            Err(problem) => wrong.push(format!("read {problem}")),
            Ok(decision) => match (decision.action, decision.rule) {
                (airlock_policy::Action::Pass, Some(rule)) => passed.push((read, rule)),
                (action, rule) => wrong.push(format!(
                    "read {} is decided {} ({}){}, not passed by a rule: a flow case's reads must pass",
                    read.url,
                    action.as_str(),
                    decision.reason_code,
                    rule.map(|r| format!(" by rule \"{r}\"")).unwrap_or_default()
                )),
            },
        }
    }
    let decision = request.decision;
    let stage_rule = match (decision.action, decision.rule.as_deref()) {
        (airlock_policy::Action::Stage, rule) => rule,
        (action, _) => {
            wrong.push(format!(
                "the request is decided {} ({}), not staged: flows decide staged effects only",
                action.as_str(),
                decision.reason_code
            ));
            None
        }
    };
    if !wrong.is_empty() {
        return wrong;
    }
    let fault = |what: &str, e: &dyn std::fmt::Display| vec![format!("{what}: {e}")];
    let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(MemoryStore::new());
    let run = match store.create_run(profile.map(str::to_owned)) {
        Ok(run) => run,
        Err(e) => return fault("cannot create the run", &e),
    };
    let worker = LineageWorker::start(store.clone());
    for (read, rule) in passed {
        let mut headers = http::HeaderMap::new();
        let mut pairs: Vec<(&str, &str)> = read
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        if let Some(content_type) = &read.content_type {
            pairs.push(("content-type", content_type));
        }
        for (name, value) in pairs {
            match (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(value),
            ) {
                (Ok(name), Ok(value)) => {
                    headers.append(name, value);
                }
                _ => return vec![format!("read {}: bad header {name:?}", read.url)],
            }
        }
        let body = bytes::Bytes::from(read.body.clone().into_bytes());
        worker.submit(Job::Read {
            read: Box::new(Read {
                run_id: run.id.clone(),
                seq: 0,
                method: read.method.as_deref().unwrap_or("GET").to_ascii_uppercase(),
                url: read.url.clone(),
                status: Some(200),
                request_bytes: 0,
                response_bytes: body.len() as u64,
                response_digest: None,
                labels: policy.labels_of(&rule).to_vec(),
                rule: Some(rule),
                created_at_ms: airlock_ledger::now_ms(),
                error: None,
                audit: Vec::new(),
            }),
            body: vec![body],
            headers,
            digest_pending: true,
        });
    }
    let effect = match store.stage(NewEffect {
        run_id: &run.id,
        method: request.method,
        url: request.url,
        headers: request
            .headers
            .iter()
            .map(|(name, value)| Header {
                name: name.to_ascii_lowercase(),
                value: HeaderText::Text(value.clone()),
            })
            .collect(),
        body: request.body,
        rule: stage_rule,
        policy_revision: policy.revision(),
        placeholders: Vec::new(),
        depends_on: Vec::new(),
        inject: None,
    }) {
        Ok(effect) => effect,
        Err(e) => return fault("cannot stage the request", &e),
    };
    let analysed = worker.analysed(&effect.id);
    worker.submit(Job::Effect {
        effect: effect.id.clone(),
    });
    if tokio::time::timeout(std::time::Duration::from_secs(30), analysed)
        .await
        .map_or(true, |r| r.is_err())
    {
        return vec!["the lineage worker did not analyse the request".to_owned()];
    }
    let check = match airlock_dataplane::flows::check_effect(&*store, policy, &effect) {
        Ok(check) => check,
        Err(e) => return fault("cannot decide the flows", &e),
    };
    let mut actual: Vec<String> = check.violations.iter().map(|v| v.flow.clone()).collect();
    actual.sort();
    let mut expected = want.map(<[String]>::to_vec).unwrap_or_default();
    expected.sort();
    if want.is_some() && actual != expected {
        let detail: Vec<String> = check
            .violations
            .iter()
            .map(|v| {
                format!(
                    "{} {:?} via {}",
                    v.action.as_str(),
                    v.flow,
                    v.source.as_deref().unwrap_or("unanalysed lineage")
                )
            })
            .collect();
        wrong.push(format!(
            "flows {actual:?} (expected {expected:?}){}",
            if detail.is_empty() {
                String::new()
            } else {
                format!(": {}", detail.join("; "))
            }
        ));
    }
    if let Some(want_action) = want_action {
        let strongest = check
            .violations
            .iter()
            .map(|v| v.action)
            .max()
            .map_or("none", |a| a.as_str());
        if strongest != want_action {
            wrong.push(format!("flow action {strongest} (expected {want_action})"));
        }
    }
    wrong
}
