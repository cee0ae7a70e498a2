//! How an effect reads once it was released: its summary and URL with the real values of
//! the placeholders it carried (as the ledger records them, `Placeholder::real`), the
//! real values of the placeholders it handed out, the link the origin gave the new object
//! and a bounded excerpt of the origin's answer. The review UI shows the same
//! (docs/admin-api.md, `released`).

use airlock_dataplane::lineage::substitute;
use airlock_ledger::{Effect, ValueKind};
use serde_json::{json, Map, Value};

/// Characters of the origin's answer shown in `released.answer.excerpt`.
pub(crate) const ANSWER_EXCERPT_CHARS: usize = 400;

/// `effect`'s `released` view, or `null` when nothing about it is known yet (no parent
/// placeholder has a real value, none of its own has one and it was never released).
/// `parents` are effects of the same run (others are ignored); `answer` is the origin's
/// kept response body, when there is one.
///
/// Shape: `{summary, url, values: {POINTER: REAL}, link, answer: {status, excerpt,
/// truncated}}`; `summary` and `url` are the staged ones with every known real value in
/// place of its placeholder (and `#?`, an adapter's "number the origin assigns", with the
/// effect's own `/number`); `link` is the answer's `html_url` (or a top-level `url`, or the
/// `Location` header) when it has one.
pub(crate) fn released_json(effect: &Effect, parents: &[Effect], answer: Option<&[u8]>) -> Value {
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
    let values: Map<String, Value> = effect
        .placeholders
        .iter()
        .filter_map(|p| Some((p.pointer.clone(), json!(p.real.as_deref()?))))
        .collect();
    if substitutions.is_empty() && values.is_empty() && effect.release.is_none() {
        return Value::Null;
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
    if let Some(number) = values.get("/number").and_then(Value::as_str) {
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
    let answer_json = release.map(|r| {
        let text = match &parsed {
            Some(json) => json.to_string(),
            None => answer
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .unwrap_or_default(),
        };
        let excerpt: String = text.chars().take(ANSWER_EXCERPT_CHARS).collect();
        let truncated = excerpt.len() < text.len()
            || answer.is_some_and(|a| (a.len() as u64) < r.body_len);
        json!({ "status": r.status, "excerpt": excerpt, "truncated": truncated, "body_len": r.body_len })
    });
    json!({
        "summary": summary,
        "url": url,
        "values": values,
        "link": link,
        "answer": answer_json,
    })
}
