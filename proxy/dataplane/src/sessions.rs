//! What the run's passed traffic told adapters about a session with an origin, kept for
//! the effects staged later in the same run (docs/adapters.md#mcp): today the MCP
//! `initialize` exchange (the client's parameters and the server's `serverInfo`), read
//! from a passed `POST` whose JSON body is an `initialize` request, and the open event
//! streams of MCP's deprecated HTTP+SSE transport ([`legacy`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use airlock_ledger::RunId;
use bytes::Bytes;
use serde_json::Value;

pub mod legacy;

/// Most request-body bytes kept to recognise an `initialize` (its parameters are small).
pub const REQUEST_CAPTURE_BYTES: usize = 64 * 1024;

/// Most (run, origin) contexts held at once; beyond it a new context is not kept (the
/// effect then names the authority, and its release opens a session as airlock).
pub const MAX_CONTEXTS: usize = 10_000;

/// Contexts per run and origin (`scheme://authority`), in memory: a context is what
/// effects staged afterwards carry into the ledger ([`airlock_ledger::Effect::context`]).
#[derive(Debug, Default)]
pub struct Sessions {
    contexts: Mutex<HashMap<(RunId, String), Value>>,
    /// The run's open HTTP+SSE streams, by the message URL their `endpoint` event named.
    pub legacy: Arc<legacy::Streams>,
}

/// `scheme://authority` of `url`.
pub fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find('/')
        .map_or(url.len(), |i| after_scheme + i);
    &url[..end]
}

/// Whether a passed request may be an MCP `initialize` worth capturing: a `POST` with a
/// JSON content type.
pub fn worth_capturing(method: &http::Method, headers: &http::HeaderMap) -> bool {
    method == http::Method::POST
        && headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.trim_start().starts_with("application/json"))
}

impl Sessions {
    /// Learns from a passed exchange: `request` and `response` are the captured bodies of
    /// a request to `url` in `run`. Cheap for anything that is no `initialize`.
    pub fn observe(&self, run: &RunId, url: &str, request: &[Bytes], response: &[Bytes]) {
        use airlock_adapters::mcp::session::{observe_initialize, observe_tools_list};
        let request: Vec<u8> = request.concat();
        let initialize = request.windows(12).any(|w| w == b"\"initialize\"");
        let tools_list = request.windows(12).any(|w| w == b"\"tools/list\"");
        if !initialize && !tools_list {
            return;
        }
        let response: Vec<u8> = response.concat();
        let key = (run.clone(), origin_of(url).to_owned());
        let mut contexts = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        if contexts.len() >= MAX_CONTEXTS && !contexts.contains_key(&key) {
            tracing::warn!(run.id = %run, url = %url, "too many MCP sessions held; this one is not kept");
            return;
        }
        if initialize {
            let Some(mut context) = observe_initialize(&request, &response) else {
                return;
            };
            tracing::info!(run.id = %run, url = %url, server = %context["server"]["name"], "MCP session initialized");
            // A new session keeps the tools already listed: the same server's.
            if let Some(schemas) = contexts.get(&key).and_then(|c| c.get("output_schemas")) {
                context["output_schemas"] = schemas.clone();
            }
            contexts.insert(key, context);
        } else if let Some(schemas) = observe_tools_list(&request, &response) {
            tracing::info!(run.id = %run, url = %url, tools = schemas.len(), "MCP tools' output schemas learnt");
            let context = contexts
                .entry(key)
                .or_insert_with(|| Value::Object(serde_json::Map::new()));
            context["output_schemas"] = Value::Object(schemas);
        }
    }

    /// The context of `run` with the origin of `url`, when one was learnt.
    pub fn context(&self, run: &RunId, url: &str) -> Option<Value> {
        self.contexts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(run.clone(), origin_of(url).to_owned()))
            .cloned()
    }

    /// Forgets `run`'s contexts (it accepts no more requests).
    pub fn forget(&self, run: &RunId) {
        self.legacy.forget(run);
        self.contexts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(r, _), _| r != run);
    }
}
