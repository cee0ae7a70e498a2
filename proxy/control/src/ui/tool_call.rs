//! The effect page's account of a staged MCP request (docs/adapters.md#mcp), from the
//! `mcp` adapter's `details` (`{server, server_name, session, calls: [{method, id, tool,
//! arguments}]}`): the server, then each call's tool and its arguments as indented JSON,
//! so a reviewer reads the tool call rather than the JSON-RPC envelope.

use maud::{html, Markup};
use serde_json::Value;

/// The "Tool call" section for `details`; empty markup for other adapters' details.
pub(super) fn section(details: Option<&Value>) -> Markup {
    let Some(details) = details.filter(|d| d["calls"].is_array() && d.get("commits").is_none())
    else {
        return html! {};
    };
    let calls = details["calls"].as_array().cloned().unwrap_or_default();
    let server = match (details["server_name"].as_str(), details["server"].as_str()) {
        (Some(name), Some(authority)) => format!("{name} ({authority})"),
        (None, Some(authority)) => authority.to_owned(),
        (Some(name), None) => name.to_owned(),
        (None, None) => "?".to_owned(),
    };
    let title = if calls.len() == 1 {
        "Tool call"
    } else {
        "Tool calls"
    };
    html! {
        section #tool-call {
            h2 { (title) }
            p.meta { "MCP server " code { (server) } }
            @for call in &calls {
                @let method = call["method"].as_str().unwrap_or("?");
                @let tool = call["tool"].as_str();
                h3 {
                    @if let Some(tool) = tool { "tool " code { (tool) } } @else { "method " code { (method) } }
                    @if !call["id"].is_null() { " (JSON-RPC id " code { (call["id"].to_string()) } ")" }
                }
                @if !call["arguments"].is_null() {
                    pre.body { (serde_json::to_string_pretty(&call["arguments"]).unwrap_or_default()) }
                }
            }
        }
    }
}
