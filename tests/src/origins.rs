//! Loopback origins with a fixed answer, for tests that only need an origin to reach.

use std::time::Duration;

use crate::{Origin, OriginCa, Received, Reply};

/// An origin that answers every request with `200 {"ok":true}` and records it.
pub async fn ok_origin(ca: &OriginCa) -> Origin {
    Origin::start(
        Some(ca),
        std::sync::Arc::new(|_req: &Received| Reply::json(200, &serde_json::json!({"ok": true}))),
    )
    .await
    .expect("origin starts")
}

/// An origin that answers every request with `status` and the text `body`, and records
/// it; HTTPS with a certificate from `ca`, or plain HTTP with `None`.
pub async fn text_origin(ca: Option<&OriginCa>, status: u16, body: &'static str) -> Origin {
    Origin::start(
        ca,
        std::sync::Arc::new(move |_req: &Received| Reply::text(status, body)),
    )
    .await
    .expect("origin starts")
}

/// Like [`text_origin`], each answer sent only after `delay`.
pub async fn slow_text_origin(
    ca: Option<&OriginCa>,
    status: u16,
    body: &'static str,
    delay: Duration,
) -> Origin {
    Origin::start(
        ca,
        std::sync::Arc::new(move |_req: &Received| {
            let mut reply = Reply::text(status, body);
            reply.delay = Some(delay);
            reply
        }),
    )
    .await
    .expect("origin starts")
}
