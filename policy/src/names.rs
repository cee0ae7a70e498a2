//! Which names a fenced run may resolve: airlock's DNS answers a name only when some rule
//! could allow a connection to it (docs/containment.md, "DNS").

use crate::decision::Decision;
use crate::matcher::Host;
use crate::obligation::Mode;
use crate::{Action, Policy};

impl Policy {
    /// Whether a run of `profile` may resolve `name` through airlock's DNS: `None` when
    /// some rule could allow a connection to it, else the decision that refuses it (the
    /// caller answers NXDOMAIN and journals the decision).
    ///
    /// Rules are read top-down by host and profile alone (no port, method or path is
    /// known to DNS), audit rules passed over:
    /// - a `pass`, `stage` or `tunnel` rule for the host allows the name;
    /// - a `deny` rule for the host with no content condition refuses it (`rule_deny`);
    ///   a conditional one is skipped, since other requests to the host may pass;
    /// - a host-level baseline deny refuses it first (`baseline_deny`).
    ///
    /// When no rule decides, a `deny` default refuses the name (`default_deny`) and any
    /// other default allows it. In audit mode every valid name is allowed, so each
    /// connection is decided (and recorded) on its own. A name that is not a valid host
    /// (RFC 1123 §2.1 labels) is refused with `default_deny`.
    pub fn resolves_for(&self, name: &str, profile: Option<&str>) -> Option<Decision> {
        let Some(host) = Host::parse(name) else {
            return Some(Decision::from_default(
                Action::Deny,
                &format!("the name {name:?} (not a valid host name)"),
            ));
        };
        for rule in self.baseline.iter() {
            if rule.host.matches(&host) && rule.applies_to_profile(profile) && rule.is_host_level()
            {
                return Some(Decision::baseline(&rule.id, rule.reason.as_deref()));
            }
        }
        if self.mode == Mode::Audit {
            return None;
        }
        for rule in self.rules.iter().filter(|rule| {
            rule.mode == Mode::Enforce
                && rule.host.matches(&host)
                && rule.applies_to_profile(profile)
        }) {
            match rule.action {
                Action::Pass | Action::Stage | Action::Tunnel => return None,
                Action::Deny if rule.is_host_level() => {
                    return Some(Decision::from_rule(
                        Action::Deny,
                        &rule.id,
                        rule.reason.as_deref(),
                    ))
                }
                Action::Deny => {}
            }
        }
        match self.default {
            Action::Deny | Action::Tunnel => Some(Decision::from_default(
                Action::Deny,
                &format!("connections to {host}, so its name does not resolve"),
            )),
            Action::Pass | Action::Stage => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> Policy {
        Policy::from_toml_str(text, "test").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_name_resolves_only_when_some_rule_could_allow_it() {
        let p = policy(
            r#"version = 1
default = "deny"
[[rule]]
id = "evil"
host = "evil.example.com"
action = "deny"
[[rule]]
id = "hooks-only"
host = "api.example.com"
method = "POST"
action = "deny"
[[rule]]
id = "api"
host = "*.example.com"
action = "stage"
[[rule]]
id = "ops"
host = "ops.internal"
profiles = ["ops"]
action = "pass"
"#,
        );
        assert_eq!(p.resolves_for("api.example.com", None), None);
        assert_eq!(p.resolves_for("x.example.com", None), None);
        assert_eq!(
            p.resolves_for("evil.example.com", None)
                .map(|d| d.reason_code),
            Some("rule_deny")
        );
        let unknown = p
            .resolves_for("exfil.attacker.test", None)
            .expect("refused");
        assert_eq!(unknown.reason_code, "default_deny");
        assert!(
            unknown.reason.contains("exfil.attacker.test"),
            "{}",
            unknown.reason
        );
        assert!(p.resolves_for("ops.internal", None).is_some());
        assert_eq!(p.resolves_for("ops.internal", Some("ops")), None);
        assert!(p.resolves_for("bad_name!", None).is_some());
    }

    #[test]
    fn a_pass_default_resolves_every_valid_name() {
        let p = policy("version = 1\ndefault = \"pass\"\n");
        assert_eq!(p.resolves_for("anything.test", None), None);
    }
}
