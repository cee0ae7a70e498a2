//! Releasing an effect inside a session airlock opens with the origin for it, when the
//! effect's adapter asks for one ([`airlock_adapters::Adapter::release_session`]; MCP:
//! `initialize`, `notifications/initialized`, the call, `DELETE`; docs/adapters.md#mcp).
//!
//! Every request of the session goes to the effect's URL with the effect's headers as
//! prepared for release (credentials included), less the ones the session replaces. A
//! failure before the call is sent, whatever it was, leaves the call provably unsent
//! ([`airlock_ledger::Delivery::NotSent`]: `failed`, retriable); the call's own outcome is
//! classified as any release's ([`super::send`]); the closing request is sent after the
//! call's answer is in, on a task of its own, and its outcome is only logged.

use std::sync::Arc;

use airlock_adapters::{ReleaseSession, SessionRequest};
use tracing::{info, warn};

use super::send::{send, Prepared, SendFailure, Sent};
use crate::Control;

/// The effect's headers for one session request: `base` less the session's replaced
/// names and less the names `request` sets itself, then `request`'s and `carried`.
fn headers_for(
    base: &[(String, Vec<u8>)],
    session: &dyn ReleaseSession,
    request: &[(String, String)],
    carried: &[(String, String)],
) -> Vec<(String, Vec<u8>)> {
    let ours = |name: &str| {
        session
            .replaces()
            .iter()
            .any(|r| name.eq_ignore_ascii_case(r))
            || request.iter().any(|(n, _)| name.eq_ignore_ascii_case(n))
            || carried.iter().any(|(n, _)| name.eq_ignore_ascii_case(n))
    };
    let mut out: Vec<(String, Vec<u8>)> = base
        .iter()
        .filter(|(name, _)| !ours(name))
        .cloned()
        .collect();
    for (name, value) in request.iter().chain(carried) {
        out.push((name.clone(), value.clone().into_bytes()));
    }
    out
}

/// Sends one request of the session (not the call); its answer, or why it failed.
async fn step(
    shared: &Arc<Control>,
    url: &str,
    base: &[(String, Vec<u8>)],
    session: &dyn ReleaseSession,
    request: SessionRequest,
    carried: &[(String, String)],
) -> Result<Sent, SendFailure> {
    let headers = headers_for(base, session, &request.headers, carried);
    send(
        shared,
        request.method,
        (url.to_owned(), headers, request.body),
    )
    .await
}

fn text_headers(sent: &Sent) -> Vec<(String, String)> {
    sent.1
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// Releases `prepared` (the effect's `method` request) inside `session`: opens it, sends
/// what comes before the call, sends the call and returns its answer, then closes the
/// session in the background.
///
/// Errors: a [`SendFailure`] that is `NotSent` when the session did not open (the call
/// was never sent), else the call's own.
pub(super) async fn send_in_session(
    shared: &Arc<Control>,
    session: Box<dyn ReleaseSession>,
    method: &str,
    (url, base, body): Prepared,
) -> Result<Sent, SendFailure> {
    let unsent = |what: String| {
        SendFailure::not_sent(format!(
            "airlock could not open a session of its own with the server ({what}); the call itself was not sent"
        ))
    };
    let open = step(shared, &url, &base, session.as_ref(), session.open(), &[])
        .await
        .map_err(|f| unsent(f.reason))?;
    let carried = session
        .opened(open.0, &text_headers(&open), &open.2)
        .map_err(unsent)?;
    for request in session.before_call() {
        let answer = step(shared, &url, &base, session.as_ref(), request, &carried)
            .await
            .map_err(|f| unsent(f.reason))?;
        if answer.0 >= 400 {
            return Err(unsent(format!(
                "the server answered {} to a request opening the session",
                answer.0
            )));
        }
    }
    info!(url = %url, "release session opened");
    let headers = headers_for(&base, session.as_ref(), &[], &carried);
    let answer = send(shared, method, (url.clone(), headers, body)).await;
    if let Some(close) = session.close(&carried) {
        let shared = shared.clone();
        tokio::spawn(async move {
            match step(&shared, &url, &base, session.as_ref(), close, &carried).await {
                Ok(sent) => info!(url = %url, status = sent.0, "release session closed"),
                Err(failure) => {
                    warn!(url = %url, reason = %failure.reason, "closing the release session failed")
                }
            }
        });
    }
    answer
}
