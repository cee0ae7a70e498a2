//! How an effect reads once it was released: its summary and URL with the real values of
//! the placeholders it carried (as the ledger records them, `Placeholder::real`), the
//! real values of the placeholders it handed out, the link the origin gave the new object
//! and a bounded excerpt of the origin's answer. The admin API returns it as `released`
//! ([`released_json`]); the review UI renders the same [`Released`] on its effect, run and
//! commit pages (docs/admin-api.md, `released`; docs/review-ui.md, "After release").

use std::collections::BTreeMap;

use airlock_dataplane::lineage::substitute;
use airlock_ledger::{Effect, ValueKind};
use serde::Serialize;
use serde_json::Value;

/// Characters of the origin's answer shown in `released.answer.excerpt`.
pub(crate) const ANSWER_EXCERPT_CHARS: usize = 400;

/// An effect as it reads with the real values known so far: the admin API's `released`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Released {
    /// The staged summary with every known real value in place of its placeholder (and
    /// `#?`, an adapter's "number the origin assigns", with the effect's own `/number`).
    pub summary: String,
    /// The staged URL with the real values of the parents' placeholders it carried: the
    /// URL as it was (or will be) sent.
    pub url: String,
    /// The real values of the placeholders it handed out, by JSON pointer.
    pub values: BTreeMap<String, String>,
    /// The answer's `html_url` (or a top-level `url` or `permalink`, or the `Location`
    /// header) when it has one.
    pub link: Option<String>,
    /// The origin's answer, once released.
    pub answer: Option<Answer>,
}

/// The origin's answer to a release, in brief.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Answer {
    /// The origin's status, when it answered.
    pub status: Option<u16>,
    /// The first [`ANSWER_EXCERPT_CHARS`] characters of the kept body (compact JSON when
    /// it is JSON); empty when the body was not loaded.
    pub excerpt: String,
    /// Whether the excerpt or the kept body is shorter than what the origin sent.
    pub truncated: bool,
    /// Bytes of body the origin sent.
    pub body_len: u64,
}

/// `effect`'s [`Released`] view, or `None` when nothing about it is known yet (no parent
/// placeholder has a real value, none of its own has one and it was never released).
/// `parents` are effects of the same run (others are ignored); `answer` is the origin's
/// kept response body, when there is one.
pub(crate) fn released(
    effect: &Effect,
    parents: &[Effect],
    answer: Option<&[u8]>,
) -> Option<Released> {
    let mut substitutions: Vec<(&str, ValueKind, &str)> = Vec::new();
    for dependency in &effect.depends_on {
        let real = parents
            .iter()
            .filter(|p| p.id == dependency.effect)
            .flat_map(|p| &p.placeholders)
            .find(|ph| ph.value == dependency.value);
        if let Some((placeholder, real)) =
            real.and_then(|ph| ph.real.as_deref().map(|real| (ph, real)))
        {
            substitutions.push((&placeholder.value, placeholder.kind, real));
        }
    }
    let values: BTreeMap<String, String> = effect
        .placeholders
        .iter()
        .filter_map(|p| Some((p.pointer.clone(), p.real.clone()?)))
        .collect();
    if substitutions.is_empty() && values.is_empty() && effect.release.is_none() {
        return None;
    }
    let mut summary = airlock_adapters::summary_of(effect);
    let mut url = effect.url.clone();
    for (value, kind, real) in &substitutions {
        summary = substitute(&summary, value, *kind, real);
        url = substitute(&url, value, *kind, real);
    }
    for own in &effect.placeholders {
        if let Some(real) = &own.real {
            summary = substitute(&summary, &own.value, own.kind, real);
        }
    }
    // A summary shortened at staging may end inside a placeholder: that piece is the real
    // value too (whole, before the ellipsis).
    for (value, _, real) in &substitutions {
        summary = complete_cut(&summary, value, real);
    }
    if let Some(number) = values.get("/number") {
        summary = summary.replacen("#?", &format!("#{number}"), 1);
    }
    let release = effect.release.as_ref();
    let parsed: Option<Value> = answer.and_then(|a| serde_json::from_slice(a).ok());
    let link = parsed
        .as_ref()
        .and_then(|json| {
            ["/html_url", "/url", "/permalink"]
                .iter()
                .filter_map(|p| json.pointer(p).and_then(Value::as_str))
                .find(|u| u.starts_with("https://") || u.starts_with("http://"))
                .map(str::to_owned)
        })
        .or_else(|| {
            release?
                .headers
                .iter()
                .find(|h| h.name == "location")
                .map(|h| String::from_utf8_lossy(h.value.as_bytes()).into_owned())
        });
    let answer = release.map(|r| {
        let text = match &parsed {
            Some(json) => json.to_string(),
            None => answer
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .unwrap_or_default(),
        };
        let excerpt: String = text.chars().take(ANSWER_EXCERPT_CHARS).collect();
        let truncated =
            excerpt.len() < text.len() || answer.is_some_and(|a| (a.len() as u64) < r.body_len);
        Answer {
            status: r.status,
            excerpt,
            truncated,
            body_len: r.body_len,
        }
    });
    Some(Released {
        summary,
        url,
        values,
        link,
        answer,
    })
}

/// `effect`'s `released` view as the admin API returns it: [`released`] as JSON, `null`
/// when nothing about it is known yet.
///
/// `summary` with a trailing, cut-short piece of placeholder `value` (at least 6 of its
/// characters, just before the ellipsis an excerpt ends with) replaced by `real`.
fn complete_cut(summary: &str, value: &str, real: &str) -> String {
    let Some(body) = summary.strip_suffix('…') else {
        return summary.to_owned();
    };
    let cut = (6..value.len())
        .rev()
        .filter(|&n| value.is_char_boundary(n))
        .find(|&n| body.ends_with(&value[..n]));
    match cut {
        Some(n) => format!("{}{real}…", &body[..body.len() - n]),
        None => summary.to_owned(),
    }
}

/// Shape: `{summary, url, values: {POINTER: REAL}, link, answer: {status, excerpt,
/// truncated, body_len}}`.
pub(crate) fn released_json(effect: &Effect, parents: &[Effect], answer: Option<&[u8]>) -> Value {
    released(effect, parents, answer)
        .and_then(|view| serde_json::to_value(view).ok())
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::complete_cut;

    #[test]
    fn a_placeholder_cut_by_the_summary_excerpt_is_shown_real() {
        let cut = r#"mcp t.create {"l3":"ph_tbfv2tp53yeyhd…"#;
        assert_eq!(
            complete_cut(cut, "ph_tbfv2tp53yeyhdq7x", "L3-real"),
            r#"mcp t.create {"l3":"L3-real…"#
        );
        assert_eq!(complete_cut("whole ph_x…", "ph_tbfv2", "R"), "whole ph_x…");
        assert_eq!(
            complete_cut("no ellipsis ph_tbfv", "ph_tbfv2", "R"),
            "no ellipsis ph_tbfv"
        );
    }
}
