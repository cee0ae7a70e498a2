//! Advisory lints for `airlock policy check`: rules that work as written but are probably
//! wider than their author meant. Unlike [`Policy::lints`] (rules that can never decide),
//! these do not fail `check` unless `--strict` is given.

use ipnet::IpNet;

use crate::matcher::HostPattern;
use crate::{Action, Lint, Policy};

/// Suffixes under which anyone can publish a host of their own (hosting platforms, object
/// stores, tunnels). A wildcard under one of them lets data reach hosts the author does not
/// control. A sample of the Public Suffix List's private section
/// (<https://publicsuffix.org/list/>), the ones agents meet most.
pub(crate) const SHARED_HOSTING: &[&str] = &[
    "amazonaws.com",
    "appspot.com",
    "azurewebsites.net",
    "blob.core.windows.net",
    "cloudfront.net",
    "firebaseapp.com",
    "fly.dev",
    "github.io",
    "githubusercontent.com",
    "glitch.me",
    "herokuapp.com",
    "netlify.app",
    "ngrok-free.app",
    "ngrok.io",
    "onrender.com",
    "pages.dev",
    "run.app",
    "storage.googleapis.com",
    "trycloudflare.com",
    "vercel.app",
    "web.app",
    "workers.dev",
];

/// Special-purpose ranges the dialer refuses unless `allow_private` names them (docs/policy.md
/// invariant 1); an `allow_private` entry that overlaps none of them has no effect.
const SPECIAL_PURPOSE: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/96",
    "::1/128",
    "::ffff:0:0/96",
    "64:ff9b::/48",
    "2001::/32",
    "2002::/16",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

impl Policy {
    /// Advisory lints: wildcards under shared-hosting suffixes, pass rules that pass writes,
    /// `allow_private` entries that are too wide, pointless or name loopback, and a `pass`
    /// default, and body matchers without `limit.body_bytes` (they decide as written;
    /// bodies over [`crate::DEFAULT_BODY_MATCH_BYTES`] are denied). `index` 0 means the
    /// top level of the file.
    pub fn warnings(&self) -> Vec<Lint> {
        let mut out = Vec::new();
        let top = |message: String| Lint {
            rule: "(top level)".into(),
            index: 0,
            message,
        };
        if self.default == Action::Pass {
            out.push(top(
                "default = \"pass\": every request no rule names leaves at once, writes included; \
                 prefer \"deny\" (or \"stage\") and list what passes"
                    .into(),
            ));
        }
        for net in &self.allow_private {
            if let Some(message) = allow_private_problem(net) {
                out.push(top(message));
            }
        }
        for (index, rule) in self.rules.iter().enumerate() {
            let mut warn = |message: String| {
                out.push(Lint {
                    rule: rule.id.clone(),
                    index: index + 1,
                    message,
                })
            };
            for host in rule.host.iter().filter(|_| rule.action != Action::Deny) {
                if let HostPattern::OneLabel(suffix) | HostPattern::AnyDepth(suffix) = host {
                    if let Some(shared) = SHARED_HOSTING
                        .iter()
                        .find(|s| suffix == *s || suffix.ends_with(&format!(".{s}")))
                    {
                        warn(format!(
                            "over-broad wildcard: anyone can publish a host under {shared}, so \
                             \"{host}\" lets data reach hosts you do not control; name the exact host"
                        ));
                    }
                }
            }
            if rule.action == Action::Pass && rule.method.is_none() {
                warn(
                    "passes every method: writes (POST, PUT, PATCH, DELETE) leave at once, \
                     unstaged and unreviewed; add method = \"read\", or put a stage rule for \
                     writes above it"
                        .into(),
                );
            }
            for net in &rule.allow_private {
                if let Some(message) = allow_private_problem(net) {
                    warn(message);
                }
            }
            // The rule decides as written; only bodies over the default limit are refused.
            if rule.has_body_matcher() && rule.limits().body_bytes.is_none() {
                warn(format!(
                    "body matcher without limit.body_bytes: bodies over the default {} bytes \
                     are denied (body_too_large); set limit = {{ body_bytes = N }} to choose",
                    crate::DEFAULT_BODY_MATCH_BYTES
                ));
            }
        }
        out.extend(self.credential_warnings());
        out.extend(self.flow_warnings());
        out
    }
}

fn allow_private_problem(net: &IpNet) -> Option<String> {
    let special: Vec<IpNet> = SPECIAL_PURPOSE
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect();
    let too_wide = match net {
        IpNet::V4(v4) => v4.prefix_len() < 8,
        IpNet::V6(v6) => v6.prefix_len() < 16,
    };
    if too_wide {
        return Some(format!(
            "allow_private \"{net}\" spans far more than private ranges; name the exact \
             private network your origins use"
        ));
    }
    if !special.iter().any(|s| overlaps(s, net)) {
        return Some(format!(
            "allow_private \"{net}\" names only public addresses, which need no opt-in: \
             it has no effect"
        ));
    }
    let loopback: [IpNet; 2] = [
        IpNet::V4("127.0.0.0/8".parse().ok()?),
        IpNet::V6("::1/128".parse().ok()?),
    ];
    if loopback.iter().any(|l| overlaps(l, net)) {
        return Some(format!(
            "allow_private \"{net}\" reaches services on airlock's own machine (loopback); \
             meant for tests: airlock's own listeners stay refused, any other local service \
             on a port a rule names is reachable"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::Policy;

    fn warnings(text: &str) -> Vec<String> {
        Policy::from_toml_str(text, "<test>")
            .expect("policy")
            .warnings()
            .into_iter()
            .map(|l| format!("{}: {}", l.rule, l.message))
            .collect()
    }

    #[test]
    fn each_advisory_lint_fires_on_its_case_and_not_on_a_tight_policy() {
        let loose = warnings(
            r#"version = 1
default = "pass"
allow_private = ["0.0.0.0/0", "8.8.8.0/24", "127.0.0.0/8", "10.1.0.0/16"]
[[rule]]
id = "pages"
host = "*.github.io"
method = "read"
action = "pass"
[[rule]]
id = "all-of-api"
host = "api.example.com"
action = "pass"
"#,
        );
        let expect = [
            "(top level): default = \"pass\"",
            "(top level): allow_private \"0.0.0.0/0\" spans",
            "(top level): allow_private \"8.8.8.0/24\" names only public",
            "(top level): allow_private \"127.0.0.0/8\" reaches services",
            "pages: over-broad wildcard",
            "all-of-api: passes every method",
        ];
        assert_eq!(loose.len(), expect.len(), "{loose:#?}");
        for (got, want) in loose.iter().zip(expect) {
            assert!(got.starts_with(want), "{got} / {want}");
        }
        let tight = warnings(
            r#"version = 1
allow_private = ["10.1.0.0/16"]
[[rule]]
id = "api-read"
host = "api.example.com"
method = "read"
action = "pass"
[[rule]]
id = "hooks"
host = "*.hooks.example.com"
action = "stage"
"#,
        );
        assert!(tight.is_empty(), "{tight:#?}");
    }
}
