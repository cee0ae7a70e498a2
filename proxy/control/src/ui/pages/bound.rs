//! Forms bound to the effects they show (docs/review-ui.md#bound-to-what-you-see): each
//! commit and approve-by-rule form carries the [`Expectation`] of the set its page shows,
//! and when the set changed before it was posted the server answers 409 with what
//! changed and a fresh form.

use std::collections::HashMap;
use std::sync::Arc;

use airlock_dataplane::flows::FlowCheck;
use airlock_ledger::{Effect, EffectId, Run};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};

use super::{action_button, badge, load, reviewable, summary};
use crate::runs::expect::{Expectation, Scope, SetChanged};
use crate::ui::flows::flagged;
use crate::ui::{html_response, layout, Session, UiResult};
use crate::Control;

/// The hidden fields that carry `expect`: `through_seq` and `digest`.
pub(in crate::ui) fn fields(expect: &Expectation) -> [(&'static str, String); 2] {
    [
        ("through_seq", expect.through_seq.to_string()),
        ("digest", expect.digest.clone()),
    ]
}

/// The *Approve all N staged by RULE* button of `run`, bound to those N effects; its
/// label says how many flow rules make it skip.
pub(in crate::ui) fn rule_button(
    session: &Session,
    run: &Run,
    rule: &str,
    effects: &[Effect],
    checks: &HashMap<EffectId, FlowCheck>,
) -> Markup {
    let scope = Scope::Rule(Some(rule).filter(|r| !r.is_empty()));
    let covered: Vec<&Effect> = effects.iter().filter(|e| scope.covers(e)).collect();
    let (count, skip) = (covered.len(), flagged(covered.iter().copied(), checks));
    let by = if rule.is_empty() { "the default" } else { rule };
    let label = if skip == 0 {
        format!("Approve all {count} staged by {by}")
    } else {
        format!("Approve all {count} staged by {by} (skips {skip} that flow rules hold or block)")
    };
    let [seq, digest] = fields(&Expectation::of(effects, scope));
    action_button(
        session,
        &format!("/runs/{}/approve-rule", run.id),
        &label,
        "approve",
        &[
            ("rule", rule),
            (seq.0, seq.1.as_str()),
            (digest.0, digest.1.as_str()),
        ],
        None,
    )
}

/// What changed since the form was shown: the effects staged since, or that the shown
/// ones were decided meanwhile, and that nothing was approved or released.
pub(in crate::ui) fn notice(changed: &SetChanged) -> Markup {
    html! {
        div.notice.danger.set-changed role="alert" {
            p {
                strong { "Nothing was approved or released: the run changed since the page was shown." }
                " The page showed the run's effects through #" (changed.expected.through_seq) "."
            }
            @if changed.added.is_empty() {
                p { "Effects it showed were decided since (approved, rejected or discarded, by another reviewer or the policy)." }
            } @else {
                p { strong { (changed.added.len()) " effect(s) staged since:" } }
                table.list #changed-added {
                    thead { tr { th { "#" } th { "summary" } th { "request" } th { "rule" } th { "state" } } }
                    tbody {
                        @for e in &changed.added {
                            tr {
                                td { (e.seq) }
                                td { a href=(format!("/effects/{}", e.id)) { (summary(e)) } }
                                td { code { (e.method) " " (e.url) } }
                                td { code { (e.rule.as_deref().unwrap_or("(default)")) } }
                                td { (badge(e.state.as_str())) }
                            }
                        }
                    }
                }
            }
            p { "Below is the run as it stands now. Confirm again only if this is what you want." }
        }
    }
}

/// The answer to an approve-by-rule form whose set changed: 409, what changed, the
/// effects the rule covers now, and a fresh button bound to them.
pub(in crate::ui) async fn rule_changed(
    shared: &Arc<Control>,
    session: &Session,
    id: &str,
    rule: &str,
    changed: &SetChanged,
) -> UiResult<Response> {
    let data = load(shared, id).await?;
    let run = &data.run;
    let by = if rule.is_empty() { "the default" } else { rule };
    // The list and the fresh button come from one read of the run.
    let scope = Scope::Rule(Some(rule).filter(|r| !r.is_empty()));
    let covered: Vec<&Effect> = data.effects.iter().filter(|e| scope.covers(e)).collect();
    let page = layout(
        "The run changed",
        Some(session),
        html! {
            p.crumbs { a href="/" { "Runs" } " / " a href=(format!("/runs/{}", run.id)) { code { (run.id) } } " / approve staged by " (by) }
            h1 { "Approve all staged by " code { (by) } "?" }
            (notice(changed))
            h2 { "Staged by " (by) " now (" (covered.len()) ")" }
            @if covered.is_empty() { p.muted { "None." } } @else {
                table.list #covered {
                    thead { tr { th { "#" } th { "summary" } th { "request" } } }
                    tbody {
                        @for e in &covered {
                            tr { td { (e.seq) } td { a href=(format!("/effects/{}", e.id)) { (summary(e)) } } td { code { (e.method) " " (e.url) } } }
                        }
                    }
                }
                @if reviewable(run) { (rule_button(session, run, rule, &data.effects, &data.checks)) }
            }
            p { a href=(format!("/runs/{}", run.id)) { "Back to the run" } }
        },
    );
    Ok(html_response(StatusCode::CONFLICT, page))
}
