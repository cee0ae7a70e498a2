//! The policy file as written: serde structs that reject unknown keys.
//!
//! Nothing here is validated beyond its TOML type; `lib.rs` compiles these
//! into [`crate::Policy`], which cannot hold an invalid rule.

use serde::Deserialize;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyFile {
    /// Required; must be 1. Optional here so a missing version gets our message.
    pub(crate) version: Option<i64>,
    pub(crate) default: Option<WireAction>,
    #[serde(default)]
    pub(crate) allow_private: Vec<String>,
    #[serde(default, rename = "rule")]
    pub(crate) rules: Vec<WireRule>,
}

/// One `[[rule]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireRule {
    pub(crate) id: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) port: Option<WirePorts>,
    pub(crate) scheme: Option<WireScheme>,
    pub(crate) method: Option<WireMethods>,
    pub(crate) path: Option<String>,
    pub(crate) action: Option<WireAction>,
    pub(crate) reason: Option<String>,
    pub(crate) allow_private: Option<Vec<String>>,
    pub(crate) respond: Option<WireRespondField>,
}

/// `respond = "github"` (an adapter by name) or a `[rule.respond]` table (a template).
///
/// Deserialised by hand rather than `untagged`, so a mistake inside the table keeps
/// toml's own message (unknown key, wrong type) instead of "did not match any variant".
#[derive(Debug)]
pub(crate) enum WireRespondField {
    Adapter(String),
    Template(WireRespond),
}

impl<'de> Deserialize<'de> for WireRespondField {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = WireRespondField;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an adapter name (like \"github\") or a [rule.respond] table")
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(WireRespondField::Adapter(value.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                WireRespond::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(WireRespondField::Template)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// `[rule.respond]`: the synthetic response of a stage rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireRespond {
    pub(crate) status: Option<i64>,
    pub(crate) content_type: Option<String>,
    #[serde(default)]
    pub(crate) headers: std::collections::BTreeMap<String, String>,
    pub(crate) body: Option<String>,
}

/// `port = 443` or `port = [443, 8443]`.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "a port number or a list of port numbers")]
pub(crate) enum WirePorts {
    One(i64),
    Many(Vec<i64>),
}

impl WirePorts {
    pub(crate) fn into_vec(self) -> Vec<i64> {
        match self {
            WirePorts::One(port) => vec![port],
            WirePorts::Many(ports) => ports,
        }
    }
}

/// `method = "read"`, `method = "POST"` or `method = ["POST", "PUT"]`.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "\"read\", \"write\", a method name or a list of method names"
)]
pub(crate) enum WireMethods {
    One(String),
    Many(Vec<String>),
}

impl WireMethods {
    pub(crate) fn into_vec(self) -> Vec<String> {
        match self {
            WireMethods::One(method) => vec![method],
            WireMethods::Many(methods) => methods,
        }
    }
}

/// `action` / `default` as written; `tunnel` parses so the loader can refuse it clearly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WireAction {
    Pass,
    Stage,
    Deny,
    Tunnel,
}

/// `scheme` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WireScheme {
    Http,
    Https,
}
