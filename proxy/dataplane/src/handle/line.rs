//! The canonical request line: one `info` event per request (target `airlock::request`,
//! message `request`), written when its response's last byte has left or the client went
//! away, with everything an operator greps for in one place (smokescreen's
//! `CANONICAL-PROXY-DECISION` line is the model). Its fields, all flat:
//!
//! ```text
//! run.id                    the run id
//! method                    the request method
//! origin.host, origin.port  the destination (the port always its own field)
//! path                      the path, without the query (queries carry tokens)
//! action                    pass | stage | deny | tunnel | none (answered before a decision)
//! rule                      the deciding rule's id, absent for the default deny or no decision
//! reason_code               the decision's reason code, absent when none was made
//! status                    the status answered to the client
//! bytes_in                  request body bytes read from the client
//! bytes_out                 response body bytes sent to the client
//! duration_ms               milliseconds from the request head to the response's end, to
//!                           the microsecond (at most three decimals, see [`millis`])
//! ```
//!
//! The names are the ones every other airlock event uses for the same things (`run.id`,
//! `effect.id`, `origin.host`, `origin.port`, `origin.status`; docs/architecture.md).
//!
//! The same moment feeds `airlock_request_duration_seconds{action}`; the acknowledgement
//! of a staged request feeds `airlock_stage_ack_duration_seconds`.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_ledger::RunId;
use airlock_policy::Decision;

use crate::metrics::RequestAction;
use crate::DataPlane;
use airlock_net::authority::Target;

/// What the decide phase settled.
#[derive(Debug)]
struct Decided {
    action: RequestAction,
    rule: Option<String>,
    reason_code: Option<Cow<'static, str>>,
}

/// One request's line, shared by the phases (through [`super::RequestCtx`]) and the
/// response body's guard; written when the last holder drops it.
pub(super) struct RequestLine {
    plane: Arc<DataPlane>,
    run: RunId,
    method: http::Method,
    host: String,
    port: u16,
    path: String,
    start: Instant,
    decided: Mutex<Decided>,
    status: AtomicU16,
    /// Request body bytes read from the client.
    pub(super) bytes_in: Arc<AtomicU64>,
    /// Response body bytes sent to the client.
    pub(super) bytes_out: Arc<AtomicU64>,
}

impl RequestLine {
    /// Starts the line of a request of `run` for `target`, its clock running from now.
    pub(super) fn start<B>(
        plane: &Arc<DataPlane>,
        run: &RunId,
        target: &Target,
        req: &http::Request<B>,
    ) -> Arc<Self> {
        Arc::new(Self {
            plane: plane.clone(),
            run: run.clone(),
            method: req.method().clone(),
            host: target.host.clone(),
            port: target.port,
            path: req.uri().path().to_owned(),
            start: Instant::now(),
            decided: Mutex::new(Decided {
                action: RequestAction::None,
                rule: None,
                reason_code: None,
            }),
            status: AtomicU16::new(0),
            bytes_in: Arc::default(),
            bytes_out: Arc::default(),
        })
    }

    /// Records the policy's decision.
    pub(super) fn decided(&self, decision: &Decision) {
        let mut decided = self.decided.lock().unwrap_or_else(|e| e.into_inner());
        decided.action = RequestAction::of(decision.action);
        decided.rule.clone_from(&decision.rule);
        decided.reason_code = Some(Cow::Borrowed(decision.reason_code));
    }

    /// Records that a passed request was staged after all (its body inspection found a
    /// placeholder of a staged effect).
    pub(super) fn staged_instead(&self) {
        let mut decided = self.decided.lock().unwrap_or_else(|e| e.into_inner());
        decided.action = RequestAction::Stage;
    }

    /// Records the status answered; a staged request's acknowledgement (a `2xx`: `202`, or
    /// the status of the rule's `respond` template) is timed now.
    pub(super) fn answered(&self, status: http::StatusCode) {
        self.status.store(status.as_u16(), Ordering::Relaxed);
        let staged = self
            .decided
            .lock()
            .map(|d| d.action == RequestAction::Stage)
            .unwrap_or(false);
        if staged && status.is_success() {
            self.plane.metrics.stage_ack.observe(self.start.elapsed());
        }
    }
}

/// `elapsed` in milliseconds to the microsecond: whole microseconds divided by 1000, so
/// the text and JSON logs print `1.627`, never the float noise of a product
/// (`1.6274600000000001`).
pub fn millis(elapsed: Duration) -> f64 {
    // u64 microseconds cover 584,000 years; f64 holds them exactly below 2^53 µs (285 years).
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX) as f64 / 1000.0
}

/// Answers a request inside a tunnel with `refusal` instead of deciding it (the CONNECT's
/// host is denied outright, or a fenced connection's address was never given), and writes
/// its line: the inner request's method and path, action `deny`, the refusal's rule and
/// reason code, and the status it got (403).
pub(crate) fn refused_inside<B>(
    plane: &Arc<DataPlane>,
    run: &RunId,
    target: &Target,
    req: &http::Request<B>,
    refusal: airlock_net::respond::ProxyError,
) -> http::Response<airlock_net::body::ProxyBody> {
    let line = RequestLine::start(plane, run, target, req);
    {
        let mut decided = line.decided.lock().unwrap_or_else(|e| e.into_inner());
        decided.action = RequestAction::Deny;
        if let airlock_net::respond::ProxyError::Denied { rule, .. } = &refusal {
            decided.rule.clone_from(rule);
        }
        decided.reason_code = Some(Cow::Owned(refusal.code().to_owned()));
    }
    let response = refusal.into_response();
    line.answered(response.status());
    let sent = http_body::Body::size_hint(response.body()).exact();
    line.bytes_out.store(sent.unwrap_or(0), Ordering::Relaxed);
    response
}

/// A CONNECT answered at the tunnel's level: tunneled without interception (`tunnel`,
/// 200) and now closed, or to a host the policy denies outright (`deny`, with the status
/// the CONNECT got: 200, each request inside then refused by [`refused_inside`]).
pub(crate) struct ConnectLine<'a> {
    /// The run.
    pub run: &'a RunId,
    /// The CONNECT target.
    pub target: &'a Target,
    /// `Deny` or `Tunnel`.
    pub action: RequestAction,
    /// The deciding rule.
    pub rule: Option<&'a str>,
    /// The decision's reason code.
    pub reason_code: &'a str,
    /// The status answered.
    pub status: u16,
    /// Bytes from the client, bytes to the client.
    pub bytes: (u64, u64),
    /// From the CONNECT's arrival (a denial) or the tunnel's opening to its close.
    pub elapsed: std::time::Duration,
}

impl ConnectLine<'_> {
    /// Writes the line (the request line's fields, `method` `CONNECT`, `path` empty) and
    /// counts it in `airlock_request_duration_seconds`.
    pub(crate) fn write(&self, plane: &DataPlane) {
        plane.metrics.observe_request(self.action, self.elapsed);
        tracing::info!(
            target: "airlock::request",
            method = "CONNECT",
            "run.id" = %self.run,
            "origin.host" = %self.target.host,
            "origin.port" = self.target.port,
            path = "",
            action = self.action.as_str(),
            rule = self.rule,
            reason_code = self.reason_code,
            status = self.status,
            bytes_in = self.bytes.0,
            bytes_out = self.bytes.1,
            duration_ms = millis(self.elapsed),
            "request"
        );
    }
}

impl Drop for RequestLine {
    fn drop(&mut self) {
        let elapsed = self.start.elapsed();
        let decided = self.decided.get_mut().unwrap_or_else(|e| e.into_inner());
        self.plane.metrics.observe_request(decided.action, elapsed);
        tracing::info!(
            target: "airlock::request",
            method = %self.method,
            "run.id" = %self.run,
            "origin.host" = %self.host,
            "origin.port" = self.port,
            path = %self.path,
            action = decided.action.as_str(),
            rule = decided.rule.as_deref(),
            reason_code = decided.reason_code.as_deref(),
            status = self.status.load(Ordering::Relaxed),
            bytes_in = self.bytes_in.load(Ordering::Relaxed),
            bytes_out = self.bytes_out.load(Ordering::Relaxed),
            duration_ms = millis(elapsed),
            "request"
        );
    }
}
