//! Pass: forward a request upstream, streaming both bodies, and journal it as a read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use airlock_ledger::{Digest, Read, RunId, Store};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Request, Response};
use http_body_util::BodyExt;

use crate::credentials::decode::Coding;
use crate::credentials::scrub::Scrubber;
use crate::lineage::{Job, LineageWorker, READ_CAPTURE_BYTES};
use crate::policy_store::Snapshot;
use crate::DataPlane;
use airlock_net::body::{BoxError, MeteredBody, ProxyBody};
use airlock_net::failure::Failure;
use airlock_net::headers::{strip_hop_by_hop, strip_reserved};
use airlock_net::respond::ProxyError;

/// What a finished response leaves for lineage analysis: captured body, the response
/// headers (a cheap clone: header values are reference-counted), and whether the body's
/// digest is still to be taken from the captured body (it fit whole).
type Content = (Vec<Bytes>, http::HeaderMap, bool);

/// The captured first bytes of a passed request's body, filled when it ends.
type Captured = Arc<std::sync::Mutex<Vec<Bytes>>>;

/// Forwards a passed request upstream, streaming both bodies, and journals it as a read
/// when the response body ends (then hands the captured body to the lineage worker).
/// `policy` is the request's snapshot (the rule's labels, whether reads are indexed for
/// the pass-path flow check).
pub async fn forward(
    shared: &Arc<DataPlane>,
    policy: &Snapshot,
    run: &RunId,
    url: &str,
    rule: Option<String>,
    mut parts: Parts,
    body: ProxyBody,
) -> Result<Response<ProxyBody>, ProxyError> {
    // A read that could not be journaled is refused, never passed unjournaled (below the
    // ledger's free-space floor: 507; while it heals: 503).
    shared
        .ledger
        .journal_room()
        .map_err(|error| crate::stage::ledger_fault("cannot journal the read", error))?;
    let audit = crate::enforce::take_audit(&mut parts);
    let scrubber = prepare_head(&mut parts, url)?;
    let sent = Arc::new(AtomicU64::new(0));
    // A JSON POST's first bytes are kept: an MCP `initialize` tells the run's later
    // effects the client's parameters and the server's name (`crate::sessions`).
    let request_capture = crate::sessions::worth_capturing(&parts.method, &parts.headers)
        .then(|| Arc::new(std::sync::Mutex::new(Vec::new())));
    let request_body = meter_request(body, &sent, request_capture.clone());
    let method = parts.method.to_string();
    let is_get = parts.method == http::Method::GET;
    let upstream = Request::from_parts(parts, request_body);
    let labels = match rule.as_deref() {
        Some(rule) => policy.labels_of(rule).to_vec(),
        None => Vec::new(),
    };
    // A read passed while the policy has flows is indexed for the pass-path check once it
    // ends (crate::flows::pass).
    let pass_index = (!policy.flows().is_empty()).then(|| shared.pass_index.clone());
    // A labelled read is counted while it streams: the commit's final pass holds the
    // run's effects until what it carries is analysed.
    let streaming = (!labels.is_empty()).then(|| shared.streaming.enter(run));
    // While flows judge the run, a read is marked in flight on disk until it is
    // journaled: a crash before then is found at the next start (crate::inflight).
    let in_flight = shared
        .reads_in_flight
        .as_ref()
        .filter(|_| !policy.flows().is_empty())
        .map(|marks| marks.enter(run));
    let journal = ReadJournal {
        _streaming: streaming,
        _in_flight: in_flight,
        pass_index,
        labels,
        started: airlock_ledger::now_ms(),
        ledger: shared.ledger.clone(),
        lineage: shared.lineage.clone(),
        run: run.clone(),
        url: url.to_owned(),
        method,
        sent,
        rule,
        audit,
        sessions: shared.sessions.clone(),
        request_capture,
    };
    let response = match shared.upstream.request(upstream).await {
        Ok(response) => response,
        Err(error) => {
            let proxy_error = ProxyError::upstream(&error);
            let reason = proxy_error.body()["reason"].to_string();
            journal.record(None, 0, None, Some(reason), None);
            return Err(proxy_error);
        }
    };
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    strip_reserved(&mut parts.headers);
    let decode = match scrub_head(scrubber.as_ref(), &mut parts.headers) {
        Ok(decode) => decode,
        Err(reason) => {
            let status = Some(parts.status.as_u16());
            journal.record(status, 0, None, Some(reason.clone()), None);
            return Err(ProxyError::Upstream {
                failure: Failure::Withheld,
                reason,
            });
        }
    };
    let status = parts.status.as_u16();
    let headers = parts.headers.clone();
    let body: ProxyBody = body.map_err(|e| -> BoxError { Box::new(e) }).boxed();
    let body = decode_and_scrub(body, decode, scrubber)?;
    let event_stream = is_get && status == 200 && is_event_stream(&headers);
    let body = meter_response(body, status, headers, journal);
    // An event stream may be MCP's deprecated HTTP+SSE transport: its `endpoint` event is
    // watched for, so a call a rule stages on it can be refused in the stream
    // (crate::sessions::legacy).
    let body = if event_stream {
        shared.sessions.legacy.watch(run, url, body)
    } else {
        body
    };
    Ok(Response::from_parts(parts, body))
}

/// Whether `headers` say the body is `text/event-stream`.
fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// Readies a passed request's head for the origin: hop-by-hop headers stripped (`TE:
/// trailers` kept when the client asked for trailers), the absolute URI, HTTP/1.1, and the
/// rule's credential and the run's placeholders placed, only now (never journaled).
/// Returns the scrubber of what was placed, when anything was.
fn prepare_head(parts: &mut Parts, url: &str) -> Result<Option<Scrubber>, ProxyError> {
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
    Ok(crate::credentials::apply(parts)?.filter(|s| !s.is_empty()))
}

/// The request body, counted into `sent` as it goes; its first
/// [`crate::sessions::REQUEST_CAPTURE_BYTES`] kept in `capture` when given.
fn meter_request(body: ProxyBody, sent: &Arc<AtomicU64>, capture: Option<Captured>) -> ProxyBody {
    // A request without a body (most reads) has nothing to count: no wrapper.
    if http_body::Body::is_end_stream(&body) {
        return body;
    }
    let sent = sent.clone();
    let room = capture
        .as_ref()
        .map_or(0, |_| crate::sessions::REQUEST_CAPTURE_BYTES);
    MeteredBody::new(
        body,
        false,
        Box::new(move |metered| {
            sent.store(metered.bytes, Ordering::Relaxed);
            if let Some(capture) = capture {
                *capture.lock().unwrap_or_else(|e| e.into_inner()) = metered.captured;
            }
        }),
    )
    .capture(room)
    .boxed()
}

/// Scrubs the answer's headers where a secret was placed, and says how its body must be
/// decoded to be scrubbed (the origin ignored `Accept-Encoding: identity`); an answer in a
/// coding that cannot be decoded is withheld (the error's reason).
fn scrub_head(
    scrubber: Option<&Scrubber>,
    headers: &mut HeaderMap,
) -> Result<Option<Coding>, String> {
    let Some(scrubber) = scrubber else {
        return Ok(None);
    };
    scrubber.scrub_headers(headers);
    match Coding::of(headers) {
        Coding::Identity => Ok(None),
        Coding::Unsupported(coding) => Err(format!(
            "the origin answered with Content-Encoding {coding} although airlock asked for identity; airlock cannot search it for the credential it placed, so the answer is withheld"
        )),
        coding => {
            headers.remove(http::header::CONTENT_ENCODING);
            headers.remove(http::header::CONTENT_LENGTH);
            Ok(Some(coding))
        }
    }
}

/// The answer's body, decoded when [`scrub_head`] said so, with an echoed secret masked
/// before the client, the journal or lineage sees it.
fn decode_and_scrub(
    body: ProxyBody,
    decode: Option<Coding>,
    scrubber: Option<Scrubber>,
) -> Result<ProxyBody, ProxyError> {
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
    Ok(match scrubber {
        Some(scrubber) => crate::credentials::scrub::ScrubBody::new(body, scrubber).boxed(),
        None => body,
    })
}

/// The answer's body, metered and captured: when it ends the read is journaled.
fn meter_response(
    body: ProxyBody,
    status: u16,
    headers: HeaderMap,
    journal: ReadJournal,
) -> ProxyBody {
    MeteredBody::new(
        body,
        true,
        Box::new(move |metered| {
            // A body cut short still reached the client as far as it went: what was
            // captured is analysed too, so its data is lineage like any read's.
            let content = if metered.error.is_none() || !metered.captured.is_empty() {
                Some((metered.captured, headers, metered.hash_deferred))
            } else {
                None
            };
            journal.record(
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
    .boxed()
}

/// What the read's journal entry needs from the request, kept until its answer ends.
struct ReadJournal {
    ledger: Arc<dyn Store>,
    lineage: LineageWorker,
    run: RunId,
    url: String,
    method: String,
    /// Request body bytes sent, counted by [`meter_request`].
    sent: Arc<AtomicU64>,
    rule: Option<String>,
    /// The rule's labels when the read was passed (`labels = [...]`).
    labels: Vec<String>,
    /// Counts the read as streaming until it is journaled (dropped with the journal).
    _streaming: Option<crate::flows::StreamingGuard>,
    /// Marks the run's read in flight on disk until it is journaled.
    _in_flight: Option<crate::inflight::InFlightGuard>,
    /// Told when the read ends, when the policy had flows as it passed.
    pass_index: Option<Arc<crate::flows::pass::PassIndex>>,
    audit: Vec<String>,
    started: u64,
    /// Where an MCP `initialize` exchange is remembered for the run.
    sessions: Arc<crate::sessions::Sessions>,
    /// The request body's first bytes, for a JSON POST.
    request_capture: Option<Captured>,
}

impl ReadJournal {
    /// Journals the read: through the lineage worker when its body was captured (off the
    /// request path), directly otherwise.
    fn record(
        self,
        status: Option<u16>,
        response_bytes: u64,
        digest: Option<[u8; 32]>,
        error: Option<String>,
        content: Option<Content>,
    ) {
        if let (Some(capture), Some((response, _, _))) = (&self.request_capture, &content) {
            let request = capture.lock().unwrap_or_else(|e| e.into_inner());
            self.sessions
                .observe(&self.run, &self.url, &request, response);
        }
        let read = Read {
            run_id: self.run,
            seq: 0,
            method: self.method,
            url: self.url,
            status,
            request_bytes: self.sent.load(Ordering::Relaxed),
            response_bytes,
            response_digest: digest.map(|h| Digest::from_blake3(&h)),
            rule: self.rule,
            created_at_ms: self.started,
            error,
            audit: self.audit,
            labels: self.labels,
        };
        match content {
            // Journaled and analysed by the lineage worker, off the request path.
            Some((body, headers, digest_pending)) => {
                let run = read.run_id.clone();
                self.lineage.submit(Job::Read {
                    read: Box::new(read),
                    body,
                    headers,
                    digest_pending,
                });
                // After the hand-over: a check that sees the count waits for a worker
                // turn that includes this read.
                if let Some(index) = &self.pass_index {
                    index.read_ended(&run);
                }
            }
            None => {
                let (run, url) = (read.run_id.clone(), read.url.clone());
                if let Err(error) = self.ledger.journal_read(read) {
                    crate::gaps::read_dropped(&*self.ledger, &run, &url, &error, false);
                }
            }
        }
    }
}
