//! The decide phase: a credential placeholder headed off its host is refused whatever the
//! rules say, then the policy decides (reading the body first only when a body matcher
//! needs it); the decision's audit matches are logged, a passed request's credentials are
//! planned, and the decision is counted and logged.

use airlock_policy::{Action, Decision};
use http::request::Parts;
use tracing::debug;

use super::RequestCtx;
use crate::policy_store::Snapshot;
use crate::request::request_facts;
use airlock_net::body::ProxyBody;
use airlock_net::respond::ProxyError;

/// Decides the request; returns the decision and the body to go on with.
pub(super) async fn decide(
    ctx: &RequestCtx<'_>,
    policy: &Snapshot,
    parts: &mut Parts,
    body: ProxyBody,
) -> Result<(Decision, ProxyBody), ProxyError> {
    let RequestCtx {
        plane, run, target, ..
    } = ctx;
    // A run's credential placeholder never leaves for a host outside its bind, whatever
    // the rules say (docs/policy.md "Credentials").
    if let Some(credential) =
        crate::credentials::find_off_host(policy, run, &target.host, parts, None)
    {
        return Err(crate::credentials::refuse_off_host(
            plane,
            policy,
            run,
            &target.host,
            credential,
        ));
    }
    let (decision, body) = crate::enforce::decide(plane, policy, run, target, parts, body).await?;
    crate::enforce::log_audit(run, &ctx.url, &decision);
    crate::enforce::note_audit(parts, &decision);
    plan_credentials(ctx, policy, &decision, parts)?;
    count_and_log(ctx, parts, &decision);
    Ok((decision, body))
}

/// What a passed request gets placed on it on the way out: the rule's credential and the
/// run's placeholders swapped for their values.
fn plan_credentials(
    ctx: &RequestCtx<'_>,
    policy: &Snapshot,
    decision: &Decision,
    parts: &mut Parts,
) -> Result<(), ProxyError> {
    let credential_plan = if decision.action == Action::Pass {
        let inject = decision
            .rule
            .as_deref()
            .and_then(|id| policy.rule(id))
            .and_then(|rule| rule.inject());
        // The headers let a bind's `methods = "read"` know a git fetch (its Content-Type);
        // the body is not offered, so a GraphQL query stays outside such a bind.
        let values: Vec<(&str, std::borrow::Cow<'_, str>)> = parts
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), String::from_utf8_lossy(value.as_bytes())))
            .collect();
        let headers: Vec<(&str, &str)> = values
            .iter()
            .map(|(name, value)| (*name, value.as_ref()))
            .collect();
        let facts = airlock_policy::RequestFacts {
            headers: &headers,
            ..request_facts(&ctx.target, parts)
        };
        crate::credentials::plan(policy, &ctx.run, &facts, inject)?
    } else {
        None
    };
    if let Some(plan) = credential_plan {
        parts.extensions.insert(plan);
    }
    Ok(())
}

/// Counts the decision in the metrics and logs it.
fn count_and_log(ctx: &RequestCtx<'_>, parts: &Parts, decision: &Decision) {
    let counter = match decision.action {
        Action::Pass => &ctx.plane.metrics.passed,
        Action::Stage => &ctx.plane.metrics.staged,
        Action::Deny | Action::Tunnel => &ctx.plane.metrics.denied,
    };
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ctx.line.decided(decision);
    // The request's canonical line (at info, `line`) says what was decided once it is
    // answered; this one, at debug, comes at the moment of the decision.
    macro_rules! decided {
        ($level:ident) => {
            $level!(
                run.id = %ctx.run,
                http.method = %parts.method,
                url = %ctx.url,
                policy.action = ?decision.action,
                policy.rule = decision.rule.as_deref().unwrap_or("<default>"),
                policy.reason_code = decision.reason_code,
                "request decided"
            )
        };
    }
    decided!(debug);
}
