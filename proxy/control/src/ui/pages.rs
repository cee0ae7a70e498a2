//! The runs list, the run page and the commit confirmation.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use airlock_dataplane::flows::FlowCheck;
use airlock_ledger::{
    Edge, EdgeKind, EdgeSource, Effect, EffectId, EffectState, Read, Run, RunState,
};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use serde::Deserialize;

use super::flows::{hold, hold_mark, holds, verdict_buttons};
use super::graph::{host_path, svg};
use super::released::{brief, summary_now};
use super::{blocking, html_response, layout, parse_run, Session, UiError, UiResult};
use crate::released::Released;
use crate::Control;

mod bound;
mod commit;
mod list;
mod report;

pub(super) use bound::rule_changed;
#[cfg(test)]
pub(super) use commit::plan;
pub(super) use commit::{commit_confirm, confirm_page};
pub(super) use list::runs_list;

/// The one-line summary of an effect: the adapter's `summary` when the ledger record has
/// one, else `METHOD host path`.
pub(super) fn summary(effect: &Effect) -> String {
    let adapter = serde_json::to_value(effect)
        .ok()
        .and_then(|v| v.get("summary").and_then(|s| s.as_str()).map(str::to_owned))
        .filter(|s| !s.is_empty());
    adapter.unwrap_or_else(|| {
        let (host, path) = host_path(&effect.url);
        format!("{} {host} {path}", effect.method)
    })
}

/// A state as a coloured badge.
pub(super) fn badge(state: &str) -> Markup {
    html! { span class=(format!("badge state-{state}")) { (state.replace('_', " ")) } }
}

fn counts(effects: &[Effect]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for effect in effects {
        *counts.entry(effect.state.as_str()).or_insert(0) += 1;
    }
    counts
}

/// When a run ended: the latest of its final decision and its releases, for finished runs.
fn ended_ms(run: &Run, effects: &[Effect]) -> Option<u64> {
    if !run.state.is_final() {
        return None;
    }
    let decided = run.decisions.iter().map(|d| d.at_ms).max();
    let released = effects
        .iter()
        .filter_map(|e| e.release.as_ref().and_then(|r| r.finished_at_ms))
        .max();
    decided.max(released)
}

/// Flags a reviewer should see before opening a run.
fn flags(
    edges: &[Edge],
    effects: &[Effect],
    rollback_unverified: bool,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let from_reads: HashSet<&EffectId> = edges
        .iter()
        .filter(|e| matches!(e.from, EdgeSource::Read { .. }) && e.kind != EdgeKind::Credential)
        .map(|e| &e.to)
        .collect();
    if !from_reads.is_empty() {
        out.push((
            "warn",
            format!("{} effect(s) carry data from reads", from_reads.len()),
        ));
    }
    let credentials = edges
        .iter()
        .filter(|e| e.kind == EdgeKind::Credential)
        .count();
    if credentials > 0 {
        out.push((
            "danger",
            format!("{credentials} credential-looking value(s) from reads in effects"),
        ));
    }
    if rollback_unverified {
        out.push(("danger", "rollback unverified".to_owned()));
    }
    let stale = effects
        .iter()
        .filter(|e| {
            e.approval
                .as_ref()
                .is_some_and(|a| a.body_digest != e.body_digest)
        })
        .count();
    if stale > 0 {
        out.push((
            "danger",
            format!("{stale} approval(s) for a changed request"),
        ));
    }
    out
}

struct RunData {
    run: Run,
    effects: Vec<Effect>,
    reads: Vec<Read>,
    edges: Vec<Edge>,
    rollback_unverified: bool,
    denials: Vec<airlock_ledger::Denial>,
    /// The flow decision on each effect (empty when the policy has no flows).
    checks: HashMap<EffectId, FlowCheck>,
    /// What the release made of each effect that has a `released` view.
    released: HashMap<EffectId, Released>,
}

async fn load(shared: &Arc<Control>, id: &str) -> UiResult<RunData> {
    let run_id = parse_run(id)?;
    let control = shared.clone();
    let found = blocking(move || {
        let ledger = control.ledger();
        let Some(run) = ledger.run(&run_id)? else {
            return Ok(None);
        };
        let effects = ledger.effects(&run.id)?;
        Ok(Some(RunData {
            checks: crate::flows::check_run_blocking(&control, &run.id)?,
            released: super::released::of_run(ledger.as_ref(), &effects)?,
            effects,
            reads: ledger.reads(&run.id)?,
            edges: ledger.edges(&run.id)?,
            rollback_unverified: ledger
                .workspace(&run.id)?
                .is_some_and(|w| w.rollback_unverified),
            denials: ledger.denials(&run.id)?,
            run,
        }))
    })
    .await?;
    found.ok_or_else(|| UiError::new(StatusCode::NOT_FOUND, format!("no run with id {id}")))
}

fn source_label(edge: &Edge, reads: &[Read], effects: &[Effect]) -> String {
    match &edge.from {
        EdgeSource::Read { seq } => match reads.iter().find(|r| r.seq == *seq) {
            Some(read) => format!("read #{seq} {} {}", read.method, host_path(&read.url).1),
            None => format!("read #{seq}"),
        },
        EdgeSource::Effect { id } => match effects.iter().find(|e| e.id == *id) {
            Some(effect) => format!("effect #{}", effect.seq),
            None => id.to_string(),
        },
    }
}

fn edge_note(edge: &Edge) -> String {
    match edge.kind {
        EdgeKind::Content => format!(
            "{} bytes, {}.{}% of the body",
            edge.overlap_bytes,
            edge.overlap_permille / 10,
            edge.overlap_permille % 10
        ),
        EdgeKind::Credential => "credential-looking value".to_owned(),
        EdgeKind::Header => edge
            .detail
            .clone()
            .unwrap_or_else(|| "header value".to_owned()),
        EdgeKind::Placeholder => edge
            .detail
            .clone()
            .unwrap_or_else(|| "placeholder".to_owned()),
    }
}

/// A form with one button that posts to `action` with the session's CSRF token.
pub(super) fn action_button(
    session: &Session,
    action: &str,
    label: &str,
    class: &str,
    hidden: &[(&str, &str)],
    confirm: Option<&str>,
) -> Markup {
    // Only the actions the signed-in role may take are shown (the server refuses the
    // rest with a 403 page besides).
    if !session.may("POST", action) {
        return html! {};
    }
    html! {
        form.inline method="post" action=(action) data-confirm=[confirm] {
            input type="hidden" name="csrf" value=(session.csrf);
            @for (name, value) in hidden { input type="hidden" name=(name) value=(value); }
            button type="submit" class=(class) { (label) }
        }
    }
}

fn reviewable(run: &Run) -> bool {
    matches!(run.state, RunState::Open | RunState::Sealed)
}

/// What the run page reports after approving by rule: `?approved=N&skipped=M`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RunQuery {
    approved: Option<usize>,
    skipped: Option<usize>,
}

/// `GET /runs/{id}`: the run's effects in staging order, lineage, decisions and actions.
pub(super) async fn run_page(
    State(shared): State<Arc<Control>>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    Query(query): Query<RunQuery>,
) -> UiResult<Response> {
    let data = load(&shared, &id).await?;
    let RunData {
        run,
        effects,
        reads,
        edges,
        rollback_unverified,
        denials,
        checks,
        released,
    } = &data;
    let open = reviewable(run);
    // The rules that staged effects still staged, each with its approve-all button.
    let by_rule: std::collections::BTreeSet<String> = effects
        .iter()
        .filter(|e| e.state == EffectState::Staged)
        .map(|e| e.rule.clone().unwrap_or_default())
        .collect();
    let (held, blocked) = holds(effects.iter(), checks);
    let mut history: Vec<(u64, String, String, String)> = run
        .decisions
        .iter()
        .map(|d| (d.at_ms, d.kind.clone(), "run".to_owned(), d.by.clone()))
        .collect();
    for effect in effects.iter() {
        for d in &effect.decisions {
            history.push((
                d.at_ms,
                d.kind.clone(),
                format!("effect #{}", effect.seq),
                d.by.clone(),
            ));
        }
    }
    history.sort_by_key(|h| h.0);
    let mut incoming: HashMap<&EffectId, Vec<&Edge>> = HashMap::new();
    for edge in edges.iter() {
        incoming.entry(&edge.to).or_default().push(edge);
    }
    let page = layout(
        &format!("Run {}", run.id),
        Some(&session),
        html! {
            p.crumbs { a href="/" { "Runs" } " / " code { (run.id) } }
            h1 { "Run " code { (run.id) } " " (badge(run.state.as_str())) }
            p.meta {
                "profile " strong { (run.profile.as_deref().unwrap_or("none")) }
                " · started " (time_utc(run.created_at_ms)) " UTC"
                @if let Some(ended) = ended_ms(run, effects) { " · ended " (time_utc(ended)) " UTC" }
                " · " (effects.len()) " effect(s), " (reads.len()) " read(s)"
            }
            div.flags {
                @for (level, text) in flags(edges, effects, *rollback_unverified) { span class=(format!("flag {level}")) { (text) } }
                @if held > 0 { span.flag.warn { (held) " effect(s) held by review flows" } }
                @if blocked > 0 { span.flag.danger { (blocked) " effect(s) blocked by flow rules" } }
            }
            @if let Some(approved) = query.approved {
                p.notice.flash role="status" {
                    "Approved " (approved) " effect(s)."
                    @if let Some(skipped) = query.skipped.filter(|n| *n > 0) {
                        " Skipped " strong { (skipped) } " that flow rules hold or block: each needs your own approval on its page (or a rejection)."
                    }
                }
            }
            @if open {
                div.actions {
                    @if session.may("POST", &format!("/runs/{}/commit", run.id)) {
                        a.button.primary href=(format!("/runs/{}/commit", run.id)) accesskey="c" { "Commit…" }
                    }
                    (action_button(&session, &format!("/runs/{}/abort", run.id), "Abort run", "danger", &[],
                        Some("Abort this run? Every pending effect is discarded and nothing is sent.")))
                    @for rule in &by_rule {
                        (bound::rule_button(&session, run, rule, effects, checks))
                    }
                }
            } @else if report::shown(run) {
                div.actions {
                    a.button href=(format!("/runs/{}/commit", run.id)) accesskey="c" { "What the commit released" }
                }
            }
            h2 #effects { "Effects" }
            @if effects.is_empty() {
                p.muted { "This run staged no effects." }
            } @else {
                table.list #effect-table {
                    thead { tr { th { "#" } th { "summary" } th { "method" } th { "host" } th { "rule" } th { "state" } th { "origin" } th { "lineage" } @if open { th { "decide" } } } }
                    tbody {
                        @for effect in effects.iter() {
                            @let (host, _) = host_path(&effect.url);
                            @let link = format!("/effects/{}", effect.id);
                            tr.row id=(effect.id) data-href=(link) data-effect=(effect.id) data-state=(effect.state.as_str()) {
                                td { (effect.seq) }
                                @let view = released.get(&effect.id);
                                td {
                                    a href=(link) { (summary_now(effect, view)) }
                                    (brief(effect, view))
                                }
                                td { code { (effect.method) } }
                                td { (host) }
                                td { code { (effect.rule.as_deref().unwrap_or("(default)")) } }
                                td {
                                    (badge(effect.state.as_str()))
                                    @if let Some(reason) = &effect.state_reason { div.reason { (reason) } }
                                    @if let Some(next) = crate::outcomes::next_step(effect) { div.next { "Next: " (next) } }
                                    @let check = checks.get(&effect.id);
                                    div { (hold_mark(hold(effect, check), check)) }
                                }
                                td.origin {
                                    @if let Some(release) = &effect.release {
                                        @match release.status {
                                            Some(status) => span class=(if status < 400 { "ok" } else { "bad" }) { (status) },
                                            None => span.bad { "no answer" },
                                        }
                                    } @else { span.muted { "—" } }
                                }
                                td.lineage {
                                    @for edge in incoming.get(&effect.id).map(Vec::as_slice).unwrap_or_default() {
                                        div class=(format!("edge-chip {}", super::graph::kind_name(edge.kind))) title=(edge.excerpt.clone().unwrap_or_default()) {
                                            "← " (source_label(edge, reads, effects)) ": " (edge_note(edge))
                                        }
                                    }
                                }
                                @if open {
                                    td.decide {
                                        (verdict_buttons(&session, effect, checks.get(&effect.id), &[]))
                                    }
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Lineage" }
            @if edges.is_empty() {
                p.muted { "No lineage edges: no effect carries data from a read or a placeholder of another effect." }
            } @else {
                p.legend {
                    span.key.content { "content" } span.key.credential { "credential" } span.key.header { "header value" } span.key.placeholder { "placeholder (released after its parent)" }
                }
                @let sent_url = |e: &Effect| released.get(&e.id).map_or_else(|| e.url.clone(), |v| v.url.clone());
                div.graph { (svg(reads, effects, edges, &sent_url)) }
                details {
                    summary { "edges as a table (" (edges.len()) ")" }
                    table.list {
                        thead { tr { th { "from" } th { "to" } th { "kind" } th { "detail" } th { "excerpt" } } }
                        tbody {
                            @for edge in edges.iter() {
                                tr {
                                    td { (source_label(edge, reads, effects)) }
                                    td { a href=(format!("/effects/{}", edge.to)) { "effect #" (effects.iter().find(|e| e.id == edge.to).map(|e| e.seq).unwrap_or(0)) } }
                                    td { (super::graph::kind_name(edge.kind)) }
                                    td { (edge_note(edge)) }
                                    td { code.excerpt { (edge.excerpt.as_deref().unwrap_or("")) } }
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Reads" }
            @if reads.is_empty() { p.muted { "No reads." } } @else {
                table.list {
                    thead { tr { th { "#" } th { "request" } th { "status" } th { "bytes" } th { "rule" } } }
                    tbody {
                        @for read in reads.iter() {
                            tr {
                                td { (read.seq) }
                                td { code { (read.method) " " (read.url) } }
                                td { (read.status.map(|s| s.to_string()).unwrap_or_else(|| read.error.clone().unwrap_or_else(|| "—".into()))) }
                                td { (read.response_bytes) }
                                td { code { (read.rule.as_deref().unwrap_or("(default)")) } }
                            }
                        }
                    }
                }
            }
            h2 #denied { "Denied (" (denials.len()) ")" }
            @if denials.is_empty() { p.muted { "Nothing was denied." } } @else {
                table.list {
                    thead { tr { th { "when (UTC)" } th { "request" } th { "rule" } th { "reason code" } } }
                    tbody {
                        @for denial in denials.iter() {
                            tr {
                                td.time { (time_utc(denial.created_at_ms)) }
                                td { code { (denial.method) " " (denial.url) } }
                                td { code { (denial.rule.as_deref().unwrap_or("(default)")) } }
                                td { code { (denial.reason_code) } }
                            }
                        }
                    }
                }
            }
            h2 { "Decisions" }
            @if history.is_empty() { p.muted { "No decisions yet." } } @else {
                table.list {
                    thead { tr { th { "when (UTC)" } th { "decision" } th { "on" } th { "by" } } }
                    tbody {
                        @for (at, kind, on, by) in &history {
                            tr { td.time { (time_utc(*at)) } td { (kind) } td { (on) } td { (by) } }
                        }
                    }
                }
            }
        },
    );
    Ok(html_response(StatusCode::OK, page))
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS` UTC.
pub(super) fn time_utc(ms: u64) -> String {
    let Ok(at) = time::OffsetDateTime::from_unix_timestamp((ms / 1000) as i64) else {
        return ms.to_string();
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}
