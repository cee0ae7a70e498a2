//! Notifications to reviewers: when a run is sealed with effects still waiting for a
//! decision, airlock POSTs `{"run", "pending", "link"}` (JSON) to the webhook given by
//! `airlock serve --notify-webhook URL` (a chat channel's incoming webhook, for instance).
//!
//! The notification goes out directly from airlock, not through the proxy path: policy
//! does not apply to it, and it is not journaled in any run. It is sent once, in the
//! background; a failure is logged and never blocks or fails the seal.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Uri};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tracing::{info, warn};

/// How long one notification may take.
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors configuring the webhook.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NotifyError {
    /// The URL is not an absolute `http://` or `https://` URL.
    #[error("--notify-webhook {0:?} is not an absolute http:// or https:// URL")]
    Url(String),
}

/// The webhook and the client that reaches it.
pub struct Notifier {
    url: Uri,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL of a chat webhook is often its secret: only the host is shown.
        f.debug_struct("Notifier")
            .field("host", &self.url.host())
            .finish_non_exhaustive()
    }
}

impl Notifier {
    /// A notifier posting to `url`; TLS is verified with `tls` (webpki roots plus
    /// `--upstream-ca`, as for origins).
    ///
    /// Errors: [`NotifyError::Url`] for anything but an absolute http(s) URL.
    pub fn new(url: &str, tls: rustls::ClientConfig) -> Result<Self, NotifyError> {
        let parsed: Uri = url.parse().map_err(|_| NotifyError::Url(url.to_owned()))?;
        if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none() {
            return Err(NotifyError::Url(url.to_owned()));
        }
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(NOTIFY_TIMEOUT));
        let connector = HttpsConnector::from((http, tls));
        Ok(Self {
            url: parsed,
            client: Client::builder(TokioExecutor::new()).build(connector),
        })
    }

    /// Posts `{"run", "pending", "link"}`; returns the status, or why it failed.
    pub async fn send(&self, run: &str, pending: usize, link: &str) -> Result<u16, String> {
        let body = serde_json::json!({
            "run": run,
            "pending": pending,
            "link": link,
            "text": format!("airlock: run {run} is sealed with {pending} effect(s) waiting for review: {link}"),
        });
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::USER_AGENT, "airlock-notify")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        let response = tokio::time::timeout(NOTIFY_TIMEOUT, self.client.request(request))
            .await
            .map_err(|_| format!("no answer within {NOTIFY_TIMEOUT:?}"))?
            .map_err(|e| airlock_net::respond::error_chain(&e).unwrap_or_else(|| e.to_string()))?;
        Ok(response.status().as_u16())
    }
}

/// Tells the webhook, in the background, that `run` was sealed, when it has effects
/// waiting for a decision (`staged`). Does nothing without `--notify-webhook`.
pub fn run_sealed(shared: &std::sync::Arc<crate::Control>, run: &airlock_ledger::RunId) {
    if shared.review.notifier.is_none() {
        return;
    }
    let shared = shared.clone();
    let run = run.clone();
    tokio::spawn(async move {
        let ledger = shared.ledger().clone();
        let id = run.clone();
        let pending = match tokio::task::spawn_blocking(move || ledger.effects(&id)).await {
            Ok(Ok(effects)) => effects
                .iter()
                .filter(|e| e.state == airlock_ledger::EffectState::Staged)
                .count(),
            _ => return,
        };
        if pending == 0 {
            return;
        }
        let Some(notifier) = &shared.review.notifier else {
            return;
        };
        let link = format!("{}/runs/{run}", shared.review.base_url);
        match notifier.send(run.as_str(), pending, &link).await {
            Ok(status) if status < 300 => {
                info!(run.id = %run, pending, webhook.status = status, "reviewers notified")
            }
            Ok(status) => {
                warn!(run.id = %run, webhook.status = status, "the notification webhook refused")
            }
            Err(reason) => {
                warn!(run.id = %run, reason = %reason, "the notification webhook failed")
            }
        }
    });
}
