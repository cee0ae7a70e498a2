//! The shapes of the placeholder values airlock issues, as a quick test on text.

/// Whether `text` may hold a placeholder value of the shapes [`super::placeholder_value`] makes:
/// `ph_`, `ffffffff` (in any casing) or `airlock.invalid/p/` anywhere, a run of 16 digits after any
/// leading zeros (a number: the run's base is in [10^15, 9 * 10^15), and an origin reads
/// `01234…` as `1234…`), or a run of 10 digits starting with `9` and followed by `.` (a
/// Slack timestamp). False positives only cost a check; a text for which this is false
/// holds no placeholder this binary issues, which is what lets a shared store's freshness
/// check be skipped (docs/fleet.md, "Bounds"). It is a test on one text: callers apply it
/// to every reading of a request ([`crate::fingerprint::readings`]), the same texts the
/// placeholder search reads, so an encoded placeholder is seen once decoded.
pub fn may_hold_placeholder(text: &str) -> bool {
    if text.contains("ph_") || text.contains("airlock.invalid/p/") {
        return true;
    }
    let bytes = text.as_bytes();
    // A SHA-1 placeholder in any casing (the search finds it so).
    if bytes
        .windows(8)
        .any(|w| w.eq_ignore_ascii_case(b"ffffffff"))
    {
        return true;
    }
    let mut at = 0;
    while at < bytes.len() {
        if !bytes[at].is_ascii_digit() {
            at += 1;
            continue;
        }
        let start = at;
        while at < bytes.len() && bytes[at].is_ascii_digit() {
            at += 1;
        }
        let run = at - start;
        let zeros = bytes[start..at].iter().take_while(|b| **b == b'0').count();
        if run - zeros == 16 || (run == 10 && bytes[start] == b'9' && bytes.get(at) == Some(&b'.'))
        {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{placeholder_value, random_placeholder_base};
    use crate::ValueKind;

    #[test]
    fn every_issued_shape_is_seen_wherever_it_stands() {
        for _ in 0..200 {
            let base = random_placeholder_base();
            for kind in [
                ValueKind::Number,
                ValueKind::String,
                ValueKind::SlackTs,
                ValueKind::Sha1,
                ValueKind::Url,
            ] {
                let value = placeholder_value(kind, base, 7);
                for text in [
                    value.clone(),
                    format!("/items/{value}/comments"),
                    format!(r#"{{"id":{value},"x":"y"}}"#),
                    format!("a={value}&b=1"),
                ] {
                    assert!(may_hold_placeholder(&text), "{kind:?}: {text}");
                }
                if kind == ValueKind::Number {
                    assert!(may_hold_placeholder(&format!("/items/00{value}")));
                }
                if kind == ValueKind::Sha1 {
                    assert!(may_hold_placeholder(&value.to_ascii_uppercase()));
                }
            }
        }
    }

    #[test]
    fn ordinary_requests_are_not_taken_for_placeholders() {
        for text in [
            "/api/v1/items?page=2&t=1733241600000",
            "/repos/o/r/commits/0123456789abcdef0123456789abcdef01234567",
            "550e8400-e29b-41d4-a716-446655440000",
            "2026-12-03T15:07:20Z",
            "Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc",
            "1733241600.123456",
            "12345678901234567",
        ] {
            assert!(!may_hold_placeholder(text), "{text}");
        }
    }
}
