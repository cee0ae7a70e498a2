//! Per-rule obligations and modes: `mode`, `review`, `limit`, `strip`, `redact`,
//! `idempotency_key` with `retry_unknown`.
//!
//! The policy crate only compiles and exposes them (accessors on [`crate::Rule`]); the
//! proxy enforces them. Masking for `redact` is pure, so it lives here too
//! ([`Redaction::mask_body`], [`Redaction::masks_header`]).

use serde::Serialize;
use serde_json::Value;

use crate::wire::{WireLimit, WireMode, WireRetryUnknown, WireReview};

/// The value written in place of a redacted header or JSON value.
pub const REDACTED: &str = "[redacted]";

/// `mode` of a rule or of the whole policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The rule decides (default).
    #[default]
    Enforce,
    /// On a rule: a match is logged (with what the rule would have done) and evaluation
    /// continues with the next rule. On the policy: every request is decided normally,
    /// and one that would be denied passes instead, recorded as an audit match.
    Audit,
}

impl Mode {
    pub(crate) fn from_wire(wire: Option<WireMode>) -> Mode {
        match wire {
            None | Some(WireMode::Enforce) => Mode::Enforce,
            Some(WireMode::Audit) => Mode::Audit,
        }
    }
}

/// `review` of a stage rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Review {
    /// A reviewer must approve the effect (default).
    #[default]
    Required,
    /// The effect is created already approved; it is still staged, still released only
    /// at commit and still discarded on abort.
    Auto,
}

impl Review {
    pub(crate) fn from_wire(wire: Option<WireReview>) -> Review {
        match wire {
            None | Some(WireReview::Required) => Review::Required,
            Some(WireReview::Auto) => Review::Auto,
        }
    }
}

/// `idempotency_key` and `retry_unknown` of a stage rule: the origin honours an
/// idempotency key (the IETF httpapi draft "The Idempotency-Key HTTP Header Field";
/// Stripe's API), so airlock sends a stable per-effect key with every release attempt,
/// and may re-send an effect whose outcome is unknown when `retry_unknown` says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Idempotency {
    /// The header the origin reads the key from, as written (`Idempotency-Key`).
    pub header: String,
    /// `retry_unknown = "idempotent"`: an `unknown` effect may be re-sent with its key.
    pub retry_unknown: bool,
}

impl Idempotency {
    /// Compiles the two keys of a rule whose action is `action`; `None` without them.
    pub(crate) fn parse(
        header: Option<String>,
        retry_unknown: Option<WireRetryUnknown>,
        action: crate::Action,
    ) -> Result<Option<Idempotency>, (&'static str, String)> {
        if action != crate::Action::Stage {
            if header.is_some() {
                return Err((
                    "idempotency_key",
                    "only a stage rule's effects are released with an idempotency key".into(),
                ));
            }
            if retry_unknown.is_some() {
                return Err((
                    "retry_unknown",
                    "only a stage rule's effects are released and retried".into(),
                ));
            }
        }
        let Some(header) = header else {
            if retry_unknown == Some(WireRetryUnknown::Idempotent) {
                return Err((
                    "retry_unknown",
                    "\"idempotent\" needs idempotency_key: without a key the origin cannot tell a re-sent request from a new one".into(),
                ));
            }
            return Ok(None);
        };
        let lower = header.to_ascii_lowercase();
        let token = !lower.is_empty()
            && lower
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err((
                "idempotency_key",
                format!("\"{header}\" is not a header name"),
            ));
        }
        if lower.starts_with("airlock-")
            || matches!(
                lower.as_str(),
                "host" | "content-length" | "transfer-encoding" | "connection" | "authorization"
            )
        {
            return Err((
                "idempotency_key",
                format!("header \"{header}\" is not the origin's idempotency key header"),
            ));
        }
        Ok(Some(Idempotency {
            header,
            retry_unknown: retry_unknown == Some(WireRetryUnknown::Idempotent),
        }))
    }
}

/// `limit = { … }` of a rule. Every limit is optional; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Limits {
    /// Largest request body, in bytes (413 `limit_body_bytes` over it). Also the bound a
    /// body matcher reads up to (default [`crate::DEFAULT_BODY_MATCH_BYTES`]).
    pub body_bytes: Option<u64>,
    /// Requests per minute this rule lets one run make (429 `limit_requests_per_minute`).
    pub requests_per_minute: Option<u32>,
    /// Request body bytes one run may send to one host through this rule, summed over the
    /// run (413 `limit_upload_bytes_per_run`).
    pub upload_bytes_per_run: Option<u64>,
    /// Longest raw query string, in bytes, without the `?` (414 `limit_query_bytes`): a
    /// query is an exfiltration channel even on a read.
    pub query_bytes: Option<u64>,
}

impl Limits {
    pub(crate) fn parse(wire: Option<WireLimit>) -> Result<Limits, String> {
        let Some(wire) = wire else {
            return Ok(Limits::default());
        };
        let positive = |name: &str, value: Option<i64>| -> Result<Option<u64>, String> {
            match value {
                None => Ok(None),
                Some(n) if n > 0 => Ok(Some(n as u64)),
                Some(n) => Err(format!("{name} = {n}: must be a positive integer")),
            }
        };
        let limits = Limits {
            body_bytes: positive("body_bytes", wire.body_bytes)?,
            requests_per_minute: positive("requests_per_minute", wire.requests_per_minute)?
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            upload_bytes_per_run: positive("upload_bytes_per_run", wire.upload_bytes_per_run)?,
            query_bytes: positive("query_bytes", wire.query_bytes)?,
        };
        if limits == Limits::default() {
            return Err("empty table limits nothing; remove \"limit\" instead".into());
        }
        Ok(limits)
    }
}

/// One `redact` entry: what is masked in the journal, the admin API, the review UI and
/// logs. The bytes released to the origin are never changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "target", rename_all = "snake_case")]
pub enum Redaction {
    /// `"/password"`: the value at this JSON pointer (RFC 6901) in a JSON body.
    JsonPointer(String),
    /// `"header:authorization"`: every value of this header (lower-case name).
    Header(String),
}

impl Redaction {
    pub(crate) fn parse(raw: &str) -> Result<Redaction, String> {
        if let Some(name) = raw.strip_prefix("header:") {
            let lower = name.to_ascii_lowercase();
            if lower.is_empty() || !lower.bytes().all(crate::matcher::is_token_byte) {
                return Err(format!("\"{raw}\": \"{name}\" is not a header name"));
            }
            return Ok(Redaction::Header(lower));
        }
        if raw.starts_with('/') {
            return Ok(Redaction::JsonPointer(raw.to_owned()));
        }
        Err(format!(
            "\"{raw}\" is neither a JSON pointer (\"/password\") nor \"header:NAME\""
        ))
    }

    /// Whether header `name` (any case) is masked by one of `redactions`.
    pub fn masks_header(redactions: &[Redaction], name: &str) -> bool {
        redactions
            .iter()
            .any(|r| matches!(r, Redaction::Header(h) if h.eq_ignore_ascii_case(name)))
    }

    /// `body` with every JSON pointer of `redactions` replaced by [`REDACTED`]; `None`
    /// when nothing was masked (no pointer redaction, not JSON, or no pointer present).
    pub fn mask_body(redactions: &[Redaction], body: &[u8]) -> Option<Vec<u8>> {
        let pointers: Vec<&str> = redactions
            .iter()
            .filter_map(|r| match r {
                Redaction::JsonPointer(p) => Some(p.as_str()),
                Redaction::Header(_) => None,
            })
            .collect();
        if pointers.is_empty() {
            return None;
        }
        let mut value: Value = serde_json::from_slice(body).ok()?;
        let mut masked = false;
        for pointer in pointers {
            if let Some(slot) = value.pointer_mut(pointer) {
                *slot = Value::String(REDACTED.to_owned());
                masked = true;
            }
        }
        masked.then(|| serde_json::to_vec(&value).ok()).flatten()
    }
}

/// Compiles `strip`: lower-case header names.
pub(crate) fn parse_strip(raw: Vec<String>) -> Result<Vec<String>, String> {
    let mut out = Vec::with_capacity(raw.len());
    for name in raw {
        let lower = name.to_ascii_lowercase();
        if lower.is_empty() || !lower.bytes().all(crate::matcher::is_token_byte) {
            return Err(format!("\"{name}\" is not a header name"));
        }
        if lower == "host" {
            return Err("\"host\" cannot be stripped: it names the destination".into());
        }
        if !out.contains(&lower) {
            out.push(lower);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redactions_parse_and_mask() {
        let redactions = vec![
            Redaction::parse("/password").expect("pointer"),
            Redaction::parse("/user/token").expect("pointer"),
            Redaction::parse("header:Authorization").expect("header"),
        ];
        assert!(Redaction::parse("password").is_err());
        assert!(Redaction::parse("header:").is_err());
        assert!(Redaction::masks_header(&redactions, "AUTHORIZATION"));
        assert!(!Redaction::masks_header(&redactions, "cookie"));
        let masked = Redaction::mask_body(
            &redactions,
            br#"{"password":"hunter2","user":{"token":"t","name":"n"}}"#,
        )
        .expect("masked");
        let value: Value = serde_json::from_slice(&masked).expect("json");
        assert_eq!(value["password"], REDACTED);
        assert_eq!(value["user"]["token"], REDACTED);
        assert_eq!(value["user"]["name"], "n");
        assert_eq!(Redaction::mask_body(&redactions, b"not json"), None);
        assert_eq!(Redaction::mask_body(&redactions, br#"{"other":1}"#), None);
    }

    #[test]
    fn limits_must_be_positive_and_present() {
        let wire = |body: Option<i64>| WireLimit {
            body_bytes: body,
            requests_per_minute: None,
            upload_bytes_per_run: None,
            query_bytes: None,
        };
        assert_eq!(
            Limits::parse(Some(wire(Some(10)))).expect("ok").body_bytes,
            Some(10)
        );
        assert!(Limits::parse(Some(wire(Some(0)))).is_err());
        assert!(Limits::parse(Some(wire(None))).is_err());
        assert_eq!(Limits::parse(None).expect("ok"), Limits::default());
    }

    #[test]
    fn strip_names_are_lowercased_and_checked() {
        assert_eq!(
            parse_strip(vec![
                "X-Forwarded-For".into(),
                "cookie".into(),
                "COOKIE".into()
            ])
            .expect("ok"),
            vec!["x-forwarded-for".to_owned(), "cookie".to_owned()]
        );
        assert!(parse_strip(vec!["bad name".into()]).is_err());
        assert!(parse_strip(vec!["Host".into()]).is_err());
    }
}
