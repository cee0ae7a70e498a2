//! Finding and substituting a run's issued placeholders in text, for staging, release and
//! compensation. A typed placeholder (a number, a Slack `ts`, a SHA-1) counts only where
//! it is not part of a longer value of its shape ([`ValueKind::continues`]): `12345` is not
//! found in `912345`, a SHA-1 placeholder not inside a longer hex string. A SHA-1
//! placeholder is also found abbreviated, as git accepts it: a prefix of
//! [`MIN_SHA_PREFIX`] hex digits or more standing alone, and substituted by the real
//! value's prefix of the same length.
//!
//! [`encoded_forms`] gives the encodings of a whole placeholder that the search finds
//! once decoded ([`airlock_ledger::fingerprint::readings`]) and release substitutes in the
//! same encoding: base64 (RFC 4648 §4 and §5, padded or not) and hex (either case).

use airlock_ledger::{IssuedPlaceholder, ValueKind};
use base64::Engine as _;

/// Fewest hex digits of an abbreviated SHA-1 placeholder that count as the placeholder
/// (git's own default abbreviation is 7, but 12 keeps an 8-`f` prefix plus 4 random digits
/// apart from chance hex in text).
pub const MIN_SHA_PREFIX: usize = 12;

/// Placeholders of `issued` that occur in `text`, at the boundaries of their kind.
///
/// A SHA-1 placeholder is found in any casing (an origin may read hex either way) and
/// abbreviated; the others as issued.
pub fn find_placeholders<'a>(
    issued: &'a [IssuedPlaceholder],
    text: &str,
) -> Vec<&'a IssuedPlaceholder> {
    let mut lower: Option<String> = None;
    issued
        .iter()
        .filter(|placeholder| {
            let text = if placeholder.kind == ValueKind::Sha1 {
                lower
                    .get_or_insert_with(|| text.to_ascii_lowercase())
                    .as_str()
            } else {
                text
            };
            !occurrences(text, &placeholder.value, placeholder.kind).is_empty()
        })
        .collect()
}

/// `(start, length)` of each occurrence of `value` in `text` that stands alone for
/// `kind`. A number placeholder after leading zeros stands alone (`/items/0042` is item
/// 42 to an origin that parses it), so it is found and substituted there too; a SHA-1
/// placeholder is a maximal run of hex digits that is the placeholder or a prefix of it
/// of at least [`MIN_SHA_PREFIX`] digits.
fn occurrences(text: &str, value: &str, kind: ValueKind) -> Vec<(usize, usize)> {
    if kind == ValueKind::Sha1 {
        return hex_runs(text)
            .filter(|&(start, len)| {
                len >= MIN_SHA_PREFIX.min(value.len())
                    && value.starts_with(&text[start..start + len])
            })
            .collect();
    }
    text.match_indices(value)
        .filter_map(|(start, _)| {
            let head = match kind {
                ValueKind::Number => text[..start].trim_end_matches('0'),
                _ => &text[..start],
            };
            let before = head.chars().next_back();
            let after = text[start + value.len()..].chars().next();
            let joined = before.is_some_and(|c| kind.continues(c))
                || after.is_some_and(|c| kind.continues(c));
            (!joined).then_some((start, value.len()))
        })
        .collect()
}

/// `(start, length)` of each maximal run of ASCII hex digits in `text`.
fn hex_runs(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let bytes = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < bytes.len() && !bytes[at].is_ascii_hexdigit() {
            at += 1;
        }
        if at >= bytes.len() {
            return None;
        }
        let start = at;
        while at < bytes.len() && bytes[at].is_ascii_hexdigit() {
            at += 1;
        }
        Some((start, at - start))
    })
}

/// Replaces every occurrence of `value` (at the boundaries of `kind`) with `real`; an
/// abbreviated SHA-1 placeholder with as many leading characters of `real`.
pub fn substitute(text: &str, value: &str, kind: ValueKind, real: &str) -> String {
    if kind == ValueKind::String {
        return text.replace(value, real);
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (start, len) in occurrences(text, value, kind) {
        out.push_str(&text[last..start]);
        if kind == ValueKind::Sha1 && len < value.len() {
            out.push_str(real.get(..len).unwrap_or(real));
        } else {
            out.push_str(real);
        }
        last = start + len;
    }
    out.push_str(&text[last..]);
    out
}

/// The encodings of the whole `value` the placeholder search finds, each paired with the
/// same encoding of `real`: base64 with the standard and the URL-safe alphabet (RFC 4648
/// §4, §5), padded and unpadded, and hex in lower and upper case.
pub fn encoded_forms(value: &str, real: &str) -> Vec<(String, String)> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let mut out: Vec<(String, String)> = Vec::new();
    for engine in [&STANDARD, &URL_SAFE, &STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        out.push((engine.encode(value), engine.encode(real)));
    }
    let hex = |text: &str| -> String { text.bytes().map(|b| format!("{b:02x}")).collect() };
    out.push((hex(value), hex(real)));
    out.push((
        hex(value).to_ascii_uppercase(),
        hex(real).to_ascii_uppercase(),
    ));
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

/// Replaces every occurrence of `form` (an encoding from [`encoded_forms`]) that is a
/// whole value — not inside a longer run of base64 characters (`/` and `=` before it
/// excepted: a path segment, `key=value`) — with `with`.
pub fn substitute_whole(text: &str, form: &str, with: &str) -> String {
    let continues = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '_');
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (start, _) in text.match_indices(form) {
        if start < last {
            continue;
        }
        let before = text[..start].chars().next_back();
        let after = text[start + form.len()..].chars().next();
        if before.is_some_and(continues) || after.is_some_and(|c| continues(c) || c == '=') {
            continue;
        }
        out.push_str(&text[last..start]);
        out.push_str(with);
        last = start + form.len();
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued(value: &str, kind: ValueKind) -> IssuedPlaceholder {
        IssuedPlaceholder {
            value: value.into(),
            kind,
            effect: airlock_ledger::EffectId::generate(),
        }
    }

    #[test]
    fn typed_placeholders_are_found_and_substituted_only_standing_alone() {
        let ts = "9123456789.123456";
        let sha = "ffffffff0123456789abcdef0123456789abcdef";
        let all = [issued(ts, ValueKind::SlackTs), issued(sha, ValueKind::Sha1)];
        let text = format!(r#"{{"ts":"{ts}","sha":"{sha}"}}"#);
        assert_eq!(find_placeholders(&all, &text).len(), 2);
        assert!(find_placeholders(&all, &format!("{ts}7 a{sha}")).is_empty());
        assert_eq!(find_placeholders(&all, &sha.to_ascii_uppercase()).len(), 1);
        let number = [issued("1234567890123456", ValueKind::Number)];
        assert_eq!(
            find_placeholders(&number, "/items/001234567890123456").len(),
            1
        );
        assert!(find_placeholders(&number, "/items/101234567890123456").is_empty());
        assert_eq!(
            substitute(
                "/i/01234567890123456",
                "1234567890123456",
                ValueKind::Number,
                "7"
            ),
            "/i/07"
        );
        assert_eq!(
            substitute(&text, ts, ValueKind::SlackTs, "1712345678.000100"),
            format!(r#"{{"ts":"1712345678.000100","sha":"{sha}"}}"#)
        );
        assert_eq!(
            substitute(
                &format!("/commits/{sha}/x {sha}0"),
                sha,
                ValueKind::Sha1,
                "abc"
            ),
            format!("/commits/abc/x {sha}0")
        );
        // Abbreviated, as git accepts it: 12 digits or more, standing alone.
        let real_sha = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(
            find_placeholders(&all, &format!("git show {}", &sha[..12])).len(),
            1
        );
        assert_eq!(
            find_placeholders(&all, &format!("/c/{}", &sha[..20].to_ascii_uppercase())).len(),
            1
        );
        assert!(find_placeholders(&all, &format!("git show {}", &sha[..11])).is_empty());
        assert!(find_placeholders(&all, &format!("{}9", &sha[..12])).is_empty());
        assert!(find_placeholders(&all, &format!("a{}", &sha[..12])).is_empty());
        assert_eq!(
            substitute(
                &format!("git show {} and {sha}", &sha[..12]),
                sha,
                ValueKind::Sha1,
                real_sha
            ),
            format!("git show {} and {real_sha}", &real_sha[..12])
        );
        let url = "https://airlock.invalid/p/abcdefghijkmnopqrstuvwxy";
        let with_url = [issued(url, ValueKind::Url)];
        assert_eq!(
            find_placeholders(&with_url, &format!("{url}/files")).len(),
            1
        );
        assert!(find_placeholders(&with_url, &format!("{url}z")).is_empty());
        assert_eq!(
            substitute(
                &format!("see {url}/files"),
                url,
                ValueKind::Url,
                "https://gh/pull/5"
            ),
            "see https://gh/pull/5/files"
        );
    }

    #[test]
    fn encoded_whole_values_are_substituted_in_the_same_encoding() {
        let value = "1234567890123456";
        let forms = encoded_forms(value, "42");
        let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(value);
        let (_, real) = forms
            .iter()
            .find(|(f, _)| *f == b64)
            .expect("unpadded form");
        assert_eq!(real, "NDI");
        assert_eq!(
            substitute_whole(&format!("/items/{b64}?x={b64}&y=a{b64}"), &b64, real),
            format!("/items/NDI?x=NDI&y=a{b64}")
        );
        let ph = "ph_abcdefghijkmnopqrstuvwxy";
        let forms = encoded_forms(ph, "C0ABC");
        let hex: String = ph.bytes().map(|b| format!("{b:02x}")).collect();
        let (_, real) = forms.iter().find(|(f, _)| *f == hex).expect("hex form");
        assert_eq!(real, "4330414243");
        assert!(forms
            .iter()
            .any(|(f, r)| *f == hex.to_ascii_uppercase() && r == "4330414243"));
        assert_eq!(
            substitute_whole(&format!("{{\"id\":\"{hex}\"}}"), &hex, real),
            "{\"id\":\"4330414243\"}"
        );
    }
}
