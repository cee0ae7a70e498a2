//! Fuzz target: the request-head checks airlock does itself (`proxy/net/src/authority.rs`).
//!
//! Input, as text: line 1 is a CONNECT target (`host:port`), line 2 a request target
//! (absolute-form or origin-form URI), the other lines `name: value` header fields.
//! Nothing may panic, and:
//! - a parsed [`Target`] has a non-empty lowercase host without a trailing dot or URI
//!   delimiters, and its `authority()` and `url()` parse back to the same target;
//! - a request whose URI and `Host` are the target's own passes [`check_authority`];
//!   whatever passes `check_authority` names the target in its `Host`;
//! - [`check_head_limits`] refuses exactly the heads over its limits.
#![no_main]

use airlock_policy::Scheme;
use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use libfuzzer_sys::fuzz_target;

#[path = "../../net/src/authority.rs"]
#[allow(dead_code)]
mod authority;

use authority::{check_authority, check_head_limits, default_port, HeadLimit, Target};

fn target_properties(target: &Target, input: &str) {
    assert!(!target.host.is_empty(), "{input:?}");
    assert_eq!(target.host, target.host.to_ascii_lowercase(), "{input:?}");
    assert!(!target.host.ends_with('.'), "{input:?} -> {target:?}");
    assert!(
        !target
            .host
            .contains(['/', '?', '#', '@', ' ', '\t', '\r', '\n', '[', ']']),
        "{input:?} -> {target:?}"
    );
    let again = Target::parse(target.scheme, &target.authority(), 0);
    assert_eq!(again.as_ref(), Some(target), "authority() of {input:?}");
    let url = target.url("/");
    let uri: Uri = url
        .parse()
        .unwrap_or_else(|e| panic!("url() of {input:?} is {url:?}: {e}"));
    let from_uri = uri
        .authority()
        .and_then(|a| Target::parse(target.scheme, a.as_str(), default_port(target.scheme)));
    assert_eq!(from_uri.as_ref(), Some(target), "url() of {input:?}");
    // The target's own URI and Host pass the one-authority check.
    let mut headers = HeaderMap::new();
    let host = HeaderValue::from_str(&target.authority()).expect("an authority is a header value");
    headers.insert(http::header::HOST, host);
    assert_eq!(check_authority(&uri, &headers, target), Ok(()), "{input:?}");
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let connect = lines.next().unwrap_or_default();
    let request_target = lines.next().unwrap_or_default();
    let mut headers = HeaderMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.trim().as_bytes()),
            HeaderValue::from_str(value.trim()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }

    for (scheme, default) in [(Scheme::Https, 0), (Scheme::Http, 80)] {
        if let Some(target) = Target::parse(scheme, connect, default) {
            target_properties(&target, connect);
            if let Ok(uri) = request_target.parse::<Uri>() {
                if check_authority(&uri, &headers, &target).is_ok() {
                    if let Some(host) = headers.get(http::header::HOST) {
                        let named = host
                            .to_str()
                            .ok()
                            .and_then(|h| Target::parse(scheme, h, default_port(scheme)))
                            .expect("a Host that passed parses");
                        assert_eq!((named.host, named.port), (target.host.clone(), target.port));
                    }
                }
            }
        }
    }

    if let Ok(uri) = request_target.parse::<Uri>() {
        let (max_fields, max_bytes) = (4, 256);
        let bytes = uri.to_string().len()
            + headers
                .iter()
                .map(|(n, v)| n.as_str().len() + v.len() + 4)
                .sum::<usize>();
        match check_head_limits(&headers, &uri, max_fields, max_bytes) {
            Ok(()) => assert!(headers.len() <= max_fields && bytes <= max_bytes),
            Err(HeadLimit::Fields { count, .. }) => assert!(count > max_fields),
            Err(HeadLimit::Bytes { bytes: b, .. }) => {
                assert!(headers.len() <= max_fields && b == bytes && b > max_bytes)
            }
        }
    }
});
