//! `airlock policy diff|replay|reload`: comparing policies, re-deciding a past run under a
//! candidate policy, and swapping the running server's policy.

use std::path::Path;

use airlock_policy::{Action, ChangeKind, Policy, RequestBody, RequestFacts, Scheme};
use anyhow::{anyhow, Context as _};
use serde::Serialize;
use serde_json::{json, Value};

use super::admin_client::print_json;
use super::{connect, AdminArgs};
use airlock_net::authority::Target;

mod replay_flows;

use replay_flows::show_verdicts;

/// `policy diff OLD NEW`: grouped widenings, narrowings and reroutes; with
/// `fail_on_widen`, an error when anything widens (for CI gates on policy changes).
pub(super) fn diff(old: &Path, new: &Path, json: bool, fail_on_widen: bool) -> anyhow::Result<()> {
    let old_policy = Policy::load(old)?;
    let new_policy = Policy::load(new)?;
    let diff = old_policy.diff(&new_policy);
    if json {
        print_json(&serde_json::to_value(&diff)?)?;
    } else {
        outln!(
            "{} ({}) -> {} ({}): {} probe request(s)",
            old.display(),
            diff.old_revision,
            new.display(),
            diff.new_revision,
            diff.probes
        );
        if let Some((was, now)) = diff.default {
            outln!("default: {was} -> {now}");
        }
        for (label, ids) in [
            ("rules added", &diff.rules_added),
            ("rules removed", &diff.rules_removed),
            ("rules changed", &diff.rules_changed),
        ] {
            if !ids.is_empty() {
                outln!("{label}: {}", ids.join(", "));
            }
        }
        if diff.rules_reordered {
            outln!("rules reordered (first match wins: order can change decisions)");
        }
        for (kind, title) in [
            (ChangeKind::Widens, "WIDENS"),
            (ChangeKind::Narrows, "narrows"),
            (ChangeKind::Rerouted, "rerouted (same action, another rule)"),
        ] {
            let group: Vec<_> = diff.changes.iter().filter(|c| c.kind == kind).collect();
            if group.is_empty() {
                continue;
            }
            outln!("{title} ({}):", group.len());
            for change in group {
                outln!(
                    "  {:<7} {:<60} {} -> {}",
                    change.method,
                    change.url,
                    by_with(
                        change.old_action,
                        change.old_rule.as_deref(),
                        change.old_inject.as_deref()
                    ),
                    by_with(
                        change.new_action,
                        change.new_rule.as_deref(),
                        change.new_inject.as_deref()
                    ),
                );
                for (name, value) in &change.headers {
                    outln!("          header {name}: {value}");
                }
                if let Some(body) = &change.body {
                    outln!("          body {body}");
                }
            }
        }
        for (kind, title) in [
            (ChangeKind::Widens, "CREDENTIAL REACH WIDENS"),
            (ChangeKind::Narrows, "credential reach narrows"),
            (ChangeKind::Rerouted, "credential placement changed"),
        ] {
            let group: Vec<_> = diff.credentials.iter().filter(|c| c.kind == kind).collect();
            if group.is_empty() {
                continue;
            }
            outln!("{title} ({}):", group.len());
            for change in group {
                outln!("  {}: {}", change.credential, change.what);
            }
        }
        for (kind, title) in [
            (
                ChangeKind::Widens,
                "PRIVATE ADDRESSES OPENED (allow_private)",
            ),
            (
                ChangeKind::Narrows,
                "private addresses closed (allow_private)",
            ),
        ] {
            let group: Vec<_> = diff.private.iter().filter(|c| c.kind == kind).collect();
            if group.is_empty() {
                continue;
            }
            outln!("{title} ({}):", group.len());
            for change in group {
                outln!("  {}: {}", change.scope, change.network);
            }
        }
        for (kind, title) in [
            (ChangeKind::Widens, "FLOW RULES WIDEN"),
            (ChangeKind::Narrows, "flow rules narrow"),
        ] {
            let group: Vec<_> = diff.flows.iter().filter(|c| c.kind == kind).collect();
            if group.is_empty() {
                continue;
            }
            outln!("{title} ({}):", group.len());
            for change in group {
                outln!("  {}: {}", change.flow, change.what);
            }
        }
        if diff.changes.is_empty()
            && diff.default.is_none()
            && diff.credentials.is_empty()
            && diff.private.is_empty()
            && diff.flows.is_empty()
        {
            outln!("no decision changes");
        }
    }
    if fail_on_widen && diff.widens() {
        return Err(anyhow!(
            "the new policy widens what is allowed (--fail-on-widen)"
        ));
    }
    Ok(())
}

/// `pass (rule) +inject gh-bot`: the decision and the credential it adds.
fn by_with(action: Action, rule: Option<&str>, inject: Option<&str>) -> String {
    match inject {
        Some(name) => format!("{} +inject {name}", by(action, rule)),
        None => by(action, rule),
    }
}

fn by(action: Action, rule: Option<&str>) -> String {
    match rule {
        Some(rule) => format!("{action} ({rule})"),
        None => format!("{action} (default)"),
    }
}

/// One request of a past run, re-decided.
#[derive(Debug, Serialize)]
struct Replayed {
    kind: &'static str,
    method: String,
    url: String,
    was: Action,
    was_rule: Option<String>,
    now: Action,
    now_rule: Option<String>,
    now_reason_code: &'static str,
    /// Why the request could only be re-decided approximately (`None`: from everything a
    /// `headers`, `query` or body matcher looks at).
    approximate: Option<&'static str>,
}

/// What the ledger kept of one request, beyond its method and URL.
struct Recorded {
    headers: Vec<(String, String)>,
    /// The body, when the ledger kept it (effects).
    body: Option<Vec<u8>>,
    has_body: bool,
    approximate: Option<&'static str>,
}

/// Why reads are re-decided approximately.
const READS_KEEP_NO_CONTENT: &str = "reads keep no headers or body";
/// Why denials are re-decided approximately.
const DENIALS_KEEP_NO_CONTENT: &str = "denials keep no headers or body";
/// Why an effect with masked fields is re-decided approximately.
const EFFECT_MASKED: &str =
    "credential headers or `redact` fields are masked in the ledger's view of this effect";

/// The header lines and body of an effect's full record (`GET /v1/effects/{id}`).
fn effect_content(full: &Value) -> Recorded {
    let mut masked = full["redacted"].as_array().is_some_and(|r| !r.is_empty());
    let headers: Vec<(String, String)> = full["headers"]
        .as_array()
        .map(|headers| {
            headers
                .iter()
                .filter_map(|h| {
                    Some((
                        h["name"].as_str()?.to_owned(),
                        h["value"].as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    if headers
        .iter()
        .any(|(_, value)| value == airlock_policy::REDACTED)
    {
        masked = true;
    }
    let body = match (
        full["body"]["text"].as_str(),
        full["body"]["base64"].as_str(),
    ) {
        (Some(text), _) => Some(text.as_bytes().to_vec()),
        (None, Some(encoded)) => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()
        }
        (None, None) => None,
    };
    let body_len = full["body_len"].as_u64().unwrap_or(0);
    Recorded {
        headers,
        has_body: body_len > 0 || body.as_ref().is_some_and(|b| !b.is_empty()),
        body: body.filter(|b| !b.is_empty()),
        approximate: masked.then_some(EFFECT_MASKED),
    }
}

/// `policy replay FILE --run RUN`: every pass (read), stage (effect) and deny (denial)
/// the run's ledger holds, decided again by `file` for the run's profile; prints those
/// whose decision changes, and which requests could only be re-decided approximately.
/// Effects are re-decided from their full record (headers and body, `GET
/// /v1/effects/{id}`); reads and denials keep only the method, URL and whether there was
/// a body, so `headers` and body matchers see none. Each effect's flows are decided again
/// by the server (`POST /v1/runs/{id}/flows/replay`) from its stored lineage, under the
/// policy in force and the candidate, with the live decision's inputs and commit rule;
/// those whose verdicts or commit outcome differ are printed.
pub(super) async fn replay(file: &Path, run: &str, admin: &AdminArgs) -> anyhow::Result<()> {
    let policy = Policy::load(file)?;
    let client = connect(admin)?;
    let run_view = client.get(&format!("/v1/runs/{run}")).await?;
    let profile = run_view["profile"].as_str().map(str::to_owned);
    let reads = client.get(&format!("/v1/runs/{run}/reads")).await?;
    let effects = client.get(&format!("/v1/runs/{run}/effects")).await?;
    let denials = client.get(&format!("/v1/runs/{run}/denials")).await?;
    let mut replayed = Vec::new();
    let list = |value: &Value, key: &str| value[key].as_array().cloned().unwrap_or_default();
    let profile = profile.as_deref();
    for read in list(&reads, "reads") {
        let has_body = read["request_bytes"].as_u64().unwrap_or(0) > 0;
        // A tunnel is journaled as a CONNECT read: decided on host and port alone.
        let (was, approximate) = if read["method"] == "CONNECT" {
            (Action::Tunnel, None)
        } else {
            (Action::Pass, Some(READS_KEEP_NO_CONTENT))
        };
        let recorded = Recorded {
            headers: Vec::new(),
            body: None,
            has_body,
            approximate,
        };
        replayed.push(redecide(&policy, "read", &read, was, &recorded, profile)?);
    }
    let effect_list = list(&effects, "effects");
    for effect in &effect_list {
        let id = effect["id"].as_str().unwrap_or_default();
        let full = client.get(&format!("/v1/effects/{id}")).await?;
        let recorded = effect_content(&full);
        replayed.push(redecide(
            &policy,
            "effect",
            effect,
            Action::Stage,
            &recorded,
            profile,
        )?);
    }
    for denial in list(&denials, "denials") {
        let recorded = Recorded {
            headers: Vec::new(),
            body: None,
            has_body: denial["has_body"].as_bool().unwrap_or(false),
            approximate: Some(DENIALS_KEEP_NO_CONTENT),
        };
        replayed.push(redecide(
            &policy,
            "denial",
            &denial,
            Action::Deny,
            &recorded,
            profile,
        )?);
    }
    let changed: Vec<&Replayed> = replayed
        .iter()
        .filter(|r| r.was != r.now || r.was_rule != r.now_rule)
        .collect();
    let approximate: Vec<&Replayed> = replayed
        .iter()
        .filter(|r| r.approximate.is_some())
        .collect();
    // Flows: every effect decided again by the server, under the policy in force and the
    // candidate, with the live decision's own inputs.
    let flow_replay = client
        .post_text(
            &format!("/v1/runs/{run}/flows/replay"),
            "application/toml",
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?,
        )
        .await?;
    let flow_changes = replay_flows::changes(&flow_replay);
    let streaming = flow_replay["streaming_labelled_reads"]
        .as_u64()
        .unwrap_or(0);
    if admin.json {
        return print_json(&json!({
            "run": run,
            "profile": profile,
            "policy_revision": policy.revision(),
            "requests": replayed.len(),
            "changed": changed,
            "approximate": approximate,
            "flows_changed": flow_changes,
            "streaming_labelled_reads": streaming,
        }));
    }
    for r in &changed {
        outln!(
            "{:<6} {:<7} {:<60} {} -> {} [{}]{}",
            r.kind,
            r.method,
            r.url,
            by(r.was, r.was_rule.as_deref()),
            by(r.now, r.now_rule.as_deref()),
            r.now_reason_code,
            if r.approximate.is_some() { " ~" } else { "" }
        );
    }
    outln!(
        "run {run}: {} request(s) re-decided under {} ({}): {} decision change(s), {} flow change(s)",
        replayed.len(),
        file.display(),
        policy.revision(),
        changed.len(),
        flow_changes.len()
    );
    for change in &flow_changes {
        outln!(
            "effect {} ({} {}): {} -> {}",
            change.effect,
            change.method,
            change.url,
            show_verdicts(&change.was, change.was_at_commit.as_deref()),
            show_verdicts(&change.now, change.now_at_commit.as_deref())
        );
    }
    if !effect_list.is_empty() {
        outln!(
            "flows: {} effect(s) re-decided from their stored lineage: {} change(s)",
            effect_list.len(),
            flow_changes.len()
        );
    }
    if streaming > 0 {
        outln!(
            "flows: {streaming} labelled read(s) of the run still streaming: the commit holds every effect no reviewer approved by itself until they end"
        );
    }
    if !approximate.is_empty() {
        outln!(
            "~ {} request(s) re-decided approximately, without what the ledger does not keep (headers and body matchers saw none or masked values):",
            approximate.len()
        );
        const SHOWN: usize = 20;
        for r in approximate.iter().take(SHOWN) {
            outln!(
                "  {:<6} {:<7} {}: {}",
                r.kind,
                r.method,
                r.url,
                r.approximate.unwrap_or_default()
            );
        }
        if approximate.len() > SHOWN {
            outln!(
                "  … and {} more (--json lists all)",
                approximate.len() - SHOWN
            );
        }
    }
    Ok(())
}

fn redecide(
    policy: &Policy,
    kind: &'static str,
    record: &Value,
    was: Action,
    recorded: &Recorded,
    profile: Option<&str>,
) -> anyhow::Result<Replayed> {
    let method = record["method"].as_str().unwrap_or("GET").to_owned();
    let url = record["url"].as_str().unwrap_or_default().to_owned();
    let uri: http::Uri = url
        .parse()
        .with_context(|| format!("the ledger holds an unparseable URL {url:?}"))?;
    let scheme = if uri.scheme_str() == Some("http") {
        Scheme::Http
    } else {
        Scheme::Https
    };
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
    let target = Target::parse(scheme, authority, scheme.default_port())
        .ok_or_else(|| anyhow!("the ledger holds a URL without a valid host: {url:?}"))?;
    let decision = if method == "CONNECT" {
        match policy.decide_connect_for(&target.host, target.port, profile) {
            airlock_policy::ConnectDecision::Deny(decision)
            | airlock_policy::ConnectDecision::Tunnel(decision) => decision,
            airlock_policy::ConnectDecision::Intercept => airlock_policy::Decision {
                action: Action::Pass,
                rule: None,
                reason: "the CONNECT would be intercepted".into(),
                reason_code: "connect_intercept",
                audit: Vec::new(),
            },
        }
    } else {
        let headers: Vec<(&str, &str)> = recorded
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        // As the proxy decides it: a method override makes it the method it names.
        let query = uri.query().unwrap_or("");
        let method = airlock_policy::effective_method(&method, headers.iter().copied(), query);
        let line = RequestFacts {
            query,
            headers: &headers,
            profile,
            ..RequestFacts::new(
                scheme,
                &target.host,
                target.port,
                method,
                uri.path(),
                recorded.has_body,
            )
        };
        // The body as the proxy would have read it: only as far as the policy reads.
        let body = match (&recorded.body, policy.body_limit(&line)) {
            (Some(body), Some(limit)) if body.len() as u64 > limit => RequestBody::TooLarge,
            (Some(body), _) => RequestBody::Read(body),
            (None, _) => RequestBody::NotRead,
        };
        policy.decide(&RequestFacts { body, ..line })
    };
    Ok(Replayed {
        kind,
        method,
        url,
        was,
        was_rule: record["rule"].as_str().map(str::to_owned),
        now: decision.action,
        now_rule: decision.rule,
        now_reason_code: decision.reason_code,
        approximate: recorded.approximate,
    })
}

/// `policy reload FILE`: posts the file to the running server (`POST /v1/policy`).
pub(super) async fn reload(file: &Path, admin: &AdminArgs) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    // Refuse locally first: the same strict parser, with the file's own name in errors.
    Policy::from_toml_str(&text, &file.display().to_string())?;
    let client = connect(admin)?;
    let answer = client
        .post_text("/v1/policy", "application/toml", text)
        .await?;
    if admin.json {
        return print_json(&answer);
    }
    outln!(
        "policy {} in force (generation {}){}",
        answer["revision"].as_str().unwrap_or("?"),
        answer["generation"],
        if answer["changed"] == json!(false) {
            "; unchanged"
        } else {
            ""
        }
    );
    Ok(())
}
