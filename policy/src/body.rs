//! Bounded body matchers: `json`, `graphql` and `jsonrpc`.
//!
//! They read a request body the proxy buffered up to the rule's `limit.body_bytes`
//! (default [`DEFAULT_BODY_MATCH_BYTES`]). A body that is over the limit or cannot be
//! parsed the way a matcher needs denies the request, naming the rule (`docs/policy.md`
//! invariant 6: fail closed); a request without a body never matches a body matcher.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::content::ValueGlob;
use crate::graphql::{self, OperationType};
use crate::wire::{WireGraphql, WireJsonRpc, WireScalar};

/// The body limit of a rule with a body matcher and no `limit.body_bytes`: 1 MiB.
pub const DEFAULT_BODY_MATCH_BYTES: u64 = 1024 * 1024;

/// What one `json` entry wants at its pointer.
#[derive(Debug, Clone, PartialEq)]
enum JsonExpect {
    /// A string value matching the glob.
    Glob(ValueGlob),
    /// This integer.
    Int(i64),
    /// This number.
    Float(f64),
    /// This boolean.
    Bool(bool),
}

impl JsonExpect {
    fn matches(&self, value: &Value) -> bool {
        match (self, value) {
            (JsonExpect::Glob(glob), Value::String(s)) => glob.matches(s),
            (JsonExpect::Int(want), Value::Number(n)) => {
                n.as_i64() == Some(*want) || n.as_f64() == Some(*want as f64)
            }
            (JsonExpect::Float(want), Value::Number(n)) => n.as_f64() == Some(*want),
            (JsonExpect::Bool(want), Value::Bool(got)) => want == got,
            _ => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            JsonExpect::Glob(glob) => format!("\"{glob}\""),
            JsonExpect::Int(n) => n.to_string(),
            JsonExpect::Float(n) => n.to_string(),
            JsonExpect::Bool(b) => b.to_string(),
        }
    }
}

/// The body conditions of one rule (all that are present must hold).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BodyMatcher {
    json: Vec<(String, JsonExpect)>,
    graphql: Option<(Option<OperationType>, Option<ValueGlob>)>,
    jsonrpc: Option<(Option<ValueGlob>, Option<ValueGlob>)>,
}

/// The outcome of a body matcher on a buffered body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BodyCheck {
    /// Every condition holds.
    Match,
    /// A condition does not hold: the field (`json`, `graphql`, `jsonrpc`) and why.
    Mismatch(&'static str, String),
    /// The body cannot be read the way a matcher needs: why.
    Unparseable(String),
}

impl BodyMatcher {
    /// Compiles the three optional body tables; `Ok(None)` when the rule has none.
    pub(crate) fn parse(
        json: Option<BTreeMap<String, WireScalar>>,
        graphql: Option<WireGraphql>,
        jsonrpc: Option<WireJsonRpc>,
    ) -> Result<Option<BodyMatcher>, (&'static str, String)> {
        if json.is_none() && graphql.is_none() && jsonrpc.is_none() {
            return Ok(None);
        }
        let mut compiled_json = Vec::new();
        if let Some(json) = json {
            if json.is_empty() {
                return Err(("json", "empty table matches every JSON body".into()));
            }
            for (pointer, value) in json {
                if !(pointer.is_empty() || pointer.starts_with('/')) {
                    return Err((
                        "json",
                        format!(
                            "\"{pointer}\" is not a JSON pointer (RFC 6901): write \"/{pointer}\""
                        ),
                    ));
                }
                let expect = match value {
                    WireScalar::Str(s) => JsonExpect::Glob(ValueGlob::new(&s)),
                    WireScalar::Int(n) => JsonExpect::Int(n),
                    WireScalar::Float(n) => JsonExpect::Float(n),
                    WireScalar::Bool(b) => JsonExpect::Bool(b),
                };
                compiled_json.push((pointer, expect));
            }
        }
        let graphql = graphql
            .map(|wire| {
                let operation = wire
                    .operation
                    .map(|op| {
                        OperationType::parse(&op).ok_or_else(|| {
                            (
                                "graphql",
                                format!(
                                    "operation \"{op}\" is not \"query\", \"mutation\" or \"subscription\""
                                ),
                            )
                        })
                    })
                    .transpose()?;
                let name = wire.name.as_deref().map(ValueGlob::new);
                if operation.is_none() && name.is_none() {
                    return Err((
                        "graphql",
                        "give \"operation\", \"name\" or both".to_owned(),
                    ));
                }
                Ok((operation, name))
            })
            .transpose()?;
        let jsonrpc = jsonrpc
            .map(|wire| {
                let method = wire.method.as_deref().map(ValueGlob::new);
                let tool = wire.tool.as_deref().map(ValueGlob::new);
                if method.is_none() && tool.is_none() {
                    return Err(("jsonrpc", "give \"method\", \"tool\" or both".to_owned()));
                }
                Ok((method, tool))
            })
            .transpose()?;
        Ok(Some(BodyMatcher {
            json: compiled_json,
            graphql,
            jsonrpc,
        }))
    }

    /// True when the rule has a `jsonrpc` matcher.
    pub(crate) fn has_jsonrpc(&self) -> bool {
        self.jsonrpc.is_some()
    }

    /// The first body key the rule uses, for explanations of a request without a body.
    pub(crate) fn field(&self) -> &'static str {
        if !self.json.is_empty() {
            "json"
        } else if self.graphql.is_some() {
            "graphql"
        } else {
            "jsonrpc"
        }
    }

    /// Checks a whole buffered body.
    pub(crate) fn check(&self, body: &[u8]) -> BodyCheck {
        let value: Value = match serde_json::from_slice(body) {
            Ok(value) => value,
            Err(error) => return BodyCheck::Unparseable(format!("the body is not JSON ({error})")),
        };
        for (pointer, expect) in &self.json {
            match value.pointer(pointer) {
                None => {
                    return BodyCheck::Mismatch("json", format!("{pointer:?} is absent"));
                }
                Some(found) if !expect.matches(found) => {
                    return BodyCheck::Mismatch(
                        "json",
                        format!("{pointer:?} is {found}, not {}", expect.describe()),
                    );
                }
                Some(_) => {}
            }
        }
        if let Some((operation, name)) = &self.graphql {
            let Value::Object(request) = &value else {
                return BodyCheck::Unparseable(
                    "a GraphQL request must be one JSON object (batches are not analysed)".into(),
                );
            };
            let Some(Value::String(document)) = request.get("query") else {
                return BodyCheck::Unparseable(
                    "the GraphQL request has no \"query\" string (persisted queries are not analysed)"
                        .into(),
                );
            };
            let operation_name = match request.get("operationName") {
                None | Some(Value::Null) => None,
                Some(Value::String(name)) => Some(name.as_str()),
                Some(_) => {
                    return BodyCheck::Unparseable("\"operationName\" is not a string".into())
                }
            };
            let Some(executed) = graphql::executed(document, operation_name) else {
                return BodyCheck::Unparseable(
                    "the GraphQL document has no single operation to execute, or cannot be scanned"
                        .into(),
                );
            };
            if let Some(want) = operation {
                if executed.kind != *want {
                    return BodyCheck::Mismatch(
                        "graphql",
                        format!(
                            "the operation is a {}, not a {}",
                            executed.kind.as_str(),
                            want.as_str()
                        ),
                    );
                }
            }
            if let Some(glob) = name {
                let actual = executed.name.as_deref().unwrap_or("");
                if !glob.matches(actual) {
                    return BodyCheck::Mismatch(
                        "graphql",
                        format!("the operation is named {actual:?}, not \"{glob}\""),
                    );
                }
            }
        }
        if let Some((method, tool)) = &self.jsonrpc {
            let Value::Object(call) = &value else {
                return BodyCheck::Unparseable(
                    "a JSON-RPC request must be one JSON object (batches are not analysed)".into(),
                );
            };
            let Some(Value::String(actual)) = call.get("method") else {
                return BodyCheck::Unparseable(
                    "the JSON-RPC request has no \"method\" string".into(),
                );
            };
            if let Some(glob) = method {
                if !glob.matches(actual) {
                    return BodyCheck::Mismatch(
                        "jsonrpc",
                        format!("the method is {actual:?}, not \"{glob}\""),
                    );
                }
            }
            if let Some(glob) = tool {
                // MCP `tools/call`: params.name names the tool
                // (https://modelcontextprotocol.io/specification/2025-06-18/server/tools).
                let name = call
                    .get("params")
                    .and_then(|p| p.get("name"))
                    .and_then(Value::as_str);
                match name {
                    Some(name) if glob.matches(name) => {}
                    Some(name) => {
                        return BodyCheck::Mismatch(
                            "jsonrpc",
                            format!("the tool is {name:?}, not \"{glob}\""),
                        )
                    }
                    None => {
                        return BodyCheck::Mismatch(
                            "jsonrpc",
                            "the call names no tool (params.name)".into(),
                        )
                    }
                }
            }
        }
        BodyCheck::Match
    }
}

/// A body that matches, for `policy diff`'s probe requests.
impl BodyMatcher {
    /// A JSON body that satisfies every condition: each `json` pointer set to a matching
    /// value (objects created along the way), a GraphQL `query` document of the wanted
    /// operation type and name, a JSON-RPC `method` and MCP tool name. `None` when the
    /// pointers conflict (one is inside another's scalar value).
    pub(crate) fn sample(&self) -> Option<String> {
        let mut body = Value::Object(serde_json::Map::new());
        for (pointer, expect) in &self.json {
            let value = match expect {
                JsonExpect::Glob(glob) => Value::String(glob.sample()),
                JsonExpect::Int(n) => Value::from(*n),
                JsonExpect::Float(n) => Value::from(*n),
                JsonExpect::Bool(b) => Value::Bool(*b),
            };
            set_pointer(&mut body, pointer, value)?;
        }
        if let Some((operation, name)) = &self.graphql {
            let kind = operation.unwrap_or(OperationType::Query).as_str();
            let name = name.as_ref().map(ValueGlob::sample).unwrap_or_default();
            set_pointer(
                &mut body,
                "/query",
                Value::String(format!("{kind} {name} {{ x }}")),
            )?;
        }
        if let Some((method, tool)) = &self.jsonrpc {
            let method = match (method, tool) {
                (Some(glob), _) => glob.sample(),
                (None, Some(_)) => "tools/call".to_owned(),
                (None, None) => "x".to_owned(),
            };
            set_pointer(&mut body, "/jsonrpc", Value::String("2.0".into()))?;
            set_pointer(&mut body, "/id", Value::from(1))?;
            set_pointer(&mut body, "/method", Value::String(method))?;
            if let Some(tool) = tool {
                set_pointer(&mut body, "/params/name", Value::String(tool.sample()))?;
            }
        }
        serde_json::to_string(&body).ok()
    }
}

/// Sets the value at an RFC 6901 pointer, creating objects for missing parents (a
/// numeric token becomes an object key: `Value::pointer` finds it there too).
fn set_pointer(root: &mut Value, pointer: &str, value: Value) -> Option<()> {
    if pointer.is_empty() {
        *root = value;
        return Some(());
    }
    let mut current = root;
    let tokens: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let (last, parents) = tokens.split_last()?;
    for token in parents {
        let Value::Object(map) = current else {
            return None;
        };
        current = map
            .entry(token.clone())
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
    let Value::Object(map) = current else {
        return None;
    };
    map.insert(last.clone(), value);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(pairs: &[(&str, WireScalar)]) -> BodyMatcher {
        let table = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        BodyMatcher::parse(Some(table), None, None)
            .expect("compiles")
            .expect("present")
    }

    fn outcome(check: BodyCheck) -> &'static str {
        match check {
            BodyCheck::Match => "match",
            BodyCheck::Mismatch(..) => "mismatch",
            BodyCheck::Unparseable(_) => "unparseable",
        }
    }

    #[test]
    fn json_matcher_table() {
        let matcher = json(&[
            ("/action", WireScalar::Str("opened".into())),
            ("/pull_request/base/ref", WireScalar::Str("main*".into())),
            ("/number", WireScalar::Int(7)),
            ("/draft", WireScalar::Bool(false)),
        ]);
        let table = [
            (
                r#"{"action":"opened","pull_request":{"base":{"ref":"main"}},"number":7,"draft":false}"#,
                "match",
            ),
            (
                r#"{"action":"opened","pull_request":{"base":{"ref":"main-2"}},"number":7.0,"draft":false}"#,
                "match",
            ),
            (
                r#"{"action":"closed","pull_request":{"base":{"ref":"main"}},"number":7,"draft":false}"#,
                "mismatch",
            ),
            (
                r#"{"action":"opened","number":7,"draft":false}"#,
                "mismatch",
            ),
            (
                r#"{"action":"opened","pull_request":{"base":{"ref":"main"}},"number":"7","draft":false}"#,
                "mismatch",
            ),
            (
                r#"{"action":"opened","pull_request":{"base":{"ref":"main"}},"number":7,"draft":"false"}"#,
                "mismatch",
            ),
            ("action=opened", "unparseable"),
            ("", "unparseable"),
        ];
        for (body, want) in table {
            assert_eq!(outcome(matcher.check(body.as_bytes())), want, "{body}");
        }
    }

    #[test]
    fn graphql_matcher_table() {
        let mutation = BodyMatcher::parse(
            None,
            Some(WireGraphql {
                operation: Some("mutation".into()),
                name: Some("create*".into()),
            }),
            None,
        )
        .expect("compiles")
        .expect("present");
        let table = [
            (r#"{"query":"mutation createPullRequest { a }"}"#, "match"),
            (
                r#"{"query":"mutation createIssue($i: X) { a }","variables":{"i":1}}"#,
                "match",
            ),
            (r#"{"query":"mutation deleteRepo { a }"}"#, "mismatch"),
            (r#"{"query":"query createLike { a }"}"#, "mismatch"),
            (r#"{"query":"{ viewer { login } }"}"#, "mismatch"),
            (
                r#"{"query":"query A { a } mutation createX { b }","operationName":"createX"}"#,
                "match",
            ),
            (
                r#"{"query":"query A { a } mutation createX { b }"}"#,
                "unparseable",
            ),
            (r#"[{"query":"mutation createX { b }"}]"#, "unparseable"),
            (
                r#"{"extensions":{"persistedQuery":{"sha256Hash":"ab"}}}"#,
                "unparseable",
            ),
            (r#"{"query":"mutation createX { b "}"#, "unparseable"),
        ];
        for (body, want) in table {
            assert_eq!(outcome(mutation.check(body.as_bytes())), want, "{body}");
        }
        assert!(BodyMatcher::parse(
            None,
            Some(WireGraphql {
                operation: Some("write".into()),
                name: None
            }),
            None
        )
        .is_err());
    }

    #[test]
    fn jsonrpc_matcher_table() {
        let matcher = BodyMatcher::parse(
            None,
            None,
            Some(WireJsonRpc {
                method: Some("tools/call".into()),
                tool: Some("create_issue".into()),
            }),
        )
        .expect("compiles")
        .expect("present");
        let table = [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{}}}"#,
                "match",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_issues"}}"#,
                "mismatch",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
                "mismatch",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
                "mismatch",
            ),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call"}]"#,
                "unparseable",
            ),
            (r#"{"jsonrpc":"2.0","id":1}"#, "unparseable"),
        ];
        for (body, want) in table {
            assert_eq!(outcome(matcher.check(body.as_bytes())), want, "{body}");
        }
    }

    #[test]
    fn pointers_must_be_pointers() {
        let table = [("action".to_owned(), WireScalar::Str("x".into()))]
            .into_iter()
            .collect();
        assert!(BodyMatcher::parse(Some(table), None, None).is_err());
        assert!(BodyMatcher::parse(Some(BTreeMap::new()), None, None).is_err());
    }
}
