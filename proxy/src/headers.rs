//! Header handling shared by forwarding, staging and release: hop-by-hop removal
//! (RFC 9110 §7.6.1) and conversions to the ledger's records.

use airlock_ledger::{Header, HeaderText};
use http::{header, HeaderMap, HeaderName};

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
/// (CASES.md C19).
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

/// Checks a request head against [`crate::listener::MAX_HEADERS`] and
/// [`crate::listener::MAX_HEADER_LIST_BYTES`] (CASES.md C08: 431 with a reason, never a
/// reset).
///
/// # Errors
/// [`crate::respond::ProxyError::HeadersTooLarge`] naming the limit passed.
pub fn check_head_limits(
    headers: &http::HeaderMap,
    uri: &http::Uri,
) -> Result<(), crate::respond::ProxyError> {
    use crate::authority::HeadLimit;
    use crate::listener::{MAX_HEADERS, MAX_HEADER_LIST_BYTES};
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
