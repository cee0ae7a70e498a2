//! What airlock learns of an MCP session from the `initialize` exchange that passed, and
//! the fresh session it opens with the server to release a staged call (MCP
//! specification 2025-06-18, "Lifecycle" and "Transports: Streamable HTTP, Session
//! Management").
//!
//! The context ([`Context`], kept as JSON on the effect, [`airlock_ledger::Effect::context`])
//! is `{server: {name, version}, initialize: PARAMS, output_schemas: {TOOL: SCHEMA}}`: the
//! server's `serverInfo` from its answer, the client's own `initialize` parameters
//! (`protocolVersion`, `capabilities`, `clientInfo`) from its request, and the tools'
//! output schemas from a `tools/list` answer ([`observe_tools_list`]). At release airlock sends `initialize`
//! with those parameters, `notifications/initialized`, the call, and `DELETE`, each
//! carrying the `Mcp-Session-Id` the server gave (when it gave one) and the
//! `MCP-Protocol-Version` it chose.

use serde_json::{json, Value};

use crate::{Call, ReleaseSession, SessionRequest};

/// The header that names a streamable-HTTP session (MCP 2025-06-18, "Session Management").
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The header that names the negotiated protocol version on every request after
/// `initialize` (MCP 2025-06-18, "Protocol Version Header").
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// The protocol version airlock asks for when it recorded no client `initialize`.
pub const DEFAULT_VERSION: &str = "2025-06-18";
/// The JSON-RPC id of the `initialize` airlock sends at release.
const INIT_ID: &str = "airlock-release-initialize";

/// The typed view of an MCP effect's context.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Context {
    /// The server's `serverInfo.name`, when its `initialize` answer named it.
    pub server_name: Option<String>,
    /// The client's `initialize` `params`, as it sent them.
    pub initialize: Option<Value>,
    /// The tools' `outputSchema`s from the server's `tools/list` answer (`{TOOL:
    /// schema}`), when one passed and listed any.
    pub output_schemas: Option<Value>,
}

impl Context {
    /// Reads the context a call carries (`None` fields when absent).
    pub fn of(call: &Call<'_>) -> Self {
        let Some(context) = call.context else {
            return Self::default();
        };
        Self {
            server_name: context["server"]["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
            initialize: context.get("initialize").filter(|p| p.is_object()).cloned(),
            output_schemas: context
                .get("output_schemas")
                .filter(|s| s.is_object())
                .cloned(),
        }
    }
}

/// The JSON-RPC messages of an MCP answer: a JSON body (one message or a batch), or the
/// `data:` of each event of a `text/event-stream` body. Unparseable parts are skipped.
pub fn answer_messages(body: &[u8]) -> Vec<Value> {
    if let Ok(json) = serde_json::from_slice::<Value>(body) {
        return match json {
            Value::Array(items) => items,
            other => vec![other],
        };
    }
    let text = String::from_utf8_lossy(body);
    let mut out = Vec::new();
    // Events are separated by a blank line; an event's data lines join with `\n`.
    for event in text.replace("\r\n", "\n").split("\n\n") {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if let Ok(message) = serde_json::from_str::<Value>(&data.join("\n")) {
            out.push(message);
        }
    }
    out
}

/// The context an `initialize` exchange establishes: `request` is the client's body (a
/// JSON-RPC `initialize` request), `response` the server's answer (JSON or an event
/// stream) carrying the response with the same `id`. `None` when it is no such exchange
/// or the server answered an error.
pub fn observe_initialize(request: &[u8], response: &[u8]) -> Option<Value> {
    let request: Value = serde_json::from_slice(request).ok()?;
    if request["jsonrpc"] != "2.0" || request["method"] != "initialize" {
        return None;
    }
    let id = request.get("id").filter(|id| !id.is_null())?;
    let answer = answer_messages(response)
        .into_iter()
        .find(|m| m.get("id") == Some(id) && m.get("result").is_some())?;
    let info = &answer["result"]["serverInfo"];
    Some(json!({
        "server": { "name": info["name"], "version": info["version"] },
        "initialize": request.get("params").cloned().unwrap_or_else(|| json!({})),
    }))
}

/// Most output schemas kept from one `tools/list` answer (a server with more tools keeps
/// the first ones; a staged call of another tool is answered without
/// `structuredContent`).
pub const MAX_OUTPUT_SCHEMAS: usize = 256;

/// The tools' output schemas a `tools/list` exchange lists: `{TOOL: outputSchema}` for
/// each tool of the answer that declares one (MCP 2025-06-18, "Tools: Listing Tools").
/// `None` when it is no such exchange or no tool declares one.
pub fn observe_tools_list(
    request: &[u8],
    response: &[u8],
) -> Option<serde_json::Map<String, Value>> {
    let request: Value = serde_json::from_slice(request).ok()?;
    if request["jsonrpc"] != "2.0" || request["method"] != "tools/list" {
        return None;
    }
    let id = request.get("id").filter(|id| !id.is_null())?;
    let answer = answer_messages(response)
        .into_iter()
        .find(|m| m.get("id") == Some(id) && m.get("result").is_some())?;
    let schemas: serde_json::Map<String, Value> = answer["result"]["tools"]
        .as_array()?
        .iter()
        .filter_map(|tool| {
            let name = tool["name"].as_str()?;
            let schema = tool.get("outputSchema").filter(|s| s.is_object())?;
            Some((name.to_owned(), schema.clone()))
        })
        .take(MAX_OUTPUT_SCHEMAS)
        .collect();
    (!schemas.is_empty()).then_some(schemas)
}

/// What an effect keeps of the run's `context` with its origin: everything but the
/// output schemas of tools the staged `body` (one JSON-RPC message or a batch) does not
/// call, so the ledger holds one schema per call, not the server's whole list.
pub fn kept_context(context: &Value, body: &[u8]) -> Value {
    let mut kept = context.clone();
    let Some(schemas) = kept
        .get_mut("output_schemas")
        .and_then(Value::as_object_mut)
    else {
        return kept;
    };
    let called: Vec<String> = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(items)) => items,
        Ok(one) => vec![one],
        Err(_) => Vec::new(),
    }
    .iter()
    .filter(|m| m["method"] == "tools/call")
    .filter_map(|m| m["params"]["name"].as_str().map(str::to_owned))
    .collect();
    schemas.retain(|tool, _| called.contains(tool));
    kept
}

/// The session airlock opens to release one staged MCP request.
#[derive(Debug, Clone)]
pub struct McpSession {
    /// The `initialize` parameters sent (the client's, or airlock's own).
    params: Value,
}

impl McpSession {
    /// The session for `call`: with the client's recorded `initialize` parameters, else
    /// with `clientInfo` `airlock` and the protocol version the staged request named.
    pub fn for_call(call: &Call<'_>) -> Self {
        let params = Context::of(call).initialize.unwrap_or_else(|| {
            json!({
                "protocolVersion": call.header(VERSION_HEADER).unwrap_or(DEFAULT_VERSION),
                "capabilities": {},
                "clientInfo": { "name": "airlock", "version": env!("CARGO_PKG_VERSION") },
            })
        });
        Self { params }
    }
}

fn post(body: &Value) -> SessionRequest {
    SessionRequest {
        method: "POST",
        headers: vec![
            ("content-type".into(), "application/json".into()),
            (
                "accept".into(),
                "application/json, text/event-stream".into(),
            ),
        ],
        body: serde_json::to_vec(body).unwrap_or_default(),
    }
}

impl ReleaseSession for McpSession {
    fn replaces(&self) -> &'static [&'static str] {
        &[SESSION_HEADER, VERSION_HEADER]
    }

    fn open(&self) -> SessionRequest {
        post(&json!({
            "jsonrpc": "2.0",
            "id": INIT_ID,
            "method": "initialize",
            "params": self.params,
        }))
    }

    fn opened(
        &self,
        status: u16,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Vec<(String, String)>, String> {
        if !(200..300).contains(&status) {
            return Err(format!("the server answered initialize {status}"));
        }
        let messages = answer_messages(body);
        let Some(answer) = messages.iter().find(|m| m["id"] == INIT_ID) else {
            return Err("the server's answer to initialize held no response to it".into());
        };
        if let Some(error) = answer.get("error") {
            return Err(format!("the server refused initialize: {error}"));
        }
        let mut carried = Vec::new();
        if let Some((_, session)) = headers.iter().find(|(n, _)| n == SESSION_HEADER) {
            carried.push((SESSION_HEADER.to_owned(), session.clone()));
        }
        let version = answer["result"]["protocolVersion"]
            .as_str()
            .or_else(|| self.params["protocolVersion"].as_str())
            .unwrap_or(DEFAULT_VERSION);
        carried.push((VERSION_HEADER.to_owned(), version.to_owned()));
        Ok(carried)
    }

    fn before_call(&self) -> Vec<SessionRequest> {
        vec![post(
            &json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
        )]
    }

    fn close(&self, carried: &[(String, String)]) -> Option<SessionRequest> {
        carried
            .iter()
            .any(|(n, _)| n == SESSION_HEADER)
            .then(|| SessionRequest {
                method: "DELETE",
                headers: Vec::new(),
                body: Vec::new(),
            })
    }
}

/// `arguments` as one line for a summary: `{}` when absent, else compact JSON.
pub(super) fn arguments_line(arguments: &Value) -> String {
    match arguments {
        Value::Null => "{}".to_owned(),
        other => other.to_string(),
    }
}
