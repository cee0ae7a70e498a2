//! What `method = "read"` counts as a read: the HTTP reads, and the POSTs that are reads
//! by their protocol.
//!
//! - A bodiless GET, HEAD, OPTIONS or TRACE (RFC 9110 §9.2.1 safe methods).
//! - A git fetch: `POST …/git-upload-pack` with `Content-Type:
//!   application/x-git-upload-pack-request` (gitprotocol-http, "Smart Service
//!   git-upload-pack"). Its body lists the objects the client wants and has; the
//!   server answers with a pack and changes nothing.
//! - A GraphQL query: `POST …/graphql` with `Content-Type: application/json` whose body is
//!   one GraphQL-over-HTTP request object (only the keys `query`, `operationName`,
//!   `variables`, `extensions`) and whose document's operations are all queries (GraphQL
//!   spec, October 2021, §2.3: only a mutation writes). This needs the body: the proxy
//!   reads it up to the rule's `limit.body_bytes` (default 1 MiB) as for a body matcher.
//!
//! Anything not shown to be a read is a write: a body over the limit, a body that is not
//! such a request, a document that cannot be scanned, a batch (a JSON array), a
//! persisted query without `query`, a second `Content-Type` header.

use serde_json::Value;

use super::CanonicalPath;
use crate::graphql::{self, OperationType};
use crate::{RequestBody, RequestFacts};

/// The methods that are reads without a body.
pub(crate) const READ_METHODS: [&str; 4] = ["GET", "HEAD", "OPTIONS", "TRACE"];

/// The content type git sends with a fetch's `POST …/git-upload-pack`.
const UPLOAD_PACK_REQUEST: &str = "application/x-git-upload-pack-request";

/// The keys a GraphQL-over-HTTP request object may have (GraphQL over HTTP, "Request
/// Parameters").
const GRAPHQL_KEYS: [&str; 4] = ["query", "operationName", "variables", "extensions"];

/// Whether a request is a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadCheck {
    /// A read.
    Read,
    /// Not a read (a write).
    NotRead,
    /// It may be a GraphQL query: the body must be read to tell.
    NeedsBody,
}

/// Classifies `request` (its path already canonical); `body_limit` is the most body bytes
/// the asking rule reads (a larger body is not a read).
pub(crate) fn classify(
    request: &RequestFacts<'_>,
    path: &CanonicalPath,
    body_limit: u64,
) -> ReadCheck {
    if READ_METHODS.contains(&request.method) {
        return if request.has_body {
            ReadCheck::NotRead
        } else {
            ReadCheck::Read
        };
    }
    if request.method != "POST" || !request.has_body {
        return ReadCheck::NotRead;
    }
    let media_type = content_type(request.headers);
    match (path.last_segment(), media_type.as_deref()) {
        (b"git-upload-pack", Some(UPLOAD_PACK_REQUEST)) => ReadCheck::Read,
        (b"graphql", Some("application/json")) => match request.body {
            RequestBody::NotRead => ReadCheck::NeedsBody,
            RequestBody::TooLarge => ReadCheck::NotRead,
            RequestBody::Read(bytes) if bytes.len() as u64 > body_limit => ReadCheck::NotRead,
            RequestBody::Read(bytes) if is_graphql_query(bytes) => ReadCheck::Read,
            RequestBody::Read(_) => ReadCheck::NotRead,
        },
        _ => ReadCheck::NotRead,
    }
}

/// The media type of the one `Content-Type` header, lower-case, without parameters;
/// `None` when there is none or more than one.
fn content_type(headers: &[(&str, &str)]) -> Option<String> {
    let mut values = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        .map(|(_, value)| *value);
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let media_type = value.split(';').next().unwrap_or("").trim();
    Some(media_type.to_ascii_lowercase())
}

/// True for one GraphQL request object whose document holds only queries.
fn is_graphql_query(body: &[u8]) -> bool {
    let Ok(Value::Object(request)) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    if !request
        .keys()
        .all(|key| GRAPHQL_KEYS.contains(&key.as_str()))
    {
        return false;
    }
    let Some(Value::String(document)) = request.get("query") else {
        return false;
    };
    graphql::operations(document).is_some_and(|operations| {
        operations
            .iter()
            .all(|operation| operation.kind == OperationType::Query)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scheme;

    fn check(
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&str>,
    ) -> ReadCheck {
        let headers: Vec<(&str, &str)> = content_type
            .map(|value| ("Content-Type", value))
            .into_iter()
            .collect();
        let request = RequestFacts {
            headers: &headers,
            body: body.map_or(RequestBody::NotRead, |b| RequestBody::Read(b.as_bytes())),
            ..RequestFacts::new(
                Scheme::Https,
                "forge.example",
                443,
                method,
                path,
                body.is_some() || method == "POST",
            )
        };
        let path = CanonicalPath::parse(path).expect("canonical");
        classify(&request, &path, 1024)
    }

    #[test]
    fn git_fetch_is_a_read_and_push_is_not() {
        use ReadCheck::{NotRead, Read};
        let pack = Some("application/x-git-upload-pack-request");
        assert_eq!(check("POST", "/o/r.git/git-upload-pack", pack, None), Read);
        assert_eq!(
            check(
                "POST",
                "/o/r/git-upload-pack",
                Some("Application/X-Git-Upload-Pack-Request; x=1"),
                None
            ),
            Read
        );
        assert_eq!(check("POST", "/o/r/git-upload-pack", None, None), NotRead);
        assert_eq!(
            check(
                "POST",
                "/o/r/git-receive-pack",
                Some("application/x-git-receive-pack-request"),
                None
            ),
            NotRead
        );
        assert_eq!(check("POST", "/o/r/git-receive-pack", pack, None), NotRead);
        assert_eq!(check("PUT", "/o/r/git-upload-pack", pack, None), NotRead);
        assert_eq!(check("POST", "/o/r/git-upload-pack/x", pack, None), NotRead);
    }

    #[test]
    fn graphql_queries_are_reads_and_mutations_are_not() {
        use ReadCheck::{NeedsBody, NotRead, Read};
        let json = Some("application/json; charset=utf-8");
        let table = [
            (r#"{"query":"{ viewer { login } }"}"#, Read),
            (
                r#"{"query":"query Me($n: Int) { viewer { login } }","variables":{"n":1},"operationName":"Me"}"#,
                Read,
            ),
            (
                r#"{"query":"query A { a } query B { b }","operationName":"B"}"#,
                Read,
            ),
            (
                r#"{"query":"fragment F on U { l } query Q { viewer { ...F } }"}"#,
                Read,
            ),
            (
                r#"{"query":"mutation { createIssue(input: {}) { issue { id } } }"}"#,
                NotRead,
            ),
            (
                r#"{"query":"query A { a } mutation B { b }","operationName":"A"}"#,
                NotRead,
            ),
            (r#"{"query":"subscription S { x }"}"#, NotRead),
            (r#"{"query":"{ a ","variables":{}}"#, NotRead),
            (r#"{"query":"{ a }","delete":true}"#, NotRead),
            (r#"[{"query":"{ a }"}]"#, NotRead),
            (
                r#"{"extensions":{"persistedQuery":{"sha256Hash":"ab"}}}"#,
                NotRead,
            ),
            ("query=%7B+a+%7D", NotRead),
        ];
        for (body, want) in table {
            assert_eq!(check("POST", "/graphql", json, Some(body)), want, "{body}");
        }
        assert_eq!(check("POST", "/api/graphql", json, None), NeedsBody);
        assert_eq!(
            check(
                "POST",
                "/graphql",
                Some("text/plain"),
                Some(r#"{"query":"{ a }"}"#)
            ),
            NotRead
        );
        assert_eq!(
            check("POST", "/gql", json, Some(r#"{"query":"{ a }"}"#)),
            NotRead
        );
        let long = format!(
            r#"{{"query":"{{ a }}","variables":{{"x":"{}"}}}}"#,
            "y".repeat(2000)
        );
        assert_eq!(check("POST", "/graphql", json, Some(&long)), NotRead);
    }

    #[test]
    fn http_reads_have_no_body() {
        use ReadCheck::{NotRead, Read};
        assert_eq!(check("GET", "/graphql", None, None), Read);
        assert_eq!(check("GET", "/graphql", None, Some("x")), NotRead);
        assert_eq!(check("get", "/", None, None), NotRead);
    }
}
