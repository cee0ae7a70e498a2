//! A value that a JSON Schema accepts, for the `structuredContent` of a staged MCP tool
//! call (MCP 2025-06-18, "Tools: Output Schema": "If an output schema is provided,
//! servers MUST provide structured results that conform to this schema", and clients
//! such as the official Python SDK refuse a result without them). The schema is the
//! tool's `outputSchema` from the server's `tools/list` answer that passed earlier in the
//! run ([`super::session::observe_tools_list`]).
//!
//! Covered (JSON Schema 2020-12 as FastMCP and pydantic write it): `$ref` into `$defs`
//! or `definitions`, `const`, `enum`, `default`, `anyOf`/`oneOf` (the first branch that is
//! not `null`), `allOf` (merged), `type` (a name or a list), `properties` with
//! `required`, `minItems`, `minLength`/`maxLength`, `minimum`/`maximum`/`exclusiveMinimum`
//! and the string formats `date-time`, `date`, `uri`, `email` and `uuid`. Not: `pattern`
//! (no string is generated to match one) and conditionals (`if`/`then`).

use airlock_ledger::ValueKind;
use serde_json::{json, Map, Value};

/// The text a generated string carries.
pub const STAGED_STRING: &str = "staged by airlock";

/// Deepest nesting followed (a recursive `$ref` ends there as `null`).
const MAX_DEPTH: usize = 16;

/// Most values one sample holds (objects, arrays and scalars counted alike): past it every
/// further value is `null`, so a schema written to multiply (an array of `minItems` 8 of
/// itself, sixteen deep) costs bounded time and memory. The server's schema is not
/// trusted.
pub const MAX_NODES: usize = 4_096;

/// Longest string generated for a `minLength` (in characters); a longer minimum gets this
/// many, or fewer when the sample's [`MAX_NODES`] budget is spent (the client may then
/// refuse the answer, which is better than airlock spending the memory).
pub const MAX_STRING_CHARS: usize = 64 * 1024;

/// A value `schema` accepts (as far as the module says), with `$ref`s resolved against
/// `schema`'s own `$defs` (a `$ref` that does not resolve gives `null`); at most
/// [`MAX_NODES`] values and strings of at most [`MAX_STRING_CHARS`].
pub fn sample(schema: &Value) -> Value {
    let mut budget = MAX_NODES;
    sample_at(schema, schema, 0, &mut budget)
}

/// The fields of a tool's structured result that only the server can assign, as
/// `(path, kind)`, `path` the property names from the result's top down: the properties
/// that [`sample`] fills that are named `id`, `number` or `…_id` (an integer:
/// [`ValueKind::Number`]; a string: [`ValueKind::String`]), or `url`/`html_url`/`…_url`
/// of format `uri` ([`ValueKind::Url`]), at the top level or in nested objects (`{"issue":
/// {"number": …}}`, through `$ref` and the branch of an `anyOf`/`oneOf` that [`sample`]
/// takes), at most [`MAX_ID_DEPTH`] objects deep. Arrays are not searched. The adapter
/// answers them as placeholders, so a later call that carries one depends on the staged
/// call and gets the real value at release.
pub fn id_fields(schema: &Value) -> Vec<(Vec<String>, ValueKind)> {
    let sampled = sample(schema);
    let mut found = Vec::new();
    collect_ids(schema, schema, &sampled, &mut Vec::new(), &mut found);
    found
}

/// Deepest object nesting searched for server-assigned fields.
pub const MAX_ID_DEPTH: usize = 4;

fn collect_ids(
    root: &Value,
    schema: &Value,
    sampled: &Value,
    path: &mut Vec<String>,
    found: &mut Vec<(Vec<String>, ValueKind)>,
) {
    let object = chosen(root, schema);
    let Some(properties) = object.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, property) in properties {
        let Some(value) = sampled.get(name.as_str()) else {
            continue;
        };
        let property = chosen(root, property);
        path.push(name.clone());
        if value.is_object() {
            if path.len() < MAX_ID_DEPTH {
                collect_ids(root, property, value, path, found);
            }
        } else if let Some(kind) = id_kind(name, property) {
            found.push((path.clone(), kind));
        }
        path.pop();
    }
}

/// The kind of placeholder a property named `name` of schema `property` is answered
/// with, when it is server-assigned.
fn id_kind(name: &str, property: &Value) -> Option<ValueKind> {
    let kind = match property.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|k| *k != "null")?,
        _ => return None,
    };
    let id_like = name == "id" || name == "number" || name.ends_with("_id");
    let url_like = name == "url" || name.ends_with("_url");
    match kind {
        "integer" if id_like => Some(ValueKind::Number),
        "string" if url_like && property["format"] == "uri" => Some(ValueKind::Url),
        "string" if id_like && name != "number" => Some(ValueKind::String),
        _ => None,
    }
}

/// `schema` with its `$ref` resolved and, for an `anyOf`/`oneOf`, the branch [`sample`]
/// takes (the first that is not `null`), resolved in turn.
fn chosen<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut schema = resolve(root, schema);
    for _ in 0..MAX_DEPTH {
        let Some(branches) = ["anyOf", "oneOf"]
            .iter()
            .find_map(|key| schema.get(*key).and_then(Value::as_array))
        else {
            break;
        };
        let Some(branch) = branches
            .iter()
            .find(|b| resolve(root, b).get("type") != Some(&json!("null")))
            .or(branches.first())
        else {
            break;
        };
        schema = resolve(root, branch);
    }
    schema
}

fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
        return schema;
    };
    reference
        .strip_prefix('#')
        .and_then(|pointer| root.pointer(pointer))
        .unwrap_or(&Value::Null)
}

fn sample_at(root: &Value, schema: &Value, depth: usize, budget: &mut usize) -> Value {
    // Every value is charged, the `null` past the depth too.
    if *budget == 0 {
        return Value::Null;
    }
    *budget -= 1;
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    let schema = resolve(root, schema);
    if let Some(value) = schema.get("const") {
        return value.clone();
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if let Some(value) = schema.get("default") {
        return value.clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            let branch = branches
                .iter()
                .find(|b| resolve(root, b).get("type") != Some(&json!("null")))
                .or(branches.first());
            return branch.map_or(Value::Null, |b| sample_at(root, b, depth + 1, budget));
        }
    }
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        let mut merged = Map::new();
        for part in parts {
            if let Value::Object(object) = sample_at(root, part, depth + 1, budget) {
                merged.extend(object);
            }
        }
        return Value::Object(merged);
    }
    let kind = match schema.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|k| *k != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "null",
    };
    match kind {
        "object" => object(root, schema, depth, budget),
        "array" => {
            let count = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let items = schema.get("items").unwrap_or(&Value::Null);
            Value::Array(
                (0..count.min(8))
                    // Past the budget no more items: each would be a `null` of its own.
                    .map_while(|_| (*budget > 0).then(|| sample_at(root, items, depth + 1, budget)))
                    .collect(),
            )
        }
        "string" => Value::String(string(schema, budget)),
        "integer" => json!(integer(schema)),
        "number" => number(schema),
        "boolean" => Value::Bool(false),
        _ => Value::Null,
    }
}

/// Every property the schema requires (all of them when it names none as required, so
/// a client reading the answer finds each field).
fn object(root: &Value, schema: &Value, depth: usize, budget: &mut usize) -> Value {
    let properties = schema.get("properties").and_then(Value::as_object);
    let required: Option<Vec<&str>> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect());
    let mut out = Map::new();
    for (name, property) in properties.into_iter().flatten() {
        if required
            .as_ref()
            .is_some_and(|r| !r.contains(&name.as_str()))
        {
            continue;
        }
        out.insert(name.clone(), sample_at(root, property, depth + 1, budget));
    }
    Value::Object(out)
}

/// A string for `schema`; its length is charged to `budget` (a value per 64 characters),
/// so the strings of one sample total at most [`MAX_NODES`] × 64 characters.
fn string(schema: &Value, budget: &mut usize) -> String {
    let text = match schema.get("format").and_then(Value::as_str) {
        Some("date-time") => "1970-01-01T00:00:00Z".to_owned(),
        Some("date") => "1970-01-01".to_owned(),
        Some("uri") | Some("uri-reference") | Some("url") => {
            "https://airlock.invalid/staged".to_owned()
        }
        Some("email") => "staged@airlock.invalid".to_owned(),
        Some("uuid") => "00000000-0000-4000-8000-000000000000".to_owned(),
        _ => STAGED_STRING.to_owned(),
    };
    let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
    let max = schema
        .get("maxLength")
        .and_then(Value::as_u64)
        .map_or(usize::MAX, |m| m as usize);
    let mut text = text;
    let count = text.chars().count();
    let wanted = min.min(MAX_STRING_CHARS).min(budget.saturating_mul(64));
    if count < wanted {
        text.extend(std::iter::repeat_n('.', wanted - count));
    }
    *budget = budget.saturating_sub(wanted / 64);
    text.chars().take(max).collect()
}

fn integer(schema: &Value) -> i64 {
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    match (
        bound("minimum"),
        bound("exclusiveMinimum"),
        bound("maximum"),
    ) {
        (Some(min), _, _) => min.ceil() as i64,
        (None, Some(min), _) => min.floor() as i64 + 1,
        (None, None, Some(max)) if max < 0.0 => max.floor() as i64,
        _ => 0,
    }
}

fn number(schema: &Value) -> Value {
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    let value = match (
        bound("minimum"),
        bound("exclusiveMinimum"),
        bound("maximum"),
    ) {
        (Some(min), _, _) => min,
        (None, Some(min), _) => min + 1.0,
        (None, None, Some(max)) if max < 0.0 => max,
        _ => 0.0,
    };
    json!(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pydantic_schema_gets_every_required_field_of_its_type() {
        // As FastMCP writes a tool returning a model with a nested model, an optional
        // field, a list, an enum and bounded numbers.
        let schema = json!({
            "type": "object",
            "$defs": {
                "Label": {"type": "object", "properties": {"name": {"type": "string", "minLength": 20}}, "required": ["name"]},
                "State": {"enum": ["open", "closed"], "type": "string"}
            },
            "properties": {
                "number": {"type": "integer", "minimum": 1},
                "url": {"type": "string", "format": "uri"},
                "label": {"$ref": "#/$defs/Label"},
                "state": {"$ref": "#/$defs/State"},
                "assignee": {"anyOf": [{"type": "null"}, {"type": "string"}]},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "score": {"type": "number", "exclusiveMinimum": 0.5},
                "draft": {"type": "boolean"},
                "unused": {"type": "string"}
            },
            "required": ["number", "url", "label", "state", "assignee", "tags", "score", "draft"]
        });
        let value = sample(&schema);
        assert_eq!(value["number"], 1);
        assert_eq!(value["url"], "https://airlock.invalid/staged");
        assert_eq!(value["label"]["name"].as_str().map(str::len), Some(20));
        assert_eq!(value["state"], "open");
        assert_eq!(value["assignee"], STAGED_STRING);
        assert_eq!(value["tags"], json!([STAGED_STRING]));
        assert_eq!(value["score"], 1.5);
        assert_eq!(value["draft"], false);
        assert!(value.get("unused").is_none(), "{value}");
    }

    #[test]
    fn a_schema_written_to_multiply_or_to_ask_for_huge_strings_costs_bounded_work() {
        let bomb = json!({"type": "object", "required": ["x"], "properties": {"x": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"type": "array", "minItems": 8, "items": {"$ref": "#/$defs/A"}}}});
        let started = std::time::Instant::now();
        let value = sample(&bomb);
        assert!(value.to_string().len() < 64 * 1024, "bounded output");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        let self_ref = json!({"type": "object", "properties": {"a": {"$ref": "#"}, "b": {"$ref": "#"}, "c": {"$ref": "#"}}});
        assert!(sample(&self_ref).to_string().len() < 256 * 1024);
        let long = json!({"type": "string", "minLength": 10_000_000});
        let text = sample(&long);
        assert_eq!(text.as_str().map(str::len), Some(MAX_STRING_CHARS));
        assert!(id_fields(&bomb).is_empty());
    }

    #[test]
    fn server_assigned_fields_are_found_in_nested_objects_through_refs_and_optional_branches() {
        let schema = json!({
            "type": "object",
            "$defs": {
                "Issue": {"type": "object", "properties": {
                    "number": {"type": "integer"},
                    "html_url": {"type": "string", "format": "uri"},
                    "title": {"type": "string"},
                    "author": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/User"}]}
                }},
                "User": {"type": "object", "properties": {"id": {"type": ["string", "null"]}, "login": {"type": "string"}}}
            },
            "properties": {
                "id": {"type": "integer"},
                "issue": {"$ref": "#/$defs/Issue"},
                "labels": {"type": "array", "items": {"$ref": "#/$defs/User"}}
            }
        });
        let mut found = id_fields(&schema);
        found.sort_by(|a, b| a.0.cmp(&b.0));
        let paths: Vec<String> = found.iter().map(|(p, _)| p.join("/")).collect();
        assert_eq!(
            paths,
            ["id", "issue/author/id", "issue/html_url", "issue/number"]
        );
        assert_eq!(found[0].1, ValueKind::Number);
        assert_eq!(found[1].1, ValueKind::String);
        assert_eq!(found[2].1, ValueKind::Url);
    }

    #[test]
    fn a_wrapped_result_a_recursive_ref_and_no_required_list_are_answered() {
        // FastMCP wraps a tool returning `str` as {"result": str}.
        let wrapped = json!({"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"], "x-fastmcp-wrap-result": true});
        assert_eq!(sample(&wrapped), json!({"result": STAGED_STRING}));
        let recursive = json!({"$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}, "required": ["next"]}}, "$ref": "#/$defs/Node"});
        let value = sample(&recursive);
        assert!(value["next"]["next"].is_object());
        let open = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": ["string", "null"]}}});
        assert_eq!(sample(&open), json!({"a": 0, "b": STAGED_STRING}));
        assert_eq!(sample(&json!({"$ref": "#/$defs/Missing"})), Value::Null);
    }
}
