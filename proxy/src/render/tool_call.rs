//! A staged MCP request for `airlock show`: the server, and each call's tool with its
//! arguments, from the `mcp` adapter's `details` (docs/adapters.md#mcp).

use serde_json::Value;

use super::line;
use airlock_control::visible::escape_line;

/// Most characters of one call's arguments shown (the body below has them whole).
const ARGUMENTS_CHARS: usize = 2_000;

/// `server …` and one `tool NAME {arguments}` line per call from the `mcp` adapter's
/// `details` (`{server, server_name, calls: [{method, id, tool, arguments}]}`); empty
/// for other effects. The arguments are compact JSON, escaped like every value an agent
/// chose.
pub(super) fn render_tool_calls(details: &Value) -> String {
    let Some(calls) = details["calls"].as_array() else {
        return String::new();
    };
    if details.get("commits").is_some() {
        return String::new();
    }
    let mut out = String::new();
    let server = match details["server_name"].as_str() {
        Some(name) => format!("{} ({})", escape_line(name), line(&details["server"])),
        None => line(&details["server"]).into_owned(),
    };
    out.push_str(&format!("server   {server} (MCP)\n"));
    for call in calls {
        let name = match call["tool"].as_str() {
            Some(tool) => format!("tool     {}", escape_line(tool)),
            None => format!("method   {}", line(&call["method"])),
        };
        let arguments = if call["arguments"].is_null() {
            String::new()
        } else {
            let json = call["arguments"].to_string();
            let shown: String = json.chars().take(ARGUMENTS_CHARS).collect();
            let cut = if shown.len() < json.len() { " …" } else { "" };
            format!(" {}{cut}", escape_line(&shown))
        };
        out.push_str(&format!("{name}{arguments}\n"));
    }
    out
}
