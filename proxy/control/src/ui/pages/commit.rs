//! The commit confirmation page and the release plan it shows.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use airlock_ledger::{Effect, EffectId, EffectState};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::html;

use super::bound::{fields, notice};
use super::{action_button, badge, load, reviewable, summary};
use crate::runs::expect::{Expectation, Scope, SetChanged};
use crate::ui::flows::{flagged, holds};
use crate::ui::{html_response, layout, Session, UiError, UiResult};
use crate::Control;

/// The release plan of a commit: approved effects in the order release will take them
/// (parents before dependents, then staging order), effects that will be skipped because
/// something they depend on will not be released, and effects that are not sent.
pub(in crate::ui) struct Plan<'a> {
    /// Will be released, in this order.
    pub release: Vec<&'a Effect>,
    /// Approved but will be skipped, with the reason.
    pub skip: Vec<(&'a Effect, String)>,
    /// Not sent: rejected (or, without approve_pending, undecided).
    pub not_sent: Vec<&'a Effect>,
    /// Undecided (`staged`).
    pub undecided: Vec<&'a Effect>,
}

pub(in crate::ui) fn plan(effects: &[Effect], approve_pending: bool) -> Plan<'_> {
    let going = |e: &Effect| {
        e.state == EffectState::Approved || (approve_pending && e.state == EffectState::Staged)
    };
    let mut released: HashSet<&EffectId> = HashSet::new();
    let mut blocked: HashMap<&EffectId, String> = HashMap::new();
    let mut out = Plan {
        release: Vec::new(),
        skip: Vec::new(),
        not_sent: Vec::new(),
        undecided: effects
            .iter()
            .filter(|e| e.state == EffectState::Staged)
            .collect(),
    };
    // Dependencies point to earlier effects, so staging order is a topological order.
    for effect in effects {
        if !going(effect) {
            if effect.state.is_pending() {
                out.not_sent.push(effect);
            }
            continue;
        }
        let parent_gone = effect.depends_on.iter().find_map(|d| {
            if released.contains(&d.effect) {
                return None;
            }
            let seq = effects.iter().find(|e| e.id == d.effect).map(|e| e.seq);
            Some(match blocked.get(&d.effect) {
                Some(_) => format!("effect #{} it depends on will be skipped", seq.unwrap_or(0)),
                None => format!(
                    "effect #{} it depends on will not be released",
                    seq.unwrap_or(0)
                ),
            })
        });
        match parent_gone {
            Some(reason) => {
                blocked.insert(&effect.id, reason.clone());
                out.skip.push((effect, reason));
            }
            None => {
                released.insert(&effect.id);
                out.release.push(effect);
            }
        }
    }
    out
}

/// `GET /runs/{id}/commit`: what a commit will release, in order, and what it skips; once
/// the commit is decided, what it released ([`super::report`]).
pub(in crate::ui) async fn commit_confirm(
    State(shared): State<Arc<Control>>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
) -> UiResult<Response> {
    confirm_page(&shared, &session, &id, None).await
}

/// The confirmation of a commit of run `id` as it stands, with its forms bound to the
/// effects it shows; after a refused form (`changed`), the same page at 409 with what
/// changed at the top.
pub(in crate::ui) async fn confirm_page(
    shared: &Arc<Control>,
    session: &Session,
    id: &str,
    changed: Option<&SetChanged>,
) -> UiResult<Response> {
    let data = load(shared, id).await?;
    let run = &data.run;
    // Once the commit is decided, the page reports what it released.
    if changed.is_none() && super::report::shown(run) {
        return Ok(super::report::page(session, &data));
    }
    if !reviewable(run) {
        return Err(UiError::new(
            StatusCode::CONFLICT,
            format!(
                "run {} is {}; it can no longer be committed",
                run.id, run.state
            ),
        ));
    }
    let strict = plan(&data.effects, false);
    let lenient = plan(&data.effects, true);
    let (held, blocked) = holds(data.effects.iter(), &data.checks);
    let skip = flagged(strict.undecided.iter().copied(), &data.checks);
    // A held effect refuses the whole commit; a blocked one is rejected by it.
    let approve_all = if skip == 0 {
        format!("Approve {} undecided and commit", strict.undecided.len())
    } else if held > 0 {
        format!(
            "Approve {} undecided and commit (refused while flow rules hold {held} effect(s): approve or reject those on their pages first)",
            strict.undecided.len() - skip
        )
    } else {
        format!(
            "Approve {} undecided and commit (rejects {skip} that block flows forbid)",
            strict.undecided.len() - skip
        )
    };
    // Both buttons carry the set this page shows: the server refuses them once it changed.
    let [seq, digest] = fields(&Expectation::of(&data.effects, Scope::Commit));
    let bound = [(seq.0, seq.1.as_str()), (digest.0, digest.1.as_str())];
    let effect_row = |effect: &Effect| {
        html! {
            td { (effect.seq) }
            td { a href=(format!("/effects/{}", effect.id)) { (summary(effect)) } }
            td { code { (effect.method) " " (effect.url) } }
        }
    };
    let page = layout(
        "Confirm commit",
        Some(session),
        html! {
            p.crumbs { a href="/" { "Runs" } " / " a href=(format!("/runs/{}", run.id)) { code { (run.id) } } " / commit" }
            h1 { "Commit run " code { (run.id) } "?" }
            @if let Some(changed) = changed { (notice(changed)) }
            @if held > 0 {
                div.notice.warn.flows-held {
                    p { strong { (held) " effect(s) are held by review flows." } " Only a reviewer's own approval of each, on its page, releases it; approving all undecided skips them, and the commit is refused while any is held. Approve or reject each first." }
                }
            }
            @if blocked > 0 {
                div.notice.danger.flows-blocked {
                    p { strong { (blocked) " effect(s) are blocked by flow rules." } " The commit rejects them with the flow's reason, and skips the effects that depend on them." }
                }
            }
            @if !strict.undecided.is_empty() {
                div.notice.warn {
                    p { strong { (strict.undecided.len()) " effect(s) are undecided." } " A commit refuses while any effect is undecided unless you approve them too (the second list below shows that plan)." }
                }
            }
            h2 { "Will be released, in this order (" (strict.release.len()) ")" }
            @if strict.release.is_empty() { p.muted { "Nothing will be sent." } } @else {
                table.list #release-plan { thead { tr { th { "#" } th { "summary" } th { "request" } } } tbody { @for e in &strict.release { tr { (effect_row(e)) } } } }
            }
            h2 { "Will be skipped (" (strict.skip.len()) ")" }
            @if strict.skip.is_empty() { p.muted { "None." } } @else {
                table.list #skip-plan { thead { tr { th { "#" } th { "summary" } th { "request" } th { "why" } } } tbody { @for (e, why) in &strict.skip { tr { (effect_row(e)) td { (why) } } } } }
            }
            h2 { "Not sent (" (strict.not_sent.len()) ")" }
            @if strict.not_sent.is_empty() { p.muted { "None." } } @else {
                table.list #not-sent { thead { tr { th { "#" } th { "summary" } th { "request" } th { "state" } } } tbody { @for e in &strict.not_sent { tr { (effect_row(e)) td { (badge(e.state.as_str())) } } } } }
            }
            @if strict.undecided.is_empty() {
                (action_button(session, &format!("/runs/{}/commit", run.id), &format!("Commit: release {} effect(s)", strict.release.len()), "primary", &bound, None))
            } @else {
                h2 { "Or approve the undecided too" }
                p { "Then " (lenient.release.len()) " effect(s) are released and " (lenient.skip.len()) " skipped." }
                (action_button(session, &format!("/runs/{}/commit", run.id), &approve_all, "primary", &[("approve_pending", "true"), bound[0], bound[1]], None))
            }
            p { a href=(format!("/runs/{}", run.id)) { "Back to the run" } }
        },
    );
    let status = if changed.is_some() {
        StatusCode::CONFLICT
    } else {
        StatusCode::OK
    };
    Ok(html_response(status, page))
}
