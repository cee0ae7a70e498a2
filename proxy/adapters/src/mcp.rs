//! `mcp`: the Model Context Protocol's tool calls over streamable HTTP (MCP specification
//! 2025-06-18, "Transports: Streamable HTTP" and "Server Features: Tools";
//! JSON-RPC 2.0). A staged `tools/call`, alone or in a batch, is answered as an MCP server
//! answers it: a JSON-RPC response with the request's own `id` whose result is a text
//! content block saying the call is staged and `isError: false`, as `application/json`
//! or, when the client accepts only `text/event-stream`, as a one-event stream. A staged
//! notification (no `id`) gets `202 Accepted` with no body, as the transport says for
//! notifications. Reviewers see `mcp SERVER.TOOL {arguments}`, SERVER being the
//! `serverInfo.name` of the server's `initialize` answer that passed earlier in the run
//! ([`session`]); the release opens a session of its own ([`session::McpSession`]).

use airlock_ledger::{Effect, ValueKind};
use serde_json::{json, Value};

use super::{excerpt, placeholder_json, Adapter, Call, Plan, ReleaseSession, Synthetic};

pub mod schema;
pub mod session;

pub use session::Context;

/// The MCP adapter.
#[derive(Debug, Clone, Copy)]
pub struct Mcp;

/// What the text content of a staged call's result says.
pub const STAGED_TEXT: &str = "This tool call was staged by airlock: it runs only if a reviewer approves it, when the run is committed. Nothing has happened yet; do not assume its effects.";

/// The JSON-RPC messages of a request body: one object, or the objects of a batch.
fn messages(call: &Call<'_>) -> Option<(Vec<Value>, bool)> {
    match call.json()? {
        Value::Array(items) if !items.is_empty() => Some((items, true)),
        object @ Value::Object(_) => Some((vec![object], false)),
        _ => None,
    }
}

fn is_jsonrpc(message: &Value) -> bool {
    message["jsonrpc"] == "2.0" && message["method"].is_string()
}

/// `TOOL {arguments…}` (arguments shortened) of a `tools/call`, else the method, for the
/// summary line.
fn describe(message: &Value) -> String {
    let method = message["method"].as_str().unwrap_or("?");
    if method != "tools/call" {
        return method.to_owned();
    }
    let tool = message["params"]["name"].as_str().unwrap_or("?");
    let arguments = session::arguments_line(&message["params"]["arguments"]);
    format!("{tool} {}", excerpt(&arguments, 80))
}

/// Where a staged answer's server-assigned fields are: for one `tools/call` (not a batch)
/// of a tool whose output schema the run learnt, each id-like field of its structured
/// content ([`schema::id_fields`], nested ones included) at
/// `/result/structuredContent/FIELD[/FIELD…]`.
fn placeholder_fields(call: &Call<'_>, messages: &[Value]) -> Vec<(String, ValueKind)> {
    let [message] = messages else {
        return Vec::new();
    };
    if message["method"] != "tools/call" || message.get("id").is_none_or(Value::is_null) {
        return Vec::new();
    }
    let schemas = Context::of(call).output_schemas;
    let tool = message["params"]["name"].as_str().unwrap_or("");
    let Some(schema) = schemas.as_ref().and_then(|s| s.get(tool)) else {
        return Vec::new();
    };
    schema::id_fields(schema)
        .into_iter()
        .map(|(path, kind)| {
            let tokens: Vec<String> = path.iter().map(|name| pointer_escape(name)).collect();
            (format!("{STRUCTURED}/{}", tokens.join("/")), kind)
        })
        .collect()
}

/// Where the structured content of a JSON-RPC tool result is.
const STRUCTURED: &str = "/result/structuredContent";

/// `name` as one JSON Pointer reference token (RFC 6901 §3: `~` as `~0`, `/` as `~1`).
fn pointer_escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// The answer to one staged message with an `id`; `schemas` are the tools' output
/// schemas the run's `tools/list` answer gave ([`session::Context::output_schemas`]).
fn result_for(message: &Value, effect: &Effect, schemas: Option<&Value>) -> Value {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    if message["method"] == "tools/call" {
        let tool = message["params"]["name"].as_str().unwrap_or("");
        let mut result = json!({
            "content": [{
                "type": "text",
                "text": format!("{STAGED_TEXT} (tool {tool}, airlock effect {})", effect.id),
            }],
            "isError": false,
        });
        // A tool with an output schema must answer structured content that conforms to
        // it (MCP 2025-06-18, "Tools: Output Schema"); clients check.
        if let Some(schema) = schemas.and_then(|s| s.get(tool)) {
            result["structuredContent"] = schema::sample(schema);
        }
        let mut answer = json!({ "jsonrpc": "2.0", "id": id, "result": result });
        // The server-assigned fields are the effect's placeholders (planned for a single
        // call: `placeholder_fields`).
        for placeholder in &effect.placeholders {
            if placeholder.pointer.starts_with(STRUCTURED) {
                if let Some(slot) = answer.pointer_mut(&placeholder.pointer) {
                    *slot = placeholder_json(effect, &placeholder.pointer);
                }
            }
        }
        answer
    } else {
        // Any other request a rule staged: an empty result, as for a method with nothing
        // to return (JSON-RPC 2.0 §5: a response has `result` or `error`).
        json!({ "jsonrpc": "2.0", "id": id, "result": {} })
    }
}

/// Whether the client takes a JSON answer: its `Accept` lists `application/json` (or
/// `*/*`), or it sent none. MCP clients send both media types; one that lists only
/// `text/event-stream` gets a stream.
fn accepts_json(call: &Call<'_>) -> bool {
    let Some(accept) = call.header("accept") else {
        return true;
    };
    accept.split(',').any(|item| {
        let media = item.split(';').next().unwrap_or("").trim();
        media.eq_ignore_ascii_case("application/json")
            || media == "*/*"
            || media.eq_ignore_ascii_case("application/*")
    })
}

impl Adapter for Mcp {
    fn name(&self) -> &'static str {
        "mcp"
    }

    fn plan(&self, call: &Call<'_>) -> Plan {
        let Some((messages, _)) = messages(call) else {
            return Plan::default();
        };
        if call.method != "POST" || !messages.iter().all(is_jsonrpc) {
            return Plan::default();
        }
        let calls: Vec<String> = messages.iter().map(describe).collect();
        // `SERVER.` from the session's `initialize` answer; else the authority follows.
        let server = Context::of(call).server_name;
        let (prefix, suffix) = match &server {
            Some(name) => (format!("{name}."), String::new()),
            None => (String::new(), format!(" on {}", call.authority())),
        };
        let summary = match calls.as_slice() {
            [one] => format!("mcp {prefix}{one}{suffix}"),
            many => format!(
                "mcp batch of {}{}: {}",
                many.len(),
                server.map_or_else(
                    || format!(" on {}", call.authority()),
                    |s| format!(" to {s}")
                ),
                excerpt(&many.join(", "), 120)
            ),
        };
        let endpoint = if messages.iter().any(|m| m["method"] == "tools/call") {
            "tools/call"
        } else {
            "jsonrpc"
        };
        let pointers = placeholder_fields(call, &messages);
        let placeholders: Vec<(&str, ValueKind)> =
            pointers.iter().map(|(p, k)| (p.as_str(), *k)).collect();
        Plan::new(endpoint, summary, &placeholders)
    }

    fn details(&self, call: &Call<'_>) -> Option<Value> {
        let (messages, _) = messages(call)?;
        let calls: Vec<Value> = messages
            .iter()
            .filter(|m| is_jsonrpc(m))
            .map(|m| {
                json!({
                    "method": m["method"],
                    "id": m.get("id").cloned().unwrap_or(Value::Null),
                    "tool": m["params"]["name"],
                    "arguments": m["params"]["arguments"],
                })
            })
            .collect();
        (!calls.is_empty()).then(|| {
            json!({
                "server": call.authority(),
                "server_name": Context::of(call).server_name,
                "session": call.header(session::SESSION_HEADER),
                "calls": calls,
            })
        })
    }

    /// Every staged MCP request is released in a session of airlock's own: the client's
    /// session may be gone by commit (a restarted server, an expired session).
    fn release_session(&self, call: &Call<'_>) -> Option<Box<dyn ReleaseSession>> {
        Some(Box::new(session::McpSession::for_call(call)))
    }

    /// A JSON-RPC `error` answering a released request is a failure (the server refused
    /// the call); a tool result with `isError: true` is one too (the tool ran and
    /// reported an error, MCP 2025-06-18 "Tools: Error Handling").
    fn release_failure(&self, _call: &Call<'_>, status: u16, body: &[u8]) -> Option<String> {
        if status >= 300 {
            return None;
        }
        session::answer_messages(body).iter().find_map(|m| {
            if let Some(error) = m.get("error") {
                return Some(format!("the MCP server answered a JSON-RPC error: {error}"));
            }
            (m["result"]["isError"] == true).then(|| {
                format!(
                    "the tool reported an error: {}",
                    excerpt(&m["result"]["content"].to_string(), 200)
                )
            })
        })
    }

    fn respond(&self, call: &Call<'_>, effect: &Effect) -> Synthetic {
        let Some((messages, batch)) = messages(call) else {
            return Synthetic {
                status: 202,
                headers: Vec::new(),
                body: Vec::new(),
            };
        };
        let schemas = Context::of(call).output_schemas;
        let answers: Vec<Value> = messages
            .iter()
            .filter(|m| m.get("id").is_some_and(|id| !id.is_null()))
            .map(|m| result_for(m, effect, schemas.as_ref()))
            .collect();
        if answers.is_empty() {
            // Notifications and responses only: accepted, no body (streamable HTTP).
            return Synthetic {
                status: 202,
                headers: Vec::new(),
                body: Vec::new(),
            };
        }
        let body = if batch {
            Value::Array(answers)
        } else {
            answers.into_iter().next().unwrap_or(Value::Null)
        };
        let mut answer = if accepts_json(call) {
            Synthetic {
                status: 200,
                headers: vec![("content-type".into(), "application/json".into())],
                body: serde_json::to_vec(&body).unwrap_or_default(),
            }
        } else {
            // One server-sent event carrying the response, then the stream ends (the
            // transport: "the server SHOULD close the SSE stream" after the response).
            let event = format!("event: message\ndata: {body}\n\n");
            Synthetic {
                status: 200,
                headers: vec![
                    ("content-type".into(), "text/event-stream".into()),
                    ("cache-control".into(), "no-cache".into()),
                ],
                body: event.into_bytes(),
            }
        };
        if let Some(session) = call.header(session::SESSION_HEADER) {
            answer
                .headers
                .push((session::SESSION_HEADER.into(), session.to_owned()));
        }
        answer
    }
}
