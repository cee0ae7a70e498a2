//! Writing the audit log ([`airlock_ledger::audit`]) from the control plane: every audited
//! call of the route table ([`super::routes::Route::audited`]) is recorded by the role
//! check after the handler answered, under the caller's name and role, with the run or
//! effect from its path, how it ended, and what the handler added ([`AuditDetail`]);
//! refused calls (403) are recorded too. The server's own actions (a rule's automatic
//! review, the tokens it started with) are recorded where they happen.
//!
//! A failed write is logged and counted (`airlock_audit_write_failures_total`); the action
//! it describes has already happened and stays done.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use airlock_ledger::{AuditOutcome, AuditPage, EffectId, NewAuditEntry, RunId};
use axum::http::StatusCode;
use serde_json::{json, Value};

use super::routes::Route;
use super::Principal;
use crate::Control;

/// What a handler adds to the audit entry of its call: a JSON object merged into the
/// entry's `detail` (the policy revisions before and after, what a prune removed…). Put
/// it in the response's extensions.
#[derive(Debug, Clone)]
pub struct AuditDetail(pub Value);

/// The audit log's counters, for `/metrics`.
#[derive(Debug, Default)]
pub struct AuditMetrics {
    /// Entries written.
    pub written: AtomicU64,
    /// Entries that could not be written.
    pub failures: AtomicU64,
    /// Calls refused with 403 `forbidden_for_role`.
    pub forbidden: AtomicU64,
}

impl AuditMetrics {
    /// The counters in the Prometheus text format: `airlock_audit_entries_total`,
    /// `airlock_audit_write_failures_total`, `airlock_forbidden_total`.
    pub fn render(&self) -> String {
        format!(
            "# HELP airlock_audit_entries_total Audit entries written since the start.\n\
             # TYPE airlock_audit_entries_total counter\n\
             airlock_audit_entries_total {}\n\
             # HELP airlock_audit_write_failures_total Audit entries that could not be written (the action stood).\n\
             # TYPE airlock_audit_write_failures_total counter\n\
             airlock_audit_write_failures_total {}\n\
             # HELP airlock_forbidden_total Admin API and review UI calls refused for the caller's role (403 forbidden_for_role).\n\
             # TYPE airlock_forbidden_total counter\n\
             airlock_forbidden_total {}\n",
            self.written.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
            self.forbidden.load(Ordering::Relaxed),
        )
    }
}

/// The role recorded for the server's own actions.
pub const SERVER_ROLE: &str = "airlock";

/// Appends `entry` on the calling thread (call it from the blocking pool); a failure is
/// logged and counted.
pub fn record_blocking(control: &Control, entry: NewAuditEntry) {
    let action = entry.action.clone();
    match control.ledger().append_audit(entry) {
        Ok(_) => {
            control
                .metrics
                .audit
                .written
                .fetch_add(1, Ordering::Relaxed);
        }
        Err(error) => {
            control
                .metrics
                .audit
                .failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::error!(action = %action, error = %error, "audit entry not written");
        }
    }
}

/// [`record_blocking`] from async code.
pub async fn record(control: &Arc<Control>, entry: NewAuditEntry) {
    let control = control.clone();
    let _ = tokio::task::spawn_blocking(move || record_blocking(&control, entry)).await;
}

/// How a call ended, for [`record_call`].
#[derive(Debug, Clone)]
pub enum Answered {
    /// The role check refused it (403 `forbidden_for_role`).
    Forbidden,
    /// The handler answered `status`, adding `detail` ([`AuditDetail`]) if it had any.
    Status(StatusCode, Option<Value>),
}

/// How `response` ended, for [`record_call`]: [`Answered::Forbidden`] when a role check
/// refused it (the [`ForbiddenAnswer`] mark), else its status and the [`AuditDetail`] it
/// added.
pub fn answered(response: &axum::response::Response) -> Answered {
    if response.extensions().get::<ForbiddenAnswer>().is_some() {
        return Answered::Forbidden;
    }
    let detail = response
        .extensions()
        .get::<AuditDetail>()
        .map(|d| d.0.clone());
    Answered::Status(response.status(), detail)
}

/// The mark on a 403 `forbidden_for_role` response, wherever the role check that refused
/// it ran (the route's, or a handler's: the `cmd` driver, a decision that commits, a
/// sign-in link for another), so that its audit entry says `forbidden`.
#[derive(Debug, Clone, Copy)]
pub struct ForbiddenAnswer;

/// Runs the rest of an audited `route`'s stack (`next` on `request`) and records the call
/// by `principal` on `path`, both in a task of their own: a client that hangs up stops
/// neither the action half way (a commit goes on detached) nor its record. The admin API's
/// and the review UI's role checks call it.
///
/// Errors: the task's panic or cancellation, for the caller to render.
pub async fn run_audited(
    control: Arc<Control>,
    principal: Principal,
    route: &'static Route,
    path: String,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Result<axum::response::Response, tokio::task::JoinError> {
    tokio::spawn(async move {
        let response = next.run(request).await;
        let answered = answered(&response);
        record_call(&control, &principal, route, &path, answered).await;
        response
    })
    .await
}

/// Records one call of `route` by `principal` on `path`.
pub async fn record_call(
    control: &Arc<Control>,
    principal: &Principal,
    route: &Route,
    path: &str,
    answered: Answered,
) {
    let (outcome, status, detail) = match answered {
        Answered::Forbidden => (AuditOutcome::Forbidden, StatusCode::FORBIDDEN, None),
        Answered::Status(status, detail) if status.is_success() || status.is_redirection() => {
            (AuditOutcome::Done, status, detail)
        }
        Answered::Status(status, detail) => (AuditOutcome::Refused, status, detail),
    };
    if outcome == AuditOutcome::Forbidden {
        control
            .metrics
            .audit
            .forbidden
            .fetch_add(1, Ordering::Relaxed);
    }
    let (mut run, effect) = super::routes::subject(route.path, path);
    // A handler names the run its call concerns when the path does not (a created run).
    if run.is_none() {
        run = detail
            .as_ref()
            .and_then(|d| d["run"].as_str())
            .map(str::to_owned);
    }
    let mut fields = json!({ "method": route.method, "path": path, "status": status.as_u16() });
    if let (Value::Object(fields), Some(Value::Object(extra))) = (&mut fields, detail) {
        fields.extend(extra);
    }
    let mut entry = NewAuditEntry::new(&principal.name, principal.role.as_str(), route.name)
        .outcome(outcome)
        .detail(fields);
    entry.run = run.as_deref().and_then(RunId::parse);
    entry.effect = effect.as_deref().and_then(EffectId::parse);
    let control = control.clone();
    let _ = tokio::task::spawn_blocking(move || {
        // An effect's entry names its run too, so that the run's export holds it.
        if let (None, Some(effect)) = (&entry.run, &entry.effect) {
            if let Ok(Some(found)) = control.ledger().effect(effect) {
                entry.run = Some(found.run_id);
            }
        }
        record_blocking(&control, entry);
    })
    .await;
}

/// Records the tokens a server starts with (`tokens_loaded`: each name and role) when they
/// differ from the last such entry of the log, so that a token added, removed or given
/// another role between two starts is visible. Looks back through the newest 1000 entries.
pub fn record_tokens_blocking(control: &Control, principals: &[Principal]) {
    let tokens: Vec<Value> = principals
        .iter()
        .map(|p| json!({ "name": p.name, "role": p.role }))
        .collect();
    let recent = control.ledger().audit_page(&AuditPage {
        limit: airlock_ledger::audit::MAX_AUDIT_PAGE,
        newest_first: true,
        ..AuditPage::default()
    });
    let last = recent
        .ok()
        .and_then(|page| page.into_iter().find(|e| e.action == "tokens_loaded"));
    if last.is_some_and(|e| e.detail["tokens"] == json!(tokens)) {
        return;
    }
    record_blocking(
        control,
        NewAuditEntry::new("airlock serve", SERVER_ROLE, "tokens_loaded")
            .detail(json!({ "tokens": tokens })),
    );
}
