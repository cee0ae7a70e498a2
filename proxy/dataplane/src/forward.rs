//! Pass: forward a request upstream, streaming both bodies, and journal it as a read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use airlock_ledger::{Digest, Read, RunId};
use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use http_body_util::BodyExt;
use tracing::warn;

use crate::lineage::{Job, READ_CAPTURE_BYTES};
use crate::DataPlane;
use airlock_net::body::{BoxError, MeteredBody, ProxyBody};
use airlock_net::headers::{strip_hop_by_hop, strip_reserved};
use airlock_net::respond::ProxyError;
use airlock_net::upstream::Failure;

/// What a finished response leaves for lineage analysis: captured body, the response
/// headers (a cheap clone: header values are reference-counted), and whether the body's
/// digest is still to be taken from the captured body (it fit whole).
type Content = (Vec<Bytes>, http::HeaderMap, bool);

/// Forwards a passed request upstream, streaming both bodies, and journals it as a read
/// when the response body ends (then hands the captured body to the lineage worker).
pub async fn forward(
    shared: &Arc<DataPlane>,
    run: &RunId,
    url: &str,
    rule: Option<String>,
    mut parts: Parts,
    body: ProxyBody,
) -> Result<Response<ProxyBody>, ProxyError> {
    let audit = crate::enforce::take_audit(&mut parts);
    let trailers = airlock_net::headers::wants_trailers(&parts.headers);
    strip_hop_by_hop(&mut parts.headers);
    if trailers {
        parts
            .headers
            .insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    }
    parts.uri = url.parse().map_err(|_| ProxyError::BadRequest {
        code: "bad_uri",
        reason: format!("{url} is not a valid URI"),
    })?;
    parts.version = http::Version::HTTP_11;
    // The rule's credential and the run's placeholders, placed only now (never journaled).
    let scrubber = crate::credentials::apply(&mut parts)?.filter(|s| !s.is_empty());
    let sent = Arc::new(AtomicU64::new(0));
    let sent_in_body = sent.clone();
    // A request without a body (most reads) has nothing to count: no wrapper.
    let request_body = if http_body::Body::is_end_stream(&body) {
        body
    } else {
        MeteredBody::new(
            body,
            false,
            Box::new(move |metered| sent_in_body.store(metered.bytes, Ordering::Relaxed)),
        )
        .boxed()
    };
    let method = parts.method.to_string();
    let upstream = Request::from_parts(parts, request_body);
    let started = airlock_ledger::now_ms();
    let journal = {
        let ledger = shared.ledger.clone();
        let lineage = shared.lineage.clone();
        let run = run.clone();
        let url = url.to_owned();
        move |status: Option<u16>,
              response_bytes: u64,
              digest: Option<[u8; 32]>,
              error: Option<String>,
              content: Option<Content>| {
            let read = Read {
                run_id: run,
                seq: 0,
                method,
                url,
                status,
                request_bytes: sent.load(Ordering::Relaxed),
                response_bytes,
                response_digest: digest.map(|h| Digest::from_blake3(&h)),
                rule,
                created_at_ms: started,
                error,
                audit: audit.clone(),
            };
            match content {
                // Journaled and analysed by the lineage worker, off the request path.
                Some((body, headers, digest_pending)) => lineage.submit(Job::Read {
                    read: Box::new(read),
                    body,
                    headers,
                    digest_pending,
                }),
                None => {
                    if let Err(error) = ledger.journal_read(read) {
                        warn!(error = %error, "could not journal a read");
                    }
                }
            }
        }
    };
    let response = match shared.upstream.request(upstream).await {
        Ok(response) => response,
        Err(error) => {
            let proxy_error = ProxyError::upstream(&error);
            journal(
                None,
                0,
                None,
                Some(proxy_error.body()["reason"].to_string()),
                None,
            );
            return Err(proxy_error);
        }
    };
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    strip_reserved(&mut parts.headers);
    // Where a secret was placed, an encoded answer must be decoded to be scrubbed (the
    // origin ignored `Accept-Encoding: identity`), or withheld when it cannot be.
    let mut decode = None;
    if let Some(scrubber) = &scrubber {
        scrubber.scrub_headers(&mut parts.headers);
        use crate::credentials::decode::Coding;
        match Coding::of(&parts.headers) {
            Coding::Identity => {}
            Coding::Unsupported(coding) => {
                let reason = format!(
                    "the origin answered with Content-Encoding {coding} although airlock asked for identity; airlock cannot search it for the credential it placed, so the answer is withheld"
                );
                journal(
                    Some(parts.status.as_u16()),
                    0,
                    None,
                    Some(reason.clone()),
                    None,
                );
                return Err(ProxyError::Upstream {
                    failure: Failure::Withheld,
                    reason,
                });
            }
            coding => {
                parts.headers.remove(http::header::CONTENT_ENCODING);
                parts.headers.remove(http::header::CONTENT_LENGTH);
                decode = Some(coding);
            }
        }
    }
    let status = parts.status.as_u16();
    let headers = parts.headers.clone();
    let body: ProxyBody = body.map_err(|e| -> BoxError { Box::new(e) }).boxed();
    let body: ProxyBody = match &decode {
        Some(coding) => match crate::credentials::decode::DecodedBody::new(body, coding) {
            Some(decoded) => decoded.boxed(),
            // `decode` holds only codings DecodedBody takes.
            None => {
                return Err(ProxyError::Internal {
                    reason: "an answer coding airlock cannot decode reached the decoder".into(),
                })
            }
        },
        None => body,
    };
    let body: ProxyBody = match scrubber {
        // An echoed secret is masked before the client, the journal or lineage sees it.
        Some(scrubber) => crate::credentials::scrub::ScrubBody::new(body, scrubber).boxed(),
        None => body,
    };
    let body = MeteredBody::new(
        body,
        true,
        Box::new(move |metered| {
            let content = if metered.error.is_none() {
                Some((metered.captured, headers, metered.hash_deferred))
            } else {
                None
            };
            journal(
                Some(status),
                metered.bytes,
                metered.blake3,
                metered.error,
                content,
            )
        }),
    )
    .capture(READ_CAPTURE_BYTES)
    // The digest of a body that fits the capture is taken by the lineage worker, which
    // journals the read (off the request path).
    .defer_hash()
    .boxed();
    Ok(Response::from_parts(parts, body))
}
