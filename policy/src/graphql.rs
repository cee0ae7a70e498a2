//! A small scanner of GraphQL documents: the type and name of each operation.
//!
//! It reads only what policy needs (GraphQL spec, October 2021, §2.1 lexical tokens and
//! §2.3 operations): comments, strings and block strings are skipped, brackets are
//! counted, and at the top level each `query`/`mutation`/`subscription` keyword or bare
//! selection set `{` starts an operation; `fragment` definitions are skipped. It does not
//! validate the document: the origin does that.

/// An operation's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OperationType {
    /// `query` or the `{ … }` shorthand.
    Query,
    /// `mutation`: a write, even though every GraphQL call is a POST.
    Mutation,
    /// `subscription`.
    Subscription,
}

impl OperationType {
    /// `"query"`, `"mutation"` or `"subscription"`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OperationType::Query => "query",
            OperationType::Mutation => "mutation",
            OperationType::Subscription => "subscription",
        }
    }

    pub(crate) fn parse(raw: &str) -> Option<OperationType> {
        match raw {
            "query" => Some(OperationType::Query),
            "mutation" => Some(OperationType::Mutation),
            "subscription" => Some(OperationType::Subscription),
            _ => None,
        }
    }
}

/// One operation definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Operation {
    pub(crate) kind: OperationType,
    pub(crate) name: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
enum Token<'a> {
    Name(&'a str),
    Open(u8),
    Close(u8),
    Other,
}

/// Tokens of `doc`, or `None` on an unterminated string or an unknown byte sequence that
/// could hide structure.
fn tokens(doc: &str) -> Option<Vec<Token<'_>>> {
    let bytes = doc.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b' ' | b'\t' | b'\n' | b'\r' | b',' => i += 1,
            // Byte order mark (U+FEFF, EF BB BF in UTF-8) is ignored like whitespace.
            0xEF if bytes.get(i..i + 3) == Some(&[0xEF, 0xBB, 0xBF]) => i += 3,
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b'\r' {
                    i += 1;
                }
            }
            b'"' => {
                if bytes.get(i..i + 3) == Some(b"\"\"\"") {
                    i += 3;
                    loop {
                        if i >= bytes.len() {
                            return None;
                        }
                        if bytes.get(i..i + 4) == Some(b"\\\"\"\"") {
                            i += 4;
                        } else if bytes.get(i..i + 3) == Some(b"\"\"\"") {
                            i += 3;
                            break;
                        } else {
                            i += 1;
                        }
                    }
                } else {
                    i += 1;
                    loop {
                        match bytes.get(i) {
                            None | Some(b'\n') | Some(b'\r') => return None,
                            Some(b'\\') => i += 2,
                            Some(b'"') => {
                                i += 1;
                                break;
                            }
                            Some(_) => i += 1,
                        }
                    }
                }
                out.push(Token::Other);
            }
            b'{' | b'(' | b'[' => {
                out.push(Token::Open(b));
                i += 1;
            }
            b'}' | b')' | b']' => {
                out.push(Token::Close(b));
                i += 1;
            }
            b'_' | b'a'..=b'z' | b'A'..=b'Z' => {
                let start = i;
                while i < bytes.len() && (bytes[i] == b'_' || bytes[i].is_ascii_alphanumeric()) {
                    i += 1;
                }
                out.push(Token::Name(&doc[start..i]));
            }
            b'0'..=b'9' | b'-' | b'.' | b'+' => {
                i += 1;
                out.push(Token::Other);
            }
            b'!' | b'$' | b'&' | b':' | b'=' | b'@' | b'|' => {
                i += 1;
                out.push(Token::Other);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// The operations of `doc` in order; `None` when it cannot be scanned (unbalanced
/// brackets, an unterminated string, stray bytes) or holds no operation.
pub(crate) fn operations(doc: &str) -> Option<Vec<Operation>> {
    let tokens = tokens(doc)?;
    let mut out = Vec::new();
    let mut depth: Vec<u8> = Vec::new();
    // At top level: Some(kind) after an operation keyword until its selection set opens;
    // `skipping` after `fragment` until its selection set opens.
    let mut pending: Option<Operation> = None;
    let mut in_fragment = false;
    let mut expect_name = false;
    for token in tokens {
        match token {
            Token::Open(open) => {
                let top = depth.is_empty();
                if top {
                    expect_name = false;
                }
                if top && open == b'{' {
                    if in_fragment {
                        in_fragment = false;
                    } else {
                        out.push(pending.take().unwrap_or(Operation {
                            kind: OperationType::Query,
                            name: None,
                        }));
                    }
                }
                depth.push(open);
            }
            Token::Close(close) => {
                let open = depth.pop()?;
                let want = match open {
                    b'{' => b'}',
                    b'(' => b')',
                    _ => b']',
                };
                if close != want {
                    return None;
                }
            }
            Token::Name(name) if depth.is_empty() => {
                if expect_name {
                    if let Some(op) = pending.as_mut() {
                        op.name = Some(name.to_owned());
                    }
                    expect_name = false;
                } else if pending.is_none() && !in_fragment {
                    if let Some(kind) = OperationType::parse(name) {
                        pending = Some(Operation { kind, name: None });
                        expect_name = true;
                    } else if name == "fragment" {
                        in_fragment = true;
                    }
                }
            }
            Token::Name(_) | Token::Other => {
                if depth.is_empty() {
                    expect_name = false;
                }
            }
        }
    }
    if !depth.is_empty() || pending.is_some() || in_fragment || out.is_empty() {
        return None;
    }
    Some(out)
}

/// The operation a request executes: the one named `operation_name`, or the only one
/// (GraphQL spec §6.1 GetOperation). `None` when there is no such single operation.
pub(crate) fn executed(doc: &str, operation_name: Option<&str>) -> Option<Operation> {
    let operations = operations(doc)?;
    match operation_name {
        Some(wanted) => {
            let mut named = operations
                .into_iter()
                .filter(|op| op.name.as_deref() == Some(wanted));
            let first = named.next()?;
            named.next().is_none().then_some(first)
        }
        None if operations.len() == 1 => operations.into_iter().next(),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: OperationType, name: Option<&str>) -> Option<Operation> {
        Some(Operation {
            kind,
            name: name.map(str::to_owned),
        })
    }

    #[test]
    fn executed_operation_table() {
        use OperationType::{Mutation, Query, Subscription};
        let table: [(&str, Option<&str>, Option<Operation>); 14] = [
            ("{ viewer { login } }", None, op(Query, None)),
            ("query { viewer { login } }", None, op(Query, None)),
            ("query Me { viewer { login } }", None, op(Query, Some("Me"))),
            (
                "mutation createPullRequest($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { id } } }",
                None,
                op(Mutation, Some("createPullRequest")),
            ),
            ("subscription S { x }", None, op(Subscription, Some("S"))),
            (
                "# mutation in a comment\nquery Q { a(arg: \"mutation { x }\") }",
                None,
                op(Query, Some("Q")),
            ),
            (
                "query Q($v: In = {a: [1, 2]}) @dir { a }",
                None,
                op(Query, Some("Q")),
            ),
            (
                "fragment F on User { login }\nmutation M { a { ...F } }",
                None,
                op(Mutation, Some("M")),
            ),
            ("query A { a } mutation B { b }", Some("B"), op(Mutation, Some("B"))),
            ("query A { a } mutation B { b }", None, None),
            ("query A { a } mutation B { b }", Some("C"), None),
            ("query Q { a(s: \"\"\"block } \"\"\") }", None, op(Query, Some("Q"))),
            ("query Q { a ", None, None),
            ("query Q { a(s: \"open) }", None, None),
        ];
        for (doc, name, want) in table {
            assert_eq!(executed(doc, name), want, "{doc}");
        }
    }
}
