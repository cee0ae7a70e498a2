//! `slack`: Slack Web API writes (<https://api.slack.com/methods>) answered with `ok: true`
//! objects: `chat.postMessage`, `chat.update`, `chat.delete`, `reactions.add`,
//! `reactions.remove`. A message's `ts` is a placeholder (only Slack assigns it); the
//! channel is echoed as the client named it. Slack reports failures as HTTP 200 with
//! `ok: false`, so at release such an answer makes the effect `failed` with Slack's `error`.

use airlock_ledger::{Effect, ValueKind};
use serde_json::{json, Map, Value};

use super::{excerpt, placeholder_json, Adapter, Call, Compensation, Plan, Synthetic};

/// The Slack Web API adapter.
#[derive(Debug, Clone, Copy)]
pub struct Slack;

/// The method name, from a path ending in `/api/METHOD`.
fn method_name(path: &str) -> Option<&str> {
    let (_, method) = path.rsplit_once("/api/")?;
    (!method.is_empty() && !method.contains('/')).then_some(method)
}

/// Decodes `application/x-www-form-urlencoded` text (WHATWG URL standard §5.1).
fn form_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(high), Some(low)) => {
                        out.push((high * 16 + low) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The arguments of a Web API call: a JSON object, or form fields (as strings).
fn arguments(call: &Call<'_>) -> Map<String, Value> {
    if let Some(Value::Object(map)) = call.json() {
        return map;
    }
    let text = String::from_utf8_lossy(call.body);
    let mut map = Map::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        map.insert(form_decode(key), Value::from(form_decode(value)));
    }
    map
}

fn text_arg<'m>(args: &'m Map<String, Value>, key: &str) -> &'m str {
    args.get(key).and_then(Value::as_str).unwrap_or("")
}

impl Adapter for Slack {
    fn name(&self) -> &'static str {
        "slack"
    }

    fn plan(&self, call: &Call<'_>) -> Plan {
        if call.method != "POST" {
            return Plan::default();
        }
        let args = arguments(call);
        let channel = text_arg(&args, "channel");
        match method_name(call.path()) {
            Some("chat.postMessage") => Plan::new(
                "chat.postMessage",
                format!(
                    "post to {channel}: '{}'",
                    excerpt(text_arg(&args, "text"), 60)
                ),
                &[("/ts", ValueKind::SlackTs)],
            ),
            Some("chat.update") => Plan::new(
                "chat.update",
                format!(
                    "edit message {} in {channel}: '{}'",
                    text_arg(&args, "ts"),
                    excerpt(text_arg(&args, "text"), 60)
                ),
                &[],
            ),
            Some("chat.delete") => Plan::new(
                "chat.delete",
                format!("delete message {} in {channel}", text_arg(&args, "ts")),
                &[],
            ),
            Some("reactions.add") => Plan::new(
                "reactions.add",
                format!(
                    "react :{}: to message {} in {channel}",
                    text_arg(&args, "name"),
                    text_arg(&args, "timestamp")
                ),
                &[],
            ),
            Some("reactions.remove") => Plan::new(
                "reactions.remove",
                format!(
                    "remove reaction :{}: from message {} in {channel}",
                    text_arg(&args, "name"),
                    text_arg(&args, "timestamp")
                ),
                &[],
            ),
            _ => Plan::default(),
        }
    }

    fn respond(&self, call: &Call<'_>, effect: &Effect) -> Synthetic {
        let args = arguments(call);
        let channel = text_arg(&args, "channel");
        let body = match method_name(call.path()) {
            Some("chat.postMessage") => {
                let ts = placeholder_json(effect, "/ts");
                json!({
                    "ok": true,
                    "channel": channel,
                    "ts": ts,
                    "message": {
                        "type": "message",
                        "text": text_arg(&args, "text"),
                        "ts": ts,
                    },
                })
            }
            Some("chat.update") => json!({
                "ok": true,
                "channel": channel,
                "ts": text_arg(&args, "ts"),
                "text": text_arg(&args, "text"),
                "message": {"type": "message", "text": text_arg(&args, "text")},
            }),
            Some("chat.delete") => json!({
                "ok": true,
                "channel": channel,
                "ts": text_arg(&args, "ts"),
            }),
            _ => json!({"ok": true}),
        };
        Synthetic::json(200, &body)
    }

    fn release_failure(&self, _call: &Call<'_>, status: u16, body: &[u8]) -> Option<String> {
        if status >= 400 {
            return None;
        }
        let answer: Value = serde_json::from_slice(body).ok()?;
        (answer.get("ok") == Some(&Value::Bool(false))).then(|| {
            format!(
                "slack answered ok: false: {}",
                answer
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("no error given")
            )
        })
    }

    fn compensations(&self, call: &Call<'_>, response: &[u8]) -> Vec<Compensation> {
        let args = arguments(call);
        let real: Value = serde_json::from_slice(response).unwrap_or(Value::Null);
        let prefix = call
            .path()
            .rsplit_once("/api/")
            .map_or("", |(prefix, _)| prefix);
        let base = format!("{}{prefix}/api/", call.origin());
        let (method, body, summary) = match method_name(call.path()) {
            Some("chat.postMessage") => {
                let channel = real
                    .get("channel")
                    .and_then(Value::as_str)
                    .unwrap_or(text_arg(&args, "channel"));
                let Some(ts) = real.get("ts").and_then(Value::as_str) else {
                    return Vec::new();
                };
                (
                    "chat.delete",
                    json!({"channel": channel, "ts": ts}),
                    format!("delete message {ts} in {channel}"),
                )
            }
            Some("reactions.add") => (
                "reactions.remove",
                json!({"channel": text_arg(&args, "channel"), "timestamp": text_arg(&args, "timestamp"), "name": text_arg(&args, "name")}),
                format!("remove reaction :{}:", text_arg(&args, "name")),
            ),
            _ => return Vec::new(),
        };
        vec![Compensation {
            method: "POST".into(),
            url: format!("{base}{method}"),
            content_type: Some("application/json; charset=utf-8".into()),
            body: body.to_string().into_bytes(),
            summary: format!("{summary} (approximate: the notification already went out)"),
        }]
    }
}
