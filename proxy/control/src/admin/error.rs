//! The admin API's error: a status, a stable code, what happened and what to do, rendered
//! in one place as `{error, reason_code, reason, hint, details?}` (docs/admin-api.md,
//! "Errors"), with the mappings from the ledger's and the commit's errors.

use airlock_ledger::{LedgerError, Refused};
use airlock_net::respond::Side;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tracing::warn;

use super::{commit, openapi};

/// An admin API error: status, stable code, what happened. It becomes a response in one
/// place, [`ApiError::into_response`], with the data plane's field names:
/// `{error, reason_code, reason, hint, details?}`.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub(super) status: StatusCode,
    /// The stable code (`reason_code`).
    pub(super) code: &'static str,
    /// What happened.
    pub(super) reason: String,
    /// Details some codes carry.
    pub(super) details: Option<Value>,
    /// A hint for this answer, when the code's own ([`ApiError::hint`]) is too general.
    pub(super) hint: Option<&'static str>,
}

impl ApiError {
    /// An error with the code's own hint and no details.
    pub(crate) fn new(status: StatusCode, code: &'static str, reason: impl Into<String>) -> Self {
        Self {
            status,
            code,
            reason: reason.into(),
            details: None,
            hint: None,
        }
    }

    /// 404 `not_found` for a `kind` (`run`, `effect`, `workspace of run`, …) the request
    /// named, with `reason` and the hint of what lists that kind ([`not_found_hint`]).
    pub(crate) fn not_found(kind: &str, reason: impl Into<String>) -> Self {
        Self {
            hint: Some(not_found_hint(kind)),
            ..Self::new(StatusCode::NOT_FOUND, "not_found", reason)
        }
    }

    /// Whose move it is: the caller's for 4xx answers, airlock's own for the rest.
    pub fn side(&self) -> Side {
        if self.status.is_server_error() {
            Side::Internal
        } else {
            Side::Client
        }
    }

    /// What to do about it: this answer's own hint, else the code's.
    fn hint(&self) -> &'static str {
        if let Some(hint) = self.hint {
            return hint;
        }
        match self.code {
            "unauthorized" => "send Authorization: Bearer TOKEN; the admin token is in DATA/admin.token, named tokens in the files --admin-token, --runner-token, --reviewer-token and --viewer-token name",
            "forbidden_for_role" => "use a token of a role in details.needed (an admin hands them out: docs/admin-api.md#roles)",
            "route_without_role" => "this is a bug in airlock: the route is missing from the route table (proxy/control/src/access/routes.rs), so nobody may call it",
            "not_found" => "docs/admin-api.md and GET /v1/openapi.json list the endpoints; GET /v1/runs lists the runs",
            "bad_json" | "bad_body" | "bad_query" | "bad_run_id" | "bad_effect_id" | "bad_workspace_request" => {
                "fix the request and send it again; docs/admin-api.md describes each body"
            }
            "undecided_effects" => "approve or reject each effect in details.undecided first, or commit with approve_pending = true and expect",
            "expectation_required" => "GET /v1/runs/{id}/effects, look at the effects it lists, then send its expect with approve_pending (docs/admin-api.md#expectations)",
            "set_changed" => "nothing was approved or released: look at details.added (staged since) and details.covered, then commit again with details.now as expect if you want exactly those",
            "flow_review_required" => "each effect in details.held violates a review flow: look at its flows (GET /v1/effects/{id}), then approve it by itself (POST /v1/effects/{id}/approve) or reject it, and commit again",
            "flow_blocked" => "a block flow forbids releasing this effect (GET /v1/effects/{id} shows its flows); reject it, or change the policy",
            "run_not_open" | "invalid_run_transition" | "invalid_effect_transition" => {
                "the run or effect is past that step; GET it to see its state"
            }
            "body_too_large" => "send a smaller body: the admin API reads at most 2 MiB per request",
            "policy_invalid" => "fix the policy file; the policy in force is unchanged (docs/policy.md lists every key)",
            "snapshot_unsupported" => "give the workspace snapshot_cmd and rollback_cmd, or use a git workspace",
            "run_not_committed" => "only a committed run can be compensated; commit it first",
            "already_compensated" => "the run was compensated before; see its compensation run",
            "not_retriable" => "the effect may have reached its origin (or the origin refused it): check the origin, then settle an unknown effect (POST /v1/effects/{id}/settle, `airlock settle`)",
            "bad_settlement" => "name a placeholder of the effect by its pointer (GET /v1/effects/{id} lists them) with a value of its type, and give values only with delivered = true",
            "run_not_finished" => "only finished runs are pruned (docs/architecture.md, Retention): commit or abort it, settle its unknown effects, or wait for its release to end",
            "not_served_by_role" => "send admin API and review UI requests to a control instance (airlock serve --role control or all); docs/fleet.md",
            "lease_held" => "another control instance is releasing this run (waited 60 s for it): ask again; it is taken over if that instance died (docs/architecture.md, \"Commit authority\")",
            "nothing_to_retry" => "GET /v1/runs/{id}/effects: a failed effect with retriable = true, or an unknown one, is what to look at",
            _ if self.status.is_server_error() => "see airlock's log; retry later",
            _ => "see reason; docs/admin-api.md describes each endpoint",
        }
    }
}

impl From<crate::access::Forbidden> for ApiError {
    /// 403 `forbidden_for_role`, `details: {role, needed, action}`.
    fn from(refused: crate::access::Forbidden) -> Self {
        Self {
            details: Some(json!({
                "role": refused.role,
                "needed": refused.needed(),
                "action": refused.action,
            })),
            ..Self::new(
                StatusCode::FORBIDDEN,
                "forbidden_for_role",
                refused.to_string(),
            )
        }
    }
}

impl From<LedgerError> for ApiError {
    fn from(error: LedgerError) -> Self {
        match error {
            LedgerError::NotFound { kind, .. } => Self::not_found(kind, error.to_string()),
            LedgerError::Refused(refused) => {
                let details = match &refused {
                    Refused::Undecided { effects, .. } => Some(json!({ "undecided": effects })),
                    Refused::FlowHeld { effects, .. } => Some(json!({ "held": effects })),
                    Refused::FlowBlocked { flows, .. } => Some(json!({ "flows": flows })),
                    _ => None,
                };
                Self {
                    status: StatusCode::CONFLICT,
                    code: refused.code(),
                    reason: refused.to_string(),
                    details,
                    hint: None,
                }
            }
            LedgerError::Degraded { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ledger_degraded",
                error.to_string(),
            ),
            LedgerError::LowSpace { .. } => Self::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "ledger_low_space",
                error.to_string(),
            ),
            other => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "ledger_error",
                airlock_net::respond::error_chain(&other).unwrap_or_default(),
            ),
        }
    }
}

impl From<crate::release::CommitError> for ApiError {
    fn from(error: crate::release::CommitError) -> Self {
        match error {
            crate::release::CommitError::Ledger(error) => error.into(),
            crate::release::CommitError::Changed(changed) => commit::set_changed(&changed),
            other => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "task_failed",
                other.to_string(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    /// The admin listener's one error-to-response mapping: the status, and the JSON body
    /// `{error, reason_code, reason, hint, details?}` (`error` the status's short name).
    fn into_response(self) -> Response {
        if self.side().is_failure() {
            warn!(reason_code = self.code, reason = %self.reason, "admin request failed");
        }
        let hint = self.hint();
        let body = openapi::ApiErrorBody {
            error: self
                .status
                .canonical_reason()
                .unwrap_or("error")
                .to_ascii_lowercase(),
            reason_code: self.code.to_owned(),
            reason: self.reason,
            hint: hint.to_owned(),
            details: self.details,
        };
        let forbidden = self.code == "forbidden_for_role";
        let mut response = (self.status, Json(body)).into_response();
        if forbidden {
            // Its audit entry says `forbidden`, whichever role check refused it.
            response
                .extensions_mut()
                .insert(crate::access::audit::ForbiddenAnswer);
        }
        response
    }
}

/// 404 `not_found`: no `kind` (`run`, `effect`, …) has `id`.
pub(super) fn not_found(kind: &str, id: &str) -> ApiError {
    ApiError::not_found(kind, format!("no {kind} with id {id}"))
}

/// What was not found and how to list what there is, for a 404 about `kind`.
fn not_found_hint(kind: &str) -> &'static str {
    match kind {
        "run" => "no run has that id: GET /v1/runs (`airlock runs`) lists the runs",
        "effect" => "no effect has that id: GET /v1/runs/{id}/effects (`airlock effects RUN`) lists a run's effects",
        "workspace of run" => "that run has no workspace (or there is no such run): GET /v1/runs lists the runs; POST /v1/runs/{id}/workspace attaches one, as `airlock run` does",
        "decision for run" => "that run's workspace has no decision to resume: POST /v1/runs/{id}/workspace/decide makes one",
        "endpoint" => "no endpoint has that method and path: docs/admin-api.md and GET /v1/openapi.json list them",
        _ => "GET /v1/runs lists the runs, GET /v1/runs/{id}/effects a run's effects",
    }
}
