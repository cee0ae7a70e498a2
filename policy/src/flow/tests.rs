use super::*;
use crate::Policy;

const BASE: &str = r#"
version = 1
[[rule]]
id = "vault-read"
host = "vault.internal.example"
method = "read"
action = "pass"
labels = ["secret"]

[[rule]]
id = "docs-read"
host = "docs.example.com"
action = "pass"

[[rule]]
id = "hooks"
host = "hooks.example.net"
action = "stage"
"#;

fn policy(flows: &str) -> Result<Policy, crate::PolicyError> {
    Policy::from_toml_str(&format!("{BASE}\n{flows}"), "<inline>")
}

fn read<'a>(host: &'a str, rule: &'a str, labels: &'a [String]) -> FlowSource<'a> {
    FlowSource {
        host,
        port: 443,
        rule: Some(rule),
        labels,
    }
}

const TARGET: FlowTarget<'static> = FlowTarget {
    host: "hooks.example.net",
    port: 443,
    unanalysed: None,
};

#[test]
fn a_secret_edge_to_an_external_host_blocks() {
    let policy = policy(
        r#"[[flow]]
id = "no-secrets-out"
from = ["secret", "credential"]
to = "external"
min_overlap_bytes = 24
action = "block"
reason = "secrets never leave"
"#,
    )
    .expect("valid");
    let edges = [FlowEdge {
        source: read("vault.internal.example", "vault-read", &[]),
        class: EdgeClass::Content,
        overlap_bytes: 40,
    }];
    let verdicts = policy.evaluate_flows(&TARGET, &edges);
    assert_eq!(verdicts.len(), 1);
    assert_eq!(verdicts[0].flow, "no-secrets-out");
    assert_eq!(verdicts[0].action, FlowAction::Block);
    assert_eq!(verdicts[0].reason, "secrets never leave");
    assert_eq!(verdicts[0].edge, Some(0));
    assert_eq!(verdicts[0].labels, vec!["secret".to_owned()]);
}

#[test]
fn short_content_edges_and_the_same_origin_do_not_count() {
    let policy = policy(
        r#"[[flow]]
id = "f"
from = ["secret"]
min_overlap_bytes = 24
action = "review"
"#,
    )
    .expect("valid");
    let short = [FlowEdge {
        source: read("vault.internal.example", "vault-read", &[]),
        class: EdgeClass::Content,
        overlap_bytes: 23,
    }];
    assert!(policy.evaluate_flows(&TARGET, &short).is_empty());
    let home = FlowTarget {
        host: "VAULT.internal.example.",
        ..TARGET
    };
    let long = [FlowEdge {
        overlap_bytes: 200,
        ..short[0].clone()
    }];
    assert!(policy.evaluate_flows(&home, &long).is_empty());
    assert_eq!(policy.evaluate_flows(&TARGET, &long).len(), 1);
}

#[test]
fn credential_edges_count_whatever_their_length_and_carry_the_built_in_label() {
    let policy = policy(
        "[[flow]]\nid = \"f\"\nfrom = [\"credential\"]\nmin_overlap_bytes = 1000\naction = \"block\"\n",
    )
    .expect("valid");
    let edges = [FlowEdge {
        source: read("docs.example.com", "docs-read", &[]),
        class: EdgeClass::Credential,
        overlap_bytes: 20,
    }];
    assert_eq!(
        policy.evaluate_flows(&TARGET, &edges)[0].labels,
        vec!["credential"]
    );
}

#[test]
fn labels_recorded_on_the_read_count_after_the_rule_lost_them() {
    let policy =
        policy("[[flow]]\nid = \"f\"\nfrom = [\"secret\"]\naction = \"review\"\n").expect("valid");
    let recorded = vec!["secret".to_owned()];
    let edges = [FlowEdge {
        source: read("docs.example.com", "docs-read", &recorded),
        class: EdgeClass::Header,
        overlap_bytes: 30,
    }];
    assert_eq!(policy.evaluate_flows(&TARGET, &edges).len(), 1);
}

#[test]
fn keys_narrow_each_other_and_to_hosts_match_the_effect() {
    let policy = policy(
        r#"[[flow]]
id = "f"
rules = ["docs-read"]
hosts = ["*.example.com"]
to = ["*.example.net"]
action = "review"
"#,
    )
    .expect("valid");
    let docs = [FlowEdge {
        source: read("docs.example.com", "docs-read", &[]),
        class: EdgeClass::Content,
        overlap_bytes: 30,
    }];
    assert_eq!(policy.evaluate_flows(&TARGET, &docs).len(), 1);
    let elsewhere = FlowTarget {
        host: "api.other.org",
        ..TARGET
    };
    assert!(policy.evaluate_flows(&elsewhere, &docs).is_empty());
    let vault = [FlowEdge {
        source: read("vault.internal.example", "vault-read", &[]),
        ..docs[0].clone()
    }];
    assert!(policy.evaluate_flows(&TARGET, &vault).is_empty());
}

#[test]
fn unanalysed_effects_match_their_own_flow_and_blocks_come_first() {
    let policy = policy(
        r#"[[flow]]
id = "look"
from = ["unanalysed"]
action = "review"

[[flow]]
id = "no-secrets"
from = ["secret"]
action = "block"
"#,
    )
    .expect("valid");
    let target = FlowTarget {
        unanalysed: Some("the analysis queue was full"),
        ..TARGET
    };
    let edges = [FlowEdge {
        source: read("vault.internal.example", "vault-read", &[]),
        class: EdgeClass::Content,
        overlap_bytes: 30,
    }];
    let verdicts = policy.evaluate_flows(&target, &edges);
    assert_eq!(
        verdicts.iter().map(|v| v.flow.as_str()).collect::<Vec<_>>(),
        ["no-secrets", "look"]
    );
    assert_eq!(verdicts[1].edge, None);
    assert!(policy.evaluate_flows(&TARGET, &[]).is_empty());
}

#[test]
fn placeholder_chains_are_labelled_by_the_staging_rule() {
    let policy = policy(
        "[[flow]]\nid = \"f\"\nfrom = [\"placeholder-of:hooks\"]\nto = \"any\"\naction = \"review\"\n",
    )
    .expect("valid");
    let edges = [FlowEdge {
        source: FlowSource {
            host: "hooks.example.net",
            port: 443,
            rule: Some("hooks"),
            labels: &[],
        },
        class: EdgeClass::Placeholder,
        overlap_bytes: 0,
    }];
    assert_eq!(policy.evaluate_flows(&TARGET, &edges).len(), 1);
}

#[test]
fn bad_flows_fail_to_load_naming_the_flow_and_field() {
    let cases = [
        ("[[flow]]\nid = \"f\"\nfrom = [\"secrets\"]\naction = \"block\"\n", "unknown label \"secrets\""),
        ("[[flow]]\nid = \"f\"\nrules = [\"nope\"]\naction = \"block\"\n", "no rule has id \"nope\""),
        ("[[flow]]\nid = \"f\"\nhosts = [\"*\"]\naction = \"block\"\n", "field \"hosts\""),
        ("[[flow]]\nid = \"f\"\naction = \"block\"\n", "must name what it guards"),
        ("[[flow]]\nid = \"f\"\nfrom = [\"secret\"]\n", "field \"action\": required"),
        ("[[flow]]\nid = \"f\"\nfrom = [\"secret\"]\nto = \"outside\"\naction = \"block\"\n", "neither \"external\""),
        ("[[flow]]\nid = \"f\"\nfrom = [\"placeholder-of:vault-read\"]\naction = \"block\"\n", "not a stage rule"),
        ("[[flow]]\nid = \"f\"\nfrom = [\"unanalysed\", \"secret\"]\naction = \"block\"\n", "flow of its own"),
        ("[[flow]]\nid = \"f\"\nfrom = [\"secret\"]\naction = \"block\"\n[[flow]]\nid = \"f\"\nfrom = [\"secret\"]\naction = \"block\"\n", "flow \"f\" (#2): field \"id\": duplicate"),
        ("[[flow]]\nid = \"f\"\nfrom = [\"secret\"]\nmin_overlap_bytes = -1\naction = \"block\"\n", "negative"),
    ];
    for (text, expected) in cases {
        let error = policy(text).expect_err("refused").to_string();
        assert!(error.contains(expected), "{text}\n=> {error}");
    }
}

#[test]
fn labels_belong_on_pass_rules_and_are_not_built_ins() {
    let stage = "version = 1\n[[rule]]\nid = \"s\"\nhost = \"a.example\"\naction = \"stage\"\nlabels = [\"x\"]\n";
    assert!(Policy::from_toml_str(stage, "<inline>")
        .expect_err("refused")
        .to_string()
        .contains("only a pass rule labels"));
    let builtin = "version = 1\n[[rule]]\nid = \"p\"\nhost = \"a.example\"\naction = \"pass\"\nlabels = [\"credential\"]\n";
    assert!(Policy::from_toml_str(builtin, "<inline>")
        .expect_err("refused")
        .to_string()
        .contains("built-in label"));
}

#[test]
fn an_except_host_is_never_judged_and_the_model_api_without_one_is_warned_about() {
    let flows = |except: &str| {
        format!(
            r#"[[rule]]
id = "model"
host = "api.anthropic.com"
method = ["POST"]
action = "pass"

[[flow]]
id = "no-secrets-out"
from = ["secret"]
to = "external"
{except}
action = "block"
"#
        )
    };
    let edges = [FlowEdge {
        source: read("vault.internal.example", "vault-read", &[]),
        class: EdgeClass::Content,
        overlap_bytes: 40,
    }];
    let model = FlowTarget {
        host: "api.anthropic.com",
        port: 443,
        unanalysed: None,
    };
    let plain = policy(&flows("")).expect("valid");
    assert_eq!(plain.evaluate_flows(&model, &edges).len(), 1);
    let warned: Vec<String> = plain.warnings().into_iter().map(|l| l.message).collect();
    assert!(
        warned
            .iter()
            .any(|m| m.contains("api.anthropic.com") && m.contains("except")),
        "{warned:?}"
    );
    let excepted = policy(&flows(
        r#"except = ["api.anthropic.com", "*.models.example"]"#,
    ))
    .expect("valid");
    assert!(excepted.evaluate_flows(&model, &edges).is_empty());
    let sub = FlowTarget {
        host: "eu.models.example",
        ..model.clone()
    };
    assert!(excepted.evaluate_flows(&sub, &edges).is_empty());
    // Every other exit is still judged; the reason names the exception.
    let verdicts = excepted.evaluate_flows(&TARGET, &edges);
    assert_eq!(verdicts.len(), 1);
    assert!(
        verdicts[0].reason.contains("except api.anthropic.com"),
        "{}",
        verdicts[0].reason
    );
    assert!(excepted.flows()[0].excepts("api.anthropic.com"));
    let warned: Vec<String> = excepted.warnings().into_iter().map(|l| l.message).collect();
    assert!(
        !warned.iter().any(|m| m.contains("a model API")),
        "{warned:?}"
    );
    // A bad glob is a load error naming the field.
    let bad = policy(&flows(r#"except = ["*"]"#)).expect_err("invalid");
    assert!(bad.to_string().contains("except"), "{bad}");
}
