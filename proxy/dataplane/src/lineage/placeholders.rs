//! Finding and substituting a run's issued placeholders in text (numbers only at digit
//! boundaries), for staging, release and compensation.

use airlock_ledger::{IssuedPlaceholder, ValueKind};

/// Placeholders of `issued` that occur in `text`: numbers only at digit boundaries.
pub fn find_placeholders<'a>(
    issued: &'a [IssuedPlaceholder],
    text: &str,
) -> Vec<&'a IssuedPlaceholder> {
    issued
        .iter()
        .filter(|placeholder| occurs(&placeholder.value, placeholder.kind, text))
        .collect()
}

fn occurs(value: &str, kind: ValueKind, text: &str) -> bool {
    match kind {
        ValueKind::String => text.contains(value),
        ValueKind::Number => text.match_indices(value).any(|(start, _)| {
            let before = text[..start].chars().next_back();
            let after = text[start + value.len()..].chars().next();
            !before.is_some_and(|c| c.is_ascii_digit())
                && !after.is_some_and(|c| c.is_ascii_digit())
        }),
    }
}

/// Replaces every occurrence of `value` (at digit boundaries for numbers) with `real`.
pub fn substitute(text: &str, value: &str, kind: ValueKind, real: &str) -> String {
    match kind {
        ValueKind::String => text.replace(value, real),
        ValueKind::Number => {
            let mut out = String::with_capacity(text.len());
            let mut last = 0;
            for (start, _) in text.match_indices(value) {
                let before = text[..start].chars().next_back();
                let after = text[start + value.len()..].chars().next();
                if before.is_some_and(|c| c.is_ascii_digit())
                    || after.is_some_and(|c| c.is_ascii_digit())
                {
                    continue;
                }
                out.push_str(&text[last..start]);
                out.push_str(real);
                last = start + value.len();
            }
            out.push_str(&text[last..]);
            out
        }
    }
}
