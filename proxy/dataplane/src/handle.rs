//! One request, once its run and destination are known: decide by policy, then pass,
//! stage or deny. The same path serves plain `http://` requests and requests inside an
//! intercepted CONNECT (POLICY.md invariant 7: one decision function).

use std::sync::Arc;

use airlock_ledger::RunId;
use airlock_policy::Action;
use http::request::Parts;
use http::{header, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tracing::{debug, info, warn};

use crate::forward::forward;
use crate::stage::stage;
use crate::DataPlane;
use airlock_net::body::{BoxError, ProxyBody};
use airlock_net::respond::ProxyError;

pub use airlock_net::authority::Target;

mod act;
mod authority;
mod inspect;
mod request_body;

use act::{nearest_miss, refuse_undialable};
pub use airlock_net::body::full_body;
use authority::check_authority;
use inspect::{find_dependencies, issued_placeholders};
pub use request_body::{has_body, FramedBody, BODY_IDLE_TIMEOUT};
use request_body::{read_bounded, search_pass_body};

/// Counts a request as in flight until dropped, which is when its response body has been
/// sent (graceful shutdown waits for zero).
struct InFlight(Arc<DataPlane>);

impl InFlight {
    fn new(shared: &Arc<DataPlane>) -> Self {
        shared
            .in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(shared.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Handles one request of `run` for `target`.
pub async fn handle(
    shared: Arc<DataPlane>,
    run: RunId,
    target: Target,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let in_flight = InFlight::new(&shared);
    if let Err(error) = airlock_net::headers::check_head_limits(req.headers(), req.uri()) {
        return error.into_response();
    }
    let (mut parts, body) = req.into_parts();
    // hyper knows from the framing (h2 END_STREAM, h1 length) whether a body follows.
    let framed = !http_body::Body::is_end_stream(&body);
    let body = body.map_err(|e| -> BoxError { Box::new(e) }).boxed();
    let body = if framed {
        parts.extensions.insert(FramedBody);
        airlock_net::limits::keepalive::hold_body(&parts, body)
    } else {
        body
    };
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = target.url(path_and_query);
    if shared.is_closed(&run) {
        // Committed or aborted: the run's credentials still authenticate, so the agent
        // learns why, but nothing passes and nothing is staged any more.
        return ProxyError::RunNotOpen {
            reason: format!("run {run} was committed or aborted: it accepts no more requests"),
        }
        .into_response();
    }
    if target.host == crate::manifest::MANIFEST_HOST {
        let response = crate::manifest::answer(&shared, run.as_str(), parts.uri.path());
        let (head, body) = response.into_parts();
        return Response::from_parts(
            head,
            airlock_net::body::Guarded::new(body, Box::new(in_flight)).boxed(),
        );
    }
    let method = parts.method.to_string();
    let had_body = has_body(&parts);
    let result = decide_and_act(&shared, &run, &target, &url, parts, body).await;
    if let Err(ProxyError::Denied {
        rule,
        reason_code,
        policy_revision,
        ..
    }) = &result
    {
        crate::denials::journal(
            &shared,
            &run,
            crate::denials::Refusal {
                method,
                url: url.clone(),
                has_body: had_body,
                rule: rule.clone(),
                reason_code: reason_code.clone(),
                policy_revision: policy_revision.clone(),
            },
        );
    }
    let response = result.unwrap_or_else(|error| {
        if error.status().is_server_error() {
            warn!(run.id = %run, url = %url, error = %error, reason = %error.body()["reason"], "request failed");
        }
        error.into_response()
    });
    let (head, body) = response.into_parts();
    Response::from_parts(
        head,
        airlock_net::body::Guarded::new(body, Box::new(in_flight)).boxed(),
    )
}

async fn decide_and_act(
    shared: &Arc<DataPlane>,
    run: &RunId,
    target: &Target,
    url: &str,
    parts: Parts,
    body: ProxyBody,
) -> Result<Response<ProxyBody>, ProxyError> {
    check_authority(&parts, target)?;
    // One policy snapshot for the whole request: a reload cannot split it.
    let policy = shared.policy.current();
    // A run's credential placeholder never leaves for a host outside its bind, whatever
    // the rules say (POLICY.md "Credentials").
    if let Some(credential) =
        crate::credentials::find_off_host(&policy, run, &target.host, &parts, None)
    {
        return Err(crate::credentials::refuse_off_host(
            shared,
            &policy,
            run,
            &target.host,
            credential,
        ));
    }
    let mut parts = parts;
    let (decision, body) = match crate::enforce::decide(shared, run, target, &parts, body).await {
        Ok(decided) => decided,
        Err(crate::enforce::Refused::Error(error)) => return Err(error),
        Err(crate::enforce::Refused::Response(response)) => return Ok(response),
    };
    crate::enforce::log_audit(run, url, &decision);
    crate::enforce::note_audit(&mut parts, &decision);
    // What a passed request gets placed on it on the way out: the rule's credential and
    // the run's placeholders swapped for their values.
    let credential_plan = if decision.action == Action::Pass {
        let inject = decision
            .rule
            .as_deref()
            .and_then(|id| policy.rule(id))
            .and_then(|rule| rule.inject());
        let facts = request_facts(target, &parts);
        crate::credentials::plan(&policy, run, &facts, inject)?
    } else {
        None
    };
    if let Some(plan) = credential_plan {
        parts.extensions.insert(plan);
    }
    let counter = match decision.action {
        Action::Pass => &shared.metrics.passed,
        Action::Stage => &shared.metrics.staged,
        Action::Deny | Action::Tunnel => &shared.metrics.denied,
    };
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Passed requests are the bulk of traffic: their line is at debug level, so a busy
    // agent does not pay a log write per read (stage and deny stay at info).
    macro_rules! decided {
        ($level:ident) => {
            $level!(
                run.id = %run,
                http.method = %parts.method,
                url = %url,
                policy.action = ?decision.action,
                policy.rule = decision.rule.as_deref().unwrap_or("<default>"),
                policy.reason_code = decision.reason_code,
                "request decided"
            )
        };
    }
    if decision.action == Action::Pass {
        decided!(debug);
    } else {
        decided!(info);
    }
    // The winning rule's obligations (limits, strip) before anything is passed or staged.
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
            match crate::enforce::apply(shared, run, target, rule, &mut parts, body).await {
                Ok(body) => body,
                Err(crate::enforce::Refused::Error(error)) => return Err(error),
                Err(crate::enforce::Refused::Response(response)) => return Ok(response),
            }
        }
        None => body,
    };
    if let Some(protocol) = crate::upgrade::requested(&parts.headers) {
        return match decision.action {
            Action::Pass => crate::upgrade::relay(shared, run, url, decision.rule, protocol, parts).await,
            Action::Stage => Err(ProxyError::Denied {
                rule: decision.rule,
                reason: format!(
                    "a {protocol} upgrade cannot be staged: its messages flow both ways after the handshake; \
                     a rule must pass or deny it"
                ),
                reason_code: "upgrade_not_stageable".to_owned(),
                policy_revision: policy.revision().to_owned(),
            }),
            Action::Deny | Action::Tunnel => Err(ProxyError::Denied {
                rule: decision.rule,
                reason: decision.reason,
                reason_code: decision.reason_code.to_owned(),
                policy_revision: policy.revision().to_owned(),
            }),
        };
    }
    match decision.action {
        Action::Deny | Action::Tunnel => Err(ProxyError::Denied {
            reason: match nearest_miss(&policy, target, &parts, &decision) {
                Some(near) => format!("{} ({near})", decision.reason),
                None => decision.reason,
            },
            rule: decision.rule,
            reason_code: decision.reason_code.to_owned(),
            policy_revision: policy.revision().to_owned(),
        }),
        Action::Stage => {
            // A destination release could never dial (a private address no allow_private
            // names, airlock's own listeners) is refused now, as a pass would be, rather
            // than staged for a reviewer to approve and a commit to fail.
            refuse_undialable(shared, target).await?;
            let issued = issued_placeholders(shared, run).await?;
            let body = read_bounded(shared, &parts, body).await?;
            if let Some(credential) =
                crate::credentials::find_off_host(&policy, run, &target.host, &parts, Some(&body))
            {
                return Err(crate::credentials::refuse_off_host(
                    shared,
                    &policy,
                    run,
                    &target.host,
                    credential,
                ));
            }
            let depends_on = find_dependencies(&issued, &parts, Some(&body));
            let staged = stage(
                shared,
                run,
                url,
                decision.rule.as_deref(),
                parts,
                body,
                depends_on,
            )
            .await?;
            if let Some(rule) = rule {
                crate::enforce::auto_approve(shared, rule, &staged).await;
            }
            Ok(staged)
        }
        Action::Pass => {
            let body = search_pass_body(shared, run, target, &parts, body).await?;
            // A placeholder must never reach a real origin: a request that carries one
            // depends on a staged effect, so it is staged too (DESIGN.md lineage).
            let issued = issued_placeholders(shared, run).await?;
            if issued.is_empty() {
                return forward(shared, run, url, decision.rule, parts, body).await;
            }
            let mut depends_on = find_dependencies(&issued, &parts, None);
            if !depends_on.is_empty() && !has_body(&parts) {
                // Read-your-staged-writes: the adapter of the staged effect may answer
                // from staged state (docs/adapters.md).
                let parents: Vec<_> = depends_on.iter().map(|d| d.effect.clone()).collect();
                if let Some(answer) = crate::staged_reads::answer(
                    shared,
                    run,
                    parts.method.as_str(),
                    url,
                    &parts.headers,
                    &parents,
                )
                .await
                {
                    return Ok(answer);
                }
            }
            if depends_on.is_empty() && !has_body(&parts) {
                return forward(shared, run, url, decision.rule, parts, body).await;
            }
            let declared = parts
                .headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            if depends_on.is_empty() && declared.is_some_and(|n| n > shared.limits.stage_body_bytes)
            {
                // Too large to hold and search: a passed upload streams on unsearched.
                warn!(run.id = %run, url = %url, "a passed body over the staging limit was not searched for placeholders");
                return forward(shared, run, url, decision.rule, parts, body).await;
            }
            let body = read_bounded(shared, &parts, body).await?;
            depends_on = find_dependencies(&issued, &parts, Some(&body));
            if depends_on.is_empty() {
                return forward(shared, run, url, decision.rule, parts, full_body(body)).await;
            }
            info!(run.id = %run, url = %url, "the request carries a placeholder of a staged effect: staged instead of passed");
            stage(
                shared,
                run,
                url,
                decision.rule.as_deref(),
                parts,
                body,
                depends_on,
            )
            .await
        }
    }
}

/// The facts a policy decides on for a request to `target`: scheme, host, port, method,
/// path and whether a body follows (query, headers and profile left empty).
pub(crate) fn request_facts<'a>(
    target: &'a Target,
    parts: &'a Parts,
) -> airlock_policy::RequestFacts<'a> {
    airlock_policy::RequestFacts::new(
        target.scheme,
        &target.host,
        target.port,
        parts.method.as_str(),
        parts.uri.path(),
        has_body(parts),
    )
}
