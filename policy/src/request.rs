//! What a request looks like to the policy: its scheme, its facts and what is known of its body.

use std::fmt;

#[cfg(doc)]
use crate::Policy;

/// The URL scheme a request was made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP (absolute-form request to the proxy).
    Http,
    /// HTTPS (an inner request of an intercepted CONNECT).
    Https,
}

impl Scheme {
    /// `"http"` or `"https"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// 80 for http, 443 for https: the ports a rule without `port` matches.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What policy needs to know about one HTTP request.
///
/// Values may arrive as the client spelled them: the host in any case, with a
/// trailing dot or as a bracketed IPv6 literal; the path still percent-encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFacts<'a> {
    /// The scheme of the request.
    pub scheme: Scheme,
    /// The destination host (the one authority; see `docs/policy.md` invariant 2).
    pub host: &'a str,
    /// The destination port.
    pub port: u16,
    /// The request method, e.g. `"GET"`.
    pub method: &'a str,
    /// The request path without the query, as sent (percent-encoded).
    pub path: &'a str,
    /// True when the request framing carries a body (a GET with a body is a write).
    pub has_body: bool,
    /// The raw query string without the `?` (`""` when there is none), still encoded.
    pub query: &'a str,
    /// The request's header lines as sent (names in any case; values as text, bytes
    /// that are not UTF-8 replaced by U+FFFD so that no line is left out).
    pub headers: &'a [(&'a str, &'a str)],
    /// The request body, when the proxy read it for a body matcher (see
    /// [`Policy::body_limit`]).
    pub body: RequestBody<'a>,
    /// The profile of the run making the request (`POST /v1/runs {"profile": …}`).
    pub profile: Option<&'a str>,
}

impl<'a> RequestFacts<'a> {
    /// Facts with no query, no headers, body not read and no profile: the line only.
    pub fn new(
        scheme: Scheme,
        host: &'a str,
        port: u16,
        method: &'a str,
        path: &'a str,
        has_body: bool,
    ) -> RequestFacts<'a> {
        RequestFacts {
            scheme,
            host,
            port,
            method,
            path,
            has_body,
            query: "",
            headers: &[],
            body: RequestBody::NotRead,
            profile: None,
        }
    }
}

/// Header names that ask an origin to take a request as another method: Google's
/// `X-HTTP-Method-Override` (Google APIs, "HTTP method override"), OData's `X-HTTP-Method`
/// and `X-Method-Override`. With the `_method` query field (Rails' and Laravel's method
/// spoofing), [`effective_method`] reads them.
pub const METHOD_OVERRIDE_HEADERS: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// The methods an override can never make a request into: the safe ones (RFC 9110
/// §9.2.1) and `CONNECT`.
const NOT_BY_OVERRIDE: [&str; 5] = ["GET", "HEAD", "OPTIONS", "TRACE", "CONNECT"];

/// The method rules and flows judge a request by: `method`, unless a method override (a
/// header of [`METHOD_OVERRIDE_HEADERS`] or a `_method` query field) names another method
/// that is not safe; then that method (upper-case when it is a standard one). An override
/// never turns a write into a read: a `POST` asking to be a `GET` stays a `POST`, while a
/// `GET` asking to be a `POST` is a write, because an origin that honours the override
/// acts on it as one. The first unsafe override found wins (headers before the query).
pub fn effective_method<'a>(
    method: &'a str,
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    query: &'a str,
) -> &'a str {
    let from_headers = headers
        .into_iter()
        .filter(|(name, _)| {
            METHOD_OVERRIDE_HEADERS
                .iter()
                .any(|h| name.eq_ignore_ascii_case(h))
        })
        .map(|(_, value)| value.trim());
    let from_query = query.split('&').filter_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == "_method").then_some(value.trim())
    });
    for wanted in from_headers.chain(from_query) {
        let token = !wanted.is_empty() && wanted.bytes().all(crate::matcher::is_token_byte);
        if !token
            || NOT_BY_OVERRIDE
                .iter()
                .any(|m| m.eq_ignore_ascii_case(wanted))
        {
            continue;
        }
        return ["POST", "PUT", "PATCH", "DELETE"]
            .into_iter()
            .find(|m| m.eq_ignore_ascii_case(wanted))
            .unwrap_or(wanted);
    }
    method
}

/// What the proxy knows of a request's body when it asks for a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestBody<'a> {
    /// Not read: a rule with a body matcher reached with this denies
    /// (`body_unparseable`), so callers read the body when [`Policy::body_limit`] says so.
    #[default]
    NotRead,
    /// The whole body (after any `Content-Encoding` was removed).
    Read(&'a [u8]),
    /// The body was longer than [`Policy::body_limit`]; a body matcher reached with this
    /// denies (`body_too_large`).
    TooLarge,
}

#[cfg(test)]
mod tests {
    use super::effective_method;

    #[test]
    fn an_override_makes_a_read_a_write_and_never_a_write_a_read() {
        let override_post = [("X-HTTP-Method-Override", "post")];
        assert_eq!(effective_method("GET", override_post, ""), "POST");
        assert_eq!(
            effective_method("GET", [("x-http-method", "DELETE")], ""),
            "DELETE"
        );
        assert_eq!(
            effective_method("HEAD", [("X-Method-Override", "PATCH")], ""),
            "PATCH"
        );
        assert_eq!(effective_method("GET", [], "a=1&_method=put"), "PUT");
        assert_eq!(
            effective_method("POST", [("X-HTTP-Method-Override", "GET")], ""),
            "POST"
        );
        assert_eq!(effective_method("POST", [], "_method=get"), "POST");
        assert_eq!(
            effective_method("GET", [("X-HTTP-Method-Override", "a b")], ""),
            "GET"
        );
        assert_eq!(
            effective_method("GET", [("accept", "POST")], "method=POST"),
            "GET"
        );
        assert_eq!(
            effective_method("GET", [("X-HTTP-Method", "PURGE")], ""),
            "PURGE"
        );
    }
}
