//! The commit page once the commit is decided: what it released, with the real values
//! (the admin API's `released` view, as on the run and effect pages), and what it did not.

use airlock_ledger::{Effect, EffectState, Run, RunState};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::{badge, RunData};
use crate::ui::released::{brief, summary_now};
use crate::ui::{html_response, layout, Session};

/// Whether `run`'s commit page is the report of its commit: once a commit is decided
/// (`committing`, `committed`, `partially_committed`).
pub(super) fn shown(run: &Run) -> bool {
    matches!(
        run.state,
        RunState::Committing | RunState::Committed | RunState::PartiallyCommitted
    )
}

/// The groups of the report: a heading, the table's id, and which states it lists.
const GROUPS: [(&str, &str, &[EffectState]); 5] = [
    ("Released", "released-list", &[EffectState::Released]),
    (
        "Failed or unknown",
        "failed-list",
        &[EffectState::Failed, EffectState::Unknown],
    ),
    (
        "Approved, not released yet",
        "pending-list",
        &[EffectState::Approved, EffectState::Releasing],
    ),
    ("Skipped", "skipped-list", &[EffectState::Skipped]),
    (
        "Not sent",
        "not-sent",
        &[
            EffectState::Rejected,
            EffectState::Discarded,
            EffectState::Staged,
        ],
    ),
];

/// `GET /runs/{id}/commit` of a run whose commit is decided: each effect in staging
/// order under what became of it, released ones as they were sent (real values, the
/// origin's status and link, an excerpt of its answer), the others with their reason
/// and what to do next.
pub(super) fn page(session: &Session, data: &RunData) -> Response {
    let run = &data.run;
    let row = |effect: &Effect| {
        let view = data.released.get(&effect.id);
        html! {
            tr.row id=(effect.id) data-href=(format!("/effects/{}", effect.id)) data-effect=(effect.id) data-state=(effect.state.as_str()) {
                td { (effect.seq) }
                td {
                    a href=(format!("/effects/{}", effect.id)) { (summary_now(effect, view)) }
                    (brief(effect, view))
                }
                td { code { (effect.method) " " (view.map_or(&effect.url, |v| &v.url)) } }
                td {
                    (badge(effect.state.as_str()))
                    @if let Some(release) = &effect.release {
                        " "
                        @match release.status {
                            Some(status) => span class=(if status < 400 { "ok" } else { "bad" }) { "HTTP " (status) },
                            None => span.bad { "no answer" },
                        }
                    }
                    @if let Some(reason) = &effect.state_reason { div.reason { (reason) } }
                    @if let Some(next) = crate::outcomes::next_step(effect) { div.next { "Next: " (next) } }
                }
            }
        }
    };
    let page = layout(
        &format!("Commit of run {}", run.id),
        Some(session),
        html! {
            p.crumbs { a href="/" { "Runs" } " / " a href=(format!("/runs/{}", run.id)) { code { (run.id) } } " / commit" }
            h1 { "Commit of run " code { (run.id) } " " (badge(run.state.as_str())) }
            @if run.state == RunState::Committing {
                p.notice.warn { "The commit is releasing effects now: reload to see the rest." }
            }
            @for (heading, id, states) in GROUPS {
                @let effects: Vec<&Effect> = data.effects.iter().filter(|e| states.contains(&e.state)).collect();
                @if !effects.is_empty() || id == "released-list" {
                    h2 { (heading) " (" (effects.len()) ")" }
                    @if effects.is_empty() { p.muted { "None." } } @else {
                        table.list id=(id) {
                            thead { tr { th { "#" } th { "summary" } th { "request" } th { "outcome" } } }
                            tbody { @for effect in &effects { (row(effect)) } }
                        }
                    }
                }
            }
            p { a href=(format!("/runs/{}", run.id)) { "Back to the run" } }
        },
    );
    html_response(StatusCode::OK, page)
}
