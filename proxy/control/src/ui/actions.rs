//! What reviewers do in the UI: verdicts on effects, approving all of a rule's staged
//! effects, commit, abort, and signing out. Every action is a POST form carrying the
//! session's CSRF token, and records the reviewer's name.

use std::sync::Arc;

use airlock_ledger::Verdict;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Form;
use serde::Deserialize;

use super::{
    blocking, parse_effect, parse_run, redirect, safe_next, session, Session, UiError, UiResult,
};
use crate::Control;

#[derive(Debug, Default, Deserialize)]
pub(super) struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    back: Option<String>,
    #[serde(default)]
    rule: Option<String>,
    #[serde(default)]
    approve_pending: Option<String>,
}

fn check_csrf(session: &Session, form: &ActionForm) -> UiResult<()> {
    if session::same(&form.csrf, &session.csrf) {
        Ok(())
    } else {
        Err(UiError::new(
            StatusCode::FORBIDDEN,
            "the form's CSRF token does not match this session; reload the page and try again",
        ))
    }
}

pub(super) async fn logout(
    axum::Extension(session): axum::Extension<Session>,
    Form(form): Form<ActionForm>,
) -> UiResult<Response> {
    check_csrf(&session, &form)?;
    let mut response = redirect("/login");
    if let Ok(value) = HeaderValue::from_str(&session::clear_cookie()) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    Ok(response)
}

async fn decide(
    shared: Arc<Control>,
    session: Session,
    id: String,
    form: ActionForm,
    verdict: Verdict,
) -> UiResult<Response> {
    check_csrf(&session, &form)?;
    let effect_id = parse_effect(&id)?;
    let ledger = shared.ledger.clone();
    let by = session.reviewer.name.clone();
    let effect = blocking(move || ledger.decide_effect(&effect_id, verdict, &by)).await?;
    let back = safe_next(form.back.as_deref());
    let back = if back == "/" {
        format!("/runs/{}#{}", effect.run_id, effect.id)
    } else {
        back
    };
    Ok(redirect(&back))
}

pub(super) async fn approve_effect(
    State(shared): State<Arc<Control>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> UiResult<Response> {
    decide(shared, session, id, form, Verdict::Approve).await
}

pub(super) async fn reject_effect(
    State(shared): State<Arc<Control>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> UiResult<Response> {
    decide(shared, session, id, form, Verdict::Reject).await
}

/// Approves every `staged` effect of the run that the rule named in the form staged
/// (an empty rule: the policy default).
pub(super) async fn approve_rule(
    State(shared): State<Arc<Control>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> UiResult<Response> {
    check_csrf(&session, &form)?;
    let run_id = parse_run(&id)?;
    let rule = form.rule.clone().filter(|r| !r.is_empty());
    let ledger = shared.ledger.clone();
    let by = session.reviewer.name.clone();
    let run = run_id.clone();
    blocking(move || {
        for effect in ledger.effects(&run)? {
            if effect.state == airlock_ledger::EffectState::Staged && effect.rule == rule {
                ledger.decide_effect(&effect.id, Verdict::Approve, &by)?;
            }
        }
        Ok(())
    })
    .await?;
    Ok(redirect(&format!("/runs/{run_id}")))
}

pub(super) async fn commit_run(
    State(shared): State<Arc<Control>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> UiResult<Response> {
    check_csrf(&session, &form)?;
    let run_id = parse_run(&id)?;
    let approve_pending = form.approve_pending.is_some();
    let by = session.reviewer.name.clone();
    let run = run_id.clone();
    // As in the API: once decided, the commit finishes even if the browser goes away.
    let task =
        tokio::spawn(
            async move { crate::release::commit(&shared, &run, approve_pending, &by).await },
        );
    match task.await {
        Ok(Ok(_report)) => Ok(redirect(&format!("/runs/{run_id}#effects"))),
        Ok(Err(crate::release::CommitError::Ledger(error))) => Err(error.into()),
        Ok(Err(other)) => Err(UiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            other.to_string(),
        )),
        Err(error) => Err(UiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            error.to_string(),
        )),
    }
}

pub(super) async fn abort_run(
    State(shared): State<Arc<Control>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> UiResult<Response> {
    check_csrf(&session, &form)?;
    let run_id = parse_run(&id)?;
    let ledger = shared.ledger.clone();
    let closing = shared.clone();
    let by = session.reviewer.name.clone();
    let run = run_id.clone();
    blocking(move || {
        let run = ledger.abort(&run, &by)?;
        closing.close_run(&run.id);
        Ok(())
    })
    .await?;
    Ok(redirect(&format!("/runs/{run_id}")))
}
