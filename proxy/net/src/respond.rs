//! Every answer airlock itself gives a client of the proxy listener: one error type that
//! knows its status, stable code and side, turned into a response in one place
//! ([`ProxyError::into_response`]).

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Full};

use crate::body::ProxyBody;
use crate::failure::Failure;

mod refusal;
pub use refusal::refuse_connection;

/// Header carrying the stable code of an error answered by airlock.
pub const ERROR_HEADER: &str = "airlock-error";
/// Header naming the effect a synthetic response stands for.
pub const EFFECT_HEADER: &str = "airlock-effect";
/// Where an agent reads its run's policy manifest through the proxy: airlock answers the
/// reserved host `airlock.invalid` itself (RFC 6761 §6.4) and never dials it. Every
/// refusal body links it as `manifest`, and `airlock env` puts it in
/// `AIRLOCK_MANIFEST_URL`.
pub const MANIFEST_URL: &str = "http://airlock.invalid/.well-known/airlock/policy";

/// Whose move it is when airlock answers with an error: logs and metrics decide by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Side {
    /// The client sent something airlock cannot take (credentials, a malformed or
    /// oversized request, too many connections, a run that is closed).
    Client,
    /// The origin failed, could not be reached, or answered what airlock withholds.
    Origin,
    /// The policy refused it: a deny, a rule's limit, a destination no rule allows.
    Policy,
    /// airlock itself failed (the ledger, a task).
    Internal,
}

impl Side {
    /// The label value (`client`, `origin`, `policy`, `internal`).
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Origin => "origin",
            Side::Policy => "policy",
            Side::Internal => "internal",
        }
    }

    /// Whether the operator should hear of it: the origin's or airlock's failures, not
    /// refusals working as intended.
    pub fn is_failure(self) -> bool {
        matches!(self, Side::Origin | Side::Internal)
    }
}

/// One of a policy rule's `limit` obligations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RuleLimit {
    /// `query_bytes`: 414.
    QueryBytes,
    /// `requests_per_minute`: 429 with `Retry-After`.
    RequestsPerMinute,
    /// `body_bytes` (also the bytes a body matcher reads): 413.
    BodyBytes,
    /// `upload_bytes_per_run`: 413.
    UploadBytesPerRun,
}

impl RuleLimit {
    /// The key in the policy file.
    pub fn name(self) -> &'static str {
        match self {
            RuleLimit::QueryBytes => "query_bytes",
            RuleLimit::RequestsPerMinute => "requests_per_minute",
            RuleLimit::BodyBytes => "body_bytes",
            RuleLimit::UploadBytesPerRun => "upload_bytes_per_run",
        }
    }

    /// The stable code: `limit_` and the name.
    fn code(self) -> &'static str {
        match self {
            RuleLimit::QueryBytes => "limit_query_bytes",
            RuleLimit::RequestsPerMinute => "limit_requests_per_minute",
            RuleLimit::BodyBytes => "limit_body_bytes",
            RuleLimit::UploadBytesPerRun => "limit_upload_bytes_per_run",
        }
    }

    fn status(self) -> StatusCode {
        match self {
            RuleLimit::QueryBytes => StatusCode::URI_TOO_LONG,
            RuleLimit::RequestsPerMinute => StatusCode::TOO_MANY_REQUESTS,
            RuleLimit::BodyBytes | RuleLimit::UploadBytesPerRun => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }
}

/// The two deadlines of a request body airlock reads whole (staging, a body matcher, the
/// placeholder search).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BodyDeadline {
    /// No frame of the body arrived for this long (30 s).
    Idle,
    /// The whole body did not arrive within this long of the first read
    /// (`--body-read-timeout`, 120 s by default).
    Total,
}

impl BodyDeadline {
    /// The name in the JSON body's `limit_name`: `body_idle_timeout` or
    /// `body_read_timeout` (the `airlock serve` flag's name).
    pub fn name(self) -> &'static str {
        match self {
            BodyDeadline::Idle => "body_idle_timeout",
            BodyDeadline::Total => "body_read_timeout",
        }
    }
}

/// Why airlock answers a proxied request itself instead of the origin.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// No or wrong run credentials (RFC 9110 §11.7.1).
    #[error("proxy authentication required")]
    ProxyAuth {
        /// What was wrong with the credentials.
        reason: String,
    },
    /// The policy denies the request.
    #[error("denied by policy")]
    Denied {
        /// The winning rule, `None` for the default.
        rule: Option<String>,
        /// The rule's reason.
        reason: String,
        /// A stable code (`rule_deny`, `default_deny`, `non_canonical_path`, …).
        reason_code: String,
        /// The policy revision that decided.
        policy_revision: String,
        /// What to change, naming the actual mismatch (e.g. the nearest rule's method)
        /// when the request path knows it; `None` gives the generic hint.
        hint: Option<String>,
    },
    /// The request cannot be understood.
    #[error("bad request")]
    BadRequest {
        /// A stable code.
        code: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The CONNECT target, TLS SNI, `Host` and absolute-form URI do not name the same host
    /// (docs/policy.md invariant 2).
    #[error("misdirected request")]
    AuthorityMismatch {
        /// What disagreed.
        reason: String,
    },
    /// A staged body passed the staging limit; nothing was stored.
    #[error("request body too large to stage")]
    BodyTooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// A passed body over the staging limit in a run that has handed out placeholders:
    /// too large to search for them, so it was not sent (docs/lineage.md, "Where
    /// placeholders are searched").
    #[error("request body too large to search for placeholders")]
    BodyUnsearchable {
        /// The limit in bytes (`--stage-body-limit`).
        limit: u64,
        /// What happened, naming the limit.
        reason: String,
    },
    /// The request's header section is over a limit (docs/cases.md C08).
    #[error("request header fields too large")]
    HeadersTooLarge {
        /// Which limit and by how much.
        reason: String,
        /// The limit (fields or bytes, as `reason` says).
        limit: u64,
    },
    /// The client paused too long, or took too long in all, while sending a body airlock
    /// reads whole; nothing was staged.
    #[error("request body timed out")]
    BodyTimeout {
        /// Which deadline passed.
        deadline: BodyDeadline,
        /// That deadline, in seconds.
        seconds: u64,
    },
    /// The run does not accept effects any more (sealed), or nothing at all (`closed`:
    /// committed or aborted, reads refused too).
    #[error("{}", if *.closed { "run is closed" } else { "run does not accept effects" })]
    RunNotOpen {
        /// The ledger's explanation.
        reason: String,
        /// Committed or aborted: no request passes, reads included.
        closed: bool,
    },
    /// The destination is refused before dialing (airlock's own listeners, private addresses).
    #[error("destination refused")]
    DestinationRefused {
        /// A stable code.
        code: &'static str,
        /// Why.
        reason: String,
    },
    /// A request over one of the winning rule's limits (docs/policy.md, docs/policy.md "limit").
    #[error("over a policy limit")]
    OverLimit {
        /// The rule.
        rule: String,
        /// Which of its limits.
        limit: RuleLimit,
        /// The limit's value (bytes, or requests per minute).
        value: u64,
        /// What went over it.
        reason: String,
        /// The policy revision that decided.
        policy_revision: String,
    },
    /// The origin could not be reached or failed mid-request.
    #[error("origin unreachable")]
    Upstream {
        /// What kind of failure, from the error's types.
        failure: Failure,
        /// What failed.
        reason: String,
    },
    /// The ledger failed; the request was not staged.
    #[error("internal error")]
    Internal {
        /// What failed (no secret values).
        reason: String,
    },
    /// The ledger cannot write now: degraded by a storage fault and healing (503), or its
    /// disk below `--ledger-min-free-mib` (507, RFC 4918 §11.5); nothing was staged.
    #[error("ledger unavailable")]
    LedgerUnavailable {
        /// `ledger_degraded` or `ledger_low_space`.
        code: &'static str,
        /// What the ledger said.
        reason: String,
    },
    /// A connection cap was reached (`--max-connections-per-run`, `--max-connections`).
    #[error("too many connections")]
    TooManyConnections {
        /// The flag that sets the cap.
        limit_name: &'static str,
        /// The cap.
        limit: usize,
    },
}

impl ProxyError {
    /// Status code for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::ProxyAuth { .. } => StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            Self::Denied { .. } | Self::DestinationRefused { .. } => StatusCode::FORBIDDEN,
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::AuthorityMismatch { .. } => StatusCode::MISDIRECTED_REQUEST,
            Self::BodyTooLarge { .. } | Self::BodyUnsearchable { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Self::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::RunNotOpen { .. } => StatusCode::CONFLICT,
            Self::OverLimit { limit, .. } => limit.status(),
            Self::Upstream { .. } => StatusCode::BAD_GATEWAY,
            Self::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            Self::LedgerUnavailable {
                code: "ledger_low_space",
                ..
            } => StatusCode::INSUFFICIENT_STORAGE,
            Self::LedgerUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::TooManyConnections { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// Whose move it is.
    pub fn side(&self) -> Side {
        match self {
            Self::ProxyAuth { .. }
            | Self::BadRequest { .. }
            | Self::AuthorityMismatch { .. }
            | Self::BodyTooLarge { .. }
            | Self::BodyUnsearchable { .. }
            | Self::HeadersTooLarge { .. }
            | Self::BodyTimeout { .. }
            | Self::RunNotOpen { .. }
            | Self::TooManyConnections { .. } => Side::Client,
            Self::Denied { .. } | Self::DestinationRefused { .. } | Self::OverLimit { .. } => {
                Side::Policy
            }
            Self::Upstream { .. } => Side::Origin,
            Self::Internal { .. } | Self::LedgerUnavailable { .. } => Side::Internal,
        }
    }

    /// The answer to a failed request to an origin (or dial): a refused destination
    /// (airlock's own listener, a private address) when the dialer refused it, otherwise
    /// [`ProxyError::Upstream`] classified from the error's types.
    pub fn upstream(error: &(dyn std::error::Error + 'static)) -> Self {
        match crate::dial::find_dial_error(error) {
            Some(dial) => match dial.refusal_code() {
                Some(code) => Self::DestinationRefused {
                    code,
                    reason: dial.to_string(),
                },
                None => Self::Upstream {
                    failure: Failure::of(error),
                    reason: error_chain(dial).unwrap_or_else(|| dial.to_string()),
                },
            },
            None => Self::Upstream {
                failure: Failure::of(error),
                reason: error_chain(error).unwrap_or_else(|| error.to_string()),
            },
        }
    }

    /// Stable machine-readable code, also sent in the `airlock-error` header.
    pub fn code(&self) -> &str {
        match self {
            Self::ProxyAuth { .. } => "proxy_auth_required",
            Self::Denied { reason_code, .. } => reason_code,
            Self::BadRequest { code, .. } | Self::DestinationRefused { code, .. } => code,
            Self::AuthorityMismatch { .. } => "authority_mismatch",
            Self::BodyTooLarge { .. } => "body_too_large",
            Self::BodyUnsearchable { .. } => "body_unsearchable",
            Self::HeadersTooLarge { .. } => "header_fields_too_large",
            Self::BodyTimeout { .. } => "body_timeout",
            Self::RunNotOpen { .. } => "run_not_open",
            Self::OverLimit { limit, .. } => limit.code(),
            Self::Upstream {
                failure: Failure::HeadTooLarge,
                ..
            } => "upstream_head_too_large",
            Self::Upstream { .. } => "upstream_unreachable",
            Self::Internal { .. } => "internal_error",
            Self::LedgerUnavailable { code, .. } => code,
            Self::TooManyConnections { .. } => "too_many_connections",
        }
    }

    /// The JSON body: `{error, reason_code, reason, hint, manifest}` (`manifest` is
    /// [`MANIFEST_URL`], in every refusal) and, as the error has them,
    /// `rule`, `policy_revision`, `limit` (a number; a rule limit's name, its value in
    /// `limit_value`) and `limit_name` (a connection cap's or a body deadline's).
    pub fn body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({
            "error": self.to_string(),
            "reason_code": self.code(),
        });
        let (reason, hint) = match self {
            Self::ProxyAuth { reason } => (
                reason.clone(),
                "send Proxy-Authorization: Basic base64(run_id:token); `airlock env RUN` prints a proxy URL that carries them",
            ),
            Self::Denied {
                rule,
                reason,
                policy_revision,
                reason_code,
                hint,
            } => {
                body["rule"] = serde_json::json!(rule);
                body["policy_revision"] = serde_json::json!(policy_revision);
                if let Some(hint) = hint {
                    body["hint"] = serde_json::json!(hint);
                }
                (
                    reason.clone(),
                    if reason_code == "default_deny" {
                        "no rule matched: read the manifest for the rules this run has; if this request is needed, ask the operator for a rule that passes or stages it"
                    } else {
                        "if this request is needed, ask the operator to add a policy rule that passes or stages it"
                    },
                )
            }
            Self::BadRequest { reason, .. } => (reason.clone(), "fix the request and send it again"),
            Self::AuthorityMismatch { reason } => (
                reason.clone(),
                "send requests only for the host named in CONNECT; open a new tunnel for another host",
            ),
            Self::BodyUnsearchable { limit, reason } => {
                body["limit"] = serde_json::json!(limit);
                body["limit_name"] = serde_json::json!("stage_body_limit");
                (
                    reason.clone(),
                    "send a body within the limit (in parts, if the API allows), or ask the operator to raise --stage-body-limit",
                )
            }
            Self::BodyTooLarge { limit } => {
                body["limit"] = serde_json::json!(limit);
                (
                    format!("the request body is over the staging limit of {limit} bytes; nothing was staged"),
                    "send a smaller body, or ask the operator to raise --stage-body-limit",
                )
            }
            Self::HeadersTooLarge { reason, limit } => {
                body["limit"] = serde_json::json!(limit);
                (
                    reason.clone(),
                    "send fewer or smaller header fields (large cookies are the usual cause)",
                )
            }
            Self::BodyTimeout { deadline, seconds } => {
                body["limit"] = serde_json::json!(seconds);
                body["limit_name"] = serde_json::json!(deadline.name());
                match deadline {
                    BodyDeadline::Total => (
                        format!("the request body did not arrive whole within {seconds} s (body_read_timeout); nothing was staged"),
                        "send the body faster, or ask the operator to raise --body-read-timeout",
                    ),
                    _ => (
                        format!("no part of the request body arrived for {seconds} s (body_idle_timeout); nothing was staged"),
                        "send the body without long pauses",
                    ),
                }
            }
            Self::RunNotOpen { reason, closed } => (
                reason.clone(),
                if *closed {
                    "the run was committed or aborted and passes nothing any more, reads included; create a new run for more work"
                } else {
                    "the run is sealed: reads still pass, but it stages nothing; start a new run to stage more effects"
                },
            ),
            Self::DestinationRefused { reason, code } => (
                reason.clone(),
                if *code == "airlock_listener" {
                    "airlock's own listeners can never be reached through the proxy, whatever allow_private says"
                } else {
                    "name the address range in a rule's allow_private if this destination is intended"
                },
            ),
            Self::OverLimit {
                rule,
                limit,
                value,
                reason,
                policy_revision,
            } => {
                body["rule"] = serde_json::json!(rule);
                // The name, as before the fold (tests/tests/it/matchers.rs asserts it); the
                // number is `limit_value`.
                body["limit"] = serde_json::json!(limit.name());
                body["limit_value"] = serde_json::json!(value);
                body["policy_revision"] = serde_json::json!(policy_revision);
                (
                    reason.clone(),
                    if *limit == RuleLimit::RequestsPerMinute {
                        "slow down and retry after the Retry-After seconds, or ask the operator to raise the rule's limit"
                    } else {
                        "send less, or ask the operator to raise the rule's limit"
                    },
                )
            }
            Self::Upstream { failure, reason } => (
                reason.clone(),
                match failure {
                    Failure::HeadTooLarge => "the origin answered with a header section over airlock's limits (256 fields, 256 KiB; docs/protocols.md), which apply to origin responses too",
                    Failure::CaAsEndEntity => "the origin presents a CA certificate (basicConstraints CA:TRUE, e.g. from `openssl req -x509`) as its own; verifiers refuse that: issue the origin a server certificate from a CA and give airlock that CA with --upstream-ca",
                    Failure::UntrustedCertificate => "the origin's TLS certificate was not trusted: airlock verifies origins against the webpki roots and --upstream-ca",
                    Failure::Withheld => "airlock withheld the origin's answer for the reason given; retrying helps only if the origin answers differently",
                    _ => "check that the origin is up and reachable",
                },
            ),
            Self::Internal { reason } => (reason.clone(), "see airlock's log; retry later"),
            Self::LedgerUnavailable { code, reason } => (
                reason.clone(),
                if *code == "ledger_low_space" {
                    "the ledger's disk is nearly full; nothing was staged: retry once the operator frees space (GET /healthz on the admin listener answers 200 again)"
                } else {
                    "the ledger is recovering from a storage fault; nothing was staged: retry once GET /healthz on the admin listener answers 200"
                },
            ),
            Self::TooManyConnections { limit_name, limit } => {
                body["limit"] = serde_json::json!(limit);
                body["limit_name"] = serde_json::json!(limit_name);
                (
                    format!("{limit} connections are open, the most {limit_name} allows"),
                    "reuse connections (keep-alive, HTTP/2) or close idle ones, then retry; the operator can raise the limit",
                )
            }
        };
        body["reason"] = serde_json::json!(reason);
        if body.get("hint").is_none() {
            body["hint"] = serde_json::json!(hint);
        }
        body["manifest"] = serde_json::json!(MANIFEST_URL);
        body
    }

    /// The response airlock sends for this error.
    pub fn into_response(self) -> Response<ProxyBody> {
        let mut response = json_response(self.status(), &self.body());
        if let Ok(value) = HeaderValue::from_str(self.code()) {
            response.headers_mut().insert(ERROR_HEADER, value);
        }
        match self {
            Self::ProxyAuth { .. } => {
                response.headers_mut().insert(
                    header::PROXY_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"airlock\""),
                );
            }
            Self::OverLimit {
                limit: RuleLimit::RequestsPerMinute,
                ..
            } => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
            }
            _ => {}
        }
        response
    }
}

/// A JSON response with Content-Type and Content-Length set.
pub fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<ProxyBody> {
    let mut bytes = serde_json::to_vec_pretty(body).unwrap_or_default();
    bytes.push(b'\n');
    let length = bytes.len();
    let mut response = Response::new(
        Full::new(Bytes::from(bytes))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    response
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

#[cfg(test)]
mod tests;
