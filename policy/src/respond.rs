//! `respond`: the synthetic response a stage rule gives, with typed placeholders for values
//! only the origin can assign (docs/design.md glossary: synthetic response, placeholder).
//!
//! ```toml
//! [rule.respond]
//! status = 201
//! body = '{"id": "{{placeholder:number:/id}}", "url": "https://api.example/items/{{placeholder:number:/id}}"}'
//! ```
//!
//! A token `{{placeholder:KIND:POINTER}}` stands for the value at JSON pointer POINTER
//! (RFC 6901) in the origin's real response. KIND is `number` or `string`. Every token
//! with the same POINTER in one response gets the same placeholder value. A `number` token
//! written as a whole JSON string (`"{{placeholder:number:/id}}"`) becomes a bare JSON
//! number, so the synthetic body is typed like the real one.

use std::collections::BTreeMap;

use serde::Serialize;

/// The type a placeholder imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaceholderKind {
    /// A JSON number (an id, a PR number).
    Number,
    /// An opaque string (a node id): `ph_` and 24 random characters.
    String,
    /// A Slack message timestamp (`SECONDS.MICROS`, seconds after 2255).
    SlackTs,
    /// A git object id (40 lowercase hex digits, prefix `ffffffff`).
    Sha1,
    /// A URL (`https://airlock.invalid/p/…`).
    Url,
}

/// One piece of a response template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Literal text.
    Text(String),
    /// A placeholder for the value at `pointer` in the real response.
    Placeholder {
        /// The imitated type.
        kind: PlaceholderKind,
        /// JSON pointer into the origin's real response body.
        pointer: String,
        /// A number token written inside quotes: the quotes are dropped when rendered.
        unquote: bool,
    },
}

/// A stage rule's synthetic response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Respond {
    /// Status code (default 202).
    pub status: u16,
    /// Content-Type (default `application/json`).
    pub content_type: String,
    /// Extra headers.
    pub headers: BTreeMap<String, String>,
    /// The body template; `None` means airlock's default JSON body.
    pub body: Option<Vec<Part>>,
}

impl Respond {
    /// Each distinct `(pointer, kind)` of the template, in first-use order.
    pub fn placeholders(&self) -> Vec<(String, PlaceholderKind)> {
        let mut out: Vec<(String, PlaceholderKind)> = Vec::new();
        for part in self.body.iter().flatten() {
            if let Part::Placeholder { kind, pointer, .. } = part {
                if !out.iter().any(|(p, _)| p == pointer) {
                    out.push((pointer.clone(), *kind));
                }
            }
        }
        out
    }

    /// Renders the body with `value(pointer)` giving each placeholder's text (digits for a
    /// number, the bare string for a string).
    pub fn render(&self, value: &dyn Fn(&str) -> String) -> Option<String> {
        let parts = self.body.as_ref()?;
        let mut out = String::new();
        for part in parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Placeholder { pointer, .. } => out.push_str(&value(pointer)),
            }
        }
        Some(out)
    }
}

/// Parses a template body.
pub(crate) fn parse_template(text: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut rest = text;
    let mut literal = String::new();
    while let Some(start) = rest.find("{{") {
        literal.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| {
            format!(
                "unclosed \"{{{{\" at byte {}",
                text.len() - rest.len() + start
            )
        })?;
        let token = after[..end].trim();
        let mut fields = token.splitn(3, ':');
        let (Some("placeholder"), Some(kind), Some(pointer)) =
            (fields.next(), fields.next(), fields.next())
        else {
            return Err(format!(
                "\"{{{{{token}}}}}\" is not a placeholder; write {{{{placeholder:number:/id}}}} or {{{{placeholder:string:/node_id}}}}"
            ));
        };
        let kind = match kind {
            "number" => PlaceholderKind::Number,
            "string" => PlaceholderKind::String,
            "slack_ts" => PlaceholderKind::SlackTs,
            "sha1" => PlaceholderKind::Sha1,
            "url" => PlaceholderKind::Url,
            other => {
                return Err(format!(
                    "placeholder kind \"{other}\" is not number, string, slack_ts, sha1 or url"
                ))
            }
        };
        if !(pointer.is_empty() || pointer.starts_with('/')) {
            return Err(format!(
                "\"{pointer}\" is not a JSON pointer (RFC 6901): it must start with '/'"
            ));
        }
        let next = &after[end + 2..];
        let unquote =
            kind == PlaceholderKind::Number && literal.ends_with('"') && next.starts_with('"');
        if unquote {
            literal.pop();
        }
        if !literal.is_empty() {
            parts.push(Part::Text(std::mem::take(&mut literal)));
        }
        parts.push(Part::Placeholder {
            kind,
            pointer: pointer.to_owned(),
            unquote,
        });
        rest = if unquote { &next[1..] } else { next };
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(Part::Text(literal));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_tokens_in_quotes_become_bare_numbers_and_share_values() {
        let parts = parse_template(r#"{"id": "{{placeholder:number:/id}}", "url": "https://x/items/{{placeholder:number:/id}}", "node": "{{placeholder:string:/node_id}}"}"#)
            .expect("parse");
        let respond = Respond {
            status: 201,
            content_type: "application/json".into(),
            headers: BTreeMap::new(),
            body: Some(parts),
        };
        assert_eq!(
            respond.placeholders(),
            vec![
                ("/id".to_owned(), PlaceholderKind::Number),
                ("/node_id".to_owned(), PlaceholderKind::String)
            ]
        );
        let body = respond
            .render(&|pointer| {
                if pointer == "/id" {
                    "77".into()
                } else {
                    "N_1".into()
                }
            })
            .expect("body");
        assert_eq!(
            body,
            r#"{"id": 77, "url": "https://x/items/77", "node": "N_1"}"#
        );
        let parsed: serde_json::Value = serde_json::from_str(&body).expect("valid JSON");
        assert!(parsed["id"].is_u64());
    }

    #[test]
    fn typed_string_kinds_are_parsed() {
        let parts = parse_template(
            r#"{"ts": "{{placeholder:slack_ts:/ts}}", "sha": "{{placeholder:sha1:/sha}}"}"#,
        )
        .expect("parse");
        let kinds: Vec<PlaceholderKind> = parts
            .iter()
            .filter_map(|p| match p {
                Part::Placeholder { kind, .. } => Some(*kind),
                Part::Text(_) => None,
            })
            .collect();
        assert_eq!(kinds, [PlaceholderKind::SlackTs, PlaceholderKind::Sha1]);
    }

    #[test]
    fn bad_tokens_are_explained() {
        assert!(parse_template("{{placeholder:date:/x}}")
            .expect_err("refused")
            .contains("date"));
        assert!(parse_template("{{nope}}")
            .expect_err("refused")
            .contains("not a placeholder"));
        assert!(parse_template("{{placeholder:number:id}}")
            .expect_err("refused")
            .contains("JSON pointer"));
        assert!(parse_template("{{placeholder:number:/id")
            .expect_err("refused")
            .contains("unclosed"));
    }
}
