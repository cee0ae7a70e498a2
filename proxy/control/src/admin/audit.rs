//! `GET /v1/audit`: one page of the audit log (docs/admin-api.md#audit), newest first
//! unless asked, optionally of one run, with the cursor of the next page.

use std::sync::Arc;

use airlock_ledger::{AuditPage, RunId};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;

use super::{blocking, ApiError, ApiResult};
use crate::Control;

/// `GET /v1/audit` pages: `limit` entries unless asked (at most
/// [`airlock_ledger::audit::MAX_AUDIT_PAGE`]).
pub const DEFAULT_AUDIT_PAGE: usize = 100;

/// `GET /v1/audit?limit=N&after=SEQ&run=RUN_ID&order=oldest|newest`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    /// Entries per page: 1 to 1000, default 100.
    limit: Option<usize>,
    /// The cursor: the `next` of the previous page.
    after: Option<u64>,
    /// Only the entries about this run (`run_…`).
    run: Option<String>,
    /// `newest` (the default) or `oldest` first.
    order: Option<String>,
}

/// One audit entry: `{seq, at_ms, who, role, action, run?, effect?, outcome, detail}`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct AuditEntryView {
    /// Its place in the log (1, 2, 3 …).
    pub seq: u64,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// Who: a token's name, `airlock run`, `airlock serve`, or `policy: rule "ID"`.
    pub who: String,
    /// The role: `admin`, `runner`, `reviewer`, `viewer`, or `airlock` for the server's own.
    pub role: String,
    /// The action (`approve`, `commit`, `policy_reload`, `prune`…).
    pub action: String,
    /// The run it concerns.
    pub run: Option<String>,
    /// The effect it concerns.
    pub effect: Option<String>,
    /// `done`, `refused` or `forbidden`.
    pub outcome: String,
    /// The method, path and status of the call, and what the handler added.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

/// `GET /v1/audit` → a page of entries and the cursor of the next page.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct AuditList {
    /// The entries of this page.
    pub entries: Vec<AuditEntryView>,
    /// The cursor of the next page (`?after=NEXT`, same `order` and `run`); `null` on the
    /// last page.
    pub next: Option<u64>,
}

fn bad(reason: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_query", reason)
}

#[utoipa::path(get, path = "/v1/audit", tag = "other", params(AuditQuery), responses((status = 200, description = "`{entries: [entry…], next}`: a page of the audit log, newest first unless `order=oldest`; `next` is the cursor of the next page, `null` on the last", body = AuditList), (status = 400, description = "A `limit` outside 1–1000, a `run` that is not a run id, an `order` other than `newest` or `oldest`, or an unknown parameter (`bad_query`)", body = super::openapi::ApiErrorBody)))]
pub(super) async fn list(
    State(shared): State<Arc<Control>>,
    query: Result<axum::extract::Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<AuditList>> {
    let axum::extract::Query(query) =
        query.map_err(|r| bad(format!("the query string is not valid: {}", r.body_text())))?;
    let limit = query.limit.unwrap_or(DEFAULT_AUDIT_PAGE);
    let max = airlock_ledger::audit::MAX_AUDIT_PAGE;
    if !(1..=max).contains(&limit) {
        return Err(bad(format!(
            "limit must be 1 to {max} (default {DEFAULT_AUDIT_PAGE}); got {limit}"
        )));
    }
    let newest_first = match query.order.as_deref() {
        None | Some("newest") => true,
        Some("oldest") => false,
        Some(other) => {
            return Err(bad(format!(
                "order must be newest or oldest; got {other:?}"
            )))
        }
    };
    let run = match query.run.as_deref() {
        None => None,
        Some(text) => Some(
            RunId::parse(text)
                .ok_or_else(|| bad(format!("run must be a run id (run_…); got {text:?}")))?,
        ),
    };
    let ledger = shared.ledger().clone();
    let page = AuditPage {
        after: query.after,
        // One more than asked says whether a next page exists.
        limit: (limit + 1).min(max),
        newest_first,
        run,
    };
    let mut entries = blocking(move || ledger.audit_page(&page)).await?;
    let more = entries.len() > limit || (limit == max && entries.len() == max);
    entries.truncate(limit);
    let next = if more {
        entries.last().map(|e| e.seq)
    } else {
        None
    };
    Ok(Json(AuditList {
        entries: entries
            .into_iter()
            .map(|e| AuditEntryView {
                seq: e.seq,
                at_ms: e.at_ms,
                who: e.who,
                role: e.role,
                action: e.action,
                run: e.run.map(|r| r.0),
                effect: e.effect.map(|e| e.0),
                outcome: e.outcome.as_str().to_owned(),
                detail: e.detail,
            })
            .collect(),
        next,
    }))
}
