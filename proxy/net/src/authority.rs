//! The request-head checks airlock does itself, as pure functions: the destination of a
//! request ([`Target`], parsed from a CONNECT target, an absolute-form URI or `Host`), the
//! one-authority rule of docs/policy.md invariant 2 ([`check_authority`]) and the header-section
//! limits of docs/cases.md C08 ([`check_head_limits`]); and the percent-encoding airlock uses when
//! it writes values into URLs ([`percent_encode`]).
//!
//! Depends only on `http` and `airlock_policy::Scheme`, so `proxy/fuzz` includes this file
//! with `#[path]` and fuzzes it without building the whole proxy.

use airlock_policy::Scheme;
use http::{header, HeaderMap, Uri};

/// The destination of a request: the one authority that CONNECT, SNI, `Host` and the
/// absolute-form URI must all name (docs/policy.md invariant 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// Lowercase host name or IP literal (IPv6 without brackets).
    pub host: String,
    /// The port.
    pub port: u16,
}

impl Target {
    /// `host:port`, IPv6 bracketed.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The absolute URL of `path_and_query` on this target.
    pub fn url(&self, path_and_query: &str) -> String {
        let scheme = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        // Built in one buffer: this runs on every request.
        let mut url =
            String::with_capacity(scheme.len() + 3 + self.host.len() + 8 + path_and_query.len());
        url.push_str(scheme);
        url.push_str("://");
        if self.host.contains(':') {
            url.push('[');
            url.push_str(&self.host);
            url.push(']');
        } else {
            url.push_str(&self.host);
        }
        let _ = std::fmt::Write::write_fmt(&mut url, format_args!(":{}", self.port));
        url.push_str(path_and_query);
        url
    }

    /// Parses `host[:port]` into a target, lowercasing the host and dropping a trailing
    /// dot. The host is a name of ASCII letters, digits, `-`, `.` and `_` (an IPv4 literal
    /// is one), or an IPv6 literal in brackets (RFC 3986 §3.2.2, without zone ids); the
    /// port, when present, is 0–65535, else `default_port`. `None` when malformed:
    /// userinfo, other characters in the name (`exam[::1]om`), an unbracketed or invalid
    /// IPv6 literal, a port that does not fit in 16 bits.
    pub fn parse(scheme: Scheme, authority: &str, default_port: u16) -> Option<Self> {
        let authority: http::uri::Authority = authority.parse().ok()?;
        if authority.as_str().contains('@') {
            return None;
        }
        let raw = authority.host();
        let host = if let Some(literal) = raw.strip_prefix('[') {
            let literal = literal.strip_suffix(']')?;
            literal.parse::<std::net::Ipv6Addr>().ok()?;
            literal.to_ascii_lowercase()
        } else {
            if !raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
            {
                return None;
            }
            raw.trim_end_matches('.').to_ascii_lowercase()
        };
        if host.is_empty() {
            return None;
        }
        // `Authority::port()` is `None` for a port past 65535, so read the text after the
        // host: nothing, `:` (an empty port, RFC 3986 §3.2.3) or `:DIGITS`.
        let rest = authority.as_str().strip_prefix(raw)?;
        let port = match rest.strip_prefix(':') {
            None if rest.is_empty() => default_port,
            None => return None,
            Some("") => default_port,
            Some(digits) if digits.bytes().all(|b| b.is_ascii_digit()) => digits.parse().ok()?,
            Some(_) => return None,
        };
        Some(Self { scheme, host, port })
    }
}

/// The default port of `scheme`: 80 or 443.
pub fn default_port(scheme: Scheme) -> u16 {
    match scheme {
        Scheme::Http => 80,
        Scheme::Https => 443,
    }
}

/// Why a request's URI or `Host` does not name its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorityProblem {
    /// The absolute-form URI names another authority (the text says which).
    UriMismatch(String),
    /// More than one `Host` field line (RFC 9112 §3.2: answered with 400).
    DuplicateHost,
    /// `Host` names another authority (the text says which).
    HostMismatch(String),
}

/// Checks that the request's URI authority and `Host` header name `target` (docs/policy.md
/// invariant 2). A missing authority or `Host` is not a mismatch.
///
/// # Errors
/// The first [`AuthorityProblem`] found.
pub fn check_authority(
    uri: &Uri,
    headers: &HeaderMap,
    target: &Target,
) -> Result<(), AuthorityProblem> {
    if let Some(authority) = uri.authority() {
        let named = Target::parse(
            target.scheme,
            authority.as_str(),
            default_port(target.scheme),
        );
        if named.as_ref().map(|t| (&t.host, t.port)) != Some((&target.host, target.port)) {
            return Err(AuthorityProblem::UriMismatch(format!(
                "the request URI names {authority}, not {}",
                target.authority()
            )));
        }
    }
    let mut hosts = headers.get_all(header::HOST).iter();
    let Some(value) = hosts.next() else {
        return Ok(());
    };
    if hosts.next().is_some() {
        return Err(AuthorityProblem::DuplicateHost);
    }
    let parsed = value
        .to_str()
        .ok()
        .and_then(|v| Target::parse(target.scheme, v, default_port(target.scheme)));
    match parsed {
        Some(host) if host.host == target.host && host.port == target.port => Ok(()),
        _ => Err(AuthorityProblem::HostMismatch(format!(
            "Host header {:?} does not name {}",
            String::from_utf8_lossy(value.as_bytes()),
            target.authority()
        ))),
    }
}

/// A header-section limit a request passed (docs/cases.md C08).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadLimit {
    /// More than `limit` header fields; `count` were sent.
    Fields {
        /// Fields sent.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// The section is `bytes` long (names + values + 4 bytes a field, plus the request
    /// target), over `limit`.
    Bytes {
        /// Bytes counted.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
}

/// Checks a request head against `max_fields` header fields and `max_bytes` bytes (field
/// names and values plus 4 bytes each for `": "` and CRLF, plus the request target).
///
/// # Errors
/// The [`HeadLimit`] passed (fields are checked first).
pub fn check_head_limits(
    headers: &HeaderMap,
    uri: &Uri,
    max_fields: usize,
    max_bytes: usize,
) -> Result<(), HeadLimit> {
    if headers.len() > max_fields {
        return Err(HeadLimit::Fields {
            count: headers.len(),
            limit: max_fields,
        });
    }
    let bytes: usize = uri.to_string().len()
        + headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 4)
            .sum::<usize>();
    if bytes > max_bytes {
        return Err(HeadLimit::Bytes {
            bytes,
            limit: max_bytes,
        });
    }
    Ok(())
}

/// `text` with every byte percent-encoded (`%XX`, upper-case hex) except RFC 3986 §2.3
/// `unreserved` characters (`A-Z a-z 0-9 - . _ ~`) and the bytes in `keep` (e.g. `b"/"` for
/// a path).
pub fn percent_encode(text: &str, keep: &[u8]) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || keep.contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(authority: &str) -> Option<(String, u16)> {
        Target::parse(Scheme::Https, authority, 443).map(|t| (t.host, t.port))
    }

    #[test]
    fn names_ip_literals_and_ports() {
        assert_eq!(
            parse("Example.COM.:8443"),
            Some(("example.com".into(), 8443))
        );
        assert_eq!(parse("example.com"), Some(("example.com".into(), 443)));
        assert_eq!(parse("127.0.0.1:80"), Some(("127.0.0.1".into(), 80)));
        assert_eq!(parse("[::1]:8443"), Some(("::1".into(), 8443)));
        assert_eq!(parse("[FE80::1]"), Some(("fe80::1".into(), 443)));
        assert_eq!(
            parse("my_host.internal:1"),
            Some(("my_host.internal".into(), 1))
        );
    }

    /// Found by proxy/fuzz: `http::uri::Authority` accepts brackets inside a name (and
    /// `host()` then returns `exam[`), and its `port_u16()` is `None` for port 65536, which
    /// made `Host: example.com:65536` name port 443.
    #[test]
    fn malformed_hosts_are_refused() {
        for bad in [
            "exam[::1]om:443",
            "user@example.com:443",
            "[::1",
            "[not-v6]:443",
            "[fe80::1%25eth0]:443",
            "exa%6dple.com:443",
            "example.com:65536",
            ".:443",
            "a*b:443",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
