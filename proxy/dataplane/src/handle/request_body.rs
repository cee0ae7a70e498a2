//! Request bodies on the per-request path: body presence, bounded reads and the search
//! of passed bodies for credential placeholders.

use std::sync::Arc;

use airlock_ledger::RunId;
use bytes::Bytes;
use http::header;
use http::request::Parts;
use tracing::debug;

use super::Target;
use crate::policy_store::Snapshot;
use crate::request::{has_body, next_frame};
use crate::DataPlane;
use airlock_net::body::full_body;
use airlock_net::body::ProxyBody;
use airlock_net::respond::ProxyError;

/// Searches a passed body headed to `target` for credential placeholders bound elsewhere:
/// read whole when some credential's placeholder is not bound to the host. Refuses the
/// request when one is found, and a body over the staging limit, which cannot be searched
/// (413 `body_unsearchable`, docs/policy.md "Credentials").
pub(super) async fn search_pass_body(
    shared: &Arc<DataPlane>,
    policy: &Snapshot,
    run: &RunId,
    target: &Target,
    parts: &Parts,
    body: ProxyBody,
) -> Result<ProxyBody, ProxyError> {
    if !has_body(parts) || !crate::credentials::any_off_host(policy, &target.host) {
        return Ok(body);
    }
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let limit = shared.limits.stage_body_bytes;
    let unsearchable = |how: &str| {
        ProxyError::BodyUnsearchable {
        limit,
        reason: format!(
            "the request body was not sent: {how} the staging limit of {limit} bytes (--stage-body-limit), and a credential placeholder of this run is not bound to {}; airlock cannot search a body that large for it",
            target.host
        ),
    }
    };
    if declared.is_some_and(|n| n > limit) {
        debug!(run.id = %run, "a passed body over the staging limit cannot be searched for credential placeholders: refused");
        return Err(unsearchable("its declared length is over"));
    }
    let bytes = read_bounded(shared, parts, body)
        .await
        .map_err(|error| match error {
            ProxyError::BodyTooLarge { .. } => unsearchable("it grew past"),
            other => other,
        })?;
    if let Some(credential) =
        crate::credentials::find_off_host(policy, run, &target.host, parts, Some(&bytes))
    {
        return Err(crate::credentials::refuse_off_host(
            shared,
            policy,
            run,
            &target.host,
            credential,
        ));
    }
    Ok(full_body(bytes))
}

/// Reads a request body up to the staging limit: 413 before reading when the declared
/// length is over it (no 100 Continue is sent), 413 once the limit is passed otherwise;
/// 408 when a pause or the whole read passes its deadline ([`next_frame`]).
pub(super) fn read_bounded(
    shared: &Arc<DataPlane>,
    parts: &Parts,
    body: ProxyBody,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Bytes, ProxyError>> + Send>> {
    let limit = shared.limits.stage_body_bytes;
    let total = shared.limits.body_read_timeout;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    Box::pin(async move {
        if declared.is_some_and(|n| n > limit) {
            return Err(ProxyError::BodyTooLarge { limit });
        }
        let mut body = body;
        let mut collected: Vec<u8> = Vec::with_capacity(declared.unwrap_or(0) as usize);
        let started = std::time::Instant::now();
        loop {
            let Some(frame) = next_frame(&mut body, started, total).await? else {
                break;
            };
            let frame = frame.map_err(|error| ProxyError::BadRequest {
                code: "body_read_failed",
                reason: format!("the request body could not be read: {error}"),
            })?;
            if let Ok(data) = frame.into_data() {
                if (collected.len() + data.len()) as u64 > limit {
                    return Err(ProxyError::BodyTooLarge { limit });
                }
                collected.extend_from_slice(&data);
            }
        }
        Ok(Bytes::from(collected))
    })
}
