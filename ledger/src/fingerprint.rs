//! Content fingerprints that survive reformatting: bodies are decoded (content codings
//! and charsets in `fingerprint/encoding.rs`, percent-encoding, base64 and hex runs,
//! the views of `fingerprint/views.rs`), JSON is re-serialised canonically, text
//! is cut into lower-cased alphanumeric tokens, and k-token shingles are hashed and
//! winnowed (Schleimer, Wilkerson, Aiken, "Winnowing: local algorithms for document
//! fingerprinting", SIGMOD 2003). Any passage of at least `K + W - 1` tokens shared by two
//! bodies yields at least one shared fingerprint, whatever whitespace, key order or
//! encoding either used.
//!
//! Everything here is bounded: input bytes, decoded bytes, tokens, and wall time. When a
//! bound is hit the analysis says so (`truncated`, `skipped`) instead of failing; so it
//! does for a body it cannot read (a coding it cannot undo, binary content), which makes
//! the effect `unanalysed` (docs/lineage.md, "Every body is analysed or marked
//! `unanalysed`").

/// Tokens per shingle.
pub const K: usize = 4;
/// Winnowing window, in shingles.
pub const W: usize = 4;
/// Most body bytes analysed.
pub const MAX_INPUT_BYTES: usize = 4 * 1024 * 1024;
/// Most bytes a gzip body may expand to.
pub const MAX_DECODED_BYTES: usize = 8 * 1024 * 1024;
/// Most tokens per view.
pub const MAX_TOKENS: usize = 1_000_000;
/// Most tokens over all views of one body: the work budget. It counts work, not time,
/// so the same body always gets the same analysis however busy the machine is.
pub const TOKEN_BUDGET: usize = 3_000_000;

/// A normalised text of a body that fingerprints are taken over.
#[derive(Debug, Clone)]
pub struct View {
    /// What this view is: `text`, `json`, `json-values`, `percent-decoded`, `base64`, `gzip+…`.
    pub name: String,
    /// The normalised text.
    pub text: String,
    /// `(start, end)` byte offsets in `text` of each token.
    pub tokens: Vec<(usize, usize)>,
    /// Hash of each shingle starting at token `i` (`tokens.len() + 1 - K` of them).
    pub shingles: Vec<u64>,
}

/// The result of analysing one body.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    /// The views taken.
    pub views: Vec<View>,
    /// Hashes of the JSON leaf values of the body (each value's token sequence), so that
    /// values moved into another structure under other keys are still recognised.
    pub values: Vec<u64>,
    /// Input or output bounds cut the analysis short.
    pub truncated: bool,
    /// Why part of the analysis was skipped (time budget, undecodable gzip …).
    pub skipped: Option<String>,
}

impl Analysis {
    /// The winnowed fingerprints of every view, sorted and deduplicated.
    pub fn winnowed(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for view in &self.views {
            winnow(&view.shingles, &mut out);
        }
        out.extend_from_slice(&self.values);
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Bytes of normalised text over every view.
    pub fn text_bytes(&self) -> usize {
        self.views.first().map(|v| v.text.len()).unwrap_or(0)
    }
}

/// Most tokens in one recognised JSON value.
pub const MAX_VALUE_TOKENS: usize = 8;

/// Adds the winnowed minima of `shingles` to `out` (rightmost minimum per window).
fn winnow(shingles: &[u64], out: &mut Vec<u64>) {
    if shingles.is_empty() {
        return;
    }
    if shingles.len() <= W {
        if let Some(min) = shingles.iter().min() {
            out.push(*min);
        }
        return;
    }
    let mut last: Option<usize> = None;
    for start in 0..=shingles.len() - W {
        let window = &shingles[start..start + W];
        let (offset, _) = window
            .iter()
            .enumerate()
            .rev()
            .min_by_key(|(_, h)| **h)
            .unwrap_or((0, &0));
        let index = start + offset;
        if last != Some(index) {
            out.push(shingles[index]);
            last = Some(index);
        }
    }
}

/// Analyses a body. `content_encoding` is the `Content-Encoding` header, if any.
pub fn analyze(body: &[u8], content_encoding: Option<&str>) -> Analysis {
    let mut analysis = Analysis::default();
    let (input, prefix) = encoding::decode_body(body, content_encoding, &mut analysis);
    let mut budget = TOKEN_BUDGET;
    add_views(&mut analysis, &input, &prefix, &mut budget, 0);
    analysis
}

/// Analyses a request: its body as [`analyze`] does, and each of `extra` (`(label,
/// text)`: the URL's path and query, header values) as further views named `label+…`,
/// all under one work budget.
pub fn analyze_request(
    body: &[u8],
    content_encoding: Option<&str>,
    extra: &[(&str, &str)],
) -> Analysis {
    let mut analysis = Analysis::default();
    let (input, prefix) = encoding::decode_body(body, content_encoding, &mut analysis);
    let mut budget = TOKEN_BUDGET;
    add_views(&mut analysis, &input, &prefix, &mut budget, 0);
    for (label, text) in extra {
        add_views(
            &mut analysis,
            text.as_bytes(),
            &format!("{label}+"),
            &mut budget,
            0,
        );
    }
    analysis
}

/// Most views of one body (every decoding, part and object is a view).
pub const MAX_VIEWS: usize = 512;
/// Deepest nesting of decodings and containers followed (base64 in a multipart part in a
/// git blob …).
const MAX_DEPTH: u8 = 3;
/// Most JSON strings of one document analysed as nested JSON documents.
const MAX_NESTED_JSON: usize = 32;

fn add_views(analysis: &mut Analysis, bytes: &[u8], prefix: &str, budget: &mut usize, depth: u8) {
    if depth > MAX_DEPTH || *budget == 0 || analysis.views.len() >= MAX_VIEWS {
        return;
    }
    // gzip or zlib inside another layer (base64, hex, a multipart part, a git blob).
    if depth > 0 && bytes.starts_with(&[0x1f, 0x8b]) {
        if let Ok((decoded, cut)) = gunzip(bytes) {
            analysis.truncated |= cut;
            add_views(
                analysis,
                &decoded,
                &format!("{prefix}gzip+"),
                budget,
                depth + 1,
            );
        }
        return;
    }
    if depth > 0 && encoding::zlib_header(bytes) {
        if let Ok((decoded, cut)) = encoding::inflate_zlib(bytes) {
            analysis.truncated |= cut;
            add_views(
                analysis,
                &decoded,
                &format!("{prefix}zlib+"),
                budget,
                depth + 1,
            );
            return;
        }
    }
    // UTF-16, UTF-32 or Latin-1 inside another layer.
    if depth > 0 {
        if let Some((charset, text)) = encoding::transcode(bytes) {
            add_views(
                analysis,
                text.as_bytes(),
                &format!("{prefix}{charset}+"),
                budget,
                depth + 1,
            );
            return;
        }
    }
    // A git receive-pack request (or a bare pack): each object is a view.
    if let Some(objects) = pack_objects(bytes) {
        for object in objects {
            add_views(
                analysis,
                &object.data,
                &format!("{prefix}git-{}+", object.kind),
                budget,
                depth + 1,
            );
        }
        return;
    }
    let text = String::from_utf8_lossy(bytes);
    let mut decoded_texts = vec![text.clone().into_owned()];
    let mut json_leaves = None;
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(bytes) {
        collect_values(&json, &mut analysis.values);
        let mut canonical = String::new();
        canonical_json(&json, &mut canonical);
        push_view(analysis, format!("{prefix}json"), canonical, budget);
        let mut values = String::new();
        json_values(&json, &mut values);
        push_view(
            analysis,
            format!("{prefix}json-values"),
            values.clone(),
            budget,
        );
        json_leaves = Some(values);
        // Strings that are JSON documents themselves.
        let mut nested = Vec::new();
        nested_json(&json, &mut nested);
        for inner in nested {
            add_views(
                analysis,
                inner.as_bytes(),
                &format!("{prefix}json-string+"),
                budget,
                depth + 1,
            );
        }
    } else {
        push_view(
            analysis,
            format!("{prefix}text"),
            blank_header(text.clone().into_owned()),
            budget,
        );
        // Delimited text: every cell is a value, as a JSON leaf would be.
        for cell in delimited_cells(&text) {
            if analysis.values.len() >= MAX_VALUES {
                break;
            }
            push_value(cell, &mut analysis.values);
        }
        if text.contains('%') || text.contains('+') {
            let decoded = percent_decode(&text);
            if decoded != text {
                if let Ok(json) = serde_json::from_str::<serde_json::Value>(&decoded) {
                    collect_values(&json, &mut analysis.values);
                    let mut canonical = String::new();
                    canonical_json(&json, &mut canonical);
                    push_view(
                        analysis,
                        format!("{prefix}percent-decoded+json"),
                        canonical,
                        budget,
                    );
                } else {
                    push_view(
                        analysis,
                        format!("{prefix}percent-decoded"),
                        blank_header(decoded.clone()),
                        budget,
                    );
                }
                decoded_texts.push(decoded);
            }
        }
        if depth < MAX_DEPTH {
            for part in multipart_parts(bytes) {
                add_views(
                    analysis,
                    &part,
                    &format!("{prefix}multipart+"),
                    budget,
                    depth + 1,
                );
            }
        }
    }
    if depth < 2 {
        for candidate in &decoded_texts {
            for run in base64_runs(candidate) {
                if *budget == 0 {
                    return;
                }
                if let Some(decoded) = decode_base64(run) {
                    add_views(
                        analysis,
                        &decoded,
                        &format!("{prefix}base64+"),
                        budget,
                        depth + 1,
                    );
                }
            }
            for run in hex_runs(candidate) {
                if *budget == 0 {
                    return;
                }
                if let Some(decoded) = decode_hex(run) {
                    add_views(
                        analysis,
                        &decoded,
                        &format!("{prefix}hex+"),
                        budget,
                        depth + 1,
                    );
                }
            }
        }
    }
    // A JSON document's new views read its leaf values, escapes resolved (a wrapped
    // base64 string's `\n` are line breaks there, `\u200b` a zero-width space).
    let texts = match json_leaves {
        Some(leaves) => vec![leaves],
        None => decoded_texts,
    };
    add_text_views(analysis, &texts, prefix, budget, depth);
}

/// The views of [`views`] over `texts` (the body's text, its percent-decoding, its JSON
/// leaf values): character references resolved and invisible characters removed at any
/// depth; wrapped base64, wrapped hex, base32 and separated hex decoded in the first two
/// layers, as the other base64 and hex runs are.
fn add_text_views(
    analysis: &mut Analysis,
    texts: &[String],
    prefix: &str,
    budget: &mut usize,
    depth: u8,
) {
    if depth >= MAX_DEPTH {
        return;
    }
    for text in texts {
        if *budget == 0 || analysis.views.len() >= MAX_VIEWS {
            return;
        }
        if let Some(resolved) = views::character_references(text) {
            let name = format!("{prefix}char-refs+");
            add_views(analysis, resolved.as_bytes(), &name, budget, depth + 1);
        }
        if let Some(visible) = views::without_invisible(text) {
            let name = format!("{prefix}zero-width-removed+");
            add_views(analysis, visible.as_bytes(), &name, budget, depth + 1);
        }
        if depth >= 2 {
            continue;
        }
        let decodings = [
            ("base64+", views::wrapped_base64(text)),
            ("hex+", views::wrapped_hex(text)),
            ("base32+", views::base32(text)),
            ("hex+", views::separated_hex(text)),
        ];
        for (name, decoded) in decodings {
            for bytes in decoded {
                if *budget == 0 {
                    return;
                }
                add_views(
                    analysis,
                    &bytes,
                    &format!("{prefix}{name}"),
                    budget,
                    depth + 1,
                );
            }
        }
    }
}

/// `text` with a table's header line (column names) blanked: tables that share a schema
/// share no data.
fn blank_header(mut text: String) -> String {
    if let Some(header) = delimited_header(&text) {
        let len = header.len();
        text.replace_range(header, &" ".repeat(len));
    }
    text
}

/// JSON strings of `value` that parse as JSON objects or arrays, at most
/// [`MAX_NESTED_JSON`].
fn nested_json(value: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    if out.len() >= MAX_NESTED_JSON {
        return;
    }
    match value {
        Value::Object(map) => map.values().for_each(|v| nested_json(v, out)),
        Value::Array(items) => items.iter().for_each(|v| nested_json(v, out)),
        Value::String(text) => {
            let trimmed = text.trim();
            let framed = (trimmed.starts_with('{') && trimmed.ends_with('}'))
                || (trimmed.starts_with('[') && trimmed.ends_with(']'));
            if framed
                && trimmed.len() >= 16
                && serde_json::from_str::<Value>(trimmed)
                    .is_ok_and(|v| v.is_object() || v.is_array())
            {
                out.push(trimmed.to_owned());
            }
        }
        _ => {}
    }
}

fn push_view(analysis: &mut Analysis, name: String, text: String, budget: &mut usize) {
    if analysis.views.len() >= MAX_VIEWS {
        analysis.truncated = true;
        return;
    }
    if *budget == 0 {
        analysis.skipped.get_or_insert_with(|| {
            format!("the work budget of {TOKEN_BUDGET} tokens ran out; later views were not taken")
        });
        analysis.truncated = true;
        return;
    }
    let mut tokens = tokenize(&text);
    let cap = MAX_TOKENS.min(*budget);
    if tokens.len() > cap {
        tokens.truncate(cap);
        analysis.truncated = true;
    }
    *budget -= tokens.len();
    let hashes: Vec<u64> = tokens
        .iter()
        .map(|&(s, e)| token_hash(&text[s..e]))
        .collect();
    let shingles = if hashes.len() < K {
        Vec::new()
    } else {
        hashes.windows(K).map(shingle_hash).collect()
    };
    analysis.views.push(View {
        name,
        text,
        tokens,
        shingles,
    });
}

/// Token boundaries: maximal runs of alphanumeric characters.
pub(crate) fn tokenize(text: &str) -> Vec<(usize, usize)> {
    if text.is_ascii() {
        let mut tokens = Vec::new();
        let mut start = None;
        for (i, byte) in text.bytes().enumerate() {
            if byte.is_ascii_alphanumeric() {
                start.get_or_insert(i);
            } else if let Some(s) = start.take() {
                tokens.push((s, i));
            }
        }
        if let Some(s) = start {
            tokens.push((s, text.len()));
        }
        return tokens;
    }
    let mut tokens = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        if c.is_alphanumeric() {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            tokens.push((s, i));
        }
    }
    if let Some(s) = start {
        tokens.push((s, text.len()));
    }
    tokens
}

const VALUE_SEED: u64 = 0x2545_f491_4f6c_dd1d;

fn value_step(state: u64, token: u64) -> u64 {
    (state.rotate_left(29) ^ token).wrapping_mul(0xc4ce_b9fe_1a85_ec53)
}

fn value_finish(state: u64, len: usize) -> u64 {
    (state ^ (len as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).rotate_left(17)
}

/// Hash of a token sequence standing for one whole value (seeded apart from shingles);
/// the scan for values computes it incrementally with the same steps.
fn value_hash(tokens: &[u64]) -> u64 {
    value_finish(
        tokens.iter().fold(VALUE_SEED, |acc, &t| value_step(acc, t)),
        tokens.len(),
    )
}

/// Most value hashes of one body.
const MAX_VALUES: usize = 100_000;

/// Value hashes of the JSON leaf strings worth recognising (see [`push_value`]). At most
/// [`MAX_VALUES`].
fn collect_values(value: &serde_json::Value, out: &mut Vec<u64>) {
    use serde_json::Value;
    if out.len() >= MAX_VALUES {
        return;
    }
    match value {
        Value::Object(map) => map.values().for_each(|v| collect_values(v, out)),
        Value::Array(items) => items.iter().for_each(|v| collect_values(v, out)),
        Value::String(text) => push_value(text, out),
        _ => {}
    }
}

/// The value hash of `text` when it is worth recognising: 2 to 8 tokens and at least 8
/// characters, or one token of at least 12 characters.
fn push_value(text: &str, out: &mut Vec<u64>) {
    let tokens = tokenize(text);
    let long_enough = match tokens.len() {
        1 => tokens[0].1 - tokens[0].0 >= 12,
        2..=MAX_VALUE_TOKENS => text.len() >= 8,
        _ => false,
    };
    if long_enough {
        let hashes: Vec<u64> = tokens
            .iter()
            .map(|&(s, e)| token_hash(&text[s..e]))
            .collect();
        out.push(value_hash(&hashes));
    }
}

/// FNV-1a over the lower-cased token.
pub(crate) fn token_hash(token: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    if token.is_ascii() {
        for byte in token.bytes() {
            hash ^= u64::from(byte.to_ascii_lowercase());
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        return hash;
    }
    for c in token.chars().flat_map(char::to_lowercase) {
        let mut buf = [0u8; 4];
        for byte in c.encode_utf8(&mut buf).bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

pub(crate) fn shingle_hash(tokens: &[u64]) -> u64 {
    tokens.iter().fold(0x9e37_79b9_7f4a_7c15u64, |acc, &t| {
        (acc.rotate_left(23) ^ t).wrapping_mul(0xff51_afd7_ed55_8ccd)
    })
}

mod common;
mod containers;
mod decode;
mod encoding;
mod overlap;
pub mod readings;
mod views;

use containers::{
    decode_hex, delimited_cells, delimited_header, hex_runs, multipart_parts, pack_objects,
};
pub use decode::credential_like;
use decode::{base64_runs, canonical_json, decode_base64, json_values, percent_decode};
use encoding::gunzip;
pub use overlap::{overlap, Candidates, Overlap};

#[cfg(test)]
mod tests;
