//! The apply-obligations phase: the winning rule's obligations (limits, strip) before
//! anything is passed or staged. A request over a limit is answered here (413/414/429).

use airlock_policy::{Action, Decision, Rule};
use http::request::Parts;

use super::RequestCtx;
use crate::policy_store::Snapshot;
use airlock_net::body::ProxyBody;
use airlock_net::respond::ProxyError;

/// Applies the obligations of the rule that decided a pass or stage; returns that rule
/// (for `act`) and the body to go on with.
pub(super) async fn apply_obligations<'p>(
    ctx: &RequestCtx<'_>,
    policy: &'p Snapshot,
    decision: &Decision,
    parts: &mut Parts,
    body: ProxyBody,
) -> Result<(Option<&'p Rule>, ProxyBody), ProxyError> {
    let rule = decision
        .rule
        .as_deref()
        .and_then(|id| policy.rule(id))
        .filter(|rule| {
            // In a policy in audit mode a deny rule's id may name a pass: its
            // obligations are not the pass's.
            rule.action() == decision.action
                && matches!(decision.action, Action::Pass | Action::Stage)
        });
    let body = match rule {
        Some(rule) => {
            crate::enforce::apply(ctx.plane, policy, &ctx.run, &ctx.target, rule, parts, body)
                .await?
        }
        None => body,
    };
    Ok((rule, body))
}
