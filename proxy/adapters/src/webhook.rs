//! `webhook`, the default adapter of a stage rule: the rule's `[rule.respond]` template
//! with its placeholders, or `202 Accepted` with a JSON body naming the effect.

use std::collections::HashMap;

use airlock_ledger::{Effect, PlaceholderSpec, ValueKind};
use airlock_policy::PlaceholderKind;

use super::{excerpt, Adapter, Call, Plan, Synthetic};

/// The generic adapter (any HTTP endpoint).
#[derive(Debug, Clone, Copy)]
pub struct Webhook;

impl Adapter for Webhook {
    fn name(&self) -> &'static str {
        "webhook"
    }

    fn plan(&self, call: &Call<'_>) -> Plan {
        let placeholders = call
            .template
            .map(|respond| {
                respond
                    .placeholders()
                    .into_iter()
                    .map(|(pointer, kind)| PlaceholderSpec {
                        pointer,
                        kind: match kind {
                            PlaceholderKind::Number => ValueKind::Number,
                            PlaceholderKind::String => ValueKind::String,
                            PlaceholderKind::SlackTs => ValueKind::SlackTs,
                            PlaceholderKind::Sha1 => ValueKind::Sha1,
                            PlaceholderKind::Url => ValueKind::Url,
                        },
                    })
                    .collect()
            })
            .unwrap_or_default();
        let text = summary_text(call);
        let summary = if text.is_empty() {
            call.fallback_summary()
        } else {
            format!("{}: {text}", call.fallback_summary())
        };
        Plan {
            endpoint: Some("webhook"),
            summary,
            placeholders,
        }
    }

    fn respond(&self, call: &Call<'_>, effect: &Effect) -> Synthetic {
        let template = call.template;
        let values: HashMap<&str, &str> = effect
            .placeholders
            .iter()
            .map(|p| (p.pointer.as_str(), p.value.as_str()))
            .collect();
        let rendered = template.and_then(|respond| {
            respond.render(&|pointer| values.get(pointer).copied().unwrap_or_default().to_owned())
        });
        let status = template.map_or(202, |r| r.status);
        match (template, rendered) {
            (Some(respond), Some(body)) => {
                let mut headers: Vec<(String, String)> = respond
                    .headers
                    .iter()
                    .map(|(n, v)| (n.clone(), v.clone()))
                    .collect();
                headers.push(("content-type".into(), respond.content_type.clone()));
                Synthetic {
                    status,
                    headers,
                    body: body.into_bytes(),
                }
            }
            _ => {
                let mut body = serde_json::to_vec_pretty(&serde_json::json!({
                    "effect": effect.id,
                    "status": effect.state,
                    "run": effect.run_id,
                    "seq": effect.seq,
                    "message": "airlock staged this request; it is sent to the origin only if a reviewer approves it and the run is committed",
                }))
                .unwrap_or_default();
                body.push(b'\n');
                Synthetic {
                    status,
                    headers: vec![("content-type".into(), "application/json".into())],
                    body,
                }
            }
        }
    }
}

/// The text a webhook carries, for its summary: a JSON body's `text`, `message`,
/// `content` or `title` string, else nothing.
fn summary_text(call: &Call<'_>) -> String {
    let Some(json) = call.json() else {
        return String::new();
    };
    ["text", "message", "content", "title", "summary"]
        .iter()
        .find_map(|key| json.get(key).and_then(serde_json::Value::as_str))
        .map(|text| format!("'{}'", excerpt(text, 60)))
        .unwrap_or_default()
}
