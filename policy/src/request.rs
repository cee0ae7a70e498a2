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
