//! Request-content matchers beyond the line: `query` and `headers`.
//!
//! Both compare *decoded* values against a [`ValueGlob`] (`*` matches any run of
//! characters, everything else is literal). A name the matcher lists must be present:
//! an absent query parameter or header never matches, whatever the pattern (`"*"` thus
//! means "present, any value"). Names the matcher does not list are ignored.
//!
//! A parameter or header may repeat. Which occurrences must match depends on what the
//! rule does, so that repetition can never widen access: a pass or stage rule needs
//! **every** occurrence to match (`state=open&state=closed` does not pass a
//! `state = "open"` rule), a deny rule needs **any** occurrence (the same request is
//! caught by a `state = "closed"` deny).

use std::fmt;

use crate::matcher::glob_matches;

/// A value pattern: `*` matches any run of characters (including none); no other
/// character is special. Case-sensitive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ValueGlob {
    source: String,
    parts: Vec<Vec<u8>>,
}

impl ValueGlob {
    /// Compiles a pattern; never fails (every string is a pattern).
    pub(crate) fn new(raw: &str) -> ValueGlob {
        ValueGlob {
            source: raw.to_owned(),
            parts: raw
                .as_bytes()
                .split(|&b| b == b'*')
                .map(<[u8]>::to_vec)
                .collect(),
        }
    }

    /// Whether `value` matches.
    pub(crate) fn matches(&self, value: &str) -> bool {
        glob_matches(&self.parts, value.as_bytes())
    }
}

impl fmt::Display for ValueGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// How repeated values are combined: see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quantifier {
    /// Every occurrence must match (pass and stage rules).
    All,
    /// One occurrence suffices (deny rules).
    Any,
}

/// Whether the values of one name satisfy `glob`; `None` values means the name is absent.
/// Returns the first value that failed, for explanations.
fn check_values<'v>(
    glob: &ValueGlob,
    values: &[&'v str],
    quantifier: Quantifier,
) -> Result<(), Option<&'v str>> {
    if values.is_empty() {
        return Err(None);
    }
    let ok = match quantifier {
        Quantifier::All => values.iter().all(|v| glob.matches(v)),
        Quantifier::Any => values.iter().any(|v| glob.matches(v)),
    };
    if ok {
        Ok(())
    } else {
        Err(values.iter().copied().find(|v| !glob.matches(v)))
    }
}

/// A rule's `query`: decoded parameter name -> value glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueryMatcher {
    params: Vec<(String, ValueGlob)>,
}

impl QueryMatcher {
    pub(crate) fn parse(
        raw: std::collections::BTreeMap<String, String>,
    ) -> Result<QueryMatcher, String> {
        if raw.is_empty() {
            return Err("empty table matches every query; remove \"query\" instead".into());
        }
        Ok(QueryMatcher {
            params: raw
                .into_iter()
                .map(|(name, value)| (name, ValueGlob::new(&value)))
                .collect(),
        })
    }

    /// `Ok(())` when it matches, `Err(detail)` when not.
    pub(crate) fn check(
        &self,
        query: &[(String, String)],
        quantifier: Quantifier,
    ) -> Result<(), String> {
        for (name, glob) in &self.params {
            let values: Vec<&str> = query
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .collect();
            match check_values(glob, &values, quantifier) {
                Ok(()) => {}
                Err(None) => return Err(format!("query parameter \"{name}\" is absent")),
                Err(Some(value)) => {
                    return Err(format!(
                        "query parameter \"{name}\" is {value:?}, not \"{glob}\""
                    ))
                }
            }
        }
        Ok(())
    }
}

/// Splits and decodes a query string (`application/x-www-form-urlencoded` rules:
/// `+` is a space, `%XX` a byte; URL Standard §5.1). `None` when a `%` escape is
/// malformed or a decoded value is not UTF-8: such a query cannot be matched safely.
pub(crate) fn parse_query(raw: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        out.push((form_decode(name)?, form_decode(value)?));
    }
    Some(out)
}

fn form_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hi = char::from(hex[0]).to_digit(16)?;
                let lo = char::from(hex[1]).to_digit(16)?;
                out.push(u8::try_from(hi << 4 | lo).ok()?);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// A rule's `headers`: lower-case header name -> value glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeaderMatcher {
    headers: Vec<(String, ValueGlob)>,
}

impl HeaderMatcher {
    pub(crate) fn parse(
        raw: std::collections::BTreeMap<String, String>,
    ) -> Result<HeaderMatcher, String> {
        if raw.is_empty() {
            return Err("empty table matches every request; remove \"headers\" instead".into());
        }
        let mut headers = Vec::with_capacity(raw.len());
        for (name, value) in raw {
            let lower = name.to_ascii_lowercase();
            if lower.is_empty() || !lower.bytes().all(crate::matcher::is_token_byte) {
                return Err(format!("\"{name}\" is not a header name"));
            }
            if headers.iter().any(|(n, _)| *n == lower) {
                return Err(format!(
                    "header \"{name}\" is listed twice (names are case-insensitive)"
                ));
            }
            headers.push((lower, ValueGlob::new(&value)));
        }
        Ok(HeaderMatcher { headers })
    }

    /// `Ok(())` when it matches, `Err(detail)` when not. `request` holds the request's
    /// header lines as sent (names in any case).
    pub(crate) fn check(
        &self,
        request: &[(&str, &str)],
        quantifier: Quantifier,
    ) -> Result<(), String> {
        for (name, glob) in &self.headers {
            let values: Vec<&str> = request
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| *v)
                .collect();
            match check_values(glob, &values, quantifier) {
                Ok(()) => {}
                Err(None) => return Err(format!("header \"{name}\" is absent")),
                Err(Some(value)) => {
                    return Err(format!("header \"{name}\" is {value:?}, not \"{glob}\""))
                }
            }
        }
        Ok(())
    }
}

/// Sample values that match, for `policy diff`'s probe requests.
impl ValueGlob {
    /// A value that matches: the pattern with each `*` replaced by `x`.
    pub(crate) fn sample(&self) -> String {
        self.source.replace('*', "x")
    }
}

impl QueryMatcher {
    /// `(name, value)` pairs that match (one occurrence of each listed name).
    pub(crate) fn sample(&self) -> Vec<(String, String)> {
        self.params
            .iter()
            .map(|(name, glob)| (name.clone(), glob.sample()))
            .collect()
    }
}

impl HeaderMatcher {
    /// `(name, value)` header lines that match.
    pub(crate) fn sample(&self) -> Vec<(String, String)> {
        self.headers
            .iter()
            .map(|(name, glob)| (name.clone(), glob.sample()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_pattern_without_star_matches_only_itself(pattern in "[^*]{0,12}", value in ".{0,12}") {
            prop_assert_eq!(ValueGlob::new(&pattern).matches(&value), pattern == value);
        }

        #[test]
        fn star_infix_star_matches_every_string_containing_the_infix(
            before in ".{0,8}", infix in "[^*]{0,6}", after in ".{0,8}"
        ) {
            let glob = ValueGlob::new(&format!("*{infix}*"));
            let value = format!("{before}{infix}{after}");
            prop_assert!(glob.matches(&value));
        }

        #[test]
        fn encoded_queries_decode_back(name in "[a-z]{1,8}", value in ".{0,16}") {
            let encoded: String = value
                .bytes()
                .map(|b| format!("%{b:02X}"))
                .collect();
            let parsed = parse_query(&format!("{name}={encoded}")).expect("valid");
            prop_assert_eq!(parsed, vec![(name, value)]);
        }
    }

    fn query(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn value_globs() {
        let table = [
            ("open", "open", true),
            ("open", "opened", false),
            ("*", "", true),
            ("*", "anything", true),
            ("v*", "v1", true),
            ("v*", "x1", false),
            ("*.json", "a.json", true),
            ("a*c", "abbbc", true),
            ("a*c", "abbb", false),
            ("Open", "open", false),
        ];
        for (pattern, value, want) in table {
            assert_eq!(
                ValueGlob::new(pattern).matches(value),
                want,
                "{pattern} vs {value}"
            );
        }
    }

    #[test]
    fn query_decoding() {
        let table = [
            ("a=1&b=2", Some(vec![("a", "1"), ("b", "2")])),
            ("a=x%20y&b=x+y", Some(vec![("a", "x y"), ("b", "x y")])),
            ("flag&&c=", Some(vec![("flag", ""), ("c", "")])),
            ("%73tate=open", Some(vec![("state", "open")])),
            ("a=%zz", None),
            ("a=%ff", None),
            ("a=%2", None),
        ];
        for (raw, want) in table {
            let want = want.map(|pairs| {
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect::<Vec<_>>()
            });
            assert_eq!(parse_query(raw), want, "{raw}");
        }
    }

    #[test]
    fn query_matching_table() {
        let matcher =
            QueryMatcher::parse(query(&[("state", "open"), ("page", "*")])).expect("matcher");
        let table = [
            ("state=open&page=2", Quantifier::All, true),
            ("page=&state=open", Quantifier::All, true),
            ("state=open", Quantifier::All, false),
            ("state=closed&page=1", Quantifier::All, false),
            ("state=open&state=closed&page=1", Quantifier::All, false),
            ("state=open&state=closed&page=1", Quantifier::Any, true),
            ("%73tate=open&page=1&other=x", Quantifier::All, true),
            ("", Quantifier::All, false),
        ];
        for (raw, quantifier, want) in table {
            let parsed = parse_query(raw).expect("decodes");
            assert_eq!(
                matcher.check(&parsed, quantifier).is_ok(),
                want,
                "{raw} {quantifier:?}"
            );
        }
        assert!(QueryMatcher::parse(query(&[])).is_err());
    }

    #[test]
    fn header_matching_table() {
        let matcher = HeaderMatcher::parse(query(&[
            ("X-GitHub-Event", "push"),
            ("user-agent", "git/*"),
        ]))
        .expect("matcher");
        type Case<'a> = (&'a [(&'a str, &'a str)], Quantifier, bool);
        let table: [Case<'_>; 5] = [
            (
                &[("x-github-event", "push"), ("User-Agent", "git/2.4")],
                Quantifier::All,
                true,
            ),
            (
                &[("X-GITHUB-EVENT", "push"), ("user-agent", "git/")],
                Quantifier::All,
                true,
            ),
            (
                &[("x-github-event", "Push"), ("user-agent", "git/2")],
                Quantifier::All,
                false,
            ),
            (&[("user-agent", "git/2")], Quantifier::All, false),
            (
                &[
                    ("x-github-event", "push"),
                    ("x-github-event", "ping"),
                    ("user-agent", "git/2"),
                ],
                Quantifier::All,
                false,
            ),
        ];
        for (headers, quantifier, want) in table {
            assert_eq!(
                matcher.check(headers, quantifier).is_ok(),
                want,
                "{headers:?}"
            );
        }
        assert!(HeaderMatcher::parse(query(&[("bad name", "x")])).is_err());
        assert!(HeaderMatcher::parse(query(&[("A", "x"), ("a", "y")])).is_err());
    }
}
