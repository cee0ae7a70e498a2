//! The policy's request-side facts and per-rule obligations, in the proxy.
//!
//! - [`decide`]: builds [`RequestFacts`] (query, headers, the run's profile) and, only when
//!   [`Policy::body_limit`](airlock_policy::Policy::body_limit) says a body matcher needs
//!   it, buffers the body up to that limit before deciding.
//! - [`apply`]: the winning rule's obligations before a pass or stage: `limit`
//!   (`query_bytes` 414, `requests_per_minute` 429, `body_bytes` and
//!   `upload_bytes_per_run` 413, each a [`ProxyError::OverLimit`] naming the rule and
//!   limit) and `strip`.
//! - [`flow_hold`]: flow rules over the staged effect's lineage (the `airlock-flow` header).
//! - [`auto_approve`]: `review = "auto"` on the staged effect, unless a flow holds it.
//! - [`log_audit`]: one info line per audit match.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_ledger::{EffectId, RunId};
use airlock_policy::{Decision, RequestBody, RequestFacts, Rule};
use bytes::Bytes;
use http::request::Parts;
use http::{header, Response};
use tracing::{info, warn};

use crate::policy_store::Snapshot;
use crate::DataPlane;
use airlock_net::authority::Target;
use airlock_net::body::full_body;
use airlock_net::body::ProxyBody;
use airlock_net::respond::{ProxyError, RuleLimit, EFFECT_HEADER};

/// The window of `limit.requests_per_minute`.
const RATE_WINDOW: Duration = Duration::from_secs(60);
/// Entries kept per table before it is cleared (bounds memory across many runs).
const MAX_ENTRIES: usize = 10_000;

/// Per-run state of obligations, shared by all connections.
#[derive(Debug, Default)]
pub struct Enforcer {
    /// (run, rule id) -> times of the requests of the last minute.
    windows: Mutex<HashMap<(RunId, String), VecDeque<Instant>>>,
    /// (run, host) -> request body bytes sent or staged through rules with an upload limit.
    uploads: Mutex<HashMap<(RunId, String), u64>>,
    /// run -> its profile (fixed at creation, so cached for good).
    profiles: Mutex<HashMap<RunId, Option<String>>>,
}

/// The profile `run` was created with, cached after the first ledger read.
pub fn profile_of(shared: &Arc<DataPlane>, run: &RunId) -> Result<Option<String>, ProxyError> {
    let mut cache = shared
        .enforce
        .profiles
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(profile) = cache.get(run) {
        return Ok(profile.clone());
    }
    let profile = shared
        .ledger
        .run(run)
        .map_err(|e| crate::stage::ledger_fault("could not be read", e))?
        .and_then(|r| r.profile);
    if cache.len() >= MAX_ENTRIES {
        cache.clear();
    }
    cache.insert(run.clone(), profile.clone());
    Ok(profile)
}

/// A body read up to a limit.
enum Buffered {
    /// All of it.
    Whole(Bytes),
    /// It was longer than the limit (what was read is dropped).
    TooLarge,
}

fn declared_length(parts: &Parts) -> Option<u64> {
    parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// Reads `body` whole if it is at most `limit` bytes, within `total` in all and without
/// a pause past the idle deadline ([`crate::request::next_frame`]); a declared
/// `Content-Length` over the limit is refused before reading.
async fn read_up_to(
    body: ProxyBody,
    declared: Option<u64>,
    limit: u64,
    total: Duration,
) -> Result<Buffered, ProxyError> {
    if declared.is_some_and(|n| n > limit) {
        return Ok(Buffered::TooLarge);
    }
    let mut body = body;
    let mut collected: Vec<u8> = Vec::with_capacity(declared.unwrap_or(0).min(limit) as usize);
    let started = Instant::now();
    loop {
        let Some(frame) = crate::request::next_frame(&mut body, started, total).await? else {
            break;
        };
        let frame = frame.map_err(|error| ProxyError::BadRequest {
            code: "body_read_failed",
            reason: format!("the request body could not be read: {error}"),
        })?;
        if let Ok(data) = frame.into_data() {
            if (collected.len() + data.len()) as u64 > limit {
                return Ok(Buffered::TooLarge);
            }
            collected.extend_from_slice(&data);
        }
    }
    Ok(Buffered::Whole(Bytes::from(collected)))
}

/// Decides the request by policy, reading the body first only when a body matcher needs
/// it. Returns the decision and the body to go on with (buffered when it was read). A
/// body that was over the limit and is not denied (an audit rule failed on it) cannot be
/// forwarded any more: 413.
pub async fn decide(
    shared: &Arc<DataPlane>,
    policy: &Snapshot,
    run: &RunId,
    target: &Target,
    parts: &Parts,
    body: ProxyBody,
) -> Result<(Decision, ProxyBody), ProxyError> {
    let profile = profile_of(shared, run)?;
    // Every header line is offered, non-ASCII values decoded lossily: a value that is
    // not text must not make a header look absent to a deny rule.
    let values: Vec<(&str, std::borrow::Cow<'_, str>)> = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), String::from_utf8_lossy(value.as_bytes())))
        .collect();
    let headers: Vec<(&str, &str)> = values
        .iter()
        .map(|(name, value)| (*name, value.as_ref()))
        .collect();
    let mut facts = RequestFacts {
        query: parts.uri.query().unwrap_or(""),
        headers: &headers,
        profile: profile.as_deref(),
        ..crate::request::request_facts(target, parts)
    };
    let Some(limit) = policy.body_limit(&facts) else {
        return Ok((policy.decide(&facts), body));
    };
    match read_up_to(
        body,
        declared_length(parts),
        limit,
        shared.limits.body_read_timeout,
    )
    .await?
    {
        Buffered::Whole(bytes) => {
            facts.body = RequestBody::Read(&bytes);
            let decision = policy.decide(&facts);
            Ok((decision, full_body(bytes.clone())))
        }
        Buffered::TooLarge => {
            facts.body = RequestBody::TooLarge;
            let decision = policy.decide(&facts);
            if decision.action == airlock_policy::Action::Deny {
                return Ok((decision, full_body(Bytes::new())));
            }
            Err(ProxyError::OverLimit {
                rule: decision.rule.clone().unwrap_or_default(),
                limit: RuleLimit::BodyBytes,
                value: limit,
                reason: format!(
                    "the body is over the {limit} bytes a body matcher reads, so it cannot be forwarded"
                ),
                policy_revision: policy.revision().to_owned(),
            })
        }
    }
}

/// Logs each audit match of `decision` (info, `audit = true`): the rule and what it would
/// have done.
pub fn log_audit(run: &RunId, url: &str, decision: &Decision) {
    for matched in &decision.audit {
        info!(
            audit = true,
            run.id = %run,
            url = %url,
            policy.rule = matched.rule.as_deref().unwrap_or("<default>"),
            policy.would = matched.action.as_str(),
            policy.reason_code = matched.reason_code,
            policy.decided = decision.action.as_str(),
            "audit: a rule in audit mode matched (it did not decide)"
        );
    }
}

/// The audit matches of a request's decision, carried in its extensions to the read
/// journal (`Read::audit`).
#[derive(Debug, Clone)]
struct AuditNote(Vec<String>);

/// Attaches `decision`'s audit matches to the request, for [`take_audit`].
pub fn note_audit(parts: &mut Parts, decision: &Decision) {
    if decision.audit.is_empty() {
        return;
    }
    let notes = decision
        .audit
        .iter()
        .map(|m| {
            format!(
                "{} would {} ({})",
                m.rule.as_deref().unwrap_or("<default>"),
                m.action.as_str(),
                m.reason_code
            )
        })
        .collect();
    parts.extensions.insert(AuditNote(notes));
}

/// The audit matches [`note_audit`] attached (empty when none).
pub fn take_audit(parts: &mut Parts) -> Vec<String> {
    parts
        .extensions
        .remove::<AuditNote>()
        .map(|note| note.0)
        .unwrap_or_default()
}

/// Applies the winning rule's obligations to a request about to be passed or staged:
/// limits (in the order query, rate, body, upload) and `strip`. Returns the body to go
/// on with (buffered when a body limit needed it).
pub async fn apply(
    shared: &Arc<DataPlane>,
    policy: &Snapshot,
    run: &RunId,
    target: &Target,
    rule: &Rule,
    parts: &mut Parts,
    body: ProxyBody,
) -> Result<ProxyBody, ProxyError> {
    let revision = policy.revision();
    let limits = rule.limits();
    if let Some(max) = limits.query_bytes {
        check_query(rule, revision, parts, max)?;
    }
    if let Some(per_minute) = limits.requests_per_minute {
        check_rate(shared, run, rule, revision, per_minute)?;
    }
    let mut body = body;
    let has_body = crate::request::has_body(parts);
    if let Some(max) = limits.body_bytes.filter(|_| has_body) {
        body = limit_body(shared, rule, revision, parts, body, max).await?;
    }
    if let Some(max) = limits.upload_bytes_per_run.filter(|_| has_body) {
        body = limit_uploads(shared, run, target, rule, revision, parts, body, max).await?;
    }
    for name in rule.strip() {
        parts.headers.remove(name.as_str());
    }
    Ok(body)
}

/// `limit.query_bytes`: a GET query is an exfiltration channel (414 past `max`).
fn check_query(rule: &Rule, revision: &str, parts: &Parts, max: u64) -> Result<(), ProxyError> {
    let length = parts.uri.query().map_or(0, str::len) as u64;
    if length > max {
        return Err(ProxyError::OverLimit {
            rule: rule.id().to_owned(),
            limit: RuleLimit::QueryBytes,
            value: max,
            reason: format!("the query string is {length} bytes, over the rule's {max}"),
            policy_revision: revision.to_owned(),
        });
    }
    Ok(())
}

/// `limit.requests_per_minute`, per run and rule over a sliding minute (429 past it).
fn check_rate(
    shared: &DataPlane,
    run: &RunId,
    rule: &Rule,
    revision: &str,
    per_minute: u32,
) -> Result<(), ProxyError> {
    let mut windows = shared
        .enforce
        .windows
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if windows.len() >= MAX_ENTRIES {
        windows.clear();
    }
    let now = Instant::now();
    let window = windows
        .entry((run.clone(), rule.id().to_owned()))
        .or_default();
    while window
        .front()
        .is_some_and(|t| now.duration_since(*t) >= RATE_WINDOW)
    {
        window.pop_front();
    }
    if window.len() >= per_minute as usize {
        return Err(ProxyError::OverLimit {
            rule: rule.id().to_owned(),
            limit: RuleLimit::RequestsPerMinute,
            value: u64::from(per_minute),
            reason: format!(
                "run {run} made {per_minute} requests through this rule in the last minute"
            ),
            policy_revision: revision.to_owned(),
        });
    }
    window.push_back(now);
    Ok(())
}

/// `limit.body_bytes`: the body read whole up to `max` (413 past it).
async fn limit_body(
    shared: &DataPlane,
    rule: &Rule,
    revision: &str,
    parts: &Parts,
    body: ProxyBody,
    max: u64,
) -> Result<ProxyBody, ProxyError> {
    match read_up_to(
        body,
        declared_length(parts),
        max,
        shared.limits.body_read_timeout,
    )
    .await?
    {
        Buffered::Whole(bytes) => Ok(full_body(bytes)),
        Buffered::TooLarge => Err(ProxyError::OverLimit {
            rule: rule.id().to_owned(),
            limit: RuleLimit::BodyBytes,
            value: max,
            reason: format!("the request body is over the rule's {max} bytes"),
            policy_revision: revision.to_owned(),
        }),
    }
}

/// `limit.upload_bytes_per_run`: request body bytes per run and host, counted once a body
/// was read whole within the room left (413 past it).
#[expect(
    clippy::too_many_arguments,
    reason = "the facts of one obligation check"
)]
async fn limit_uploads(
    shared: &DataPlane,
    run: &RunId,
    target: &Target,
    rule: &Rule,
    revision: &str,
    parts: &Parts,
    body: ProxyBody,
    max: u64,
) -> Result<ProxyBody, ProxyError> {
    let key = (run.clone(), target.host.clone());
    let used = {
        let uploads = shared
            .enforce
            .uploads
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        uploads.get(&key).copied().unwrap_or(0)
    };
    let room = max.saturating_sub(used);
    let exceeded = |sent: Option<u64>| {
        ProxyError::OverLimit {
        rule: rule.id().to_owned(),
        limit: RuleLimit::UploadBytesPerRun,
        value: max,
        reason: match sent {
            Some(sent) => format!(
                "run {run} has sent {used} bytes to {}; {sent} more is over the rule's {max} per run",
                target.host
            ),
            None => format!(
                "run {run} has sent {used} bytes to {}; this body is over the {room} left of the rule's {max} per run",
                target.host
            ),
        },
        policy_revision: revision.to_owned(),
    }
    };
    match read_up_to(
        body,
        declared_length(parts),
        room,
        shared.limits.body_read_timeout,
    )
    .await?
    {
        Buffered::Whole(bytes) => {
            let sent = bytes.len() as u64;
            let mut uploads = shared
                .enforce
                .uploads
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if uploads.len() >= MAX_ENTRIES {
                uploads.clear();
            }
            let total = uploads.entry(key).or_insert(0);
            if *total + sent > max {
                return Err(exceeded(Some(sent)));
            }
            *total += sent;
            Ok(full_body(bytes))
        }
        Buffered::TooLarge => Err(exceeded(None)),
    }
}

/// The control plane's side of `review = "auto"`: approves an effect a rule staged and
/// records the rule as the actor. The composition root installs it
/// ([`crate::DataPlane::set_auto_review`]); the data plane never approves by itself.
pub trait AutoApprove: Send + Sync {
    /// Approves `effect`, staged by the rule `rule`. Runs on the blocking pool.
    ///
    /// Errors: the ledger's refusal of the transition, or a storage fault.
    fn approve(
        &self,
        effect: &EffectId,
        rule: &str,
    ) -> Result<airlock_ledger::Effect, airlock_ledger::LedgerError>;
}

/// Asks the control plane to approve the effect just staged when `rule` has
/// `review = "auto"` (the effect is still staged, and still discarded on abort).
pub async fn auto_approve(shared: &Arc<DataPlane>, rule: &Rule, response: &Response<ProxyBody>) {
    if rule.review() != airlock_policy::Review::Auto {
        return;
    }
    let Some(id) = response
        .headers()
        .get(EFFECT_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(EffectId::parse)
    else {
        return;
    };
    let Some(review) = shared.auto_review() else {
        warn!(effect.id = %id, "no control plane to approve automatically; the effect awaits review");
        return;
    };
    let (effect, rule_id) = (id.clone(), rule.id().to_owned());
    let result = tokio::task::spawn_blocking(move || review.approve(&effect, &rule_id)).await;
    match result {
        Ok(Ok(_)) => {
            info!(effect.id = %id, policy.rule = rule.id(), "effect approved automatically (review = auto)")
        }
        Ok(Err(error)) => {
            warn!(effect.id = %id, error = %error, "automatic approval failed; the effect awaits review")
        }
        Err(error) => warn!(effect.id = %id, error = %error, "automatic approval task failed"),
    }
}

/// When the policy has flows: waits for the lineage of the effect just staged
/// ([`crate::flows::at_staging`]) and, when it violates a flow, says so to the agent in the
/// `airlock-flow` header. Returns whether a flow holds the effect (then `review = "auto"`
/// does not apply). `policy` is the staging request's snapshot.
pub async fn flow_hold(
    shared: &Arc<DataPlane>,
    policy: &Arc<Snapshot>,
    response: &mut Response<ProxyBody>,
) -> bool {
    let Some(id) = response
        .headers()
        .get(EFFECT_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(EffectId::parse)
    else {
        return false;
    };
    let Some(check) = crate::flows::at_staging(shared, policy, &id).await else {
        return false;
    };
    let Some(value) = check.header_value() else {
        return false;
    };
    for violation in &check.violations {
        info!(effect.id = %id, flow = %violation.flow, action = violation.action.as_str(),
              "effect held by a flow rule");
    }
    if let Ok(value) = http::HeaderValue::from_str(&value) {
        response
            .headers_mut()
            .insert(crate::flows::FLOW_HEADER, value);
    }
    true
}

/// Applies the `redact` obligation of `rule` to an effect's admin view: header values
/// and JSON body values it names become `[redacted]` (the stored and released bytes are
/// unchanged; `redacted` lists what was masked).
pub fn redact_view(
    policy: &airlock_policy::Policy,
    rule: Option<&str>,
    body: &[u8],
    out: &mut serde_json::Value,
) {
    use airlock_policy::{Redaction, REDACTED};
    let Some(redactions) = rule
        .and_then(|id| policy.rule(id))
        .map(Rule::redact)
        .filter(|r| !r.is_empty())
    else {
        return;
    };
    if let Some(headers) = out["headers"].as_array_mut() {
        for header in headers {
            let masked = header["name"]
                .as_str()
                .is_some_and(|name| Redaction::masks_header(redactions, name));
            if masked {
                header["value"] = serde_json::json!(REDACTED);
            }
        }
    }
    if let Some(masked) = Redaction::mask_body(redactions, body) {
        out["body"] = serde_json::json!({ "text": String::from_utf8_lossy(&masked) });
    }
    out["redacted"] = serde_json::json!(redactions);
}
