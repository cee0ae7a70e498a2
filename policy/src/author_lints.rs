//! More of `airlock policy check`'s lints and warnings, about body matchers,
//! credentials and flow rules. Each names the rule (or `credential.NAME`) and ends with what to do.

use crate::matcher::{HostPattern, MethodMatcher};
use crate::warnings::SHARED_HOSTING;
use crate::{Action, FlowTo, Lint, Policy, Scheme};

impl Policy {
    /// Lints (`check` fails): a `jsonrpc` matcher on a `method = "read"` rule. The only
    /// reads with a JSON body are GraphQL queries (a GET with a body is a write; a git
    /// fetch's body is not JSON), and a GraphQL request is never a JSON-RPC call, so such
    /// a rule never matches. (`json` and `graphql` matchers on a read rule see GraphQL
    /// query bodies: no lint.)
    pub(crate) fn body_lints(&self) -> Vec<Lint> {
        let mut out = Vec::new();
        for (index, rule) in self.rules.iter().enumerate() {
            if rule.body.as_ref().is_some_and(|body| body.has_jsonrpc())
                && matches!(rule.method, Some(MethodMatcher::Read))
            {
                out.push(Lint {
                    rule: rule.id.clone(),
                    index: index + 1,
                    message: "never matches: a jsonrpc matcher on method = \"read\" — the only reads with a JSON body are GraphQL queries (a GET with a body is a write), never JSON-RPC calls; use method = [\"POST\"], or remove the jsonrpc matcher".into(),
                });
            }
        }
        out
    }

    /// Warnings (`check --strict` fails): a `[[flow]]` whose `to` list overlaps no stage
    /// or pass rule's host (and the default does not stage): flows judge staged effects
    /// and requests about to pass, so such a flow never decides anything. `rule` is `flow "ID"`, `index` 0.
    pub(crate) fn flow_warnings(&self) -> Vec<Lint> {
        let mut out = self.flow_pass_warnings();
        out.extend(self.flow_model_warnings());
        if self.default == Action::Stage {
            return out;
        }
        // Flows judge staged effects and requests about to pass.
        let staged: Vec<&HostPattern> = self
            .rules
            .iter()
            .filter(|r| r.action != Action::Deny)
            .flat_map(|r| r.host.iter())
            .collect();
        for flow in &self.flows {
            let FlowTo::Hosts(globs) = flow.to() else {
                continue;
            };
            let patterns: Vec<HostPattern> = globs
                .iter()
                .filter_map(|g| HostPattern::parse(g).ok())
                .collect();
            if patterns
                .iter()
                .any(|p| staged.iter().any(|s| hosts_overlap(p, s)))
            {
                continue;
            }
            out.push(Lint {
                rule: format!("flow \"{}\"", flow.id()),
                index: 0,
                message: format!(
                    "to {globs:?} matches no host a stage or pass rule names: flows judge staged effects and passed requests, so this flow never applies; name the hosts your rules stage or pass to, or use \"external\""
                ),
            });
        }
        out
    }

    /// Warnings (`check --strict` fails): a `[[flow]]` guarding reads of labelled (or
    /// named) rules while a pass rule lets writes (any method but a read) reach another
    /// host its `to` covers. A passed request is checked against the run's guarded reads
    /// before it leaves (docs/lineage.md, "Flows on the pass path"), but only for what
    /// lineage can read, and a review flow can only refuse it. Read
    /// rules are not named, though a GET's query can carry data too (docs/policy.md says
    /// so): every policy has them. The built-in `credential` label, which any read may
    /// carry, is left out: it would name every pass rule.
    fn flow_pass_warnings(&self) -> Vec<Lint> {
        let mut out = Vec::new();
        for flow in &self.flows {
            let sources: Vec<&crate::matcher::HostSet> = self
                .rules
                .iter()
                .filter(|r| r.action == Action::Pass)
                .filter(|r| {
                    r.labels.iter().any(|l| flow.from().contains(l)) || flow.rules().contains(&r.id)
                })
                .map(|r| &r.host)
                .collect();
            if sources.is_empty() {
                continue;
            }
            let to: Vec<HostPattern> = match flow.to() {
                FlowTo::Hosts(globs) => globs
                    .iter()
                    .filter_map(|g| HostPattern::parse(g).ok())
                    .collect(),
                _ => Vec::new(),
            };
            let leaks: Vec<String> = self
                .rules
                .iter()
                .filter(|r| r.action == Action::Pass && passes_writes(r))
                .filter(|r| !sources.iter().any(|s| s.includes(&r.host)))
                .filter(|r| match flow.to() {
                    FlowTo::Hosts(_) => to
                        .iter()
                        .any(|t| r.host.iter().any(|h| hosts_overlap(t, h))),
                    FlowTo::External | FlowTo::Any => true,
                })
                .map(|r| format!("\"{}\"", r.id))
                .collect();
            if leaks.is_empty() {
                continue;
            }
            out.push(Lint {
                rule: format!("flow \"{}\"", flow.id()),
                index: 0,
                message: format!(
                    "guards labelled reads, and pass rule(s) {} let writes reach other hosts at once: the flow checks each before it passes and refuses one that carries guarded data in a form lineage reads{}, but what lineage cannot read (encrypted, compressed beyond its decoders) leaves unreviewed; stage writes to those hosts (action = \"stage\") to have a person decide, or give those rules method = \"read\"",
                    leaks.join(", "),
                    match flow.action() {
                        crate::FlowAction::Review => " (403 flow_review_required: a pass cannot wait for a person, so this review flow refuses it)",
                        crate::FlowAction::Block => " (403 flow_blocked)",
                    }
                ),
            });
        }
        out
    }

    /// Warnings (`check --strict` fails): a `[[flow]]` whose `to` covers a model API host
    /// ([`MODEL_APIS`]) that a rule of the policy names, without naming it in `except`.
    /// Once the agent has read guarded data its prompts to its model carry it, by design;
    /// the flow would judge them like any other exit.
    fn flow_model_warnings(&self) -> Vec<Lint> {
        let mut out = Vec::new();
        for flow in &self.flows {
            let to: Vec<HostPattern> = match flow.to() {
                FlowTo::Hosts(globs) => globs
                    .iter()
                    .filter_map(|g| HostPattern::parse(g).ok())
                    .collect(),
                FlowTo::External | FlowTo::Any => Vec::new(),
            };
            for model in MODEL_APIS {
                let Ok(model_host) = HostPattern::parse(model) else {
                    continue;
                };
                let covered = match flow.to() {
                    FlowTo::Hosts(_) => to.iter().any(|t| hosts_overlap(t, &model_host)),
                    FlowTo::External | FlowTo::Any => true,
                };
                if !covered || flow.excepts(model) {
                    continue;
                }
                let Some(rule) = self.rules.iter().find(|r| {
                    r.action != Action::Deny && r.host.iter().any(|h| hosts_overlap(h, &model_host))
                }) else {
                    continue;
                };
                out.push(Lint {
                    rule: format!("flow \"{}\"", flow.id()),
                    index: 0,
                    message: format!(
                        "its `to` covers {model} (rule \"{}\"), a model API: once the agent has read guarded data, its requests to its own model carry it and this flow judges them too; if the agent's model lives there, add except = [\"{model}\"] to the flow (docs/policy.md#flow-rules)",
                        rule.id
                    ),
                });
            }
        }
        out
    }

    /// Warnings (`check --strict` fails): a rule that injects a credential but also
    /// matches plain `http` (the secret would cross the network unencrypted), and a
    /// credential whose bind has a wildcard under a suffix where anyone can publish a host.
    pub(crate) fn credential_warnings(&self) -> Vec<Lint> {
        let mut out = Vec::new();
        for (index, rule) in self.rules.iter().enumerate() {
            let Some(name) = rule.inject() else {
                continue;
            };
            if rule.scheme != Some(Scheme::Https) {
                out.push(Lint {
                    rule: rule.id.clone(),
                    index: index + 1,
                    message: format!(
                        "injects credential \"{name}\" but also matches plain http: the secret would cross the network unencrypted; add scheme = \"https\""
                    ),
                });
            }
        }
        for credential in self.credentials() {
            for host in &credential.bind().hosts {
                if let HostPattern::OneLabel(suffix) | HostPattern::AnyDepth(suffix) = host {
                    if let Some(shared) = SHARED_HOSTING
                        .iter()
                        .find(|s| suffix == *s || suffix.ends_with(&format!(".{s}")))
                    {
                        out.push(Lint {
                            rule: format!("credential.{}", credential.name()),
                            index: 0,
                            message: format!(
                                "bind host \"{host}\": anyone can publish a host under {shared}, so the secret may go to hosts you do not control; name exact hosts in bind.hosts"
                            ),
                        });
                    }
                }
            }
        }
        out
    }
}

/// Whether some host matches both patterns (judged on a sample host of each).
/// Whether a pass rule lets anything but reads through: no `method`, `"write"`, or a list
/// naming a method other than GET, HEAD and OPTIONS.
/// The hosts of the model APIs agents talk to most (each provider's API reference names
/// its base URL), for [`Policy::flow_model_warnings`].
pub(crate) const MODEL_APIS: &[&str] = &[
    "api.anthropic.com",
    "api.openai.com",
    "generativelanguage.googleapis.com",
    "aiplatform.googleapis.com",
    "api.mistral.ai",
    "api.groq.com",
    "api.deepseek.com",
    "api.together.xyz",
    "api.fireworks.ai",
    "api.cohere.com",
    "api.x.ai",
    "openrouter.ai",
];

fn passes_writes(rule: &crate::Rule) -> bool {
    match &rule.method {
        None | Some(MethodMatcher::Write) => true,
        Some(MethodMatcher::Read) => false,
        Some(MethodMatcher::List(methods)) => methods
            .iter()
            .any(|m| !matches!(m.as_str(), "GET" | "HEAD" | "OPTIONS")),
    }
}

fn hosts_overlap(a: &HostPattern, b: &HostPattern) -> bool {
    let sample = |p: &HostPattern| match p {
        HostPattern::Exact(name) => name.clone(),
        HostPattern::Ip(ip) => ip.to_string(),
        HostPattern::OneLabel(suffix) => format!("sample.{suffix}"),
        HostPattern::AnyDepth(suffix) => format!("deep.sample.{suffix}"),
    };
    let hits = |p: &HostPattern, q: &HostPattern| {
        crate::matcher::Host::parse(&sample(q)).is_some_and(|h| p.matches(&h))
    };
    hits(a, b) || hits(b, a)
}

#[cfg(test)]
mod tests {
    use crate::Policy;

    fn messages(text: &str) -> (Vec<String>, Vec<String>) {
        let policy = Policy::from_toml_str(text, "<test>").expect("valid policy");
        let show = |lints: Vec<crate::Lint>| {
            lints
                .into_iter()
                .map(|l| format!("{} #{}: {}", l.rule, l.index, l.message))
                .collect()
        };
        (show(policy.lints()), show(policy.warnings()))
    }

    const CREDENTIAL: &str =
        "[credential.c]\nsource = { env = \"X\" }\nplace = { query = \"k\" }\n";

    #[test]
    fn body_and_credential_lints_table() {
        // (policy, lint substrings, warning substrings): exactly these many of each.
        let rows: [(String, &[&str], &[&str]); 6] = [
            (
                "version = 1\n[[rule]]\nid = \"r\"\nhost = \"a.example.com\"\nmethod = \"read\"\njsonrpc = { method = \"tools/call\" }\nlimit = { body_bytes = 10 }\naction = \"pass\"\n".into(),
                &["r #1: never matches: a jsonrpc matcher on method = \"read\""],
                &[],
            ),
            // A json or graphql matcher on a read rule sees GraphQL query bodies.
            (
                "version = 1\n[[rule]]\nid = \"r\"\nhost = \"a.example.com\"\nmethod = \"read\"\ngraphql = { name = \"Viewer*\" }\nlimit = { body_bytes = 10 }\naction = \"pass\"\n".into(),
                &[],
                &[],
            ),
            (
                "version = 1\n[[rule]]\nid = \"r\"\nhost = \"a.example.com\"\nmethod = [\"GET\"]\njson = { \"/a\" = \"b\" }\nlimit = { body_bytes = 10 }\naction = \"pass\"\n".into(),
                &[],
                &[],
            ),
            (
                format!("version = 1\n{CREDENTIAL}bind = {{ hosts = [\"api.example.com\"] }}\n[[rule]]\nid = \"r\"\nhost = \"api.example.com\"\nmethod = \"read\"\naction = \"pass\"\ninject = \"c\"\n"),
                &[],
                &["r #1: injects credential \"c\" but also matches plain http"],
            ),
            (
                format!("version = 1\n{CREDENTIAL}bind = {{ hosts = [\"api.example.com\"] }}\n[[rule]]\nid = \"r\"\nhost = \"api.example.com\"\nscheme = \"https\"\nmethod = \"read\"\naction = \"pass\"\ninject = \"c\"\n"),
                &[],
                &[],
            ),
            (
                format!("version = 1\n{CREDENTIAL}bind = {{ hosts = [\"*.github.io\"] }}\n[[rule]]\nid = \"r\"\nhost = \"me.github.io\"\nscheme = \"https\"\nmethod = \"read\"\naction = \"pass\"\ninject = \"c\"\n"),
                &[],
                &["credential.c #0: bind host \"*.github.io\": anyone can publish a host under github.io"],
            ),
        ];
        for (text, want_lints, want_warnings) in rows {
            let (lints, warnings) = messages(&text);
            assert_eq!(lints.len(), want_lints.len(), "{text}\n{lints:?}");
            for (got, want) in lints.iter().zip(want_lints) {
                assert!(got.starts_with(want), "{got}");
            }
            assert_eq!(warnings.len(), want_warnings.len(), "{text}\n{warnings:?}");
            for (got, want) in warnings.iter().zip(want_warnings) {
                assert!(got.starts_with(want), "{got}");
            }
        }
    }

    #[test]
    fn a_flow_whose_to_list_reaches_no_stage_or_pass_rule_is_warned_about() {
        let base = "version = 1\n[[rule]]\nid = \"vault\"\nhost = \"vault.example\"\nmethod = \"read\"\naction = \"pass\"\nlabels = [\"secret\"]\n[[rule]]\nid = \"hooks\"\nhost = \"**.hooks.example\"\naction = \"stage\"\n[[flow]]\nid = \"f\"\nfrom = [\"secret\"]\naction = \"block\"\n";
        for (to, warned) in [
            ("[\"a.hooks.example\"]", false),
            ("[\"*.hooks.example\"]", false),
            ("[\"chat.example\", \"**.b.hooks.example\"]", false),
            ("[\"chat.example\"]", true),
            ("\"external\"", false),
            ("\"any\"", false),
            // A pass rule's host counts: flows judge passes too.
            ("[\"vault.example\"]", false),
        ] {
            let (_, warnings) = messages(&format!("{base}to = {to}\n"));
            let hit = warnings.iter().any(|w| {
                w.starts_with("flow \"f\" #0: to [\"chat.example\"] matches no host a stage or pass rule names")
            });
            assert_eq!(hit, warned, "{to}: {warnings:?}");
            assert_eq!(warnings.len(), usize::from(warned), "{to}: {warnings:?}");
        }
        // With default = "stage" every host can be staged.
        let (_, warnings) = messages(&format!(
            "{}to = [\"chat.example\"]\n",
            base.replacen("version = 1\n", "version = 1\ndefault = \"stage\"\n", 1)
        ));
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn a_flow_names_pass_rules_that_let_writes_leave_unstaged() {
        let text = r#"version = 1
[[rule]]
id = "vault"
host = "vault.internal.example"
method = "read"
action = "pass"
labels = ["secret"]

[[rule]]
id = "docs"
host = "docs.example.com"
method = "read"
action = "pass"

[[rule]]
id = "paste"
host = "paste.example.net"
action = "pass"

[[flow]]
id = "no-secrets-out"
from = ["secret"]
action = "block"
"#;
        let (_, warnings) = messages(text);
        let found: Vec<&String> = warnings
            .iter()
            .filter(|w| w.contains("no-secrets-out"))
            .collect();
        assert_eq!(found.len(), 1, "{warnings:?}");
        assert!(
            found[0].contains("\"paste\"") && !found[0].contains("\"docs\""),
            "{found:?}"
        );
    }
}
