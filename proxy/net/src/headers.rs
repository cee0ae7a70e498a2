//! Header handling shared by forwarding, staging and release: hop-by-hop removal
//! (RFC 9110 §7.6.1) and conversions to the ledger's records.

use airlock_ledger::{Header, HeaderText};
use http::{header, HeaderMap, HeaderName};

/// Most header fields in one request or response, on every side (docs/cases.md C08). A request
/// past it gets 431 with a JSON reason from airlock; hyper's own parser limits are set
/// higher ([`PARSER_MAX_HEADERS`]) so that it hands such requests over instead of failing
/// the connection. 256: two and a half times the common limits (hyper's and Envoy's
/// default 100 fields, Apache's `LimitRequestFields` 100) and past C08's 150; lowered from
/// 512 because hyper's per-message index arrays scale with it (docs/performance.md).
pub const MAX_HEADERS: usize = 256;

/// hyper's field-count backstop: above it hyper answers a bare 431 itself. Twice
/// [`MAX_HEADERS`], not more: hyper allocates and fills two arrays of this many 32-byte
/// entries for every message it parses, whatever its size (docs/performance.md: 11% of a
/// small request's CPU going from 1,024 to 512).
pub const PARSER_MAX_HEADERS: usize = 2 * MAX_HEADERS;

/// hyper's header-bytes backstop (HTTP/1.1 read buffer, h2 header list): four times
/// [`MAX_HEADER_LIST_BYTES`]; between the two airlock answers 431 with a reason.
pub const PARSER_MAX_HEADER_BYTES: u32 = 4 * MAX_HEADER_LIST_BYTES;

/// Largest request header section accepted, in bytes: field names and values plus 4 bytes
/// each (`": "`, CRLF) and the request target, counted alike for HTTP/1.1 and h2 (docs/cases.md
/// C08 asks for the same generous limit on every side).
pub const MAX_HEADER_LIST_BYTES: u32 = 256 * 1024;

/// Removes hop-by-hop headers, including every header named in `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in HOP_BY_HOP_NAMES.iter() {
        headers.remove(name);
    }
}

/// Headers that describe one connection, never forwarded (RFC 9110 §7.6.1), plus the
/// proxy's own credentials and `Proxy-Connection` (a legacy client header). `Trailer` is
/// end-to-end and kept; `TE: trailers` is restored by [`keep_te_trailers`].
/// (Header names, so that removing them parses nothing per request.)
static HOP_BY_HOP_NAMES: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

/// Removes `airlock-*` headers an origin sent, so it cannot forge airlock's verdicts
/// (docs/cases.md C19).
pub fn strip_reserved(headers: &mut HeaderMap) {
    let reserved: Vec<HeaderName> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("airlock-"))
        .cloned()
        .collect();
    for name in reserved {
        headers.remove(name);
    }
}

/// The headers as ledger records, in order.
pub fn to_records(headers: &HeaderMap) -> Vec<Header> {
    headers
        .iter()
        .map(|(name, value)| Header {
            name: name.as_str().to_owned(),
            value: HeaderText::from_bytes(value.as_bytes()),
        })
        .collect()
}

/// Header names whose values are credentials, shown as `[redacted]` to reviewers.
pub fn is_credential(name: &str) -> bool {
    matches!(
        name,
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie" | "x-api-key" | "api-key"
    ) || name.contains("token")
        || name.contains("secret")
        || name.ends_with("-key")
}

/// Whether the client asked for trailers (`TE: trailers`, RFC 9110 §10.1.4); the one TE
/// value that is forwarded (and the only one HTTP/2 allows).
pub fn wants_trailers(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
}

/// Checks a request head against [`MAX_HEADERS`] and
/// [`MAX_HEADER_LIST_BYTES`] (docs/cases.md C08: 431 with a reason, never a
/// reset).
///
/// # Errors
/// [`crate::respond::ProxyError::HeadersTooLarge`] naming the limit passed.
pub fn check_head_limits(
    headers: &http::HeaderMap,
    uri: &http::Uri,
) -> Result<(), crate::respond::ProxyError> {
    use crate::authority::HeadLimit;
    crate::authority::check_head_limits(headers, uri, MAX_HEADERS, MAX_HEADER_LIST_BYTES as usize)
        .map_err(|passed| match passed {
            HeadLimit::Fields { count, limit } => crate::respond::ProxyError::HeadersTooLarge {
                reason: format!("the request has {count} header fields; the limit is {limit}"),
                limit: limit as u64,
            },
            HeadLimit::Bytes { bytes, limit } => crate::respond::ProxyError::HeadersTooLarge {
                reason: format!(
                    "the request's header section is {bytes} bytes; the limit is {limit}"
                ),
                limit: limit as u64,
            },
        })
}
