//! Flow rules in the review UI (docs/policy.md#flow-rules): the "Flow rules" block of the
//! effect page, the held/blocked marks of the run page, and the verdict buttons, which a
//! `block` flow replaces by an explanation and a `review` flow relabels as the
//! reviewer's own approval of a flagged effect. Everything goes through maud, so every
//! value (flow ids, reasons, excerpts, URLs) is escaped.

use airlock_dataplane::flows::{FlowCheck, Violation};
use airlock_ledger::{Effect, EffectState};
use maud::{html, Markup};

use super::graph::kind_name;
use super::pages::action_button;
use super::Session;

/// Whether flow rules hold `effect` now: `"blocked"`, `"held"` or `None`
/// ([`crate::flows::hold`]); `None` without a decision.
pub(super) fn hold(effect: &Effect, check: Option<&FlowCheck>) -> Option<&'static str> {
    check.and_then(|c| crate::flows::hold(effect, c))
}

/// The mark of an effect flow rules hold, for lists.
pub(super) fn hold_mark(hold: Option<&str>, check: Option<&FlowCheck>) -> Markup {
    let flows: Vec<&str> = check
        .map(|c| c.violations.iter().map(|v| v.flow.as_str()).collect())
        .unwrap_or_default();
    html! {
        @match hold {
            Some("blocked") => span.flag.danger.flow-mark title=(format!("block flow(s): {}", flows.join(", "))) { "blocked by flow rules" },
            Some(_) => span.flag.warn.flow-mark title=(format!("review flow(s): {}", flows.join(", "))) { "held: needs your own approval" },
            None => {
                @if !flows.is_empty() {
                    span.flag.flow-mark title=(flows.join(", ")) { "flow: " (flows.join(", ")) }
                }
            },
        }
    }
}

fn violation(v: &Violation) -> Markup {
    let action = v.action.as_str();
    html! {
        li class=(format!("violation {action}")) {
            span class=(format!("badge flow-{action}")) { (action) }
            " flow " code.flow-id { (v.flow) } ": " span.flow-reason { (v.reason) }
            @if !v.labels.is_empty() {
                div.muted { "labels: " @for (i, label) in v.labels.iter().enumerate() { @if i > 0 { ", " } code { (label) } } }
            }
            @if let Some(edge) = &v.edge {
                div {
                    "via a " span class=(format!("key {}", kind_name(edge.kind))) { (kind_name(edge.kind)) } " edge"
                    @if matches!(edge.kind, airlock_ledger::EdgeKind::Content | airlock_ledger::EdgeKind::Header) {
                        ", " (edge.overlap_bytes) " bytes"
                    }
                    @if let Some(source) = &v.source { " from " code.flow-source { (source) } }
                }
                @if let Some(detail) = &edge.detail { div.muted { (detail) } }
                @if let Some(excerpt) = &edge.excerpt { div { "excerpt: " mark.excerpt { (excerpt) } } }
            }
        }
    }
}

/// The effect page's "Flow rules" block: every violation (flow id, action, reason, labels,
/// the edge with its source read and excerpt), "analysis incomplete" when it is, and what
/// the decision means for this effect now.
pub(super) fn flow_section(effect: &Effect, check: &FlowCheck) -> Markup {
    let hold = crate::flows::hold(effect, check);
    let level = match hold {
        Some("blocked") => "danger",
        Some(_) => "warn",
        None if check.violations.is_empty() => "ok",
        None => "info",
    };
    html! {
        section #flows class=(format!("flows {level}")) {
            h2 { "Flow rules" }
            @match hold {
                Some("blocked") => p.notice.danger { strong { "Blocked." } " A block flow forbids releasing this effect: it cannot be approved, and the commit rejects it (its dependents are skipped). Reject it, or change the policy." },
                Some(_) => p.notice.warn { strong { "Held for your own approval." } " A review flow flags this effect: only a reviewer's approval of this effect by itself, made while these flows are shown, releases it. Approve-all, approve-by-rule and automatic review skip it, and a commit is refused while it is held." },
                None => {
                    @if !check.violations.is_empty() {
                        p.muted { "This effect violated these flows; it is no longer held by them." }
                    }
                },
            }
            @if check.violations.is_empty() {
                p.muted {
                    @if check.analysed { "No flow rule matches this effect's lineage." } @else { "Not decided yet: the lineage of this effect has not been analysed." }
                }
            } @else {
                ul.violations { @for v in &check.violations { (violation(v)) } }
            }
            @if let Some(incomplete) = &check.incomplete {
                p.notice.warn.incomplete { strong { "Analysis incomplete: " } (incomplete) " — flow rules may miss data this effect carries." }
            }
        }
    }
}

/// The verdict buttons of a pending effect, as flow rules allow them: on a blocked effect
/// the Approve button is replaced by an explanation; on a held one it says it is the
/// reviewer's own approval of a flagged effect. `hidden` goes with each form.
pub(super) fn verdict_buttons(
    session: &Session,
    effect: &Effect,
    check: Option<&FlowCheck>,
    hidden: &[(&str, &str)],
) -> Markup {
    let hold = hold(effect, check);
    let review: Vec<String> = check.map(FlowCheck::review_flows).unwrap_or_default();
    let approve = format!("/effects/{}/approve", effect.id);
    let reject = format!("/effects/{}/reject", effect.id);
    html! {
        @if effect.state.is_pending() {
            @if effect.state != EffectState::Approved {
                @match hold {
                    Some("blocked") => span.flow-blocked title="a block flow forbids releasing this effect" { "cannot be approved: a block flow forbids it" },
                    Some(_) => (action_button(session, &approve, &format!("Approve (your own approval of a flagged effect: {})", review.join(", ")), "approve flagged", hidden,
                        Some("This effect violates a review flow. Approve it anyway, as your own decision on this effect?"))),
                    None => (action_button(session, &approve, "Approve", "approve", hidden, None)),
                }
            } @else if hold == Some("held") {
                (action_button(session, &approve, &format!("Approve again (your own approval of a flagged effect: {})", review.join(", ")), "approve flagged", hidden,
                    Some("This effect violates a review flow. Approve it, as your own decision on this effect?")))
            }
            @if effect.state != EffectState::Rejected {
                (action_button(session, &reject, "Reject", "reject", hidden, None))
            }
        }
    }
}

/// How many of `effects` an approval in bulk skips because flow rules hold or block them
/// (any violation, as [`crate::runs::approve_staged_by_rule`] decides).
pub(super) fn flagged<'a>(
    effects: impl Iterator<Item = &'a Effect>,
    checks: &std::collections::HashMap<airlock_ledger::EffectId, FlowCheck>,
) -> usize {
    effects
        .filter(|e| checks.get(&e.id).is_some_and(|c| !c.violations.is_empty()))
        .count()
}

/// Counts of `review` and `block` holds among `effects`: `(held, blocked)`.
pub(super) fn holds<'a>(
    effects: impl Iterator<Item = &'a Effect>,
    checks: &std::collections::HashMap<airlock_ledger::EffectId, FlowCheck>,
) -> (usize, usize) {
    let mut out = (0, 0);
    for effect in effects {
        match hold(effect, checks.get(&effect.id)) {
            Some("blocked") => out.1 += 1,
            Some(_) => out.0 += 1,
            None => {}
        }
    }
    out
}
