//! Decodings and normalisations the fingerprints are taken over: percent-encoding, base64 runs, canonical JSON; and spotting credential-looking values.

use base64::Engine as _;

/// JSON with object keys sorted and no insignificant whitespace.
pub(super) fn canonical_json(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*key).clone()).to_string());
                out.push(':');
                canonical_json(&map[key.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The leaf values of a JSON document, in canonical order, one per line.
pub(super) fn json_values(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for key in keys {
                json_values(&map[key.as_str()], out);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| json_values(item, out)),
        Value::String(text) => {
            out.push_str(text);
            out.push('\n');
        }
        Value::Number(n) => {
            out.push_str(&n.to_string());
            out.push('\n');
        }
        Value::Bool(_) | Value::Null => {}
    }
}

/// Decodes `%XX` and `+` (application/x-www-form-urlencoded).
pub(super) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs of at least 24 base64 characters (standard or URL-safe alphabet).
pub(super) fn base64_runs(text: &str) -> Vec<&str> {
    let mut runs = Vec::new();
    let mut start = None;
    let is_b64 = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_');
    for (i, c) in text.char_indices() {
        if is_b64(c) {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            if i - s >= 24 {
                runs.push(&text[s..i]);
            }
        }
    }
    if let Some(s) = start {
        if text.len() - s >= 24 {
            runs.push(&text[s..]);
        }
    }
    // `key=VALUE` glues a key to a base64 value: '=' is padding only at a run's end.
    // A path (`/t/VALUE/pixel`) glues segments to a URL-safe value: its segments are
    // tried too.
    let mut split: Vec<&str> = Vec::new();
    for run in runs {
        for part in run.split_inclusive('=') {
            let part = part.trim_start_matches('=');
            if part.len() >= 24 {
                split.push(part);
                if part.contains('/') {
                    split.extend(part.split('/').filter(|segment| segment.len() >= 24));
                }
            }
        }
    }
    split.truncate(64);
    split
}

/// Decodes a base64 run when the result is mostly printable text or a gzip stream.
pub(super) fn decode_base64(run: &str) -> Option<Vec<u8>> {
    let trimmed = run.trim_end_matches('=');
    let engines = [
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    for engine in engines {
        if let Some(bytes) = engine
            .decode(trimmed)
            .ok()
            .and_then(super::containers::printable_or_gzip)
        {
            return Some(bytes);
        }
    }
    None
}

/// Values that look like credentials: known token prefixes, JWTs, long mixed
/// letter-and-digit strings (not hex digests or UUIDs, which are mostly ids), values
/// assigned to secret-named keys (`DB_PASSWORD=…`, `"api_key": "…"`, `client_secret: …`),
/// and the password of a URL's user info (`postgres://user:PASSWORD@host`). At most 64.
pub fn credential_like(text: &str) -> Vec<String> {
    if [
        "sha256-",
        "sha384-",
        "sha512-",
        "AAAAB3NzaC1",
        "AAAAC3NzaC1",
        "AAAAE2VjZHNh",
    ]
    .iter()
    .any(|marker| text.contains(marker))
    {
        return credential_like_tokens(&blank_public_material(text));
    }
    credential_like_tokens(text)
}

/// `text` with each whole Subresource Integrity digest and SSH public key blob (their
/// base64 runs, `+`, `/` and `=` included) replaced by spaces, so no piece of one is taken
/// for a secret ([`public_digest_or_key`]).
fn blank_public_material(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i < bytes.len() {
        let public = text.is_char_boundary(i) && public_digest_or_key(&text[i..]);
        if public && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric()) {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric()
                    || matches!(bytes[i], b'+' | b'/' | b'=' | b'-'))
            {
                i += 1;
            }
            for b in &mut out[start..i] {
                *b = b' ';
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

/// Whether a long mixed token is public material rather than a secret: a Subresource
/// Integrity digest (`sha256-`, `sha384-`, `sha512-` and base64, as in `integrity=` of
/// HTML and npm lockfiles; W3C SRI §3.1) or an SSH public key blob (base64 of the
/// length-prefixed key type, as in `known_hosts` and `authorized_keys`; RFC 4253 §6.6).
fn public_digest_or_key(token: &str) -> bool {
    const SRI: [&str; 3] = ["sha256-", "sha384-", "sha512-"];
    const SSH_KEY_BLOBS: [&str; 4] = [
        "AAAAB3NzaC1yc2E",      // ssh-rsa
        "AAAAC3NzaC1lZDI1NTE5", // ssh-ed25519
        "AAAAE2VjZHNhLXNoYTIt", // ecdsa-sha2-*
        "AAAAB3NzaC1kc3M",      // ssh-dss
    ];
    SRI.iter().any(|p| token.starts_with(p)) || SSH_KEY_BLOBS.iter().any(|p| token.starts_with(p))
}

fn credential_like_tokens(text: &str) -> Vec<String> {
    const PREFIXES: [&str; 12] = [
        "ghp_",
        "gho_",
        "ghs_",
        "ghu_",
        "github_pat_",
        "glpat-",
        "xoxb-",
        "xoxp-",
        "xapp-",
        "sk-",
        "sk_live_",
        "AKIA",
    ];
    let mut out: Vec<String> = Vec::new();
    let push = |value: &str, out: &mut Vec<String>| {
        if out.len() < 64 && !out.iter().any(|o| o == value) {
            out.push(value.to_owned());
        }
    };
    for token in text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        let token = token.trim_matches('.');
        if token.len() < 20 || token.len() > 4096 {
            continue;
        }
        let prefixed = PREFIXES.iter().any(|p| token.starts_with(p));
        let jwt = token.starts_with("eyJ") && token.matches('.').count() == 2;
        let digits = token.bytes().filter(u8::is_ascii_digit).count();
        let letters = token.bytes().filter(u8::is_ascii_alphabetic).count();
        let hex_id = token.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        let mixed = token.len() >= 32
            && digits >= 6
            && letters >= 6
            && !token.contains('.')
            && !hex_id
            && !public_digest_or_key(token);
        if prefixed || jwt || mixed {
            push(token, &mut out);
            if out.len() >= 64 {
                return out;
            }
        }
    }
    for value in named_secrets(text).into_iter().chain(url_passwords(text)) {
        push(value, &mut out);
    }
    out
}

/// Whether a key name says its value is a secret.
fn secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    const WORDS: [&str; 10] = [
        "secret",
        "password",
        "passwd",
        "pwd",
        "token",
        "apikey",
        "api_key",
        "api-key",
        "credential",
        "private_key",
    ];
    const ID_KEYS: [&str; 6] = [
        "primary_key",
        "cache_key",
        "sort_key",
        "partition_key",
        "idempotency_key",
        "object_key",
    ];
    WORDS.iter().any(|w| name.contains(w))
        || (name.len() > 4
            && (name.ends_with("_key") || name.ends_with("-key") || name.ends_with("accesskey"))
            && !ID_KEYS.iter().any(|k| name.ends_with(k)))
}

/// Values assigned to secret-named keys: `NAME=VALUE`, `NAME: VALUE`, `"NAME": "VALUE"`.
/// The value runs to whitespace, a quote, `,` `;` `&` or a closing bracket; it counts
/// when it has at least 12 characters, 8 distinct ones, and letters with digits or
/// symbols (not a plain word or a `${VARIABLE}`).
fn named_secrets(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let is_name = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
    let mut i = 0;
    while i < bytes.len() && out.len() < 64 {
        if !is_name(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_name(bytes[i]) {
            i += 1;
        }
        if !secret_name(&text[start..i]) {
            continue;
        }
        // Separator: quotes, spaces, one '=' or ':'.
        let mut j = i;
        let mut assigned = false;
        while j < bytes.len() && j - i <= 4 {
            match bytes[j] {
                b'=' | b':' if !assigned => assigned = true,
                b'"' | b'\'' | b' ' | b'\t' => {}
                _ => break,
            }
            j += 1;
        }
        if !assigned {
            continue;
        }
        let value_start = j;
        while j < bytes.len()
            && !bytes[j].is_ascii_whitespace()
            && !matches!(
                bytes[j],
                b'"' | b'\'' | b',' | b';' | b'&' | b'}' | b']' | b')' | b'<'
            )
        {
            j += 1;
        }
        let Some(value) = text.get(value_start..j) else {
            continue;
        };
        let letters = value.bytes().filter(u8::is_ascii_alphabetic).count();
        let digits = value.bytes().filter(u8::is_ascii_digit).count();
        let symbols = value.bytes().filter(|b| !b.is_ascii_alphanumeric()).count();
        let mut distinct: Vec<u8> = value.bytes().collect();
        distinct.sort_unstable();
        distinct.dedup();
        if (12..=4096).contains(&value.len())
            && distinct.len() >= 8
            && letters >= 4
            && (digits >= 2 || symbols >= 1)
            && !value.starts_with("${")
            && !value.contains("://")
        {
            out.push(value);
        }
        i = j.max(i);
    }
    out
}

/// Passwords in URL user info (`scheme://user:PASSWORD@host`) of at least 8 characters.
fn url_passwords(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("://").take(256) {
        let rest = &text[at + 3..];
        let end = rest
            .find(|c: char| c.is_whitespace() || matches!(c, '/' | '"' | '\'' | '?' | '#'))
            .unwrap_or(rest.len());
        let authority = &rest[..end];
        if let Some((userinfo, _host)) = authority.rsplit_once('@') {
            if let Some((_user, password)) = userinfo.split_once(':') {
                if password.len() >= 8 {
                    out.push(password);
                }
            }
        }
    }
    out
}
