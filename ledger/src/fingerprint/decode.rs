//! Decodings and normalisations the fingerprints are taken over: gzip under a cap,
//! percent-encoding, base64 runs, canonical JSON; and spotting credential-looking values.

use std::io::Read as _;

use base64::Engine as _;

use super::MAX_DECODED_BYTES;

pub(super) fn gunzip(input: &[u8]) -> Result<(Vec<u8>, bool), String> {
    let mut decoder = flate2::read::MultiGzDecoder::new(input).take(MAX_DECODED_BYTES as u64 + 1);
    let mut out = Vec::new();
    decoder.read_to_end(&mut out).map_err(|e| e.to_string())?;
    let cut = out.len() > MAX_DECODED_BYTES;
    out.truncate(MAX_DECODED_BYTES);
    Ok((out, cut))
}

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
    let mut split: Vec<&str> = Vec::new();
    for run in runs {
        for part in run.split_inclusive('=') {
            let part = part.trim_start_matches('=');
            if part.len() >= 24 {
                split.push(part);
            }
        }
    }
    split.truncate(64);
    split
}

/// Decodes a base64 run when the result is mostly printable text.
pub(super) fn decode_base64(run: &str) -> Option<Vec<u8>> {
    let trimmed = run.trim_end_matches('=');
    let engines = [
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    for engine in engines {
        if let Ok(bytes) = engine.decode(trimmed) {
            let text = String::from_utf8_lossy(&bytes);
            let printable = text
                .chars()
                .filter(|c| !c.is_control() || c.is_whitespace())
                .count();
            if !bytes.is_empty()
                && printable * 10 >= text.chars().count() * 9
                && !text.contains('\u{fffd}')
            {
                return Some(bytes);
            }
        }
    }
    None
}

/// Values that look like credentials: known token prefixes, JWTs, or long mixed
/// letter-and-digit strings. At most 64.
pub fn credential_like(text: &str) -> Vec<String> {
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
        let mixed = token.len() >= 32 && digits >= 6 && letters >= 6 && !token.contains('.');
        if (prefixed || jwt || mixed) && !out.iter().any(|o| o == token) {
            out.push(token.to_owned());
            if out.len() >= 64 {
                break;
            }
        }
    }
    out
}
