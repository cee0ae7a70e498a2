use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;

fn host(raw: &str) -> Host {
    match Host::parse(raw) {
        Some(host) => host,
        None => panic!("test host {raw:?} should parse"),
    }
}

fn host_pattern(raw: &str) -> HostPattern {
    match HostPattern::parse(raw) {
        Ok(pattern) => pattern,
        Err(problem) => panic!("pattern {raw:?} should parse: {problem}"),
    }
}

fn path_pattern(raw: &str) -> PathPattern {
    match PathPattern::parse(raw) {
        Ok(pattern) => pattern,
        Err(problem) => panic!("pattern {raw:?} should parse: {problem}"),
    }
}

fn path(raw: &str) -> CanonicalPath {
    match CanonicalPath::parse(raw) {
        Ok(path) => path,
        Err(problem) => panic!("path {raw:?} should be canonical: {problem:?}"),
    }
}

#[test]
fn host_normalisation() {
    let cases: &[(&str, Option<Host>)] = &[
        ("API.GitHub.com", Some(Host::Name("api.github.com".into()))),
        ("api.github.com.", Some(Host::Name("api.github.com".into()))),
        ("127.0.0.1", Some(Host::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)))),
        (
            "127.0.0.1.",
            Some(Host::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST))),
        ),
        ("[::1]", Some(Host::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)))),
        ("::1", Some(Host::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)))),
        ("[127.0.0.1]", None),
        ("", None),
        (".", None),
        ("a..b", None),
        ("a b", None),
        ("host:443", None),
        ("ex\u{e4}mple.com", None),
    ];
    for (raw, want) in cases {
        assert_eq!(&Host::parse(raw), want, "host {raw:?}");
    }
}

#[test]
fn host_patterns_match() {
    let cases: &[(&str, &str, bool)] = &[
        ("api.github.com", "api.github.com", true),
        ("api.github.com", "API.GITHUB.COM.", true),
        ("API.GitHub.com.", "api.github.com", true),
        ("api.github.com", "github.com", false),
        ("api.github.com", "x.api.github.com", false),
        ("*.example.com", "a.example.com", true),
        ("*.example.com", "A.Example.Com.", true),
        ("*.example.com", "example.com", false),
        ("*.example.com", "a.b.example.com", false),
        ("*.example.com", "aexample.com", false),
        ("**.example.com", "a.example.com", true),
        ("**.example.com", "a.b.c.example.com", true),
        ("**.example.com", "example.com", false),
        ("**.example.com", "badexample.com", false),
        ("127.0.0.1", "127.0.0.1", true),
        ("127.0.0.1", "127.0.0.2", false),
        ("::1", "[::1]", true),
        ("[::1]", "::1", true),
        ("[0:0::1]", "[::1]", true),
        ("::1", "127.0.0.1", false),
    ];
    for (pattern, request, want) in cases {
        assert_eq!(
            host_pattern(pattern).matches(&host(request)),
            *want,
            "{pattern} vs {request}"
        );
    }
}

#[test]
fn host_patterns_rejected() {
    let cases: &[(&str, &str)] = &[
        ("*", "wildcard \"*\" alone matches every host"),
        ("**", "wildcard \"**\" alone matches every host"),
        ("*.com", "covers a whole top-level domain"),
        ("**.com", "covers a whole top-level domain"),
        ("*.0.0.1", "looks like an IP address"),
        ("a.*.com", "may only be the whole first label"),
        ("a*.example.com", "may only be the whole first label"),
        ("*.*.example.com", "may only be the whole first label"),
        ("example.com:443", "put ports in \"port\""),
        ("", "not a valid host name"),
        ("exa mple.com", "not a valid host name"),
        ("b\u{fc}cher.de", "punycode"),
    ];
    for (pattern, want) in cases {
        match HostPattern::parse(pattern) {
            Ok(parsed) => panic!("{pattern:?} should be rejected, got {parsed:?}"),
            Err(problem) => assert!(problem.contains(want), "{pattern:?}: {problem}"),
        }
    }
}

#[test]
fn port_defaults_and_lists() {
    let default = PortMatcher::SchemeDefault;
    assert!(default.matches(Scheme::Https, 443));
    assert!(default.matches(Scheme::Http, 80));
    assert!(!default.matches(Scheme::Https, 80));
    assert!(!default.matches(Scheme::Http, 443));
    assert!(!default.matches(Scheme::Https, 8443));
    let list = PortMatcher::parse(Some(vec![8443, 9000])).unwrap_or(PortMatcher::SchemeDefault);
    assert!(list.matches(Scheme::Https, 8443));
    assert!(list.matches(Scheme::Http, 9000));
    assert!(!list.matches(Scheme::Https, 443));
    for bad in [vec![0], vec![70000], vec![-1], vec![]] {
        assert!(PortMatcher::parse(Some(bad.clone())).is_err(), "{bad:?}");
    }
}

#[test]
fn method_presets_and_lists() {
    let read = MethodMatcher::Read;
    let write = MethodMatcher::Write;
    let cases: &[(&str, bool, bool)] = &[
        // method, has_body, is read
        ("GET", false, true),
        // Methods are case-sensitive (RFC 9110 §9.1): `get` is not a read.
        ("get", false, false),
        ("HEAD", false, true),
        ("OPTIONS", false, true),
        ("TRACE", false, true),
        ("GET", true, false),
        ("HEAD", true, false),
        ("POST", false, false),
        ("PUT", true, false),
        ("DELETE", false, false),
        ("PATCH", true, false),
        ("PROPFIND", false, false),
    ];
    for (method, has_body, is_read) in cases {
        assert_eq!(
            read.matches(method, *has_body),
            *is_read,
            "{method} body={has_body}"
        );
        assert_eq!(
            write.matches(method, *has_body),
            !is_read,
            "{method} body={has_body}"
        );
    }
    let parse = |raw: &[&str]| MethodMatcher::parse(raw.iter().map(|m| (*m).to_owned()).collect());
    assert_eq!(parse(&["read"]), Ok(MethodMatcher::Read));
    assert_eq!(parse(&["WRITE"]), Ok(MethodMatcher::Write));
    assert_eq!(
        parse(&["post", "Put"]),
        Ok(MethodMatcher::List(vec!["POST".into(), "PUT".into()]))
    );
    let list = MethodMatcher::List(vec!["POST".into()]);
    assert!(list.matches("post", false));
    assert!(list.matches("POST", true));
    assert!(!list.matches("GET", false));
    assert!(parse(&[]).is_err());
    assert!(parse(&["GET", "read"]).is_err());
    assert!(parse(&["GE T"]).is_err());
    assert!(parse(&[""]).is_err());
}

#[test]
fn path_globs() {
    let cases: &[(&str, &str, bool)] = &[
        ("/", "/", true),
        ("/", "", true),
        ("/", "/a", false),
        ("/hooks/**", "/hooks", true),
        ("/hooks/**", "/hooks/", true),
        ("/hooks/**", "/hooks/a/b/c", true),
        ("/hooks/**", "/hooksx", false),
        ("/hooks/**", "/other/hooks/a", false),
        ("/**", "/", true),
        ("/**", "/anything/at/all", true),
        ("/repos/*/*/pulls", "/repos/o/r/pulls", true),
        ("/repos/*/*/pulls", "/repos/o/pulls", false),
        ("/repos/*/*/pulls", "/repos/o/r/x/pulls", false),
        ("/repos/*/*/pulls", "/repos/o/r/pulls/", false),
        ("/repos/*/*/pulls", "/repos/o%20x/r/pulls", true),
        ("/repos/*/*/hooks/**", "/repos/o/r/hooks", true),
        ("/repos/*/*/hooks/**", "/repos/o/r/hooks/1/pings", true),
        ("/repos/*/*/hooks/**", "/repos/o/r/HOOKS", false),
        ("/a/**/z", "/a/z", true),
        ("/a/**/z", "/a/b/c/z", true),
        ("/a/**/z", "/a/b/c/y", false),
        ("/a/**/**/z", "/a/b/z", true),
        ("/a/*", "/a/", false),
        ("/v1/*.json", "/v1/x.json", true),
        ("/v1/*.json", "/v1/.json", true),
        ("/v1/*.json", "/v1/x.jsonp", false),
        ("/v1/*.json", "/v1/a/x.json", false),
        ("/v1/a*b*c", "/v1/abc", true),
        ("/v1/a*b*c", "/v1/axxbyyc", true),
        ("/v1/a*b*c", "/v1/axxc", false),
        ("/v1/a*bc*c", "/v1/abc", false),
        ("/caf%C3%A9", "/caf\u{e9}", true),
        ("/a b", "/a%20b", true),
        ("/a%25b", "/a%25b", true),
    ];
    for (pattern, request, want) in cases {
        assert_eq!(
            path_pattern(pattern).matches(&path(request)),
            *want,
            "{pattern} vs {request}"
        );
    }
}

#[test]
fn path_patterns_rejected() {
    for (pattern, want) in [
        ("hooks/**", "does not start with"),
        ("/a/../b", "\"..\""),
        ("/a/%2e/b", "\"..\""),
        ("/a%2Fb", "encoded slash"),
        ("/a//b", "empty segment"),
        ("/a/x**", "whole segment"),
        ("/a%zz", "percent-encoding"),
    ] {
        match PathPattern::parse(pattern) {
            Ok(parsed) => panic!("{pattern:?} should be rejected, got {parsed:?}"),
            Err(problem) => assert!(problem.contains(want), "{pattern:?}: {problem}"),
        }
    }
}

#[test]
fn non_canonical_paths() {
    let cases: &[(&str, NonCanonical)] = &[
        ("/a%2Fb", NonCanonical::EncodedSlash),
        ("/a%2fb", NonCanonical::EncodedSlash),
        ("/admin%00/x", NonCanonical::ControlByte),
        ("/%2561dmin/x", NonCanonical::DoubleEncoding),
        ("/a%252Fb", NonCanonical::DoubleEncoding),
        ("/a/../b", NonCanonical::DotSegment),
        ("/a/./b", NonCanonical::DotSegment),
        ("/..", NonCanonical::DotSegment),
        ("/a/%2e%2e/b", NonCanonical::DotSegment),
        ("/a/%2E/b", NonCanonical::DotSegment),
        ("/a/.%2e", NonCanonical::DotSegment),
        ("/a//b", NonCanonical::EmptySegment),
        ("//a", NonCanonical::EmptySegment),
        ("/a\\b", NonCanonical::Backslash),
        ("/a%5cb", NonCanonical::Backslash),
        ("/a%", NonCanonical::BadPercentEncoding),
        ("/a%4", NonCanonical::BadPercentEncoding),
        ("/a%g0", NonCanonical::BadPercentEncoding),
        ("a/b", NonCanonical::NoLeadingSlash),
        ("*", NonCanonical::NoLeadingSlash),
    ];
    for (raw, want) in cases {
        assert_eq!(CanonicalPath::parse(raw), Err(*want), "{raw}");
    }
    for fine in ["/", "", "/a/", "/a.b/..c/...", "/%41", "/a/b%2Ec"] {
        assert!(CanonicalPath::parse(fine).is_ok(), "{fine}");
    }
}

fn label() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9-]{0,10}"
}

fn segment() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,8}".prop_filter("not a dot segment", |s| s != "." && s != "..")
}

proptest! {
    #[test]
    fn one_label_wildcard_matches_exactly_one_label(
        prefix in prop::collection::vec(label(), 0..4),
        suffix in prop::collection::vec(label(), 2..4),
    ) {
        prop_assume!(!suffix.last().is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit())));
        let suffix = suffix.join(".");
        let one = host_pattern(&format!("*.{suffix}"));
        let any = host_pattern(&format!("**.{suffix}"));
        let exact = host_pattern(&suffix);
        let request = if prefix.is_empty() { suffix.clone() } else { format!("{}.{suffix}", prefix.join(".")) };
        let request = host(&request.to_ascii_uppercase());
        prop_assert_eq!(one.matches(&request), prefix.len() == 1);
        prop_assert_eq!(any.matches(&request), !prefix.is_empty());
        prop_assert_eq!(exact.matches(&request), prefix.is_empty());
    }

    #[test]
    fn path_glob_generalises_a_literal_path(
        segments in prop::collection::vec(segment(), 1..6),
        stars in prop::collection::vec(any::<bool>(), 6),
        any_at in 0usize..7,
        any_len in 0usize..3,
    ) {
        let request = path(&format!("/{}", segments.join("/")));
        // Exact literal pattern matches.
        let literal = format!("/{}", segments.join("/"));
        prop_assert!(path_pattern(&literal).matches(&request), "{} vs {}", literal, literal);
        // Replacing any segments with `*` still matches.
        let starred: Vec<&str> = segments
            .iter()
            .zip(&stars)
            .map(|(s, star)| if *star { "*" } else { s.as_str() })
            .collect();
        let starred = format!("/{}", starred.join("/"));
        prop_assert!(path_pattern(&starred).matches(&request), "{} vs {}", starred, literal);
        // Replacing a run of segments (possibly empty) with `**` still matches.
        let at = any_at.min(segments.len());
        let end = (at + any_len).min(segments.len());
        let mut globbed: Vec<&str> = segments[..at].iter().map(String::as_str).collect();
        globbed.push("**");
        globbed.extend(segments[end..].iter().map(String::as_str));
        let globbed = format!("/{}", globbed.join("/"));
        prop_assert!(path_pattern(&globbed).matches(&request), "{} vs {}", globbed, literal);
        // One segment more or fewer never matches a pattern of only literals and `*`.
        let longer = path(&format!("/{}/extra", segments.join("/")));
        prop_assert!(!path_pattern(&starred).matches(&longer), "{} vs {}/extra", starred, literal);
    }

    #[test]
    fn canonical_path_never_panics(raw in "\\PC{0,40}") {
        let _ = CanonicalPath::parse(&raw);
    }
}
