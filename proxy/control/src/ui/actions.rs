//! What reviewers do in the UI: verdicts on effects, approving all of a rule's staged
//! effects, commit, abort, and signing out. Every action is a POST form carrying the
//! session's CSRF token, and records the reviewer's name. Commit and approve-by-rule
//! forms also carry the set of effects their page showed (`through_seq`, `digest`), and
//! go ahead only while it is the set they act on ([`crate::runs::expect`]).

use std::sync::Arc;

use airlock_ledger::Verdict;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Form;
use serde::Deserialize;

use super::{parse_effect, parse_run, redirect, safe_next, session, Session, UiError, UiResult};
use crate::release::CommitError;
use crate::runs::expect::Expectation;
use crate::runs::{self, Actor};
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
    /// The expectation's `through_seq`, on commit and approve-by-rule forms.
    #[serde(default)]
    through_seq: Option<String>,
    /// The expectation's `digest`.
    #[serde(default)]
    digest: Option<String>,
}

/// The set of effects a commit or approve-by-rule form showed. Its pages always send
/// one; a form without it (an old page, a hand-made request) is refused.
fn shown(form: &ActionForm) -> UiResult<Expectation> {
    let through_seq = form
        .through_seq
        .as_deref()
        .and_then(|s| s.trim().parse().ok());
    match (through_seq, form.digest.as_deref()) {
        (Some(through_seq), Some(digest)) if digest.starts_with("sha256:") => Ok(Expectation {
            through_seq,
            digest: digest.to_owned(),
        }),
        _ => Err(UiError::with_code(
            StatusCode::BAD_REQUEST,
            "expectation_required",
            "this form does not say which effects it was shown (through_seq and digest); reload the page and confirm again",
        )),
    }
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
    let actor = Actor::Person(session.principal.name.clone());
    let effect = runs::decide_effect(&shared, &effect_id, verdict, &actor).await?;
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
/// (an empty rule: the policy default), except those flow rules hold or block; the run
/// page it redirects to says how many were approved and skipped.
pub(super) async fn approve_rule(
    State(shared): State<Arc<Control>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> UiResult<Response> {
    check_csrf(&session, &form)?;
    let run_id = parse_run(&id)?;
    let expect = shown(&form)?;
    let rule = form.rule.clone().filter(|r| !r.is_empty());
    let actor = Actor::Person(session.principal.name.clone());
    let done =
        match runs::approve_staged_by_rule(&shared, &run_id, rule.clone(), Some(expect), &actor)
            .await
        {
            Err(CommitError::Changed(changed)) => {
                let rule = rule.unwrap_or_default();
                return super::pages::rule_changed(&shared, &session, &id, &rule, &changed).await;
            }
            done => done?,
        };
    // The run page reports what was done, and what flow rules made it skip.
    Ok(redirect(&format!(
        "/runs/{run_id}?approved={}&skipped={}",
        done.approved,
        done.skipped.len()
    )))
}

pub(super) async fn commit_run(
    State(shared): State<Arc<Control>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> UiResult<Response> {
    check_csrf(&session, &form)?;
    let run_id = parse_run(&id)?;
    let expect = shown(&form)?;
    let approve_pending = form.approve_pending.is_some();
    let actor = Actor::Person(session.principal.name.clone());
    // As in the API: once decided, the commit finishes even if the browser goes away.
    match runs::commit_detached(&shared, &run_id, approve_pending, Some(expect), &actor).await {
        // The confirmation again, as the run stands now, saying what changed.
        Err(CommitError::Changed(changed)) => {
            super::pages::confirm_page(&shared, &session, &id, Some(&changed)).await
        }
        done => {
            done?;
            Ok(redirect(&format!("/runs/{run_id}#effects")))
        }
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
    let actor = Actor::Person(session.principal.name.clone());
    runs::abort(&shared, &run_id, &actor).await?;
    Ok(redirect(&format!("/runs/{run_id}")))
}
