//! Every text a request's URL, header or body can be read as by the origin that receives
//! it: the one place the placeholder searches (staging, release, credential placeholders)
//! and the placeholder-shape pre-filter read a request through, so that what the search
//! finds and what the filter lets by stay the same (docs/lineage.md, "Where placeholders
//! are searched").
//!
//! The decodings, applied to each other's results up to [`MAX_DEPTH`] layers deep:
//! Content-Encoding `gzip`/`x-gzip`/`deflate` (RFC 9110 §8.4.1) for a body, and a zlib
//! stream (RFC 1950) sent with none; percent-encoding (RFC 3986 §2.1, and `+` as a space,
//! WHATWG `application/x-www-form-urlencoded`); base64 (RFC 4648 §4, §5) runs of 24
//! characters or more, whole values of 16 to 23 characters without padding, and the
//! credentials of `Basic` (RFC 7617 §2, any length); hex runs of 32 digits or more; JSON
//! (RFC 8259 §7): the string values and object keys with every escape (`\uXXXX`)
//! resolved, and integral numbers in their shortest integer spelling (`1.5e3` reads as
//! `1500`); XML and HTML character references (`&#112;`, `&#x70;`, named references of
//! ASCII punctuation and common symbols; XML 1.0 §4.1, HTML Living Standard §13.5); and
//! the parts of a `multipart/*` body (RFC 2046 §5.1), each base64-decoded whole when its
//! `Content-Transfer-Encoding` says so (its lines joined).

use std::borrow::Cow;
use std::io::Read as _;

use base64::Engine as _;

use super::containers::{decode_hex, hex_runs, multipart_parts};
use super::decode::{base64_runs, decode_base64, percent_decode};
use super::MAX_DECODED_BYTES;

/// Deepest nesting of decodings followed (percent-encoded JSON holding base64 …).
pub const MAX_DEPTH: u8 = 4;
/// Most texts one part of a request is read as (past it further decodings are dropped,
/// as past the 64 base64 runs of one text: a bound on work, not a cut of the body).
pub const MAX_READINGS: usize = 256;
/// Most JSON strings of one document that are read again as JSON documents themselves.
const MAX_NESTED_JSON: usize = 32;

/// The texts of one request part.
#[derive(Debug, Clone, Default)]
pub struct Readings {
    /// The texts, the raw text (UTF-8, lossily) first, then each distinct decoding.
    pub texts: Vec<String>,
    /// The body's decoding was cut short (gzip or deflate expanding past
    /// [`MAX_DECODED_BYTES`], a Content-Encoding that cannot be decoded here, a stream that
    /// does not decode, decodings adding up past [`BUDGET_FACTOR`] times the input): the
    /// texts do not cover everything the origin may read.
    pub cut: bool,
    /// Bytes the texts may still take.
    budget: usize,
}

/// The texts of one part may add up to this many times its own size (plus 64 KiB), so a
/// body crafted to decode many times over costs bounded memory.
pub const BUDGET_FACTOR: usize = 16;

impl Readings {
    fn for_input(len: usize) -> Self {
        Readings {
            budget: len.saturating_mul(BUDGET_FACTOR).saturating_add(64 * 1024),
            ..Readings::default()
        }
    }
}

impl Readings {
    /// Every decoded text (all but the raw one).
    pub fn decoded(&self) -> &[String] {
        self.texts.get(1..).unwrap_or(&[])
    }

    fn push(&mut self, text: String) -> bool {
        if self.texts.contains(&text) {
            return false;
        }
        if text.len() > self.budget {
            self.cut = true;
            return false;
        }
        self.budget -= text.len();
        if self.texts.len() >= MAX_READINGS {
            return false;
        }
        self.texts.push(text);
        true
    }
}

/// Every text a body with `content_encoding` (its `Content-Encoding` header) reads as.
pub fn body(bytes: &[u8], content_encoding: Option<&str>) -> Readings {
    let (decoded, cut) = match content_decode(bytes, content_encoding) {
        Ok(decoded) => decoded,
        Err(()) => (Cow::Borrowed(bytes), true),
    };
    let mut out = Readings::for_input(bytes.len().max(decoded.len()));
    out.cut = cut;
    out.push(String::from_utf8_lossy(bytes).into_owned());
    let text = String::from_utf8_lossy(&decoded).into_owned();
    if text == out.texts[0] {
        expand(&mut out, &text, 0);
    } else {
        add(&mut out, text, 0);
    }
    out
}

/// Every text a URL (or a header value) reads as: raw, percent-decoded, base64 runs, JSON.
pub fn text(text: &str) -> Readings {
    let mut out = Readings::for_input(text.len());
    add(&mut out, text.to_owned(), 0);
    out
}

/// Every text a header value reads as: [`text`]'s, plus the `user:password` of a
/// `Basic` credential (RFC 7617 §2) however short.
pub fn header_value(value: &[u8]) -> Readings {
    let raw = String::from_utf8_lossy(value);
    let mut out = text(&raw);
    let trimmed = raw.trim();
    let scheme_len = "basic ".len();
    if trimmed.len() > scheme_len && trimmed[..scheme_len].eq_ignore_ascii_case("basic ") {
        let token = trimmed[scheme_len..].trim().trim_end_matches('=');
        let engines = [
            &base64::engine::general_purpose::STANDARD_NO_PAD,
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ];
        if let Some(decoded) = engines.iter().find_map(|e| e.decode(token).ok()) {
            add(&mut out, String::from_utf8_lossy(&decoded).into_owned(), 1);
        }
    }
    out
}

/// Every text of a request, each with where it stands (`found_in`: `url`, `header
/// name`, `header:NAME`, `body`, with ` (encoded)` appended for a decoded text), raw texts
/// first; `cut` as [`Readings::cut`] for any part.
#[derive(Debug, Clone, Default)]
pub struct RequestReadings {
    /// `(found_in, text)` pairs.
    pub texts: Vec<(String, String)>,
    /// Some part's decoding was cut short.
    pub cut: bool,
}

impl RequestReadings {
    fn extend(&mut self, place: &str, readings: Readings) {
        self.cut |= readings.cut;
        for (i, text) in readings.texts.into_iter().enumerate() {
            let place = if i == 0 {
                place.to_owned()
            } else {
                format!("{place} (encoded)")
            };
            self.texts.push((place, text));
        }
    }
}

/// Every text the request `url`, `headers` (name, value) and `body` (bytes and
/// Content-Encoding, when the body is to be searched) read as.
pub fn request<'h>(
    url: &str,
    headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
    body: Option<(&[u8], Option<&str>)>,
) -> RequestReadings {
    let mut out = RequestReadings::default();
    out.extend("url", text(url));
    for (name, value) in headers {
        out.texts.push(("header name".to_owned(), name.to_owned()));
        out.extend(&format!("header:{name}"), header_value(value));
    }
    if let Some((bytes, encoding)) = body {
        out.add_body(bytes, encoding);
    }
    out
}

impl RequestReadings {
    /// Adds the texts of the request's body, `bytes` with `content_encoding`, as
    /// [`request`] does when given it (so a caller that searched the head first does not
    /// read it again).
    pub fn add_body(&mut self, bytes: &[u8], content_encoding: Option<&str>) {
        self.extend("body", body(bytes, content_encoding));
    }
}

/// Adds `text` and what it decodes to.
fn add(out: &mut Readings, text: String, depth: u8) {
    if depth > MAX_DEPTH || !out.push(text.clone()) {
        return;
    }
    expand(out, &text, depth);
}

/// Adds what `text` (already added) decodes to.
fn expand(out: &mut Readings, text: &str, depth: u8) {
    // Only `%` can hide a placeholder (`+` decodes to a space, which none holds).
    if text.contains('%') {
        add(out, percent_decode(text), depth + 1);
    }
    for decoded in base64_runs(text).into_iter().filter_map(decode_base64) {
        let decoded = if decoded.starts_with(&[0x1f, 0x8b]) {
            match gunzip(&decoded) {
                Ok((bytes, cut)) => {
                    out.cut |= cut;
                    bytes
                }
                Err(()) => continue,
            }
        } else {
            decoded
        };
        add(
            out,
            String::from_utf8_lossy(&decoded).into_owned(),
            depth + 1,
        );
    }
    for json in json_texts(text) {
        add(out, json, depth + 1);
    }
    if let Some(resolved) = super::views::character_references(text) {
        add(out, resolved, depth + 1);
    }
    // Hex runs (32 digits or more: the hex of any placeholder) that decode to text.
    for decoded in hex_runs(text).into_iter().filter_map(decode_hex) {
        add(
            out,
            String::from_utf8_lossy(&decoded).into_owned(),
            depth + 1,
        );
    }
    for decoded in short_base64_values(text) {
        add(out, decoded, depth + 1);
    }
    if text.trim_start().starts_with("--") {
        for part in multipart_parts(text.as_bytes()) {
            add(out, String::from_utf8_lossy(&part).into_owned(), depth + 1);
        }
    }
}

/// Fewest and most characters of a whole base64 value [`short_base64_values`] decodes
/// (longer values are [`base64_runs`]'), the unpadded base64 of 12 to 17 bytes: a number
/// placeholder's 16 digits are 22 characters, a Slack timestamp's 17 are 23.
const SHORT_BASE64: std::ops::RangeInclusive<usize> = 16..=23;

/// What the whole short base64 values of `text` decode to, when that is printable ASCII:
/// the tokens between characters outside the base64 alphabets (RFC 4648 §4, §5), split
/// again at `/` (a path segment) and `=` (`key=value`; trailing padding stays with its
/// value), of [`SHORT_BASE64`] characters without padding. At most 64.
fn short_base64_values(text: &str) -> Vec<String> {
    let outside =
        |c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_'));
    let mut out = Vec::new();
    for token in text.split(outside) {
        if token.len() < *SHORT_BASE64.start() {
            continue;
        }
        let pieces = std::iter::once(token)
            .chain(token.split('/'))
            .flat_map(|piece| {
                std::iter::once(piece).chain(
                    piece
                        .split_inclusive('=')
                        .map(|p| p.trim_start_matches('=')),
                )
            });
        for piece in pieces {
            let value = piece.trim_end_matches('=');
            if !SHORT_BASE64.contains(&value.len()) {
                continue;
            }
            let decoded = super::views::decode_unpadded(value)
                .filter(|bytes| bytes.iter().all(|b| (0x20..0x7f).contains(b)))
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
            if let Some(decoded) = decoded {
                if !out.contains(&decoded) {
                    out.push(decoded);
                }
            }
            if out.len() >= 64 {
                return out;
            }
        }
    }
    out
}

/// When `text` is a JSON document: its keys and string values, escapes resolved, and its
/// integral numbers, one per line (a placeholder never spans lines), then each string
/// that is itself a JSON document's texts.
fn json_texts(text: &str) -> Vec<String> {
    let start = text.trim_start().as_bytes().first().copied();
    if !matches!(start, Some(b'{' | b'[' | b'"')) {
        return Vec::new();
    }
    let Ok(json) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    let mut lines = String::new();
    let mut nested = Vec::new();
    leaves(&json, &mut lines, &mut nested);
    let mut out = vec![lines];
    out.extend(nested);
    out
}

/// Appends each key, string and integral number of `json` to `lines`; strings that look
/// like JSON documents to `nested` (at most [`MAX_NESTED_JSON`]).
fn leaves(json: &serde_json::Value, lines: &mut String, nested: &mut Vec<String>) {
    use serde_json::Value;
    match json {
        Value::String(text) => {
            lines.push_str(text);
            lines.push('\n');
            let first = text.trim_start().as_bytes().first();
            if matches!(first, Some(b'{' | b'[')) && nested.len() < MAX_NESTED_JSON {
                nested.push(text.clone());
            }
        }
        Value::Number(number) => {
            let integral = number
                .as_u64()
                .map(|n| n.to_string())
                .or_else(|| number.as_i64().map(|n| n.to_string()))
                .or_else(|| {
                    number
                        .as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15)
                        .map(|f| format!("{}", f as i64))
                });
            if let Some(integral) = integral {
                lines.push_str(&integral);
                lines.push('\n');
            }
        }
        Value::Array(items) => items.iter().for_each(|i| leaves(i, lines, nested)),
        Value::Object(map) => {
            for (key, value) in map {
                lines.push_str(key);
                lines.push('\n');
                leaves(value, lines, nested);
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

/// The body after its Content-Encoding (`None`, `identity`: as it is; a gzip stream is
/// recognised by its magic bytes too), and whether the decoding was cut at
/// [`MAX_DECODED_BYTES`]. Errors: a coding this cannot decode (`br`, `zstd`, several), or
/// a stream that does not decode.
fn content_decode<'a>(
    bytes: &'a [u8],
    content_encoding: Option<&str>,
) -> Result<(Cow<'a, [u8]>, bool), ()> {
    let coding = content_encoding
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity");
    match coding.as_deref() {
        None if bytes.starts_with(&[0x1f, 0x8b]) => {
            // Gzip magic without the header: read as gzip when it decodes.
            Ok(gunzip(bytes)
                .map(|(b, cut)| (Cow::Owned(b), cut))
                .unwrap_or((Cow::Borrowed(bytes), false)))
        }
        None if super::encoding::zlib_header(bytes) => {
            // A zlib stream sent with no Content-Encoding (application/octet-stream): read
            // as zlib when it inflates.
            Ok(capped(flate2::read::ZlibDecoder::new(bytes))
                .map(|(b, cut)| (Cow::Owned(b), cut))
                .unwrap_or((Cow::Borrowed(bytes), false)))
        }
        None => Ok((Cow::Borrowed(bytes), false)),
        Some("gzip" | "x-gzip") => gunzip(bytes).map(|(b, cut)| (Cow::Owned(b), cut)),
        Some("deflate") => {
            // RFC 9110 §8.4.1.2: zlib; some clients send raw deflate.
            let zlib = capped(flate2::read::ZlibDecoder::new(bytes));
            zlib.or_else(|()| capped(flate2::read::DeflateDecoder::new(bytes)))
                .map(|(b, cut)| (Cow::Owned(b), cut))
        }
        Some(_) => Err(()),
    }
}

fn gunzip(bytes: &[u8]) -> Result<(Vec<u8>, bool), ()> {
    capped(flate2::read::MultiGzDecoder::new(bytes))
}

/// Reads `reader` to its end or [`MAX_DECODED_BYTES`], whichever is first; `true` when cut.
fn capped(reader: impl std::io::Read) -> Result<(Vec<u8>, bool), ()> {
    let mut out = Vec::new();
    reader
        .take(MAX_DECODED_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|_| ())?;
    let cut = out.len() > MAX_DECODED_BYTES;
    out.truncate(MAX_DECODED_BYTES);
    Ok((out, cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PH: &str = "ph_abcdefghijkmnopqrstuvwxy";

    fn percent_all(text: &str) -> String {
        text.bytes().map(|b| format!("%{b:02X}")).collect()
    }

    fn finds(readings: &Readings, needle: &str) -> bool {
        readings.texts.iter().any(|t| t.contains(needle))
    }

    #[test]
    fn every_encoding_an_origin_decodes_is_read_through() {
        let escaped: String = PH.chars().map(|c| format!("%{:02X}", c as u32)).collect();
        assert!(finds(&text(&format!("/items?q={escaped}")), PH));
        // Percent-encoded JSON in a query parameter, its `_` encoded twice over.
        let json = format!(r#"{{"id":"{}"}}"#, PH.replace('_', "%5F"));
        let query: String = json
            .bytes()
            .map(|b| format!("%{b:02X}"))
            .collect::<String>();
        assert!(finds(&text(&format!("/s?filter={query}")), PH));
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("u:{PH}"));
        assert!(finds(
            &header_value(format!("Basic {basic}").as_bytes()),
            PH
        ));
        let short = base64::engine::general_purpose::STANDARD.encode("u:1234567890123456");
        assert!(finds(
            &header_value(format!("basic {short}").as_bytes()),
            "1234567890123456"
        ));
        let unicode: String = PH.chars().map(|c| format!("\\u{:04x}", c as u32)).collect();
        assert!(finds(
            &body(format!(r#"{{"n":"{unicode}"}}"#).as_bytes(), None),
            PH
        ));
        assert!(finds(
            &body(br#"{"n": 1.234567890123456e15}"#, None),
            "1234567890123456"
        ));
        let form = format!("a=1&b={}", PH.replace('_', "%5f"));
        assert!(finds(&body(form.as_bytes(), None), PH));
        use std::io::Write as _;
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        zlib.write_all(format!(r#"{{"n":"{PH}"}}"#).as_bytes())
            .expect("zlib");
        let deflated = zlib.finish().expect("zlib");
        assert!(finds(&body(&deflated, Some("deflate")), PH));
        assert!(body(b"x", Some("br")).cut);
        let xml = format!("<q>&#x70;&#104;_{}</q>", &PH[3..]);
        assert_eq!(
            super::super::views::character_references("é&amp;ü&#x20AC;&bogus;&").as_deref(),
            Some("é&ü€&bogus;&")
        );
        assert!(finds(&body(xml.as_bytes(), None), PH));
        let wrapped = base64::engine::general_purpose::STANDARD.encode(format!(
            "a file that holds {PH} somewhere past the first line"
        ));
        let wrapped: Vec<String> = wrapped
            .as_bytes()
            .chunks(20)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect();
        let multipart = format!(
            "--xyz\r\ncontent-disposition: form-data; name=\"f\"\r\ncontent-transfer-encoding: base64\r\n\r\n{}\r\n--xyz--\r\n",
            wrapped.join("\r\n")
        );
        assert!(finds(&body(multipart.as_bytes(), None), PH));
        // A body that decodes to ever more text stops at its budget, saying so.
        let mut nested = PH.to_owned();
        for _ in 0..4 {
            nested = format!("{nested}{}", percent_all(&nested));
        }
        assert!(!body(nested.as_bytes(), None).cut);
        let big = "%25".repeat(200_000);
        let readings = body(big.as_bytes(), None);
        let total: usize = readings.texts.iter().map(String::len).sum();
        assert!(total <= big.len() * BUDGET_FACTOR + 64 * 1024);
        assert!(!body(b"{}", None).cut);
    }

    #[test]
    fn short_unpadded_base64_hex_and_zlib_are_read_through() {
        let number = "1234567890123456";
        let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(number);
        assert_eq!(b64.len(), 22);
        for place in [
            format!("/items/{b64}"),
            format!("/s?id={b64}&x=1"),
            format!(r#"{{"id":"{b64}"}}"#),
        ] {
            assert!(finds(&text(&place), number), "{place}");
        }
        let url_safe = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("9123456789.123456");
        assert!(finds(
            &text(&format!("/ts/{url_safe}")),
            "9123456789.123456"
        ));
        // A short token that decodes to binary is no reading.
        assert_eq!(text("/a/abcdefghijklmnopqr").texts.len(), 1);
        let hex: String = PH.bytes().map(|b| format!("{b:02x}")).collect();
        assert!(finds(&text(&format!("/x/{hex}")), PH));
        assert!(finds(
            &text(&format!("/x/{}", hex.to_ascii_uppercase())),
            PH
        ));
        use std::io::Write as _;
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        zlib.write_all(PH.as_bytes()).expect("zlib");
        assert!(finds(&body(&zlib.finish().expect("zlib"), None), PH));
        let named = format!("ph&lowbar;{}", &PH[3..]);
        assert!(finds(&text(&named), PH));
    }
}
