//! A rule's `host` when it may name several: `host = "a.example"` or
//! `host = ["pypi.org", "files.pythonhosted.org"]`, meaning "any of these".

use std::fmt;

use super::{Host, HostPattern};

/// One or more host patterns; a request's host matches when any of them matches it.
///
/// Never empty: [`HostSet::parse`] refuses an empty list, which would match nothing.
/// Duplicates (after normalisation) are refused too, so each pattern is written once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostSet(Vec<HostPattern>);

impl HostSet {
    /// Parses each glob with [`HostPattern::parse`]; the problem names the faulty entry.
    pub(crate) fn parse(raw: &[String]) -> Result<HostSet, String> {
        if raw.is_empty() {
            return Err("empty list matches no host; name at least one".into());
        }
        let mut patterns: Vec<HostPattern> = Vec::with_capacity(raw.len());
        for glob in raw {
            let pattern = HostPattern::parse(glob)?;
            if patterns.contains(&pattern) {
                return Err(format!("host \"{glob}\" is listed twice"));
            }
            patterns.push(pattern);
        }
        Ok(HostSet(patterns))
    }

    /// True when any pattern matches `host`.
    pub(crate) fn matches(&self, host: &Host) -> bool {
        self.0.iter().any(|pattern| pattern.matches(host))
    }

    /// True when every pattern of `other` is one of these (so this set matches every host
    /// `other` matches).
    pub(crate) fn includes(&self, other: &HostSet) -> bool {
        other.0.iter().all(|pattern| self.0.contains(pattern))
    }

    /// The patterns, in the order written.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, HostPattern> {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a HostSet {
    type Item = &'a HostPattern;
    type IntoIter = std::slice::Iter<'a, HostPattern>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// One pattern as written (`api.example.com`), several as `a.example, b.example`.
impl fmt::Display for HostSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, pattern) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{pattern}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(raw: &[&str]) -> Result<HostSet, String> {
        HostSet::parse(&raw.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn a_host_list_matches_any_of_its_hosts() {
        let hosts = set(&["pypi.org", "*.pythonhosted.org", "127.0.0.1"]).expect("parses");
        for (raw, want) in [
            ("pypi.org", true),
            ("PyPI.org.", true),
            ("files.pythonhosted.org", true),
            ("pythonhosted.org", false),
            ("a.b.pythonhosted.org", false),
            ("127.0.0.1", true),
            ("evil.org", false),
        ] {
            let host = Host::parse(raw).expect("host");
            assert_eq!(hosts.matches(&host), want, "{raw}");
        }
        assert_eq!(hosts.to_string(), "pypi.org, *.pythonhosted.org, 127.0.0.1");
    }

    #[test]
    fn a_host_list_refuses_empty_duplicate_and_bad_entries() {
        assert!(set(&[]).expect_err("refused").contains("empty list"));
        assert!(set(&["a.example", "A.example"])
            .expect_err("refused")
            .contains("listed twice"));
        let problem = set(&["a.example", "*"]).expect_err("refused");
        assert!(problem.contains("\"*\""), "{problem}");
    }

    proptest::proptest! {
        /// A list matches exactly the hosts one of its members matches.
        #[test]
        fn a_list_is_the_union_of_its_members(
            names in proptest::collection::vec("[a-c]{1,2}(\\.[a-c]{1,2}){1,2}", 1..4),
            probe in "[a-c]{1,2}(\\.[a-c]{1,2}){1,3}",
        ) {
            let mut unique = names.clone();
            unique.sort();
            unique.dedup();
            let globs: Vec<String> = unique
                .iter()
                .enumerate()
                .map(|(i, n)| if i % 2 == 1 { format!("*.{n}") } else { n.clone() })
                .collect();
            let Ok(hosts) = HostSet::parse(&globs) else { return Ok(()); };
            let host = Host::parse(&probe).expect("host");
            let any = globs
                .iter()
                .filter_map(|g| HostPattern::parse(g).ok())
                .any(|p| p.matches(&host));
            proptest::prop_assert_eq!(hosts.matches(&host), any);
        }
    }
}
