//! What a release made of an effect, on the effect, run and commit pages: the admin API's
//! `released` view ([`crate::released`], the one place placeholders are resolved for
//! display), rendered. The summary and URL with the real values of the placeholders the
//! effect carried, the real values it handed out, the link the origin gave and an excerpt
//! of the origin's answer. Every value is escaped by maud, like the rest of the page.

use std::collections::HashMap;

use airlock_ledger::{Effect, EffectId, LedgerError, Store};
use maud::{html, Markup};

use super::graph::host_path;
use super::pages::summary;
use crate::released::{released, Released};

/// The [`Released`] view of each of `effects` (a run's) that has one, by id, each with the
/// origin's kept answer read from `ledger`.
pub(super) fn of_run(
    ledger: &dyn Store,
    effects: &[Effect],
) -> Result<HashMap<EffectId, Released>, LedgerError> {
    let mut out = HashMap::new();
    for effect in effects {
        let answer = match effect.release.as_ref().and_then(|r| r.body_digest.as_ref()) {
            Some(digest) => ledger.body(digest)?,
            None => None,
        };
        if let Some(view) = released(effect, effects, answer.as_deref()) {
            out.insert(effect.id.clone(), view);
        }
    }
    Ok(out)
}

/// The one-line summary of `effect` with the real values known so far: the adapter's
/// summary as the `released` view resolves it, or, for an effect without one, `METHOD
/// host path` of the URL as sent; [`summary`] before anything is known.
pub(super) fn summary_now(effect: &Effect, view: Option<&Released>) -> String {
    match view {
        Some(view) if effect.summary.as_deref().is_some_and(|s| !s.is_empty()) => {
            view.summary.clone()
        }
        Some(view) => {
            let (host, path) = host_path(&view.url);
            format!("{} {host} {path}", effect.method)
        }
        None => summary(effect),
    }
}

/// [`summary_now`] of `effect`, resolved against the other effects of its run (without
/// the origin's answer, which a summary does not need).
pub(super) fn summary_among(effect: &Effect, effects: &[Effect]) -> String {
    summary_now(effect, released(effect, effects, None).as_ref())
}

/// The origin's link: a link when it is an `http(s)` URL, else the text.
fn link(url: &str) -> Markup {
    html! {
        @if url.starts_with("https://") || url.starts_with("http://") {
            a.origin-link href=(url) rel="noopener noreferrer" { (url) }
        } @else {
            code { (url) }
        }
    }
}

/// The excerpt of the origin's answer, with its size when it is cut.
fn answer_excerpt(view: &Released) -> Markup {
    html! {
        @if let Some(answer) = view.answer.as_ref().filter(|a| !a.excerpt.is_empty()) {
            code.answer { (answer.excerpt) }
            @if answer.truncated { span.muted { " … (" (answer.body_len) " bytes)" } }
        }
    }
}

/// Under an effect's summary on the run page and the commit page: the URL as sent when it
/// differs from the staged one, the real values, the link and the answer's excerpt.
pub(super) fn brief(effect: &Effect, view: Option<&Released>) -> Markup {
    let Some(view) = view else {
        return html! {};
    };
    html! {
        div.released {
            @if view.url != effect.url {
                div.sent { "sent as " code { (effect.method) " " (view.url) } }
            }
            @if !view.values.is_empty() {
                div.values {
                    "real "
                    @for (pointer, value) in &view.values { code { (pointer) " = " (value) } " " }
                }
            }
            @if let Some(url) = &view.link { div.link { "link " (link(url)) } }
            @if view.answer.as_ref().is_some_and(|a| !a.excerpt.is_empty()) {
                div.answer { "answer " (answer_excerpt(view)) }
            }
        }
    }
}

/// The effect page's account of the release: the summary and request as sent (and as
/// staged, when they differ), the real value of each placeholder it handed out, the link
/// the origin gave and the excerpt of its answer (the whole kept answer is under
/// "Origin's response").
pub(super) fn section(effect: &Effect, view: Option<&Released>) -> Markup {
    let Some(view) = view else {
        return html! {};
    };
    let staged = summary(effect);
    let now = summary_now(effect, Some(view));
    html! {
        section #released {
            h2 { @if effect.release.is_some() { "Released as" } @else { "With the real values known so far" } }
            table.kv {
                tbody {
                    tr { th { "summary" } td { (now) } }
                    @if now != staged { tr.staged { th { "staged as" } td { (staged) } } }
                    tr { th { "request" } td { code { (effect.method) " " (view.url) } } }
                    @if view.url != effect.url {
                        tr.staged { th { "staged as" } td { code { (effect.method) " " (effect.url) } } }
                    }
                    @for (pointer, value) in &view.values {
                        tr { th { "real " code { (pointer) } } td { code { (value) } } }
                    }
                    @if let Some(url) = &view.link { tr { th { "link" } td { (link(url)) } } }
                    @if let Some(answer) = &view.answer {
                        tr {
                            th { "answer" }
                            td {
                                @match answer.status {
                                    Some(status) => { "HTTP " (status) }
                                    None => { "no answer" }
                                }
                                " · " (answer.body_len) " body bytes"
                                @if !answer.excerpt.is_empty() { div { (answer_excerpt(view)) } }
                            }
                        }
                    }
                }
            }
        }
    }
}
