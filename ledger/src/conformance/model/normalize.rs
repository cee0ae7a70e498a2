//! Answers as comparable JSON: an error's class, sorted listings, and the [`Normalizer`].

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use crate::{EffectId, LedgerError, RunId};

/// An answer as JSON: the value, or the error's class (never its random identifiers).
pub(super) fn answer<T: Serialize>(result: Result<T, LedgerError>) -> Value {
    match result {
        Ok(value) => {
            serde_json::json!({ "ok": serde_json::to_value(value).unwrap_or(Value::Null) })
        }
        Err(LedgerError::NotFound { kind, .. }) => Value::String(format!("not_found:{kind}")),
        Err(LedgerError::Refused(refused)) => Value::String(format!("refused:{}", refused.code())),
        Err(LedgerError::Conflict { .. }) => Value::String("conflict".into()),
        Err(LedgerError::Corrupt { .. }) => Value::String("corrupt".into()),
        Err(other) => Value::String(format!("error:{other}")),
    }
}

/// `value` (`{"ok": [...]}`) with its list sorted by JSON text: for listings whose order
/// follows random identifiers or values.
pub(super) fn sorted(value: Value) -> Value {
    match value {
        Value::Object(mut object) => {
            if let Some(Value::Array(items)) = object.get_mut("ok") {
                items.sort_by_key(|item| item.to_string());
            }
            Value::Object(object)
        }
        other => other,
    }
}

/// Renames identifiers, tokens and placeholder values by order of first appearance and
/// zeroes every `*_ms` time.
#[derive(Debug, Default)]
pub struct Normalizer {
    names: HashMap<String, String>,
}

impl Normalizer {
    /// `value` with every random or clock-bound part replaced.
    pub fn normalize(&mut self, value: Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.rename(text)),
            Value::Array(items) => {
                Value::Array(items.into_iter().map(|v| self.normalize(v)).collect())
            }
            Value::Object(object) => Value::Object(
                object
                    .into_iter()
                    .map(|(key, value)| {
                        let value = if key == "token" {
                            Value::String("<token>".into())
                        } else if key.ends_with("_ms") && value.is_number() {
                            Value::from(0)
                        } else {
                            self.normalize(value)
                        };
                        (key, value)
                    })
                    .collect(),
            ),
            other => other,
        }
    }

    fn rename(&mut self, text: String) -> String {
        let kind = if RunId::parse(&text).is_some() {
            "run"
        } else if EffectId::parse(&text).is_some() {
            "eff"
        } else if text.starts_with("ph_") && text.len() == 27 {
            "ph"
        } else if text.len() == 16 && text.bytes().all(|b| b.is_ascii_digit()) {
            "number"
        } else {
            return text;
        };
        let next = self.names.len();
        self.names
            .entry(text)
            .or_insert_with(|| format!("<{kind}#{next}>"))
            .clone()
    }
}
