//! Finding and substituting a run's issued placeholders in text, for staging, release and
//! compensation. A typed placeholder (a number, a Slack `ts`, a SHA-1) counts only where
//! it is not part of a longer value of its shape ([`ValueKind::continues`]): `12345` is not
//! found in `912345`, a SHA-1 placeholder not inside a longer hex string.

use airlock_ledger::{IssuedPlaceholder, ValueKind};

/// Placeholders of `issued` that occur in `text`, at the boundaries of their kind.
///
/// A SHA-1 placeholder is found in any casing (an origin may read hex either way); the
/// others as issued.
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
            occurrences(text, &placeholder.value, placeholder.kind)
                .next()
                .is_some()
        })
        .collect()
}

/// Start offsets of `value` in `text` that stand alone for `kind`. A number placeholder
/// after leading zeros stands alone (`/items/0042` is item 42 to an origin that parses
/// it), so it is found and substituted there too.
fn occurrences<'t>(
    text: &'t str,
    value: &'t str,
    kind: ValueKind,
) -> impl Iterator<Item = usize> + 't {
    text.match_indices(value).filter_map(move |(start, _)| {
        let head = match kind {
            ValueKind::Number => text[..start].trim_end_matches('0'),
            _ => &text[..start],
        };
        let before = head.chars().next_back();
        let after = text[start + value.len()..].chars().next();
        let joined =
            before.is_some_and(|c| kind.continues(c)) || after.is_some_and(|c| kind.continues(c));
        (!joined).then_some(start)
    })
}

/// Replaces every occurrence of `value` (at the boundaries of `kind`) with `real`.
pub fn substitute(text: &str, value: &str, kind: ValueKind, real: &str) -> String {
    if kind == ValueKind::String {
        return text.replace(value, real);
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for start in occurrences(text, value, kind) {
        out.push_str(&text[last..start]);
        out.push_str(real);
        last = start + value.len();
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
}
