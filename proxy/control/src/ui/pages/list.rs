//! The runs list: newest first, a page at a time, optionally of one state.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::html;
use serde::Deserialize;

use super::{badge, counts, ended_ms, flags};
use crate::ui::{blocking, html_response, layout, parse_run, time_utc, Session, UiError, UiResult};
use crate::Control;

/// The runs list's query: `?state=` and the `?after=` cursor.
#[derive(Debug, Default, Deserialize)]
pub(in crate::ui) struct ListQuery {
    state: Option<String>,
    /// The cursor: list runs older than this one (the "Older runs" link).
    after: Option<String>,
}

/// Rows of the runs list per page.
const RUNS_PER_PAGE: usize = 50;

/// Most runs the list reads looking for one page of a state: a rare state in a long
/// ledger then takes several pages, each bounded.
const RUNS_SCANNED_PER_PAGE: usize = 2000;

const RUN_STATES: [&str; 6] = [
    "open",
    "sealed",
    "committing",
    "committed",
    "partially_committed",
    "aborted",
];

/// `GET /`: runs, newest first, optionally of one state (`?state=`).
pub(in crate::ui) async fn runs_list(
    State(shared): State<Arc<Control>>,
    Extension(session): Extension<Session>,
    Query(query): Query<ListQuery>,
) -> UiResult<Response> {
    let filter = query.state.filter(|s| !s.is_empty());
    if let Some(state) = &filter {
        if !RUN_STATES.contains(&state.as_str()) {
            return Err(UiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "unknown run state {state:?}; one of {}",
                    RUN_STATES.join(", ")
                ),
            ));
        }
    }
    let after = match query.after.as_deref().filter(|s| !s.is_empty()) {
        Some(raw) => Some(parse_run(raw)?),
        None => None,
    };
    let ledger = shared.ledger().clone();
    let wanted = filter.clone();
    let (rows, next) = blocking(move || {
        let mut rows = Vec::new();
        let (mut cursor, mut scanned) = (after, 0);
        // Newest first, a page at a time, until a page of rows or the scan bound.
        let next = loop {
            let step = RUNS_PER_PAGE;
            let page = ledger.runs_page(&airlock_ledger::RunPage {
                after: cursor.clone(),
                limit: step,
                newest_first: true,
            })?;
            let exhausted = page.len() < step;
            for run in page {
                scanned += 1;
                cursor = Some(run.id.clone());
                if wanted.as_deref().is_some_and(|s| s != run.state.as_str()) {
                    continue;
                }
                let effects = ledger.effects(&run.id)?;
                let edges = ledger.edges(&run.id)?;
                let unverified = ledger
                    .workspace(&run.id)?
                    .is_some_and(|w| w.rollback_unverified);
                rows.push((run, effects, edges, unverified));
                if rows.len() == RUNS_PER_PAGE {
                    break;
                }
            }
            if rows.len() == RUNS_PER_PAGE || scanned >= RUNS_SCANNED_PER_PAGE {
                // More may follow: whether any does is found on the next page.
                let more = !ledger
                    .runs_page(&airlock_ledger::RunPage {
                        after: cursor.clone(),
                        limit: 1,
                        newest_first: true,
                    })?
                    .is_empty();
                break more.then_some(cursor).flatten();
            }
            if exhausted {
                break None;
            }
        };
        Ok((rows, next))
    })
    .await?;
    let older = next.map(|cursor| match &filter {
        Some(state) => format!("/?state={state}&after={cursor}"),
        None => format!("/?after={cursor}"),
    });
    let page = layout(
        "Runs",
        Some(&session),
        html! {
            h1 { "Runs" @if let Some(state) = &filter { " · " (state.replace('_', " ")) } }
            nav.filters aria-label="filter by state" {
                a href="/" class=[filter.is_none().then_some("current")] { "all" }
                @for state in RUN_STATES {
                    a href=(format!("/?state={state}")) class=[(filter.as_deref() == Some(state)).then_some("current")] { (state.replace('_', " ")) }
                }
            }
            @if rows.is_empty() {
                p.muted { "No runs" @if filter.is_some() { " in this state" } "." }
            } @else {
                table.list #runs {
                    thead { tr { th { "run" } th { "state" } th { "profile" } th { "started (UTC)" } th { "ended (UTC)" } th { "effects" } th { "flags" } } }
                    tbody {
                        @for (run, effects, edges, unverified) in &rows {
                            tr.row data-href=(format!("/runs/{}", run.id)) {
                                td { a href=(format!("/runs/{}", run.id)) { code { (run.id) } } }
                                td { (badge(run.state.as_str())) }
                                td { (run.profile.as_deref().unwrap_or("—")) }
                                td.time { (time_utc(run.created_at_ms)) }
                                td.time { (ended_ms(run, effects).map(time_utc).unwrap_or_else(|| "—".to_owned())) }
                                td.counts {
                                    @if effects.is_empty() { span.muted { "none" } }
                                    @for (state, count) in counts(effects) {
                                        span class=(format!("count state-{state}")) title=(state) { (count) " " (state) }
                                    }
                                }
                                td {
                                    @for (level, text) in flags(edges, effects, *unverified) {
                                        span class=(format!("flag {level}")) { (text) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(older) = &older {
                p.pages { a.button href=(older) rel="next" { "Older runs →" } }
            }
        },
    );
    Ok(html_response(StatusCode::OK, page))
}
