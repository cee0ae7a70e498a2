//! Sending one release request to its origin, and classifying what went wrong by how far
//! it got (docs/design.md, "Outcomes of a release"): provably nothing sent (resolve, dial
//! or TLS handshake failed, the request could not be built) is `failed` and retriable;
//! anything after the request may have started (a closed connection, the release
//! timeout, a cut response) is `unknown`. Classified from the upstream client's error
//! types ([`airlock_net::failure`]), never from message text.

use std::sync::Arc;

use airlock_ledger::Delivery;
use airlock_net::body::full_body;
use airlock_net::failure::{nothing_sent, Failure};
use airlock_net::headers::{strip_hop_by_hop, strip_reserved, to_records};
use airlock_net::respond::error_chain;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request};

use crate::Control;

/// How much of an origin's response to a release is stored in the ledger.
const RELEASE_CAPTURE_BYTES: usize = 1024 * 1024;

/// What the origin answered: status, headers, the captured body (up to
/// [`RELEASE_CAPTURE_BYTES`]) and the body's full length in bytes.
pub(super) type Sent = (u16, Vec<airlock_ledger::Header>, Vec<u8>, u64);

/// A release request ready to send: URL, headers, body (placeholders substituted).
pub(super) type Prepared = (String, Vec<(String, Vec<u8>)>, Vec<u8>);

/// A release attempt that got no complete answer.
#[derive(Debug)]
pub(super) struct SendFailure {
    /// What happened, for the effect's `state_reason` (names `--upstream-ca` when the
    /// origin's certificate was not trusted).
    pub(super) reason: String,
    /// How far it got: [`Delivery::NotSent`] or [`Delivery::Unanswered`].
    pub(super) delivery: Delivery,
    /// The origin's status, when its response head arrived before the body was cut.
    pub(super) status: Option<u16>,
}

impl SendFailure {
    pub(super) fn not_sent(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            delivery: Delivery::NotSent,
            status: None,
        }
    }

    fn unanswered(reason: String, status: Option<u16>) -> Self {
        Self {
            reason,
            delivery: Delivery::Unanswered,
            status,
        }
    }

    /// The failure of the upstream client's `error`: connecting failed (nothing sent),
    /// or the request may have reached the origin.
    fn of_request(error: &(dyn std::error::Error + 'static)) -> Self {
        let chain = error_chain(error).unwrap_or_else(|| error.to_string());
        if !nothing_sent(error) {
            return Self::unanswered(
                format!(
                    "the origin gave no answer ({chain}); the request may have reached it, so its outcome is unknown"
                ),
                None,
            );
        }
        if Failure::of(error).is_untrusted_certificate() {
            return Self::not_sent(format!(
                "TLS verification of the origin failed ({chain}); nothing was sent: airlock verifies origins against the webpki roots and the CA certificates given with `airlock serve --upstream-ca FILE`; add the origin's CA there (or fix its certificate), then retry the effect"
            ));
        }
        Self::not_sent(format!(
            "connecting to the origin failed ({chain}); nothing was sent"
        ))
    }
}

/// Sends one release request and reads the answer, within the release timeout.
///
/// Errors: [`SendFailure`], classified as the module docs say.
pub(super) async fn send(
    shared: &Arc<Control>,
    method: &str,
    (url, header_list, body): Prepared,
) -> Result<Sent, SendFailure> {
    let method = Method::from_bytes(method.as_bytes())
        .map_err(|e| SendFailure::not_sent(format!("invalid method: {e}")))?;
    let mut request = Request::builder().method(method).uri(url.as_str());
    {
        let headers = request
            .headers_mut()
            .ok_or_else(|| SendFailure::not_sent("invalid release request"))?;
        for (name, value) in &header_list {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_bytes(value),
            ) else {
                continue;
            };
            headers.append(name, value);
        }
        strip_hop_by_hop(headers);
        headers.remove(http::header::CONTENT_LENGTH);
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let request = request
        .body(full_body(Bytes::from(body)))
        .map_err(|e| SendFailure::not_sent(format!("invalid release request: {e}")))?;
    // The status, once the response head arrived: a timeout after it still knows it.
    let status = std::sync::Mutex::new(None::<u16>);
    let exchange = async {
        let response = shared
            .data
            .upstream()
            .request(request)
            .await
            .map_err(|e| SendFailure::of_request(&e))?;
        let (mut parts, mut body) = response.into_parts();
        *status.lock().unwrap_or_else(|e| e.into_inner()) = Some(parts.status.as_u16());
        strip_reserved(&mut parts.headers);
        let mut captured = Vec::new();
        let mut total = 0u64;
        while let Some(frame) = http_body_util::BodyExt::frame(&mut body).await {
            let frame = frame.map_err(|e| {
                SendFailure::unanswered(
                    format!(
                        "the origin answered {} but its response was cut ({e}); its outcome is unknown",
                        parts.status.as_u16()
                    ),
                    Some(parts.status.as_u16()),
                )
            })?;
            if let Some(data) = frame.data_ref() {
                total += data.len() as u64;
                let room = RELEASE_CAPTURE_BYTES.saturating_sub(captured.len());
                captured.extend_from_slice(&data[..data.len().min(room)]);
            }
        }
        Ok::<_, SendFailure>((
            parts.status.as_u16(),
            to_records(&parts.headers),
            captured,
            total,
        ))
    };
    let timeout = shared.data.limits().release_timeout;
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(SendFailure::unanswered(
            format!(
                "the origin did not answer within {} s (the release timeout); the request may have reached it, so its outcome is unknown",
                timeout.as_secs_f64()
            ),
            *status.lock().unwrap_or_else(|e| e.into_inner()),
        )),
    }
}
