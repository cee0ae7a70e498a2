//! One request, once its run and destination are known: decide by policy, then pass,
//! stage or deny. The same path serves plain `http://` requests and requests inside an
//! intercepted CONNECT (POLICY.md invariant 7: one decision function).

use std::sync::Arc;

use airlock_ledger::{Digest, NewEffect, Read, RunId};
use airlock_policy::{Action, RequestFacts, Scheme};
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tracing::{info, warn};

use crate::body::{BoxError, MeteredBody, ProxyBody};
use crate::dial::{find_dial_error, DialError};
use crate::headers::{strip_hop_by_hop, strip_reserved, to_records};
use crate::respond::{json_response, ProxyError, EFFECT_HEADER};
use crate::server::Shared;

/// The destination of a request: the one authority that CONNECT, SNI, `Host` and the
/// absolute-form URI must all name (POLICY.md invariant 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// Lowercase host name or IP literal (IPv6 without brackets).
    pub host: String,
    /// The port.
    pub port: u16,
}

impl Target {
    /// `host:port`, IPv6 bracketed.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The absolute URL of `path_and_query` on this target.
    pub fn url(&self, path_and_query: &str) -> String {
        let scheme = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        format!("{scheme}://{}{path_and_query}", self.authority())
    }

    /// Parses `host[:port]` (IPv6 in brackets) into a target, lowercasing the host and
    /// dropping a trailing dot. `None` when malformed.
    pub fn parse(scheme: Scheme, authority: &str, default_port: u16) -> Option<Self> {
        let authority: http::uri::Authority = authority.parse().ok()?;
        if authority.as_str().contains('@') {
            return None;
        }
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host.is_empty() {
            return None;
        }
        Some(Self {
            scheme,
            host,
            port: authority.port_u16().unwrap_or(default_port),
        })
    }
}

fn default_port(scheme: Scheme) -> u16 {
    match scheme {
        Scheme::Http => 80,
        Scheme::Https => 443,
    }
}

/// Checks that the request's `Host` header names `target` (invariant 2).
fn check_host_header(req: &Request<Incoming>, target: &Target) -> Result<(), ProxyError> {
    if let Some(authority) = req.uri().authority() {
        let named = Target::parse(
            target.scheme,
            authority.as_str(),
            default_port(target.scheme),
        );
        if named.as_ref().map(|t| (&t.host, t.port)) != Some((&target.host, target.port)) {
            return Err(ProxyError::AuthorityMismatch {
                reason: format!(
                    "the request URI names {authority}, not {}",
                    target.authority()
                ),
            });
        }
    }
    let Some(value) = req.headers().get(header::HOST) else {
        return Ok(());
    };
    let parsed = value
        .to_str()
        .ok()
        .and_then(|v| Target::parse(target.scheme, v, default_port(target.scheme)));
    match parsed {
        Some(host) if host.host == target.host && host.port == target.port => Ok(()),
        _ => Err(ProxyError::AuthorityMismatch {
            reason: format!(
                "Host header {:?} does not name {}",
                String::from_utf8_lossy(value.as_bytes()),
                target.authority()
            ),
        }),
    }
}

/// Whether the request carries a body, from its framing (invariant 4), not its method.
fn has_body(req: &Request<Incoming>) -> bool {
    if req.headers().contains_key(header::TRANSFER_ENCODING) {
        return true;
    }
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n > 0)
}

/// Handles one request of `run` for `target`.
pub async fn handle(
    shared: Arc<Shared>,
    run: RunId,
    target: Target,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let method = req.method().clone();
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    let url = target.url(&path_and_query);
    let result = async {
        check_host_header(&req, &target)?;
        let facts = RequestFacts {
            scheme: target.scheme,
            host: &target.host,
            port: target.port,
            method: method.as_str(),
            path: req.uri().path(),
            has_body: has_body(&req),
        };
        let decision = shared.policy.decide(&facts);
        info!(
            run.id = %run,
            http.method = %method,
            url = %url,
            policy.action = ?decision.action,
            policy.rule = decision.rule.as_deref().unwrap_or("<default>"),
            policy.reason_code = decision.reason_code,
            "request decided"
        );
        match decision.action {
            Action::Deny => Err(ProxyError::Denied {
                rule: decision.rule,
                reason: decision.reason,
                reason_code: decision.reason_code.to_owned(),
                policy_revision: shared.policy.revision().to_owned(),
            }),
            Action::Stage => stage(&shared, &run, &url, decision.rule.as_deref(), req).await,
            Action::Pass => forward(&shared, &run, &url, decision.rule, req).await,
        }
    }
    .await;
    result.unwrap_or_else(|error| {
        if error.status().is_server_error() {
            warn!(run.id = %run, url = %url, error = %error, reason = %error.body()["reason"], "request failed");
        }
        error.into_response()
    })
}

/// Reads the body (bounded), records the effect durably, then answers `202 Accepted`.
async fn stage(
    shared: &Arc<Shared>,
    run: &RunId,
    url: &str,
    rule: Option<&str>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let limit = shared.limits.stage_body_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        // Refused before reading: no 100 Continue is sent, nothing is stored.
        return Err(ProxyError::BodyTooLarge { limit });
    }
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, limit as usize).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            if error
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return Err(ProxyError::BodyTooLarge { limit });
            }
            return Err(ProxyError::BadRequest {
                code: "body_read_failed",
                reason: format!("the request body could not be read: {error}"),
            });
        }
    };
    let mut headers = parts.headers;
    strip_hop_by_hop(&mut headers);
    headers.remove(header::CONTENT_LENGTH);
    let records = to_records(&headers);
    let ledger = shared.ledger.clone();
    let run_id = run.clone();
    let method = parts.method.to_string();
    let url_owned = url.to_owned();
    let rule_owned = rule.map(str::to_owned);
    let revision = shared.policy.revision().to_owned();
    let staged = tokio::task::spawn_blocking(move || {
        ledger.stage(NewEffect {
            run_id: &run_id,
            method: &method,
            url: &url_owned,
            headers: records,
            body: &body,
            rule: rule_owned.as_deref(),
            policy_revision: &revision,
        })
    })
    .await
    .map_err(|e| ProxyError::Internal {
        reason: format!("staging task failed: {e}"),
    })?;
    let effect = match staged {
        Ok(effect) => effect,
        Err(airlock_ledger::LedgerError::Refused(refused)) => {
            return Err(ProxyError::RunNotOpen {
                reason: refused.to_string(),
            })
        }
        Err(error) => {
            return Err(ProxyError::Internal {
                reason: format!("the ledger could not stage the effect: {error}"),
            })
        }
    };
    info!(run.id = %run, effect.id = %effect.id, effect.seq = effect.seq, url = %url, "effect staged");
    let mut response = json_response(
        StatusCode::ACCEPTED,
        &serde_json::json!({
            "effect": effect.id,
            "status": effect.state,
            "run": effect.run_id,
            "seq": effect.seq,
            "message": "airlock staged this request; it is sent to the origin only if a reviewer approves it and the run is committed",
        }),
    );
    if let Ok(value) = HeaderValue::from_str(effect.id.as_str()) {
        response.headers_mut().insert(EFFECT_HEADER, value);
    }
    Ok(response)
}

/// Forwards a passed request upstream, streaming both bodies, and journals it as a read
/// when the response body ends.
async fn forward(
    shared: &Arc<Shared>,
    run: &RunId,
    url: &str,
    rule: Option<String>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    parts.uri = url.parse().map_err(|_| ProxyError::BadRequest {
        code: "bad_uri",
        reason: format!("{url} is not a valid URI"),
    })?;
    parts.version = http::Version::HTTP_11;
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sent_in_body = sent.clone();
    let request_body = MeteredBody::new(
        body,
        false,
        Box::new(move |metered| {
            sent_in_body.store(metered.bytes, std::sync::atomic::Ordering::Relaxed);
        }),
    )
    .map_err(|e| Box::new(e) as BoxError)
    .boxed();
    let upstream = Request::from_parts(parts.clone(), request_body);
    let started = airlock_ledger::now_ms();
    let journal = {
        let ledger = shared.ledger.clone();
        let run = run.clone();
        let method = parts.method.to_string();
        let url = url.to_owned();
        move |status: Option<u16>,
              response_bytes: u64,
              sha: Option<[u8; 32]>,
              error: Option<String>| {
            let read = Read {
                run_id: run,
                seq: 0,
                method,
                url,
                status,
                request_bytes: sent.load(std::sync::atomic::Ordering::Relaxed),
                response_bytes,
                response_digest: sha.map(|h| Digest::from_sha256(&h)),
                rule,
                created_at_ms: started,
                error,
            };
            if let Err(error) = ledger.journal_read(read) {
                warn!(error = %error, "could not journal a read");
            }
        }
    };
    let response = match shared.upstream.request(upstream).await {
        Ok(response) => response,
        Err(error) => {
            let reason = error.to_string();
            let proxy_error = match find_dial_error(&error) {
                Some(dial @ DialError::OwnListener { .. }) => ProxyError::DestinationRefused {
                    code: "airlock_listener",
                    reason: dial.to_string(),
                },
                Some(dial @ DialError::Private { .. }) => ProxyError::DestinationRefused {
                    code: "private_address",
                    reason: dial.to_string(),
                },
                Some(dial) => ProxyError::Upstream {
                    reason: dial.to_string(),
                },
                None => ProxyError::Upstream {
                    reason: error_chain(&error).unwrap_or(reason),
                },
            };
            journal(
                None,
                0,
                None,
                Some(proxy_error.body()["reason"].to_string()),
            );
            return Err(proxy_error);
        }
    };
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    strip_reserved(&mut parts.headers);
    let status = parts.status.as_u16();
    let body = MeteredBody::new(
        body,
        true,
        Box::new(move |metered| {
            journal(Some(status), metered.bytes, metered.sha256, metered.error)
        }),
    )
    .map_err(|e| Box::new(e) as BoxError)
    .boxed();
    Ok(Response::from_parts(parts, body))
}

/// The messages of an error and its sources, joined with `: `.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut parts = vec![error.to_string()];
    let mut current = error.source();
    while let Some(e) = current {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    Some(parts.join(": "))
}
