//! Request and response bodies for reviewers, pretty-printed by type: JSON, HTML forms,
//! GraphQL operations, git push ref updates, text, and anything else as a hex dump.

use maud::{html, Markup};

/// At most this many bytes of a binary body are shown as hex.
const HEX_LIMIT: usize = 4096;
/// At most this many characters of a text body are shown.
const TEXT_LIMIT: usize = 256 * 1024;

/// What a body was recognised as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No bytes.
    Empty,
    /// JSON (by content type or because it parses).
    Json,
    /// `application/x-www-form-urlencoded` (WHATWG URL §5).
    Form,
    /// A GraphQL request (`{"query": …}` over JSON, GraphQL over HTTP spec).
    Graphql,
    /// A git smart-HTTP push (`application/x-git-receive-pack-request`, gitprotocol-pack(5)).
    GitPush,
    /// UTF-8 text.
    Text,
    /// Anything else.
    Binary,
}

impl BodyKind {
    /// A short label for the kind.
    pub fn label(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::Json => "JSON",
            Self::Form => "form",
            Self::Graphql => "GraphQL",
            Self::GitPush => "git push",
            Self::Text => "text",
            Self::Binary => "binary",
        }
    }
}

/// Recognises a body from its content type and bytes.
pub fn kind(content_type: &str, body: &[u8]) -> BodyKind {
    let content_type = content_type.to_ascii_lowercase();
    if body.is_empty() {
        return BodyKind::Empty;
    }
    if content_type.contains("git-receive-pack-request") {
        return BodyKind::GitPush;
    }
    if content_type.contains("x-www-form-urlencoded") {
        return BodyKind::Form;
    }
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        if value
            .get("query")
            .and_then(|q| q.as_str())
            .is_some_and(|q| {
                let q = q.trim_start();
                q.starts_with('{')
                    || q.starts_with("query")
                    || q.starts_with("mutation")
                    || q.starts_with("subscription")
            })
        {
            return BodyKind::Graphql;
        }
        if content_type.contains("json") || body.first().is_some_and(|b| b"{[".contains(b)) {
            return BodyKind::Json;
        }
    }
    if content_type.contains("graphql") {
        return BodyKind::Graphql;
    }
    match std::str::from_utf8(body) {
        Ok(_) => BodyKind::Text,
        Err(_) => BodyKind::Binary,
    }
}

/// Decodes `%XX` escapes and `+` (form encoding) in `text`.
pub fn form_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One ref update of a git push: old and new object ids and the ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    /// The object the ref pointed at (all zeros: the ref is created).
    pub old: String,
    /// The object it will point at (all zeros: the ref is deleted).
    pub new: String,
    /// The ref name.
    pub name: String,
}

/// The ref updates at the start of a receive-pack request: pkt-lines of
/// `OLD NEW REF[\0capabilities]` up to the flush packet (gitprotocol-pack(5)).
pub fn git_ref_updates(body: &[u8]) -> Vec<RefUpdate> {
    let mut updates = Vec::new();
    let mut at = 0;
    while at + 4 <= body.len() {
        let Some(len) = std::str::from_utf8(&body[at..at + 4])
            .ok()
            .and_then(|h| usize::from_str_radix(h, 16).ok())
        else {
            break;
        };
        if len == 0 || len < 4 || at + len > body.len() {
            break;
        }
        let line = &body[at + 4..at + len];
        let line = line.split(|b| *b == 0).next().unwrap_or_default();
        let text = String::from_utf8_lossy(line);
        let mut words = text.trim_end().splitn(3, ' ');
        if let (Some(old), Some(new), Some(name)) = (words.next(), words.next(), words.next()) {
            updates.push(RefUpdate {
                old: old.to_owned(),
                new: new.to_owned(),
                name: name.to_owned(),
            });
        }
        at += len;
    }
    updates
}

/// A hex dump: offset, 16 bytes in hex, the printable ASCII.
pub fn hex_dump(bytes: &[u8]) -> String {
    let mut out = String::new();
    for (row, chunk) in bytes.chunks(16).enumerate() {
        out.push_str(&format!("{:08x}  ", row * 16));
        for i in 0..16 {
            match chunk.get(i) {
                Some(b) => out.push_str(&format!("{b:02x} ")),
                None => out.push_str("   "),
            }
        }
        out.push(' ');
        out.extend(chunk.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        }));
        out.push('\n');
    }
    out
}

/// Text with every case-insensitive occurrence of a needle wrapped in `<mark>`.
pub fn highlighted(text: &str, needles: &[String]) -> Markup {
    let lower = text.to_ascii_lowercase();
    let mut marks: Vec<(usize, usize)> = Vec::new();
    for needle in needles {
        let needle = needle.to_ascii_lowercase();
        if needle.len() < 4 {
            continue;
        }
        let mut from = 0;
        while let Some(pos) = lower[from..].find(&needle) {
            let start = from + pos;
            marks.push((start, start + needle.len()));
            from = start + needle.len();
        }
    }
    marks.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (start, end) in marks {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let mut pieces: Vec<(bool, &str)> = Vec::new();
    let mut at = 0;
    for (start, end) in merged {
        if !text.is_char_boundary(start) || !text.is_char_boundary(end) || start < at {
            continue;
        }
        pieces.push((false, &text[at..start]));
        pieces.push((true, &text[start..end]));
        at = end;
    }
    pieces.push((false, &text[at..]));
    html! {
        @for (mark, piece) in pieces {
            @if mark { mark { (piece) } } @else { (piece) }
        }
    }
}

/// The fragments of lineage excerpts worth highlighting in a body. An excerpt is a
/// passage of one normalised view of the body (text, compact JSON with sorted keys, JSON
/// leaf values joined by ` | `), so it is cut at JSON punctuation and separators and the
/// pieces of 6 characters or more are looked for, whatever the body's formatting.
/// Masked values (holding `*`) are never looked for.
pub fn excerpt_needles(excerpts: &[String]) -> Vec<String> {
    let mut needles: Vec<String> = excerpts
        .iter()
        .flat_map(|e| e.split(['…', '|', '"', '{', '}', '[', ']', ',', ':', '\\']))
        .map(|piece| piece.trim().to_owned())
        .filter(|piece| piece.chars().count() >= 6 && !piece.contains('*'))
        .collect();
    needles.sort();
    needles.dedup();
    needles
}

fn truncated(text: &str) -> (&str, bool) {
    if text.len() <= TEXT_LIMIT {
        return (text, false);
    }
    let mut end = TEXT_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// A body rendered for reviewers, with lineage `needles` highlighted.
pub fn render(content_type: &str, body: &[u8], needles: &[String]) -> Markup {
    let kind = kind(content_type, body);
    let size = body.len();
    html! {
        p.meta { (kind.label()) ", " (size) " bytes" @if !content_type.is_empty() { " (" code { (content_type) } ")" } }
        @match kind {
            BodyKind::Empty => p.muted { "no body" },
            BodyKind::Json => {
                @let pretty = serde_json::from_slice::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| serde_json::to_string_pretty(&v).ok())
                    .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
                @let (text, cut) = truncated(&pretty);
                pre.body { (highlighted(text, needles)) }
                @if cut { p.muted { "(cut at " (TEXT_LIMIT) " characters)" } }
            },
            BodyKind::Form => {
                @let text = String::from_utf8_lossy(body);
                table.kv {
                    thead { tr { th { "field" } th { "value" } } }
                    tbody {
                        @for pair in text.split('&').filter(|p| !p.is_empty()) {
                            @let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                            tr { td { code { (form_decode(key)) } } td { (highlighted(&form_decode(value), needles)) } }
                        }
                    }
                }
                details { summary { "raw" } pre.body { (text) } }
            },
            BodyKind::Graphql => {
                @let value = serde_json::from_slice::<serde_json::Value>(body).ok();
                @let query = value.as_ref().and_then(|v| v.get("query")).and_then(|q| q.as_str()).map(str::to_owned)
                    .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
                @let operation = graphql_operation(&query, value.as_ref().and_then(|v| v.get("operationName")).and_then(|o| o.as_str()));
                p { "operation: " strong { (operation) } }
                pre.body { (highlighted(query.trim(), needles)) }
                @if let Some(variables) = value.as_ref().and_then(|v| v.get("variables")).filter(|v| !v.is_null()) {
                    h4 { "variables" }
                    pre.body { (highlighted(&serde_json::to_string_pretty(variables).unwrap_or_default(), needles)) }
                }
            },
            BodyKind::GitPush => {
                @let updates = git_ref_updates(body);
                @if updates.is_empty() {
                    p.muted { "no ref updates found" }
                } @else {
                    table.kv {
                        thead { tr { th { "ref" } th { "from" } th { "to" } } }
                        tbody {
                            @for update in &updates {
                                tr {
                                    td { code { (update.name) } }
                                    td { code { (short_oid(&update.old)) } }
                                    td { code { (short_oid(&update.new)) } }
                                }
                            }
                        }
                    }
                }
                p.muted { "pack data: " (size) " bytes in all" }
            },
            BodyKind::Text => {
                @let text = String::from_utf8_lossy(body);
                @let (shown, cut) = truncated(&text);
                pre.body { (highlighted(shown, needles)) }
                @if cut { p.muted { "(cut at " (TEXT_LIMIT) " characters)" } }
            },
            BodyKind::Binary => {
                pre.body.hex { (hex_dump(&body[..size.min(HEX_LIMIT)])) }
                @if size > HEX_LIMIT { p.muted { "(first " (HEX_LIMIT) " of " (size) " bytes)" } }
            },
        }
    }
}

fn short_oid(oid: &str) -> String {
    if oid.bytes().all(|b| b == b'0') {
        "(none)".to_owned()
    } else {
        oid.chars().take(12).collect()
    }
}

/// `query Name`, `mutation Name` or `query` (anonymous) of a GraphQL document.
pub fn graphql_operation(query: &str, name: Option<&str>) -> String {
    let trimmed = query.trim_start();
    let kind = ["mutation", "subscription", "query"]
        .into_iter()
        .find(|k| trimmed.starts_with(k))
        .unwrap_or("query");
    let declared = trimmed
        .strip_prefix(kind)
        .map(|rest| {
            rest.trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|n| !n.is_empty());
    match name.map(str::to_owned).or(declared) {
        Some(name) => format!("{kind} {name}"),
        None => format!("{kind} (anonymous)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        assert_eq!(kind("application/json", b"{\"a\":1}"), BodyKind::Json);
        assert_eq!(kind("", b"[1]"), BodyKind::Json);
        assert_eq!(
            kind("application/json", br#"{"query":"mutation M { x }"}"#),
            BodyKind::Graphql
        );
        assert_eq!(
            kind("application/x-www-form-urlencoded", b"a=1"),
            BodyKind::Form
        );
        assert_eq!(kind("text/plain", b"hi"), BodyKind::Text);
        assert_eq!(kind("", &[0xff, 0x00]), BodyKind::Binary);
        assert_eq!(kind("", b""), BodyKind::Empty);
    }

    #[test]
    fn form_and_graphql_and_git() {
        assert_eq!(form_decode("a+b%20c%2"), "a b c%2");
        assert_eq!(
            graphql_operation("mutation AddComment($x: ID!) { a }", None),
            "mutation AddComment"
        );
        assert_eq!(
            graphql_operation("{ viewer { login } }", None),
            "query (anonymous)"
        );
        let old = "0".repeat(40);
        let new = "a".repeat(40);
        let line = format!("{old} {new} refs/heads/main\0report-status\n");
        let body = format!("{:04x}{line}0000PACK", line.len() + 4);
        assert_eq!(
            git_ref_updates(body.as_bytes()),
            vec![RefUpdate {
                old,
                new,
                name: "refs/heads/main".into()
            }]
        );
    }

    #[test]
    fn needles_from_json_excerpts() {
        let excerpt = r#"user0.0@customers0.example","id":0,"name":"Ada Surname0"},{"email":"us…"#;
        assert_eq!(
            excerpt_needles(&[excerpt.to_owned(), "a | Grace Hopper | ****".to_owned()]),
            vec!["Ada Surname0", "Grace Hopper", "user0.0@customers0.example"]
        );
    }

    #[test]
    fn highlights_case_insensitively() {
        let marked = highlighted("Hello Ada Lovelace", &["ada lovelace".into()]).into_string();
        assert_eq!(marked, "Hello <mark>Ada Lovelace</mark>");
        assert_eq!(
            hex_dump(b"AB\x00").trim_end(),
            "00000000  41 42 00                                         AB."
        );
    }
}
