//! MCP's deprecated HTTP+SSE transport (specification 2024-11-05, "Transports: HTTP with
//! SSE"), which some servers and clients still speak: the client opens a `GET` event
//! stream, the server's first event (`event: endpoint`) names the URL the client must
//! `POST` its messages to, each POST is answered `202 Accepted` with no result, and every
//! response arrives later as a `message` event on the stream.
//!
//! airlock cannot release a call staged over this transport (a release opens a session of
//! its own over streamable HTTP, docs/adapters.md#mcp), so a rule that stages such a call
//! refuses it instead: the POST gets `202` (what the transport answers every message) and
//! the refusal reaches the client as a JSON-RPC error response injected into its event
//! stream ([`REFUSED_CODE`], the denial's JSON as `data`), so the client's pending call
//! ends at once with a readable error rather than waiting for a result that never comes.
//! Here: [`Streams::watch`] wraps a passed event stream, finds its `endpoint` event and
//! keeps an injector for that message URL while the stream is open.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use airlock_ledger::RunId;
use airlock_net::body::{BoxError, ProxyBody};
use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// The JSON-RPC error code of a call airlock refused (JSON-RPC 2.0 §5.1: -32000 to -32099
/// are the implementation's own server errors; -32000 and -32001 are taken by the MCP
/// SDKs' connection-closed and request-timeout).
pub const REFUSED_CODE: i64 = -32003;

/// Most bytes of a stream's start searched for its `endpoint` event (the transport sends
/// it first); past them the stream is relayed untouched.
pub const SNIFF_BYTES: usize = 8 * 1024;

/// Most injected events waiting for a stream's next event boundary.
const QUEUE: usize = 64;

/// Most open legacy streams held across runs; beyond it a new one is relayed without an
/// injector (a call staged on it is then refused with a 403 instead).
pub const MAX_STREAMS: usize = 10_000;

/// The `(run, message URL)` of each open stream whose `endpoint` event was seen, with
/// the sender of events to inject into it.
#[derive(Debug, Default)]
pub struct Streams {
    open: Mutex<HashMap<(RunId, String), mpsc::Sender<Bytes>>>,
    /// Every message URL an `endpoint` event named in the run, its stream open or closed
    /// (at most [`MAX_STREAMS`]): a call staged there after its stream closed is refused
    /// too, though no stream can carry the refusal.
    known: Mutex<std::collections::HashSet<(RunId, String)>>,
}

/// A handle to inject events into one open stream.
#[derive(Debug, Clone)]
pub struct Injector(mpsc::Sender<Bytes>);

impl Injector {
    /// Queues JSON-RPC `message` for the stream, as one `message` event (the transport's
    /// event name for every server message). `false` when the stream is gone or its queue
    /// is full.
    pub fn send(&self, message: &Value) -> bool {
        let event = format!("event: message\ndata: {message}\n\n");
        self.0.try_send(Bytes::from(event)).is_ok()
    }
}

impl Streams {
    /// Wraps the body of a passed `GET` to `url` in `run` whose answer is an event stream:
    /// relayed as it comes, its `endpoint` event registers the message URL it names, and
    /// events sent to that URL's [`Injector`] are relayed between the origin's events.
    /// The registration ends with the body.
    pub fn watch(self: &Arc<Self>, run: &RunId, url: &str, body: ProxyBody) -> ProxyBody {
        use http_body_util::BodyExt;
        Watched {
            inner: body,
            sniff: Some(BytesMut::new()),
            framing: Framing::default(),
            injected: None,
            streams: self.clone(),
            run: run.clone(),
            stream_url: url.to_owned(),
            registered: None,
        }
        .boxed()
    }

    /// The injector of the open stream whose `endpoint` event named `url` (the absolute
    /// URL of a request in `run`, query included), if any.
    pub fn injector(&self, run: &RunId, url: &str) -> Option<Injector> {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&(run.clone(), url.to_owned()))
            .filter(|sender| !sender.is_closed())
            .cloned()
            .map(Injector)
    }

    /// Whether an `endpoint` event of a stream in `run` named `url`, open or since closed.
    pub fn was_named(&self, run: &RunId, url: &str) -> bool {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(run.clone(), url.to_owned()))
    }

    /// Forgets `run`'s streams.
    pub fn forget(&self, run: &RunId) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(r, _), _| r != run);
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(r, _)| r != run);
    }

    fn register(&self, key: (RunId, String)) -> Option<mpsc::Receiver<Bytes>> {
        {
            let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            if known.len() < MAX_STREAMS {
                known.insert(key.clone());
            }
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|_, sender| !sender.is_closed());
        if open.len() >= MAX_STREAMS {
            tracing::warn!(run.id = %key.0, url = %key.1, "too many MCP event streams held; this one gets no injector");
            return None;
        }
        let (sender, receiver) = mpsc::channel(QUEUE);
        tracing::info!(run.id = %key.0, url = %key.1, "MCP HTTP+SSE stream open (deprecated transport)");
        open.insert(key, sender);
        Some(receiver)
    }

    fn unregister(&self, key: &(RunId, String)) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.get(key).is_some_and(mpsc::Sender::is_closed) {
            open.remove(key);
        }
    }
}

/// Whether `url` with `headers` looks like a message POST of the deprecated transport
/// whose stream airlock did not see: its query names the session (`session_id=`, as the
/// Python SDK's server writes it, or `sessionId=`, the TypeScript SDK's) and it carries no
/// `Mcp-Session-Id` header (streamable HTTP's).
pub fn looks_legacy(url: &str, headers: &http::HeaderMap) -> bool {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let names_session = query.split('&').any(|pair| {
        let name = pair.split('=').next().unwrap_or("");
        name == "session_id" || name == "sessionId"
    });
    names_session && !headers.contains_key(airlock_adapters::mcp::session::SESSION_HEADER)
}

/// Whether `body` is JSON-RPC 2.0: one message object or a batch of them, each with
/// `"jsonrpc": "2.0"`.
pub fn is_jsonrpc(body: &[u8]) -> bool {
    let is_message = |m: &Value| m.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(items)) => !items.is_empty() && items.iter().all(is_message),
        Ok(message @ Value::Object(_)) => is_message(&message),
        _ => false,
    }
}

/// The JSON-RPC error responses refusing each request (a message with an `id`) in
/// `body`, one object or a batch, with `reason` as the message and `denial` (the
/// refusal's JSON body) as `data`.
pub fn refusals(body: &[u8], reason: &str, denial: &Value) -> Vec<Value> {
    let messages = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(items)) => items,
        Ok(object @ Value::Object(_)) => vec![object],
        _ => Vec::new(),
    };
    messages
        .iter()
        .filter_map(|m| m.get("id").filter(|id| !id.is_null()))
        .map(|id| {
            json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": { "code": REFUSED_CODE, "message": reason, "data": denial },
            })
        })
        .collect()
}

/// The message URL an `endpoint` event's `data` names, made absolute against the stream's
/// `url` and written as airlock writes request URLs (the stream's own origin, port
/// included): the transport sends a path such as `/messages/?session_id=…`; an absolute
/// URL must be on the stream's origin (scheme, host in any case, port written or
/// implied), which clients check too.
pub fn message_url(stream_url: &str, data: &str) -> Option<String> {
    let data = data.trim();
    let origin = super::origin_of(stream_url);
    if data.starts_with("https://") || data.starts_with("http://") {
        let named = super::origin_of(data);
        if normalized_origin(named)? != normalized_origin(origin)? {
            return None;
        }
        let rest = &data[named.len()..];
        let rest = if rest.is_empty() { "/" } else { rest };
        return Some(format!("{origin}{rest}"));
    }
    if data.starts_with('/') {
        return Some(format!("{origin}{data}"));
    }
    // Relative to the stream's directory.
    let path = stream_url[origin.len()..].split('?').next().unwrap_or("/");
    let directory = path.rfind('/').map_or("/", |i| &path[..=i]);
    Some(format!("{origin}{directory}{data}"))
}

/// `(scheme, host, port)` of `scheme://host[:port]`: the host lower-cased, the port the
/// scheme's default when none is written (RFC 3986 §6.2.3 scheme-based normalisation).
fn normalized_origin(origin: &str) -> Option<(String, String, u16)> {
    let (scheme, authority) = origin.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse().ok()?),
        _ => (authority, default),
    };
    Some((scheme, host.to_ascii_lowercase(), port))
}

/// The `data` of the first complete `endpoint` event in `buffer` (lines end with CRLF,
/// LF or CR; an event ends with a blank line; `data` lines are joined with newlines: the
/// HTML Living Standard, "Server-sent events", "Interpreting an event stream").
fn endpoint_event(buffer: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(buffer)
        .replace("\r\n", "\n")
        .replace('\r', "\n");
    let complete = text.rfind("\n\n")?;
    for event in text[..complete].split("\n\n") {
        let mut name = "message";
        let mut data: Vec<&str> = Vec::new();
        for line in event.lines() {
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => name = value,
                "data" => data.push(value),
                _ => {}
            }
        }
        if name == "endpoint" && !data.is_empty() {
            return Some(data.join("\n"));
        }
    }
    None
}

/// Where the relayed bytes stand in the event stream's lines (CRLF, LF and CR each end a
/// line; a blank line ends an event), so events are injected only between the origin's.
#[derive(Debug, Clone, Copy)]
struct Framing {
    /// No byte of the current line yet.
    line_empty: bool,
    /// The last byte was a CR (a following LF belongs to it).
    after_cr: bool,
    /// At the start of the stream or just after a blank line.
    at_boundary: bool,
}

impl Default for Framing {
    fn default() -> Self {
        Self {
            line_empty: true,
            after_cr: false,
            at_boundary: true,
        }
    }
}

impl Framing {
    fn relayed(&mut self, data: &[u8]) {
        for &byte in data {
            if byte == b'\n' && self.after_cr {
                self.after_cr = false;
                continue;
            }
            self.after_cr = byte == b'\r';
            if byte == b'\n' || byte == b'\r' {
                if self.line_empty {
                    self.at_boundary = true;
                }
                self.line_empty = true;
            } else {
                self.line_empty = false;
                self.at_boundary = false;
            }
        }
    }

    /// After an injected event (which ends with a blank line).
    fn injected(&mut self) {
        *self = Self::default();
    }
}

struct Watched {
    inner: ProxyBody,
    /// The stream's first bytes while its `endpoint` event is looked for.
    sniff: Option<BytesMut>,
    /// Where the relayed bytes stand, to tell an event boundary.
    framing: Framing,
    injected: Option<mpsc::Receiver<Bytes>>,
    streams: Arc<Streams>,
    run: RunId,
    stream_url: String,
    registered: Option<(RunId, String)>,
}

impl Watched {
    fn relayed(&mut self, data: &Bytes) {
        self.framing.relayed(data);
        let Some(sniff) = self.sniff.as_mut() else {
            return;
        };
        sniff.extend_from_slice(data);
        if let Some(data) = endpoint_event(sniff) {
            self.sniff = None;
            let Some(url) = message_url(&self.stream_url, &data) else {
                return;
            };
            let key = (self.run.clone(), url);
            self.injected = self.streams.register(key.clone());
            if self.injected.is_some() {
                self.registered = Some(key);
            }
        } else if sniff.len() > SNIFF_BYTES {
            self.sniff = None;
        }
    }
}

impl Body for Watched {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.framing.at_boundary {
            if let Some(injected) = this.injected.as_mut() {
                if let Poll::Ready(Some(event)) = injected.poll_recv(cx) {
                    this.framing.injected();
                    return Poll::Ready(Some(Ok(Frame::data(event))));
                }
            }
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let data = data.clone();
                    this.relayed(&data);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        // Injected events change the length: none is promised.
        SizeHint::default()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(key) = self.registered.take() {
            // Closing the receiver closes the registered sender.
            self.injected = None;
            self.streams.unregister(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_event_is_found_and_made_absolute() {
        let stream = b"event: endpoint\r\ndata: /messages/?session_id=ab12\r\n\r\n";
        assert_eq!(
            endpoint_event(stream).as_deref(),
            Some("/messages/?session_id=ab12")
        );
        assert_eq!(endpoint_event(b"event: endpoint\ndata: /m"), None);
        assert_eq!(
            message_url("https://mcp.test:8443/sse", "/messages/?session_id=ab12").as_deref(),
            Some("https://mcp.test:8443/messages/?session_id=ab12")
        );
        assert_eq!(
            message_url("https://mcp.test/a/sse", "messages?sessionId=1").as_deref(),
            Some("https://mcp.test/a/messages?sessionId=1")
        );
        assert_eq!(
            message_url("https://mcp.test/sse", "https://other.test/m"),
            None
        );
        // An absolute URL with the port implied, or the host in another case, is the
        // stream's origin (written as airlock writes it).
        assert_eq!(
            message_url(
                "https://localhost:443/sse",
                "https://LocalHost/messages/?s=1"
            )
            .as_deref(),
            Some("https://localhost:443/messages/?s=1")
        );
        assert_eq!(
            message_url("https://localhost:443/sse", "https://localhost:8443/m"),
            None
        );
        assert_eq!(
            message_url("https://localhost:443/sse", "http://localhost/m"),
            None
        );
        // Bare CR line endings.
        assert_eq!(
            endpoint_event(b"event: endpoint\rdata: /m?session_id=1\r\r").as_deref(),
            Some("/m?session_id=1")
        );
    }

    #[test]
    fn an_event_boundary_is_a_blank_line_in_any_line_ending() {
        let at = |chunks: &[&[u8]]| {
            let mut framing = Framing::default();
            for chunk in chunks {
                framing.relayed(chunk);
            }
            framing.at_boundary
        };
        assert!(at(&[]));
        assert!(at(&[b"data: x\n\n"]));
        assert!(at(&[b"data: x\r\n\r\n"]));
        assert!(at(&[b"data: x\r\r"]));
        assert!(at(&[b"data: x\n\r\n"]));
        assert!(at(&[b"data: x\r\n", b"\n"]));
        assert!(at(&[b": ping\n\n"]));
        assert!(!at(&[b"data: x\n"]));
        assert!(!at(&[b"data: x\r\n"]));
        assert!(!at(&[b"data: x\n\ndata: y"]));
        assert!(!at(&[b"data: x\r", b"\n"]));
    }

    #[test]
    fn a_refusal_answers_each_request_of_a_batch_and_no_notification() {
        let body = br#"[{"jsonrpc":"2.0","id":4,"method":"tools/call"},{"jsonrpc":"2.0","method":"notifications/x"}]"#;
        let answers = refusals(body, "refused", &json!({"reason_code": "x"}));
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0]["id"], 4);
        assert_eq!(answers[0]["error"]["code"], REFUSED_CODE);
        assert_eq!(answers[0]["error"]["data"]["reason_code"], "x");
    }

    #[test]
    fn only_a_session_query_without_the_streamable_header_looks_legacy() {
        let mut headers = http::HeaderMap::new();
        assert!(looks_legacy("https://h/messages/?session_id=1", &headers));
        assert!(looks_legacy("https://h/message?sessionId=1", &headers));
        assert!(!looks_legacy("https://h/mcp", &headers));
        headers.insert("mcp-session-id", http::HeaderValue::from_static("s"));
        assert!(!looks_legacy("https://h/messages/?session_id=1", &headers));
    }
}
