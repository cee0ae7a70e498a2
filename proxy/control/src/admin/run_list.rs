//! `GET /v1/runs`: one page of runs, newest first, with the cursor of the next page
//! (docs/admin-api.md, "Runs"); the store reads only the page ([`RunStore::runs_page`]).
//!
//! [`RunStore::runs_page`]: airlock_ledger::RunStore::runs_page

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;

use super::{blocking, render, ApiError, ApiResult};
use crate::Control;

/// `GET /v1/runs` pages: `limit` runs unless asked (at most [`MAX_RUNS_PAGE`]).
pub const DEFAULT_RUNS_PAGE: usize = 100;
/// The largest page `GET /v1/runs?limit=` gives.
pub const MAX_RUNS_PAGE: usize = 1000;

/// `GET /v1/runs?limit=N&after=RUN_ID`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    /// Runs per page: 1 to 1000, default 100.
    limit: Option<usize>,
    /// The cursor: the `next` of the previous page (runs older than this one).
    after: Option<String>,
}

#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(ListQuery), responses((status = 200, description = "`{runs: [run…], next}`: a page of runs, newest first, each with its effect counts by state; `next` is the cursor of the next page (`?after=NEXT`), `null` on the last page", body = render::RunList), (status = 400, description = "A `limit` outside 1–1000, an `after` that is not a run id, or an unknown parameter (`bad_query`)", body = super::openapi::ApiErrorBody)))]
pub(super) async fn list_runs(
    State(shared): State<Arc<Control>>,
    query: Result<axum::extract::Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<render::RunList>> {
    let axum::extract::Query(query) = query.map_err(|rejection| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("the query string is not valid: {}", rejection.body_text()),
        )
    })?;
    let limit = query.limit.unwrap_or(DEFAULT_RUNS_PAGE);
    if !(1..=MAX_RUNS_PAGE).contains(&limit) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!(
                "limit must be 1 to {MAX_RUNS_PAGE} (default {DEFAULT_RUNS_PAGE}); got {limit}"
            ),
        ));
    }
    let after = match query.after.as_deref() {
        None => None,
        Some(after) => Some(airlock_ledger::RunId::parse(after).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_query",
                format!(
                    "after must be a run id (run_…), the next of a previous page; got {after:?}"
                ),
            )
        })?),
    };
    let ledger = shared.ledger().clone();
    let (runs, more) = blocking(move || {
        // One run more than asked says whether a next page exists.
        let mut page = ledger.runs_page(&airlock_ledger::RunPage {
            after,
            limit: limit + 1,
            newest_first: true,
        })?;
        let more = page.len() > limit;
        page.truncate(limit);
        let mut out = Vec::with_capacity(page.len());
        for run in page {
            let effects = ledger.effects(&run.id)?;
            out.push((run, effects));
        }
        Ok((out, more))
    })
    .await?;
    let next = more
        .then(|| runs.last().map(|(run, _)| run.id.to_string()))
        .flatten();
    let list: Vec<render::RunView> = runs
        .iter()
        .map(|(run, effects)| render::run_view(&shared, run, effects))
        .collect();
    Ok(Json(render::RunList { runs: list, next }))
}
