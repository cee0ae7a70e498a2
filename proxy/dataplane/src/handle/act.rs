//! The act phase: an upgrade is relayed or refused; otherwise the request is denied,
//! staged or passed, as decided.

use airlock_policy::{Action, Decision, Rule};
use http::request::Parts;
use http::Response;
use tracing::debug;

use super::inspect::{inspect_pass_body, inspect_stage_body, inspect_upgrade, Inspected};
use super::{RequestCtx, Target};
use crate::policy_store::Snapshot;
use crate::DataPlane;
use airlock_net::body::ProxyBody;
use airlock_net::respond::ProxyError;

/// Acts on the decision: `rule` is the rule whose obligations were applied (a stage's, for
/// its auto-approval).
pub(super) async fn act(
    ctx: &RequestCtx<'_>,
    policy: &Snapshot,
    decision: Decision,
    rule: Option<&Rule>,
    parts: Parts,
    body: ProxyBody,
) -> Result<Response<ProxyBody>, ProxyError> {
    if let Some(protocol) = crate::upgrade::requested(&parts.headers) {
        return upgrade(ctx, policy, decision, protocol, parts).await;
    }
    match decision.action {
        Action::Deny | Action::Tunnel => Err(deny(policy, &ctx.target, &parts, decision)),
        Action::Stage => stage(ctx, policy, decision.rule.as_deref(), rule, parts, body).await,
        Action::Pass => pass(ctx, policy, decision.rule, parts, body).await,
    }
}

/// An upgrade handshake: relayed when passed and it carries no placeholder (refused
/// otherwise, [`inspect_upgrade`]); it cannot be staged.
async fn upgrade(
    ctx: &RequestCtx<'_>,
    policy: &Snapshot,
    decision: Decision,
    protocol: String,
    parts: Parts,
) -> Result<Response<ProxyBody>, ProxyError> {
    match decision.action {
        Action::Pass => {
            inspect_upgrade(ctx, policy, &parts, decision.rule.as_deref()).await?;
            // The handshake's URL and headers are checked as any pass's are.
            let _ = super::pass_flows::check_pass_flows(
                ctx,
                policy,
                decision.rule.as_deref(),
                &parts,
                airlock_net::body::full_body(bytes::Bytes::new()),
            )
            .await?;
            crate::upgrade::relay(
                ctx.plane,
                policy,
                &ctx.run,
                &ctx.target.host,
                &ctx.url,
                decision.rule,
                protocol,
                parts,
            )
            .await
        }
        Action::Stage => Err(ProxyError::Denied {
            rule: decision.rule,
            reason: format!(
                "a {protocol} upgrade cannot be staged: its messages flow both ways after the handshake; \
                 a rule must pass or deny it"
            ),
            reason_code: "upgrade_not_stageable".to_owned(),
            policy_revision: policy.revision().to_owned(),
            hint: Some("a rule that passes this upgrade is needed; read the manifest, and ask the operator".into()),
        }),
        Action::Deny | Action::Tunnel => Err(deny(policy, &ctx.target, &parts, decision)),
    }
}

/// A denial (a tunnel decision on a request inside an intercepted CONNECT is one too),
/// naming the nearest miss (reason and hint) when no rule allowed the request.
fn deny(policy: &Snapshot, target: &Target, parts: &Parts, decision: Decision) -> ProxyError {
    let near = (decision.reason_code == airlock_policy::reason_code::DEFAULT_DENY)
        .then(|| super::near_miss::near_miss(policy, target, parts));
    ProxyError::Denied {
        reason: match &near {
            Some(near) => format!("{} ({})", decision.reason, near.reason),
            None => decision.reason,
        },
        rule: decision.rule,
        reason_code: decision.reason_code.to_owned(),
        policy_revision: policy.revision().to_owned(),
        hint: near.map(|near| near.hint),
    }
}

/// Stages the request, then auto-approves it when its rule says so.
async fn stage(
    ctx: &RequestCtx<'_>,
    policy: &Snapshot,
    rule_id: Option<&str>,
    rule: Option<&Rule>,
    parts: Parts,
    body: ProxyBody,
) -> Result<Response<ProxyBody>, ProxyError> {
    // A destination release could never dial (a private address no allow_private
    // names, airlock's own listeners) is refused now, as a pass would be, rather
    // than staged for a reviewer to approve and a commit to fail.
    refuse_undialable(ctx.plane, &ctx.target).await?;
    let (body, depends_on) = inspect_stage_body(ctx, policy, &parts, body).await?;
    if let Some(refused) = super::legacy_mcp::refuse(ctx, policy, rule_id, &parts, &body) {
        return refused;
    }
    let staged = crate::stage::stage(
        ctx.plane, policy, &ctx.run, &ctx.url, rule_id, parts, body, depends_on,
    )
    .await?;
    let mut staged = staged;
    let held = crate::enforce::flow_hold(ctx.plane, &ctx.policy, &mut staged).await;
    if let (Some(rule), false) = (rule, held) {
        crate::enforce::auto_approve(ctx.plane, rule, &staged).await;
    }
    Ok(staged)
}

/// Passes the request, unless its body inspection stages it or answers it.
async fn pass(
    ctx: &RequestCtx<'_>,
    policy: &Snapshot,
    rule_id: Option<String>,
    parts: Parts,
    body: ProxyBody,
) -> Result<Response<ProxyBody>, ProxyError> {
    match inspect_pass_body(ctx, &parts, body).await? {
        Inspected::Forward(body) => {
            // Flows decide what passes too (docs/lineage.md, "Flows on the pass path").
            let body =
                super::pass_flows::check_pass_flows(ctx, policy, rule_id.as_deref(), &parts, body)
                    .await?;
            crate::staged_lists::forward(
                ctx.plane, policy, &ctx.run, &ctx.url, rule_id, parts, body,
            )
            .await
        }
        Inspected::Stage(body, depends_on) => {
            ctx.line.staged_instead();
            crate::stage::stage(
                ctx.plane,
                policy,
                &ctx.run,
                &ctx.url,
                rule_id.as_deref(),
                parts,
                body,
                depends_on,
            )
            .await
        }
        Inspected::Answered(answer) => Ok(answer),
    }
}

/// Refuses a destination the release could never dial: its name resolves only to private
/// or special-purpose addresses no `allow_private` names, or to airlock's own listeners
/// (docs/policy.md invariant 1, checked at staging as it is on pass). A name that does not
/// resolve now is staged: the origin may be reachable at release.
pub(super) async fn refuse_undialable(
    shared: &DataPlane,
    target: &Target,
) -> Result<(), ProxyError> {
    match shared.dialer.resolve(&target.host, target.port).await {
        Err(dial) => match dial.refusal_code() {
            Some(code) => Err(ProxyError::DestinationRefused {
                code,
                reason: dial.to_string(),
            }),
            None => {
                debug!(origin.host = %target.host, error = %dial, "staging for a destination that does not resolve now");
                Ok(())
            }
        },
        Ok(_) => Ok(()),
    }
}
