//! `graphql`: a staged GraphQL operation (`POST` with a JSON `{query, variables,
//! operationName}` body, GraphQL over HTTP) is answered with a `data` object shaped from
//! the mutation's selection set where the adapter knows the payload type (GitHub's
//! `createPullRequest` and `addComment`, from <https://docs.github.com/en/graphql>); ids,
//! numbers and URLs only the origin assigns are placeholders at their response paths.
//! Any other operation is answered with a GraphQL error (`extensions.code =
//! "AIRLOCK_STAGED"`) saying it was staged, so no client mistakes it for a result.
//!
//! The parser reads the executable subset needed for this: operations, selection sets,
//! aliases, arguments with literal or variable values; fragments are skipped.

use airlock_ledger::{Effect, ValueKind};
use serde_json::{json, Map, Value};

use super::{excerpt, placeholder_json, rfc3339, Adapter, Call, Plan, Synthetic};

/// The GraphQL adapter.
#[derive(Debug, Clone, Copy)]
pub struct GraphQl;

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Name(String),
    Punct(char),
    Variable(String),
    Literal(Value),
    Spread,
}

fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() || c == ',' || c == '\u{feff}' {
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '.' && chars.get(i + 1) == Some(&'.') && chars.get(i + 2) == Some(&'.') {
            out.push(Token::Spread);
            i += 3;
        } else if c == '"' {
            let block = chars.get(i + 1) == Some(&'"') && chars.get(i + 2) == Some(&'"');
            let mut value = String::new();
            if block {
                i += 3;
                while i < chars.len()
                    && !(chars[i] == '"'
                        && chars.get(i + 1) == Some(&'"')
                        && chars.get(i + 2) == Some(&'"'))
                {
                    value.push(chars[i]);
                    i += 1;
                }
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                        value.push(match chars[i] {
                            'n' => '\n',
                            't' => '\t',
                            'r' => '\r',
                            other => other,
                        });
                    } else {
                        value.push(chars[i]);
                    }
                    i += 1;
                }
                i += 1;
            }
            out.push(Token::Literal(Value::from(value)));
        } else if c == '$' || c.is_alphabetic() || c == '_' {
            let start = if c == '$' { i + 1 } else { i };
            i = start;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let name: String = chars[start..i].iter().collect();
            out.push(if c == '$' {
                Token::Variable(name)
            } else {
                Token::Name(name)
            });
        } else if c == '-' || c.is_ascii_digit() {
            let start = i;
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_digit() || ".eE+-".contains(chars[i])) {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            out.push(Token::Literal(
                serde_json::from_str(&text).unwrap_or(Value::Null),
            ));
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// One field of a selection set.
#[derive(Debug, Clone, PartialEq, Default)]
struct Field {
    /// The response key: the alias, else the name.
    key: String,
    name: String,
    arguments: Map<String, Value>,
    selection: Vec<Field>,
}

struct Parser<'v> {
    tokens: Vec<Token>,
    at: usize,
    variables: &'v Value,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&Token::Punct(c)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// Skips a balanced group opened by the current token `open`.
    fn skip_group(&mut self, open: char, close: char) {
        let mut depth = 0;
        while let Some(token) = self.next() {
            if token == Token::Punct(open) {
                depth += 1;
            } else if token == Token::Punct(close) {
                depth -= 1;
                if depth == 0 {
                    return;
                }
            }
        }
    }

    fn value(&mut self) -> Value {
        match self.next() {
            Some(Token::Variable(name)) => {
                self.variables.get(&name).cloned().unwrap_or(Value::Null)
            }
            Some(Token::Literal(value)) => value,
            Some(Token::Name(name)) => match name.as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                "null" => Value::Null,
                _ => Value::from(name),
            },
            Some(Token::Punct('[')) => {
                let mut list = Vec::new();
                while self.peek().is_some() && !self.eat(']') {
                    list.push(self.value());
                }
                Value::Array(list)
            }
            Some(Token::Punct('{')) => {
                let mut object = Map::new();
                while self.peek().is_some() && !self.eat('}') {
                    if let Some(Token::Name(key)) = self.next() {
                        self.eat(':');
                        let value = self.value();
                        object.insert(key, value);
                    }
                }
                Value::Object(object)
            }
            _ => Value::Null,
        }
    }

    fn directives(&mut self) {
        while self.eat('@') {
            self.next();
            if self.peek() == Some(&Token::Punct('(')) {
                self.skip_group('(', ')');
            }
        }
    }

    fn selection_set(&mut self) -> Vec<Field> {
        let mut fields = Vec::new();
        if !self.eat('{') {
            return fields;
        }
        while let Some(token) = self.peek().cloned() {
            match token {
                Token::Punct('}') => {
                    self.at += 1;
                    break;
                }
                Token::Spread => {
                    // Fragment spreads and inline fragments: not shaped.
                    self.at += 1;
                    if self.peek() == Some(&Token::Name("on".into())) {
                        self.at += 2;
                    } else {
                        self.at += 1;
                    }
                    self.directives();
                    if self.peek() == Some(&Token::Punct('{')) {
                        self.skip_group('{', '}');
                    }
                }
                Token::Name(first) => {
                    self.at += 1;
                    let (key, name) = if self.eat(':') {
                        match self.next() {
                            Some(Token::Name(name)) => (first, name),
                            _ => (first.clone(), first),
                        }
                    } else {
                        (first.clone(), first)
                    };
                    let mut arguments = Map::new();
                    if self.eat('(') {
                        while self.peek().is_some() && !self.eat(')') {
                            if let Some(Token::Name(arg)) = self.next() {
                                self.eat(':');
                                let value = self.value();
                                arguments.insert(arg, value);
                            }
                        }
                    }
                    self.directives();
                    let selection = if self.peek() == Some(&Token::Punct('{')) {
                        self.selection_set()
                    } else {
                        Vec::new()
                    };
                    fields.push(Field {
                        key,
                        name,
                        arguments,
                        selection,
                    });
                }
                _ => self.at += 1,
            }
        }
        fields
    }
}

/// An operation: `mutation`, `query` or `subscription`, its name and its root fields.
#[derive(Debug, Clone, PartialEq, Default)]
struct Operation {
    kind: String,
    name: Option<String>,
    fields: Vec<Field>,
}

/// Parses the operation named `operation_name` (or the first) of `query`.
fn operation(query: &str, operation_name: Option<&str>, variables: &Value) -> Option<Operation> {
    let mut parser = Parser {
        tokens: tokens(query),
        at: 0,
        variables,
    };
    let mut first = None;
    while let Some(token) = parser.peek().cloned() {
        let (kind, name) = match token {
            Token::Punct('{') => ("query".to_owned(), None),
            Token::Name(word) if matches!(word.as_str(), "query" | "mutation" | "subscription") => {
                parser.at += 1;
                let name = match parser.peek() {
                    Some(Token::Name(n)) => {
                        let n = n.clone();
                        parser.at += 1;
                        Some(n)
                    }
                    _ => None,
                };
                if parser.peek() == Some(&Token::Punct('(')) {
                    parser.skip_group('(', ')');
                }
                parser.directives();
                (word, name)
            }
            Token::Name(word) if word == "fragment" => {
                while parser.peek().is_some() && parser.peek() != Some(&Token::Punct('{')) {
                    parser.at += 1;
                }
                parser.skip_group('{', '}');
                continue;
            }
            _ => {
                parser.at += 1;
                continue;
            }
        };
        let fields = parser.selection_set();
        let op = Operation { kind, name, fields };
        match operation_name {
            Some(wanted) if op.name.as_deref() == Some(wanted) => return Some(op),
            Some(_) => {
                first.get_or_insert(op);
            }
            None => return Some(op),
        }
    }
    first
}

/// The request's `query`, `operationName` and `variables`.
fn request(call: &Call<'_>) -> Option<(Operation, Value)> {
    let body = call.json()?;
    let query = body.get("query")?.as_str()?;
    let variables = body.get("variables").cloned().unwrap_or(Value::Null);
    let op = operation(
        query,
        body.get("operationName").and_then(Value::as_str),
        &variables,
    )?;
    Some((op, variables))
}

/// The value of one field of a known GitHub type; `ph(pointer, kind)` gives a placeholder.
fn shape(
    type_name: &str,
    fields: &[Field],
    path: &str,
    input: &Value,
    created: &str,
    ph: &mut dyn FnMut(&str, ValueKind) -> Value,
) -> Value {
    let mut out = Map::new();
    for field in fields {
        let pointer = format!("{path}/{}", field.key);
        let text = |key: &str| input.get(key).cloned().unwrap_or(Value::Null);
        let value = match (type_name, field.name.as_str()) {
            (_, "__typename") => Value::from(type_name),
            (_, "clientMutationId") => text("clientMutationId"),
            ("CreatePullRequestPayload", "pullRequest") => shape(
                "PullRequest",
                &field.selection,
                &pointer,
                input,
                created,
                ph,
            ),
            ("AddCommentPayload", "commentEdge") => shape(
                "IssueCommentEdge",
                &field.selection,
                &pointer,
                input,
                created,
                ph,
            ),
            ("IssueCommentEdge", "node") => shape(
                "IssueComment",
                &field.selection,
                &pointer,
                input,
                created,
                ph,
            ),
            ("IssueCommentEdge", "cursor") => ph(&pointer, ValueKind::String),
            ("AddCommentPayload", "subject") => {
                let mut subject = Map::new();
                for f in &field.selection {
                    match f.name.as_str() {
                        "id" => {
                            subject.insert(f.key.clone(), text("subjectId"));
                        }
                        _ => {
                            subject.insert(f.key.clone(), Value::Null);
                        }
                    }
                }
                Value::Object(subject)
            }
            (_, "url" | "permalink") => ph(&pointer, ValueKind::Url),
            (_, "id" | "resourcePath") => ph(&pointer, ValueKind::String),
            (_, "number" | "databaseId") => ph(&pointer, ValueKind::Number),
            ("PullRequest", "title") => text("title"),
            (_, "body") => text("body"),
            ("PullRequest", "headRefName") => text("headRefName"),
            ("PullRequest", "baseRefName") => text("baseRefName"),
            ("PullRequest", "state") => Value::from("OPEN"),
            ("PullRequest", "isDraft") => {
                Value::Bool(input.get("draft").and_then(Value::as_bool).unwrap_or(false))
            }
            ("PullRequest", "merged" | "closed") => Value::Bool(false),
            (_, "createdAt" | "updatedAt") => Value::from(created),
            (_, "author") => {
                let mut author = Map::new();
                for f in &field.selection {
                    author.insert(
                        f.key.clone(),
                        match f.name.as_str() {
                            "login" => Value::from("airlock-staged"),
                            "__typename" => Value::from("User"),
                            _ => Value::Null,
                        },
                    );
                }
                Value::Object(author)
            }
            _ => Value::Null,
        };
        out.insert(field.key.clone(), value);
    }
    Value::Object(out)
}

/// The `data` of a known mutation, or `None`.
fn data(
    op: &Operation,
    created: &str,
    ph: &mut dyn FnMut(&str, ValueKind) -> Value,
) -> Option<Value> {
    if op.kind != "mutation" || op.fields.is_empty() {
        return None;
    }
    let mut data = Map::new();
    for field in &op.fields {
        let input = field.arguments.get("input").cloned().unwrap_or(Value::Null);
        let payload = match field.name.as_str() {
            "createPullRequest" => "CreatePullRequestPayload",
            "addComment" => "AddCommentPayload",
            _ => return None,
        };
        let pointer = format!("/data/{}", field.key);
        data.insert(
            field.key.clone(),
            shape(payload, &field.selection, &pointer, &input, created, ph),
        );
    }
    Some(Value::Object(data))
}

impl Adapter for GraphQl {
    fn name(&self) -> &'static str {
        "graphql"
    }

    fn plan(&self, call: &Call<'_>) -> Plan {
        if call.method != "POST" {
            return Plan::default();
        }
        let Some((op, _)) = request(call) else {
            return Plan::default();
        };
        let mut specs: Vec<(String, ValueKind)> = Vec::new();
        let known = data(&op, "", &mut |pointer, kind| {
            specs.push((pointer.to_owned(), kind));
            Value::Null
        });
        let fields: Vec<String> = op
            .fields
            .iter()
            .map(|f| {
                let input = f.arguments.get("input");
                let title = input
                    .and_then(|i| i.get("title").or_else(|| i.get("body")))
                    .and_then(Value::as_str)
                    .map(|t| format!(" '{}'", excerpt(t, 60)))
                    .unwrap_or_default();
                format!("{}{title}", f.name)
            })
            .collect();
        let summary = format!(
            "GraphQL {} {}: {}",
            op.kind,
            op.name.as_deref().unwrap_or("(anonymous)"),
            fields.join(", ")
        );
        if known.is_none() {
            specs.clear();
        }
        let refs: Vec<(&str, ValueKind)> = specs.iter().map(|(p, k)| (p.as_str(), *k)).collect();
        Plan::new("operation", summary, &refs)
    }

    fn respond(&self, call: &Call<'_>, effect: &Effect) -> Synthetic {
        let created = rfc3339(effect.created_at_ms);
        let known = request(call).and_then(|(op, _)| {
            data(&op, &created, &mut |pointer, _| {
                placeholder_json(effect, pointer)
            })
        });
        let body = match known {
            Some(data) => json!({"data": data}),
            None => json!({
                "data": null,
                "errors": [{
                    "message": format!(
                        "airlock staged this operation as effect {}: it is sent only if a reviewer approves it and the run is committed, so its result is not known yet",
                        effect.id
                    ),
                    "extensions": {"code": "AIRLOCK_STAGED", "effect": effect.id},
                }],
            }),
        };
        Synthetic::json(200, &body)
    }

    fn release_failure(&self, _call: &Call<'_>, status: u16, body: &[u8]) -> Option<String> {
        if status >= 400 {
            return None;
        }
        let answer: Value = serde_json::from_slice(body).ok()?;
        let errors = answer.get("errors")?.as_array()?;
        let messages: Vec<&str> = errors
            .iter()
            .filter_map(|e| e.get("message").and_then(Value::as_str))
            .collect();
        (!errors.is_empty())
            .then(|| format!("the GraphQL answer has errors: {}", messages.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_sets_with_aliases_and_variables_are_read() {
        let variables = json!({"input": {"title": "Fix it", "repositoryId": "R_1", "baseRefName": "main", "headRefName": "fix"}});
        let op = operation(
            "mutation Open($input: CreatePullRequestInput!) { pr: createPullRequest(input: $input) { pullRequest { number url title headRefName ... on Node { id } } clientMutationId } }",
            None,
            &variables,
        )
        .expect("an operation");
        assert_eq!(op.kind, "mutation");
        assert_eq!(op.fields[0].key, "pr");
        assert_eq!(op.fields[0].name, "createPullRequest");
        assert_eq!(op.fields[0].arguments["input"]["title"], "Fix it");
        let mut pointers = Vec::new();
        let data = data(&op, "2026-01-01T00:00:00Z", &mut |p, _| {
            pointers.push(p.to_owned());
            json!(7)
        })
        .expect("known");
        assert_eq!(data["pr"]["pullRequest"]["title"], "Fix it");
        assert_eq!(data["pr"]["pullRequest"]["headRefName"], "fix");
        assert_eq!(
            pointers,
            ["/data/pr/pullRequest/number", "/data/pr/pullRequest/url"]
        );
    }

    #[test]
    fn a_query_and_an_unknown_mutation_have_no_data() {
        let op = operation("{ viewer { login } }", None, &Value::Null).expect("op");
        assert!(data(&op, "", &mut |_, _| Value::Null).is_none());
        let op = operation(
            "mutation { mergePullRequest(input: {pullRequestId: \"x\"}) { clientMutationId } }",
            None,
            &Value::Null,
        )
        .expect("op");
        assert!(data(&op, "", &mut |_, _| Value::Null).is_none());
    }
}
