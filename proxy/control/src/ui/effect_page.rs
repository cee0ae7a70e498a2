//! The effect page: the request as staged (credentials redacted), the flow rules it
//! violates, its body pretty-printed, its lineage with the shared passages highlighted,
//! the synthetic response the client got, and after release the request as it was sent
//! (real values, the origin's link and answer) and the origin's real response.

use std::collections::HashMap;
use std::sync::Arc;

use airlock_ledger::{Edge, EdgeSource, Effect, Header, RunState};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};

use super::body::{excerpt_needles, render};
use super::flows::{flow_section, verdict_buttons};
use super::graph::kind_name;
use super::pages::badge;
use super::released::{section as released_section, summary_among, summary_now};
use super::{blocking, html_response, layout, parse_effect, time_utc, Session, UiError, UiResult};
use crate::Control;
use airlock_net::headers::is_credential;

fn header_text(header: &Header) -> String {
    String::from_utf8_lossy(header.value.as_bytes()).into_owned()
}

fn content_type(headers: &[Header]) -> String {
    headers
        .iter()
        .find(|h| h.name == "content-type")
        .map(header_text)
        .unwrap_or_default()
}

/// Headers with credential values redacted (`authorization`, `cookie`, `x-api-key`, names
/// with `token`, `secret`, or ending in `-key`: [`is_credential`]).
fn headers_table(headers: &[Header]) -> Markup {
    html! {
        @if headers.is_empty() { p.muted { "no headers" } } @else {
            table.kv.headers {
                tbody {
                    @for h in headers {
                        tr {
                            th { code { (h.name) } }
                            @if is_credential(&h.name) {
                                td.redacted { "[redacted: " (h.value.as_bytes().len()) " bytes; sent as staged at release]" }
                            } @else {
                                td { code { (header_text(h)) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The synthetic response the client got, rebuilt as staging built it: by the effect's
/// adapter (deterministic: the same answer again), else the rule's `respond` template
/// with the effect's placeholders, or the default `202 Accepted`.
fn synthetic(shared: &Control, effect: &Effect, body: &[u8]) -> (u16, String, String, bool) {
    let policy = shared.policy().current();
    let rule = effect.rule.as_deref().and_then(|id| policy.rule(id));
    let respond = rule.and_then(|r| r.respond());
    let same_policy = effect.policy_revision == policy.revision();
    if let Some(adapter) = effect
        .adapter
        .as_deref()
        .filter(|name| *name != "webhook")
        .and_then(airlock_adapters::by_name)
    {
        let answer = adapter.respond(&airlock_adapters::Call::of_effect(effect, body), effect);
        let content_type = answer
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
            .map(|(_, value)| value.clone())
            .unwrap_or_default();
        // Adapters answer from the request and its placeholders alone: the policy's
        // changes since do not alter the answer.
        return (
            answer.status,
            content_type,
            String::from_utf8_lossy(&answer.body).into_owned(),
            true,
        );
    }
    if let Some(respond) = respond {
        let values: HashMap<&str, &str> = effect
            .placeholders
            .iter()
            .map(|p| (p.pointer.as_str(), p.value.as_str()))
            .collect();
        if let Some(body) =
            respond.render(&|pointer| values.get(pointer).copied().unwrap_or_default().to_owned())
        {
            return (
                respond.status,
                respond.content_type.clone(),
                body,
                same_policy,
            );
        }
    }
    let status = respond.map_or(202, |r| r.status);
    let body = serde_json::json!({
        "effect": effect.id,
        "status": "staged",
        "run": effect.run_id,
        "seq": effect.seq,
        "message": "airlock staged this request; it is sent to the origin only if a reviewer approves it and the run is committed",
    });
    (
        status,
        "application/json".to_owned(),
        serde_json::to_string(&body).unwrap_or_default(),
        same_policy,
    )
}

fn edge_source(edge: &Edge, reads: &[airlock_ledger::Read], siblings: &[Effect]) -> Markup {
    match &edge.from {
        EdgeSource::Read { seq } => {
            let read = reads.iter().find(|r| r.seq == *seq);
            html! { "read #" (seq) @if let Some(read) = read { " " code { (read.method) " " (read.url) } } }
        }
        EdgeSource::Effect { id } => {
            let parent = siblings.iter().find(|e| e.id == *id);
            html! { a href=(format!("/effects/{id}")) { "effect #" (parent.map(|p| p.seq).unwrap_or(0)) } @if let Some(p) = parent { " " (summary_among(p, siblings)) " " (badge(p.state.as_str())) } }
        }
    }
}

/// `GET /effects/{id}`.
pub(super) async fn effect_page(
    State(shared): State<Arc<Control>>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
) -> UiResult<Response> {
    let effect_id = parse_effect(&id)?;
    let control = shared.clone();
    let found = blocking(move || {
        let ledger = control.ledger();
        let Some(effect) = ledger.effect(&effect_id)? else {
            return Ok(None);
        };
        let body = ledger.body(&effect.body_digest)?.unwrap_or_default();
        let release_body = match effect.release.as_ref().and_then(|r| r.body_digest.clone()) {
            Some(digest) => ledger.body(&digest)?,
            None => None,
        };
        let analysis = ledger.effect_lineage(&effect.id)?;
        let reads = ledger.reads(&effect.run_id)?;
        let siblings = ledger.effects(&effect.run_id)?;
        let run = ledger.run(&effect.run_id)?;
        let check = crate::flows::check_blocking(&control, &effect)?;
        // The admin API's `released` view: the one resolver of placeholders.
        let view = crate::released::released(&effect, &siblings, release_body.as_deref());
        // The adapter's account (git: the pack read), off the async workers.
        let details = airlock_adapters::of_effect(&effect)
            .details(&airlock_adapters::Call::of_effect(&effect, &body));
        Ok(Some((
            (effect, details, view),
            check,
            body,
            release_body,
            analysis,
            reads,
            siblings,
            run,
        )))
    })
    .await?;
    let ((effect, details, view), check, body, release_body, analysis, reads, siblings, run) =
        found.ok_or_else(|| {
            UiError::new(StatusCode::NOT_FOUND, format!("no effect with id {id}"))
        })?;
    let mut sources: Vec<Edge> = airlock_ledger::placeholder_edges(&effect);
    if let Some(analysis) = &analysis {
        sources.extend(analysis.edges.iter().cloned());
    }
    let needles = excerpt_needles(
        &sources
            .iter()
            .filter(|e| !matches!(e.kind, airlock_ledger::EdgeKind::Credential))
            .filter_map(|e| e.excerpt.clone())
            .collect::<Vec<_>>(),
    );
    let dependents: Vec<&Effect> = siblings
        .iter()
        .filter(|s| s.depends_on.iter().any(|d| d.effect == effect.id))
        .collect();
    let open = run
        .as_ref()
        .is_some_and(|r| matches!(r.state, RunState::Open | RunState::Sealed));
    let (syn_status, syn_type, syn_body, same_policy) = synthetic(&shared, &effect, &body);
    let back = format!("/effects/{}", effect.id);
    let page = layout(
        &format!("Effect #{}", effect.seq),
        Some(&session),
        html! {
            p.crumbs { a href="/" { "Runs" } " / " a href=(format!("/runs/{}", effect.run_id)) { code { (effect.run_id) } } " / effect #" (effect.seq) }
            h1 { "#" (effect.seq) " " (summary_now(&effect, view.as_ref())) " " (badge(effect.state.as_str())) }
            p.requestline { code { (effect.method) " " (view.as_ref().map_or(&effect.url, |v| &v.url)) } }
            @if let Some(reason) = &effect.state_reason { p.reason { (reason) } }
            @if let Some(next) = crate::outcomes::next_step(&effect) { p.next #next { "Next: " (next) } }
            @if let Some(key) = &effect.idempotency {
                p.meta { "idempotency key " code { (key.header) ": " (key.key) }
                    @if key.retry_unknown { " · an unknown outcome may be re-sent (retry_unknown = \"idempotent\")" } }
            }
            p.meta {
                "rule " code { (effect.rule.as_deref().unwrap_or("(default)")) }
                " · staged " (time_utc(effect.created_at_ms)) " UTC"
                " · policy " code { (effect.policy_revision) }
                " · body " code.digest { (effect.body_digest) }
            }
            @if let Some(approval) = &effect.approval {
                @if approval.body_digest == effect.body_digest {
                    p.approval.ok { "Approved by " strong { (approval.by) } " at " (time_utc(approval.at_ms)) " UTC, bound to body " code.digest { (approval.body_digest) } "." }
                } @else {
                    p.approval.bad { "Approved by " strong { (approval.by) } " for body " code.digest { (approval.body_digest) } ", but the request now carries " code.digest { (effect.body_digest) } ": release will refuse it until it is approved again." }
                }
            }
            @if let Some(approval) = effect.approval.as_ref().filter(|a| a.explicit) {
                p.approval.meta {
                    "A reviewer's own approval of this effect"
                    @if !approval.flows.is_empty() { ", made while review flow(s) " @for (i, f) in approval.flows.iter().enumerate() { @if i > 0 { ", " } code { (f) } } " were shown" }
                    "."
                }
            }
            @if open && effect.state.is_pending() {
                div.actions {
                    (verdict_buttons(&session, &effect, Some(&check), &[("back", back.as_str())]))
                }
            }
            (released_section(&effect, view.as_ref()))
            (flow_section(&effect, &check))
            (super::push::details_section(details.as_ref()))
            (super::tool_call::section(details.as_ref()))
            section {
                h2 { "Request headers" }
                (headers_table(&effect.headers))
            }
            section {
                h2 { "Request body" }
                (render(&content_type(&effect.headers), &body, &needles))
            }
            section #lineage {
                h2 { "Lineage" }
                @match &analysis {
                    None => p.muted { "Content analysis has not finished for this effect." },
                    Some(a) => {
                        @if a.truncated || a.skipped.is_some() || !a.incomplete_reads.is_empty() {
                            p.notice.warn {
                                "Lineage may be incomplete"
                                @if let Some(skipped) = &a.skipped { ": " (skipped) }
                                @if !a.incomplete_reads.is_empty() { " (reads not analysed: " @for seq in &a.incomplete_reads { "#" (seq) " " } ")" }
                            }
                        }
                    }
                }
                h3 { "Carries data from" }
                @if sources.is_empty() { p.muted { "Nothing: no read's content and no other effect's placeholder was found in this request." } } @else {
                    ul.edges {
                        @for edge in &sources {
                            li class=(format!("edge-item {}", kind_name(edge.kind))) {
                                span class=(format!("key {}", kind_name(edge.kind))) { (kind_name(edge.kind)) }
                                " " (edge_source(edge, &reads, &siblings))
                                @if edge.kind == airlock_ledger::EdgeKind::Content {
                                    " — " (edge.overlap_bytes) " bytes, " (edge.overlap_permille / 10) "." (edge.overlap_permille % 10) "% of this body"
                                }
                                @if let Some(detail) = &edge.detail { div.muted { (detail) } }
                                @if let Some(excerpt) = &edge.excerpt { div { "excerpt: " mark.excerpt { (excerpt) } } }
                            }
                        }
                    }
                }
                h3 { "Depended on by" }
                @if dependents.is_empty() { p.muted { "No later effect carries this effect's placeholders." } } @else {
                    ul {
                        @for d in &dependents {
                            li { a href=(format!("/effects/{}", d.id)) { "effect #" (d.seq) " " (summary_among(d, &siblings)) } " " (badge(d.state.as_str())) }
                        }
                    }
                }
                @if !effect.placeholders.is_empty() {
                    h3 { "Placeholders it handed out" }
                    table.kv {
                        thead { tr { th { "placeholder" } th { "kind" } th { "real value at" } th { "real value" } } }
                        tbody {
                            @for p in &effect.placeholders {
                                tr { td { code { (p.value) } } td { (format!("{:?}", p.kind).to_lowercase()) } td { code { (p.pointer) } } td { (p.real.as_deref().unwrap_or("—")) } }
                            }
                        }
                    }
                }
            }
            section #synthetic {
                h2 { "What the client got (synthetic response)" }
                p.meta { "HTTP " (syn_status) " · rebuilt from "
                    @if let Some(adapter) = effect.adapter.as_deref().filter(|a| *a != "webhook") { "the " (adapter) " adapter" } @else if effect.rule.as_deref().and_then(|r| shared.policy().current().rule(r).and_then(|r| r.respond()).map(|_| ())).is_some() { "the rule's respond template" } @else { "airlock's default answer" }
                    " and this effect's placeholders"
                    @if !same_policy { " (the policy changed since; this is today's template)" }
                }
                (render(&syn_type, syn_body.as_bytes(), &[]))
            }
            section #origin {
                h2 { "Origin's response" }
                @match &effect.release {
                    None => p.muted { "Not released." },
                    Some(release) => {
                        p.meta {
                            @match release.status {
                                Some(status) => { "HTTP " strong { (status) } }
                                None => { "no answer" }
                            }
                            " · sent " (time_utc(release.started_at_ms)) " UTC"
                            @if let Some(done) = release.finished_at_ms { " · answered " (time_utc(done)) " UTC" }
                            " · " (release.body_len) " body bytes"
                        }
                        @if let Some(error) = &release.error { p.error { (error) } }
                        @if !effect.earlier_releases.is_empty() {
                            details #attempts { summary { "earlier attempts (" (effect.earlier_releases.len()) ")" }
                                ul { @for earlier in &effect.earlier_releases {
                                    li { (time_utc(earlier.started_at_ms)) " UTC — "
                                        @match earlier.status { Some(status) => { "HTTP " (status) } None => { "no answer" } }
                                        @if let Some(error) = &earlier.error { ": " (error) } }
                                } }
                            }
                        }
                        details { summary { "response headers (" (release.headers.len()) ")" } (headers_table(&release.headers)) }
                        @match &release_body {
                            Some(bytes) => {
                                (render(&content_type(&release.headers), bytes, &[]))
                                @if (bytes.len() as u64) < release.body_len { p.muted { "(the ledger keeps the first " (bytes.len()) " bytes)" } }
                            }
                            None => p.muted { "no body kept" },
                        }
                    }
                }
            }
            section {
                h2 { "Decisions" }
                @if effect.decisions.is_empty() { p.muted { "None yet." } } @else {
                    ul { @for d in &effect.decisions { li { (time_utc(d.at_ms)) " UTC — " strong { (d.kind) } " by " (d.by) @if let Some(note) = &d.note { ": " (note) } } } }
                }
            }
        },
    );
    Ok(html_response(StatusCode::OK, page))
}
