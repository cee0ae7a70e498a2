//! Table tests of `policy diff`.

use super::*;

fn policy(text: &str) -> Policy {
    Policy::from_toml_str(text, "<test>").expect("valid policy")
}

const OLD: &str = r#"
version = 1
[[rule]]
id = "gh-read"
host = "api.github.com"
method = "read"
action = "pass"

[[rule]]
id = "gh-pulls"
host = "api.github.com"
method = ["POST"]
path = "/repos/*/*/pulls"
action = "stage"

[[rule]]
id = "hooks"
host = "*.hooks.example"
action = "stage"
"#;

#[test]
fn widening_a_stage_rule_to_pass_is_reported_as_a_widening() {
    let new = OLD.replacen(
        "path = \"/repos/*/*/pulls\"\naction = \"stage\"",
        "path = \"/repos/*/*/pulls\"\naction = \"pass\"",
        1,
    );
    let diff = policy(OLD).diff(&policy(&new));
    assert!(diff.widens());
    assert_eq!(diff.rules_changed, ["gh-pulls"]);
    let widened: Vec<_> = diff
        .changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Widens)
        .map(|c| (c.method.as_str(), c.url.as_str()))
        .collect();
    // A rule without `scheme` matches plain http too.
    assert_eq!(
        widened,
        [
            ("POST", "http://api.github.com/repos/x/x/pulls"),
            ("POST", "https://api.github.com/repos/x/x/pulls")
        ]
    );
}

#[test]
fn removing_a_rule_narrows_what_it_allowed_and_names_it() {
    let new = OLD.replacen(
        "[[rule]]\nid = \"hooks\"\nhost = \"*.hooks.example\"\naction = \"stage\"\n",
        "",
        1,
    );
    let diff = policy(OLD).diff(&policy(&new));
    assert!(!diff.widens());
    assert_eq!(diff.rules_removed, ["hooks"]);
    assert!(diff.changes.iter().all(|c| c.kind == ChangeKind::Narrows));
    assert!(diff
        .changes
        .iter()
        .any(|c| c.url == "https://sample.hooks.example/" && c.new_rule.is_none()));
}

#[test]
fn a_default_change_shows_on_unlisted_hosts() {
    let new = format!(
        "default = \"stage\"\n{}",
        OLD.trim_start().replacen("version = 1\n", "", 1)
    );
    let new = format!("version = 1\n{new}");
    let diff = policy(OLD).diff(&policy(&new));
    assert_eq!(diff.default, Some((Action::Deny, Action::Stage)));
    assert!(diff.widens());
    assert!(diff
        .changes
        .iter()
        .any(|c| c.url.starts_with("https://unlisted.") && c.new_action == Action::Stage));
}

#[test]
fn identical_policies_have_no_changes() {
    let diff = policy(OLD).diff(&policy(OLD));
    assert!(diff.changes.is_empty() && !diff.widens() && !diff.rules_reordered);
    assert!(diff.rules_added.is_empty() && diff.rules_removed.is_empty());
}

#[test]
fn reordering_a_shadowing_rule_is_seen() {
    let text = r#"
version = 1
[[rule]]
id = "deny-admin"
host = "api.example.com"
path = "/admin/**"
action = "deny"

[[rule]]
id = "all"
host = "api.example.com"
action = "pass"
"#;
    let swapped = r#"
version = 1
[[rule]]
id = "all"
host = "api.example.com"
action = "pass"

[[rule]]
id = "deny-admin"
host = "api.example.com"
path = "/admin/**"
action = "deny"
"#;
    let diff = policy(text).diff(&policy(swapped));
    assert!(diff.rules_reordered);
    assert!(diff.widens(), "{diff:#?}");
    assert!(diff
        .changes
        .iter()
        .any(|c| c.url == "https://api.example.com/admin/x" && c.new_action == Action::Pass));
}

/// One table row: what `diff` must report for OLD → NEW.
struct Row {
    name: &'static str,
    old: &'static str,
    new: &'static str,
    widens: bool,
    /// `(kind, credential, substring of what)`, exactly these, in order.
    credentials: &'static [(ChangeKind, &'static str, &'static str)],
    /// `(kind, method, substring of url, substring of body)` that must be among the
    /// probe changes.
    probes: &'static [(ChangeKind, &'static str, &'static str, &'static str)],
}

#[test]
fn credential_reach_and_content_matchers_table() {
    let rows = [
        Row {
            name: "a credential added and injected on reads is new reach",
            old: "version = 1\n[[rule]]\nid = \"gh-read\"\nhost = \"api.github.com\"\nmethod = \"read\"\naction = \"pass\"\n",
            new: "version = 1\n[credential.gh]\nsource = { env = \"X\" }\nbind = { hosts = [\"api.github.com\"] }\nplace = { header = \"authorization\", format = \"Bearer {}\" }\n[[rule]]\nid = \"gh-read\"\nhost = \"api.github.com\"\nmethod = \"read\"\naction = \"pass\"\ninject = \"gh\"\n",
            widens: true,
            credentials: &[
                (ChangeKind::Widens, "gh", "credential added"),
                (ChangeKind::Widens, "gh", "rule \"gh-read\" now injects it"),
            ],
            probes: &[(ChangeKind::Widens, "GET", "https://api.github.com/", "")],
        },
        Row {
            name: "a bind host added",
            old: "version = 1\n[credential.gh]\nsource = { env = \"X\" }\nbind = { hosts = [\"api.github.com\"] }\nplace = { query = \"k\" }\n[[rule]]\nid = \"r\"\nhost = \"api.github.com\"\naction = \"stage\"\ninject = \"gh\"\n",
            new: "version = 1\n[credential.gh]\nsource = { env = \"X\" }\nbind = { hosts = [\"api.github.com\", \"uploads.github.com\"] }\nplace = { query = \"k\" }\n[[rule]]\nid = \"r\"\nhost = \"api.github.com\"\naction = \"stage\"\ninject = \"gh\"\n",
            widens: true,
            credentials: &[(ChangeKind::Widens, "gh", "bind host \"uploads.github.com\" added")],
            probes: &[],
        },
        Row {
            name: "bind paths dropped widen; bind methods added narrow",
            old: "version = 1\n[credential.gh]\nsource = { env = \"X\" }\nbind = { hosts = [\"api.github.com\"], paths = [\"/repos/**\"] }\nplace = { query = \"k\" }\n",
            new: "version = 1\n[credential.gh]\nsource = { env = \"X\" }\nbind = { hosts = [\"api.github.com\"], methods = \"read\" }\nplace = { query = \"k\" }\n",
            widens: true,
            credentials: &[
                (ChangeKind::Widens, "gh", "bind paths removed: any path"),
                (ChangeKind::Narrows, "gh", "bind methods limited to read"),
            ],
            probes: &[],
        },
        Row {
            name: "a bind path added beside another",
            old: "version = 1\n[credential.gh]\nsource = { env = \"X\" }\nbind = { hosts = [\"api.github.com\"], paths = [\"/repos/**\"] }\nplace = { query = \"k\" }\n",
            new: "version = 1\n[credential.gh]\nsource = { env = \"X\" }\nbind = { hosts = [\"api.github.com\"], paths = [\"/repos/**\", \"/user\"] }\nplace = { query = \"k\" }\n",
            widens: true,
            credentials: &[(ChangeKind::Widens, "gh", "bind path \"/user\" added")],
            probes: &[],
        },
        Row {
            name: "an inject removed narrows",
            old: "version = 1\n[credential.gh]\nsource = { env = \"X\" }\nbind = { hosts = [\"api.github.com\"] }\nplace = { query = \"k\" }\n[[rule]]\nid = \"gh-read\"\nhost = \"api.github.com\"\nmethod = \"read\"\naction = \"pass\"\ninject = \"gh\"\n",
            new: "version = 1\n[credential.gh]\nsource = { env = \"X\" }\nbind = { hosts = [\"api.github.com\"] }\nplace = { query = \"k\" }\n[[rule]]\nid = \"gh-read\"\nhost = \"api.github.com\"\nmethod = \"read\"\naction = \"pass\"\n",
            widens: false,
            credentials: &[(ChangeKind::Narrows, "gh", "rule \"gh-read\" no longer injects it")],
            probes: &[(ChangeKind::Narrows, "GET", "https://api.github.com/", "")],
        },
        Row {
            name: "a json rule turned from stage to pass shows on a body built from its pointers",
            old: "version = 1\n[[rule]]\nid = \"hooks\"\nhost = \"ci.example.com\"\nmethod = [\"POST\"]\njson = { \"/action\" = \"open*\", \"/pull/draft\" = false }\nlimit = { body_bytes = 1024 }\naction = \"stage\"\n",
            new: "version = 1\n[[rule]]\nid = \"hooks\"\nhost = \"ci.example.com\"\nmethod = [\"POST\"]\njson = { \"/action\" = \"open*\", \"/pull/draft\" = false }\nlimit = { body_bytes = 1024 }\naction = \"pass\"\n",
            widens: true,
            credentials: &[],
            probes: &[(
                ChangeKind::Widens,
                "POST",
                "https://ci.example.com/",
                r#"{"action":"openx","pull":{"draft":false}}"#,
            )],
        },
        Row {
            name: "a graphql mutation rule narrowed to one name",
            old: "version = 1\n[[rule]]\nid = \"mutations\"\nhost = \"api.github.com\"\nmethod = [\"POST\"]\npath = \"/graphql\"\ngraphql = { operation = \"mutation\", name = \"create*\" }\nlimit = { body_bytes = 1024 }\naction = \"pass\"\n",
            new: "version = 1\n[[rule]]\nid = \"mutations\"\nhost = \"api.github.com\"\nmethod = [\"POST\"]\npath = \"/graphql\"\ngraphql = { operation = \"mutation\", name = \"createIssue\" }\nlimit = { body_bytes = 1024 }\naction = \"pass\"\n",
            widens: false,
            credentials: &[],
            probes: &[(
                ChangeKind::Narrows,
                "POST",
                "https://api.github.com/graphql",
                "mutation createx",
            )],
        },
        Row {
            name: "a query deny removed shows on a URL with its parameters",
            old: "version = 1\n[[rule]]\nid = \"no-closed\"\nhost = \"api.github.com\"\nmethod = \"read\"\nquery = { state = \"closed all\" }\naction = \"deny\"\n[[rule]]\nid = \"reads\"\nhost = \"api.github.com\"\nmethod = \"read\"\naction = \"pass\"\n",
            new: "version = 1\n[[rule]]\nid = \"reads\"\nhost = \"api.github.com\"\nmethod = \"read\"\naction = \"pass\"\n",
            widens: true,
            credentials: &[],
            probes: &[(
                ChangeKind::Widens,
                "GET",
                "https://api.github.com/?state=closed+all",
                "",
            )],
        },
        Row {
            name: "a header deny changed to another value",
            old: "version = 1\n[[rule]]\nid = \"no-push\"\nhost = \"ci.example.com\"\nheaders = { \"x-event\" = \"push\" }\naction = \"deny\"\n[[rule]]\nid = \"all\"\nhost = \"ci.example.com\"\nmethod = [\"POST\"]\naction = \"stage\"\n",
            new: "version = 1\n[[rule]]\nid = \"no-push\"\nhost = \"ci.example.com\"\nheaders = { \"x-event\" = \"pull\" }\naction = \"deny\"\n[[rule]]\nid = \"all\"\nhost = \"ci.example.com\"\nmethod = [\"POST\"]\naction = \"stage\"\n",
            widens: true,
            credentials: &[],
            probes: &[
                (ChangeKind::Widens, "POST", "https://ci.example.com/", ""),
                (ChangeKind::Narrows, "POST", "https://ci.example.com/", ""),
            ],
        },
        Row {
            name: "an MCP tool rule widened to every tool",
            old: "version = 1\n[[rule]]\nid = \"mcp\"\nhost = \"mcp.example.com\"\nmethod = [\"POST\"]\njsonrpc = { method = \"tools/call\", tool = \"search\" }\nlimit = { body_bytes = 1024 }\naction = \"pass\"\n[[rule]]\nid = \"mcp-rest\"\nhost = \"mcp.example.com\"\nmethod = [\"POST\"]\njsonrpc = { method = \"tools/call\" }\nlimit = { body_bytes = 1024 }\naction = \"stage\"\n",
            new: "version = 1\n[[rule]]\nid = \"mcp\"\nhost = \"mcp.example.com\"\nmethod = [\"POST\"]\njsonrpc = { method = \"tools/call\" }\nlimit = { body_bytes = 1024 }\naction = \"pass\"\n",
            widens: true,
            credentials: &[],
            probes: &[(
                ChangeKind::Widens,
                "POST",
                "https://mcp.example.com/",
                r#""method":"tools/call""#,
            )],
        },
    ];
    for row in rows {
        let diff = policy(row.old).diff(&policy(row.new));
        assert_eq!(diff.widens(), row.widens, "{}: {diff:#?}", row.name);
        let credentials: Vec<(ChangeKind, &str, &str)> = diff
            .credentials
            .iter()
            .map(|c| (c.kind, c.credential.as_str(), c.what.as_str()))
            .collect();
        assert_eq!(
            credentials.len(),
            row.credentials.len(),
            "{}: {credentials:?}",
            row.name
        );
        for ((kind, name, what), (want_kind, want_name, want_what)) in
            credentials.iter().zip(row.credentials)
        {
            assert!(
                kind == want_kind && name == want_name && what.contains(want_what),
                "{}: {credentials:?}",
                row.name
            );
        }
        for (kind, method, url, body) in row.probes {
            assert!(
                diff.changes.iter().any(|c| c.kind == *kind
                    && c.method == *method
                    && c.url == *url
                    && c.body.as_deref().unwrap_or("").contains(body)),
                "{}: no {kind:?} {method} {url} {body}: {:#?}",
                row.name,
                diff.changes
            );
        }
    }
    // The header probes carry the header values that exercise the rule.
    let diff = policy(rows_header_old()).diff(&policy(&rows_header_old().replace("push", "pull")));
    assert!(diff
        .changes
        .iter()
        .any(|c| c.headers == [("x-event".to_owned(), "push".to_owned())]
            && c.kind == ChangeKind::Widens));
}

fn rows_header_old() -> &'static str {
    "version = 1\n[[rule]]\nid = \"no-push\"\nhost = \"ci.example.com\"\nheaders = { \"x-event\" = \"push\" }\naction = \"deny\"\n[[rule]]\nid = \"all\"\nhost = \"ci.example.com\"\nmethod = [\"POST\"]\naction = \"stage\"\n"
}

#[test]
fn opening_a_private_range_is_a_widening_and_closing_it_a_narrowing() {
    let old = "version = 1\n[[rule]]\nid = \"api\"\nhost = \"api.internal.example\"\nmethod = \"read\"\naction = \"pass\"\n";
    let new = "version = 1\nallow_private = [\"10.0.0.0/8\"]\n[[rule]]\nid = \"api\"\nhost = \"api.internal.example\"\nmethod = \"read\"\naction = \"pass\"\nallow_private = [\"192.168.1.0/24\"]\n";
    let parse = |text: &str| crate::Policy::from_toml_str(text, "<test>").expect("policy");
    let diff = parse(old).diff(&parse(new));
    assert!(diff.widens(), "{diff:#?}");
    let opened: Vec<(&str, &str)> = diff
        .private
        .iter()
        .map(|c| {
            assert_eq!(c.kind, ChangeKind::Widens);
            (c.scope.as_str(), c.network.as_str())
        })
        .collect();
    assert_eq!(
        opened,
        [("(top level)", "10.0.0.0/8"), ("api", "192.168.1.0/24")]
    );
    let back = parse(new).diff(&parse(old));
    assert!(!back.widens());
    assert!(back.private.iter().all(|c| c.kind == ChangeKind::Narrows));
    assert_eq!(back.private.len(), 2);
}

const FLOWS: &str = r#"
version = 1
[[rule]]
id = "vault"
host = "vault.example"
method = "read"
action = "pass"
labels = ["secret", "internal"]

[[rule]]
id = "wiki"
host = "wiki.example"
method = "read"
action = "pass"
labels = ["internal"]

[[rule]]
id = "hooks"
host = "*.hooks.example"
action = "stage"

[[flow]]
id = "no-secrets-out"
from = ["secret", "credential"]
rules = ["vault"]
hosts = ["vault.example", "*.vault.example"]
to = "any"
action = "block"

[[flow]]
id = "internal-review"
from = ["internal"]
to = ["*.hooks.example", "chat.example"]
min_overlap_bytes = 32
action = "review"
"#;

/// The flow changes of `FLOWS` -> `FLOWS` with `from` replaced by `to`, as (kind, flow,
/// what) triples.
fn flow_diff(from: &str, to: &str) -> (bool, Vec<(ChangeKind, String, String)>) {
    assert!(FLOWS.contains(from), "{from}");
    let new = FLOWS.replacen(from, to, 1);
    let diff = policy(FLOWS).diff(&policy(&new));
    let changes = diff
        .flows
        .iter()
        .map(|c| (c.kind, c.flow.clone(), c.what.clone()))
        .collect();
    (diff.widens(), changes)
}

fn one(from: &str, to: &str) -> (ChangeKind, String, String) {
    let (_, changes) = flow_diff(from, to);
    assert_eq!(changes.len(), 1, "{changes:?}");
    changes.into_iter().next().expect("one change")
}

#[test]
fn an_unchanged_policy_has_no_flow_changes() {
    let diff = policy(FLOWS).diff(&policy(FLOWS));
    assert!(diff.flows.is_empty());
    assert!(!diff.widens());
}

#[test]
fn removing_a_flow_widens() {
    let (widens, changes) = flow_diff(
        "[[flow]]\nid = \"internal-review\"\nfrom = [\"internal\"]\nto = [\"*.hooks.example\", \"chat.example\"]\nmin_overlap_bytes = 32\naction = \"review\"\n",
        "",
    );
    assert!(widens);
    assert_eq!(
        changes,
        [(
            ChangeKind::Widens,
            "internal-review".to_owned(),
            "flow removed (was review)".to_owned()
        )]
    );
}

#[test]
fn adding_a_flow_narrows() {
    let new = format!(
        "{FLOWS}\n[[flow]]\nid = \"creds\"\nfrom = [\"credential\"]\naction = \"review\"\n"
    );
    let diff = policy(FLOWS).diff(&policy(&new));
    assert!(!diff.widens());
    assert_eq!(diff.flows.len(), 1);
    assert_eq!(diff.flows[0].kind, ChangeKind::Narrows);
    assert_eq!(diff.flows[0].what, "flow added (review)");
}

#[test]
fn block_to_review_widens_and_review_to_block_narrows() {
    let (kind, flow, what) = one(
        "to = \"any\"\naction = \"block\"",
        "to = \"any\"\naction = \"review\"",
    );
    assert_eq!(
        (kind, flow.as_str(), what.as_str()),
        (
            ChangeKind::Widens,
            "no-secrets-out",
            "action block -> review"
        )
    );
    let (kind, _, what) = one(
        "min_overlap_bytes = 32\naction = \"review\"",
        "min_overlap_bytes = 32\naction = \"block\"",
    );
    assert_eq!(
        (kind, what.as_str()),
        (ChangeKind::Narrows, "action review -> block")
    );
}

#[test]
fn guard_lists_that_lose_entries_widen_and_gain_entries_narrow() {
    let (kind, _, what) = one("from = [\"secret\", \"credential\"]", "from = [\"secret\"]");
    assert_eq!(
        (kind, what.as_str()),
        (ChangeKind::Widens, "`from` lost [\"credential\"]")
    );
    let (kind, _, what) = one(
        "hosts = [\"vault.example\", \"*.vault.example\"]",
        "hosts = [\"vault.example\"]",
    );
    assert_eq!(
        (kind, what.as_str()),
        (ChangeKind::Widens, "`hosts` lost [\"*.vault.example\"]")
    );
    let (kind, _, _) = one(
        "from = [\"secret\", \"credential\"]",
        "from = [\"secret\", \"credential\", \"internal\"]",
    );
    assert_eq!(kind, ChangeKind::Narrows);
    // A key removed guards anything: stricter.
    let (kind, _, what) = one("rules = [\"vault\"]\n", "");
    assert_eq!(kind, ChangeKind::Narrows, "{what}");
    // A key added limits the flow to its entries: wider.
    let (widens, changes) = flow_diff(
        "from = [\"internal\"]\n",
        "from = [\"internal\"]\nrules = [\"vault\"]\n",
    );
    assert!(widens, "{changes:?}");
}

#[test]
fn narrowing_to_widens_and_reaching_further_narrows() {
    let (kind, _, what) = one("to = \"any\"", "to = \"external\"");
    assert_eq!(
        (kind, what.as_str()),
        (ChangeKind::Widens, "`to` \"any\" -> \"external\"")
    );
    let (kind, _, _) = one("to = \"any\"", "to = [\"chat.example\"]");
    assert_eq!(kind, ChangeKind::Widens);
    let (kind, _, what) = one(
        "to = [\"*.hooks.example\", \"chat.example\"]",
        "to = [\"chat.example\"]",
    );
    assert_eq!(
        (kind, what.as_str()),
        (ChangeKind::Widens, "`to` lost [\"*.hooks.example\"]")
    );
    let (kind, _, _) = one(
        "to = [\"*.hooks.example\", \"chat.example\"]",
        "to = \"external\"",
    );
    assert_eq!(kind, ChangeKind::Narrows);
}

#[test]
fn gaining_an_except_host_widens_and_losing_it_narrows() {
    let with = "min_overlap_bytes = 32\nexcept = [\"api.anthropic.com\"]";
    let (kind, _, what) = one("min_overlap_bytes = 32", with);
    assert_eq!(
        (kind, what.as_str()),
        (
            ChangeKind::Widens,
            "`except` gained [\"api.anthropic.com\"]"
        )
    );
    let excepted = FLOWS.replacen("min_overlap_bytes = 32", with, 1);
    let diff = policy(&excepted).diff(&policy(FLOWS));
    assert_eq!(diff.flows.len(), 1, "{:?}", diff.flows);
    assert_eq!(diff.flows[0].kind, ChangeKind::Narrows);
}

#[test]
fn raising_min_overlap_bytes_widens_and_lowering_it_narrows() {
    let (kind, _, what) = one("min_overlap_bytes = 32", "min_overlap_bytes = 64");
    assert_eq!(
        (kind, what.as_str()),
        (ChangeKind::Widens, "min_overlap_bytes 32 -> 64")
    );
    let (kind, _, _) = one("min_overlap_bytes = 32", "min_overlap_bytes = 0");
    assert_eq!(kind, ChangeKind::Narrows);
}

#[test]
fn a_rule_that_loses_a_label_a_flow_names_widens() {
    let (kind, flow, what) = one(
        "labels = [\"secret\", \"internal\"]",
        "labels = [\"secret\", \"public\"]",
    );
    assert_eq!(kind, ChangeKind::Widens);
    assert_eq!(flow, "rule.vault");
    assert!(what.contains("[\"internal\"]"), "{what}");
    let (widens, changes) = flow_diff(
        "labels = [\"secret\", \"internal\"]",
        "labels = [\"secret\", \"internal\", \"public\"]",
    );
    assert!(
        !widens,
        "a label no flow names changes nothing: {changes:?}"
    );
    assert!(changes.is_empty(), "{changes:?}");
}
