//! Placeholders at release: substituting parents' real values into an effect before it is
//! sent, and reading its own placeholders' real values from the origin's response.

use airlock_ledger::outcome::kinds;
use airlock_ledger::{Effect, EffectState, IssuedPlaceholder, ValueKind};
use airlock_policy::{Action, RequestFacts, Scheme};

use super::Prepared;
use crate::Control;
use airlock_dataplane::lineage::{encoded_forms, find_placeholders, substitute, substitute_whole};
use airlock_net::authority::percent_encode;
use airlock_net::authority::Target;

/// Replaces every placeholder `effect` carries with the real value from its parent,
/// encoded for where it stands: percent-encoded in the URL, JSON-escaped in a JSON body,
/// form-encoded in a form body; a SHA-1 placeholder abbreviated by the real value's prefix
/// of the same length; a placeholder written whole in base64 or hex by the real value in
/// that encoding ([`encoded_forms`]). Then checks that no placeholder of the run is left
/// anywhere, in any encoding the origin may decode
/// ([`airlock_ledger::fingerprint::readings::request`]: a placeholder written encoded is
/// found at staging but not substituted, so such an effect fails here unsent), and that
/// the policy still lets the substituted request go where it now points.
///
/// Errors with a reason, and nothing is sent, when a parent gave no real value, a number
/// placeholder's real value is not an integer, a value cannot stand in a header, a
/// placeholder remains, or the policy denies the substituted request.
pub(super) fn substituted(
    shared: &Control,
    effect: &Effect,
    parents: &[Effect],
    issued: &[IssuedPlaceholder],
    body: Vec<u8>,
) -> Result<Prepared, String> {
    let mut url = effect.url.clone();
    let mut headers: Vec<(String, Vec<u8>)> = effect
        .headers
        .iter()
        .map(|h| (h.name.clone(), h.value.as_bytes().to_vec()))
        .collect();
    let content_type = effect
        .headers
        .iter()
        .find(|h| h.name == "content-type")
        .map(|h| String::from_utf8_lossy(h.value.as_bytes()).to_ascii_lowercase())
        .unwrap_or_default();
    let mut body = body;
    for dependency in &effect.depends_on {
        let parent = parents.iter().find(|p| p.id == dependency.effect);
        let placeholder = parent.and_then(|p| {
            p.placeholders
                .iter()
                .find(|ph| ph.value == dependency.value)
        });
        let Some(placeholder) = placeholder else {
            return Err(format!(
                "placeholder {} of {} is not in the ledger",
                dependency.value, dependency.effect
            ));
        };
        let Some(real) = placeholder.real.as_deref() else {
            return Err(format!(
                "placeholder {} of {} has no real value: the origin's response to {} has nothing at {}",
                dependency.value, dependency.effect, dependency.effect, placeholder.pointer
            ));
        };
        let integer = real.strip_prefix('-').unwrap_or(real);
        if placeholder.kind == ValueKind::Number
            && (integer.is_empty() || !integer.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(format!(
                "the real value {real:?} at {} of {} is not an integer, but its placeholder {} stood for one",
                placeholder.pointer, dependency.effect, dependency.value
            ));
        }
        if real.chars().any(|c| c.is_control()) {
            return Err(format!(
                "the real value at {} of {} holds control characters; it cannot be substituted safely",
                placeholder.pointer, dependency.effect
            ));
        }
        url = substitute(
            &url,
            &dependency.value,
            placeholder.kind,
            &percent_encode(real, b""),
        );
        for (_, value) in headers.iter_mut() {
            if let Ok(text) = std::str::from_utf8(value) {
                *value = substitute(text, &dependency.value, placeholder.kind, real).into_bytes();
            }
        }
        let in_body = if content_type.contains("json") && placeholder.kind.is_string() {
            let quoted = serde_json::to_string(real).unwrap_or_default();
            quoted[1..quoted.len().saturating_sub(1).max(1)].to_owned()
        } else if content_type.contains("x-www-form-urlencoded") {
            percent_encode(real, b"")
        } else {
            real.to_owned()
        };
        if let Ok(text) = std::str::from_utf8(&body) {
            body = substitute(text, &dependency.value, placeholder.kind, &in_body).into_bytes();
        }
        // The placeholder written whole in base64 or hex (found at staging once decoded):
        // the real value in the same encoding, encoded again for where it stands.
        for (form, real_form) in encoded_forms(&dependency.value, real) {
            url = substitute_whole(&url, &form, &percent_encode(&real_form, b""));
            for (_, value) in headers.iter_mut() {
                if let Ok(text) = std::str::from_utf8(value) {
                    *value = substitute_whole(text, &form, &real_form).into_bytes();
                }
            }
            let in_body = if content_type.contains("x-www-form-urlencoded") {
                percent_encode(&real_form, b"")
            } else {
                real_form
            };
            if let Ok(text) = std::str::from_utf8(&body) {
                body = substitute_whole(text, &form, &in_body).into_bytes();
            }
        }
    }
    // No placeholder may reach an origin, wherever it hides: every reading of the URL,
    // header names and values and body the search at staging reads.
    let encoding = headers
        .iter()
        .find(|(n, _)| n == "content-encoding")
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
    let readings = airlock_ledger::fingerprint::readings::request(
        &url,
        headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
        Some((&body, encoding.as_deref())),
    );
    for (place, text) in &readings.texts {
        if let Some(left) = find_placeholders(issued, text).first() {
            return Err(format!(
                "placeholder {} of {} would reach the origin: it stands where airlock cannot substitute it (in the {place})",
                left.value, left.effect
            ));
        }
    }
    // A body that cannot be decoded whole (`readings.cut`) was refused at staging while the
    // run had placeholders out; one staged before any was issued cannot carry one.
    // The policy decides the request as it will now be sent: a substituted request, and a
    // retried one (the policy may have changed since it was staged).
    let retried = effect.decisions.iter().any(|d| d.kind == kinds::RETRY);
    if !effect.depends_on.is_empty() || retried {
        let uri: http::Uri = url
            .parse()
            .map_err(|_| format!("after substitution {url} is not a valid URL"))?;
        let scheme = if uri.scheme_str() == Some("http") {
            Scheme::Http
        } else {
            Scheme::Https
        };
        let target = Target::parse(
            scheme,
            uri.authority().map(|a| a.as_str()).unwrap_or(""),
            if scheme == Scheme::Http { 80 } else { 443 },
        )
        .ok_or_else(|| format!("after substitution {url} names no valid host"))?;
        let profile = shared
            .ledger()
            .run(&effect.run_id)
            .ok()
            .flatten()
            .and_then(|run| run.profile);
        let header_pairs: Vec<(&str, &str)> = headers
            .iter()
            .filter_map(|(name, value)| {
                std::str::from_utf8(value)
                    .ok()
                    .map(|value| (name.as_str(), value))
            })
            .collect();
        let decision = shared.policy().current().decide(&RequestFacts {
            query: uri.query().unwrap_or(""),
            headers: &header_pairs,
            body: airlock_policy::RequestBody::Read(&body),
            profile: profile.as_deref(),
            ..RequestFacts::new(
                scheme,
                &target.host,
                target.port,
                &effect.method,
                uri.path(),
                !body.is_empty(),
            )
        });
        if decision.action == Action::Deny {
            return Err(format!(
                "after substitution the request ({} {url}) is denied: {} ({})",
                effect.method, decision.reason, decision.reason_code
            ));
        }
    }
    Ok((url, headers, body))
}

/// Why `effect` must not be released yet: a parent whose placeholder it carries was
/// settled delivered by a reviewer, and airlock never learnt that placeholder's real
/// value (the origin's answer was never seen). The reason names the command that supplies
/// it; `None` when every such value is known (or the parent's answer was seen, whose
/// missing value [`substituted`] reports).
pub(super) fn value_missing(effect: &Effect, parents: &[Effect]) -> Option<String> {
    effect.depends_on.iter().find_map(|dependency| {
        let parent = parents.iter().find(|p| p.id == dependency.effect)?;
        let settled = parent.state == EffectState::Released
            && parent
                .decisions
                .iter()
                .any(|d| d.kind == kinds::SETTLE_DELIVERED);
        let placeholder = parent
            .placeholders
            .iter()
            .find(|p| p.value == dependency.value)?;
        (settled && placeholder.real.is_none()).then(|| {
            format!(
                "needs the real value of placeholder {} (at {} of the origin's answer to {}), which airlock never saw: {} was settled delivered without it; a reviewer who knows it supplies it with `airlock settle {} --delivered --value {}=VALUE`, and this effect is then released",
                dependency.value, placeholder.pointer, parent.id, parent.id, parent.id, placeholder.pointer
            )
        })
    })
}

/// The real values of an effect's placeholders in the origin's JSON response, or in the
/// first JSON message of a server-sent event stream (`data:` lines, as an MCP server
/// answers over streamable HTTP) that holds a placeholder's pointer.
pub(super) fn resolve(effect: &Effect, response: &[u8]) -> Vec<(String, Option<String>)> {
    let json: Option<serde_json::Value> = serde_json::from_slice(response).ok().or_else(|| {
        airlock_adapters::mcp::session::answer_messages(response)
            .into_iter()
            .find(|m| {
                effect
                    .placeholders
                    .iter()
                    .any(|p| m.pointer(&p.pointer).is_some())
            })
    });
    effect
        .placeholders
        .iter()
        .map(|placeholder| {
            let real = json
                .as_ref()
                .and_then(|j| j.pointer(&placeholder.pointer))
                .and_then(|v| match v {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Number(n) => Some(n.to_string()),
                    serde_json::Value::Null
                    | serde_json::Value::Array(_)
                    | serde_json::Value::Object(_) => None,
                    other => Some(other.to_string()),
                });
            (placeholder.value.clone(), real)
        })
        .collect()
}
