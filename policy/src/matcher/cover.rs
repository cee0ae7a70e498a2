//! Whether one pattern matches everything another could: used to prove at load time that
//! a rule injecting a credential cannot reach outside the credential's `bind`.
//!
//! Every `covers` here is conservative: `true` only when every request the narrower
//! pattern matches is also matched by the broader one; `false` may be a false alarm.

use super::{
    glob_matches, subdomain_prefix, HostPattern, MethodMatcher, PathPattern, PathSegment,
    READ_METHODS,
};

/// The method of the reads by protocol (git fetch, GraphQL query) `method = "read"` also
/// matches.
const PROTOCOL_READ_METHOD: &str = "POST";

impl HostPattern {
    /// Whether every host `narrower` matches is matched by `self`.
    pub(crate) fn covers(&self, narrower: &HostPattern) -> bool {
        let strictly_under = |name: &str, suffix: &str| subdomain_prefix(name, suffix).is_some();
        match (self, narrower) {
            (HostPattern::Exact(a), HostPattern::Exact(b)) => a == b,
            (HostPattern::Ip(a), HostPattern::Ip(b)) => a == b,
            (HostPattern::OneLabel(suffix), HostPattern::Exact(name)) => {
                subdomain_prefix(name, suffix).is_some_and(|prefix| !prefix.contains('.'))
            }
            (HostPattern::AnyDepth(suffix), HostPattern::Exact(name)) => {
                strictly_under(name, suffix)
            }
            (HostPattern::OneLabel(a), HostPattern::OneLabel(b)) => a == b,
            // `*.b` and `**.b` match names strictly under `b`: covered when `b` is `a` or
            // itself under `a`.
            (HostPattern::AnyDepth(a), HostPattern::OneLabel(b) | HostPattern::AnyDepth(b)) => {
                a == b || strictly_under(b, a)
            }
            _ => false,
        }
    }
}

impl MethodMatcher {
    /// Whether every request `narrower` matches (any body) is matched by `self`.
    pub(crate) fn covers(&self, narrower: &MethodMatcher) -> bool {
        let is_read_method =
            |m: &String| READ_METHODS.iter().any(|r| r == m) || m == PROTOCOL_READ_METHOD;
        match (self, narrower) {
            (MethodMatcher::Read, MethodMatcher::Read) => true,
            (MethodMatcher::Write, MethodMatcher::Write) => true,
            // A listed method that is never a read is always a write (a POST may be a git
            // fetch or a GraphQL query, which are reads).
            (MethodMatcher::Write, MethodMatcher::List(methods)) => {
                !methods.iter().any(is_read_method)
            }
            (MethodMatcher::List(allowed), MethodMatcher::List(methods)) => {
                methods.iter().all(|m| allowed.contains(m))
            }
            (MethodMatcher::List(allowed), MethodMatcher::Read) => READ_METHODS
                .iter()
                .chain([&PROTOCOL_READ_METHOD])
                .all(|r| allowed.iter().any(|a| a == r)),
            _ => false,
        }
    }
}

impl PathPattern {
    /// Whether every path `narrower` matches is matched by `self`.
    pub(crate) fn covers(&self, narrower: &PathPattern) -> bool {
        let mut memo = vec![None; (self.segments.len() + 1) * (narrower.segments.len() + 1)];
        covers_from(&self.segments, &narrower.segments, 0, 0, &mut memo)
    }
}

/// Whether `broad[i..]` matches every path `narrow[j..]` matches.
fn covers_from(
    broad: &[PathSegment],
    narrow: &[PathSegment],
    i: usize,
    j: usize,
    memo: &mut [Option<bool>],
) -> bool {
    let key = i * (narrow.len() + 1) + j;
    if let Some(known) = memo[key] {
        return known;
    }
    let answer = match broad.get(i) {
        None => j == narrow.len(),
        // `**` takes zero segments, or absorbs the next one whatever it is.
        Some(PathSegment::Any) => {
            covers_from(broad, narrow, i + 1, j, memo)
                || (j < narrow.len() && covers_from(broad, narrow, i, j + 1, memo))
        }
        Some(segment) => match narrow.get(j) {
            None | Some(PathSegment::Any) => false,
            Some(candidate) => {
                segment_covers(segment, candidate) && covers_from(broad, narrow, i + 1, j + 1, memo)
            }
        },
    };
    memo[key] = Some(answer);
    answer
}

/// Whether one segment pattern matches every segment another matches (neither is `**`).
fn segment_covers(broad: &PathSegment, narrow: &PathSegment) -> bool {
    match (broad, narrow) {
        (PathSegment::One, PathSegment::Literal(literal)) => !literal.is_empty(),
        (PathSegment::One, PathSegment::One | PathSegment::Glob(_)) => true,
        (PathSegment::Literal(a), PathSegment::Literal(b)) => a == b,
        (PathSegment::Glob(parts), PathSegment::Literal(literal)) => glob_matches(parts, literal),
        (PathSegment::Glob(a), PathSegment::Glob(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::{CanonicalPath, Host};
    use proptest::prelude::*;

    /// Labels from a tiny alphabet, so that patterns and hosts often meet.
    fn small_label() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "b", "ab"]).prop_map(str::to_owned)
    }

    fn host_pattern_text() -> impl Strategy<Value = String> {
        (
            prop::sample::select(vec!["", "*.", "**."]),
            prop::collection::vec(small_label(), 0..3),
        )
            .prop_map(|(wild, labels)| {
                let mut name = labels.join(".");
                name.push_str(if name.is_empty() { "x.com" } else { ".x.com" });
                format!("{wild}{name}")
            })
    }

    fn path_pattern_text() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop::sample::select(vec!["a", "b", "*", "**", "a*", "*b"]),
            0..4,
        )
        .prop_map(|segments| format!("/{}", segments.join("/")))
    }

    fn path_text() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(vec!["a", "b", "ab", "ba"]), 0..5)
            .prop_map(|segments| format!("/{}", segments.join("/")))
    }

    proptest! {
        /// `covers` is sound: whatever the narrower pattern matches, the broader one does.
        #[test]
        fn host_coverage_is_sound(
            broad in host_pattern_text(),
            narrow in host_pattern_text(),
            labels in prop::collection::vec(small_label(), 0..4),
        ) {
            let (broad, narrow) = (host(&broad), host(&narrow));
            let mut name = labels.join(".");
            name.push_str(if name.is_empty() { "x.com" } else { ".x.com" });
            let request = Host::parse(&name).expect("host");
            if broad.covers(&narrow) && narrow.matches(&request) {
                prop_assert!(broad.matches(&request), "{broad} covers {narrow} but not {name}");
            }
        }

        #[test]
        fn path_coverage_is_sound(
            broad in path_pattern_text(),
            narrow in path_pattern_text(),
            request in path_text(),
        ) {
            let (broad_text, narrow_text) = (broad.clone(), narrow.clone());
            let (Ok(broad), Ok(narrow)) = (PathPattern::parse(&broad), PathPattern::parse(&narrow)) else {
                return Ok(());
            };
            let Ok(request_path) = CanonicalPath::parse(&request) else {
                return Ok(());
            };
            if broad.covers(&narrow) && narrow.matches(&request_path) {
                prop_assert!(
                    broad.matches(&request_path),
                    "{broad_text} covers {narrow_text} but not {request}"
                );
            }
        }
    }

    fn host(raw: &str) -> HostPattern {
        HostPattern::parse(raw).expect("host pattern")
    }

    fn path(raw: &str) -> PathPattern {
        PathPattern::parse(raw).expect("path pattern")
    }

    fn methods(raw: &[&str]) -> MethodMatcher {
        MethodMatcher::parse(raw.iter().map(|m| m.to_string()).collect()).expect("methods")
    }

    #[test]
    fn host_coverage() {
        let cases = [
            ("api.github.com", "api.github.com", true),
            ("api.github.com", "github.com", false),
            ("*.github.com", "api.github.com", true),
            ("*.github.com", "a.api.github.com", false),
            ("*.github.com", "github.com", false),
            ("**.github.com", "a.api.github.com", true),
            ("**.github.com", "*.api.github.com", true),
            ("**.github.com", "**.github.com", true),
            ("**.github.com", "*.github.com", true),
            ("*.github.com", "**.github.com", false),
            ("*.github.com", "*.api.github.com", false),
            ("api.github.com", "*.github.com", false),
            ("**.github.com", "**.notgithub.com", false),
            ("127.0.0.1", "127.0.0.1", true),
            ("127.0.0.1", "127.0.0.2", false),
        ];
        for (broad, narrow, expected) in cases {
            assert_eq!(
                host(broad).covers(&host(narrow)),
                expected,
                "{broad} covers {narrow}"
            );
        }
    }

    #[test]
    fn method_coverage() {
        let cases = [
            (methods(&["read"]), methods(&["read"]), true),
            (methods(&["read"]), methods(&["GET"]), false),
            // A POST may be a read by protocol (git fetch, GraphQL query).
            (methods(&["write"]), methods(&["POST", "PUT"]), false),
            (
                methods(&["write"]),
                methods(&["PUT", "DELETE", "PATCH"]),
                true,
            ),
            (methods(&["write"]), methods(&["POST", "GET"]), false),
            (methods(&["write"]), methods(&["read"]), false),
            (methods(&["GET", "POST"]), methods(&["post"]), true),
            (methods(&["GET", "POST"]), methods(&["PUT"]), false),
            (
                methods(&["GET", "HEAD", "OPTIONS", "TRACE"]),
                methods(&["read"]),
                false,
            ),
            (
                methods(&["GET", "HEAD", "OPTIONS", "TRACE", "POST"]),
                methods(&["read"]),
                true,
            ),
            (methods(&["GET"]), methods(&["read"]), false),
            (methods(&["GET", "POST"]), methods(&["write"]), false),
        ];
        for (broad, narrow, expected) in cases {
            assert_eq!(
                broad.covers(&narrow),
                expected,
                "{broad:?} covers {narrow:?}"
            );
        }
    }

    #[test]
    fn path_coverage() {
        let cases = [
            ("/repos/**", "/repos/*/*/pulls", true),
            ("/repos/**", "/repos", true),
            ("/repos/**", "/repos/**", true),
            ("/repos/*/*/pulls", "/repos/**", false),
            ("/repos/*/*", "/repos/a/b", true),
            ("/repos/*/*", "/repos/a", false),
            ("/**", "/anything/**", true),
            ("/a/**/c", "/a/b/**/c", true),
            ("/a/**/c", "/a/b/**", false),
            ("/v1/*.json", "/v1/x.json", true),
            ("/v1/*.json", "/v1/*.json", true),
            ("/v1/*.json", "/v1/*", false),
            ("/a/*", "/a/", false),
        ];
        for (broad, narrow, expected) in cases {
            assert_eq!(
                path(broad).covers(&path(narrow)),
                expected,
                "{broad} covers {narrow}"
            );
        }
    }
}
