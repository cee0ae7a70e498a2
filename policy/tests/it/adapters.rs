//! `respond = "NAME"` selects an adapter; the table form stays a template.

use airlock_policy::{Policy, ADAPTERS};

fn policy(respond: &str) -> Result<Policy, String> {
    Policy::from_toml_str(
        &format!(
            "version = 1\n\n[[rule]]\nid = \"gh\"\nhost = \"api.github.com\"\nmethod = \"write\"\naction = \"stage\"\n{respond}\n"
        ),
        "policy.toml",
    )
    .map_err(|e| e.to_string())
}

#[test]
fn an_adapter_is_named_by_a_string() {
    let policy = policy("respond = \"github\"").expect("loads");
    let rule = policy.rule("gh").expect("rule");
    assert_eq!(rule.adapter(), Some("github"));
    assert!(rule.respond().is_none());
}

#[test]
fn the_table_form_is_still_a_template() {
    let policy =
        policy("[rule.respond]\nstatus = 201\nbody = '{\"id\": \"{{placeholder:number:/id}}\"}'")
            .expect("loads");
    let rule = policy.rule("gh").expect("rule");
    assert_eq!(rule.adapter(), None);
    assert_eq!(rule.respond().map(|r| r.status), Some(201));
}

#[test]
fn unknown_adapters_are_refused_with_the_known_ones() {
    let error = policy("respond = \"gitlab\"").expect_err("refused");
    assert_eq!(
        error,
        format!(
            "policy.toml: rule \"gh\" (#1): field \"respond\": unknown adapter \"gitlab\"; known adapters: {}",
            ADAPTERS.join(", ")
        )
    );
}

#[test]
fn a_mistake_inside_the_table_keeps_its_own_message() {
    let error = policy("[rule.respond]\nstatuss = 201").expect_err("refused");
    assert!(error.contains("unknown field `statuss`"), "{error}");
}

#[test]
fn a_pass_rule_cannot_name_an_adapter() {
    let error = Policy::from_toml_str(
        "version = 1\n\n[[rule]]\nid = \"r\"\nhost = \"a.example\"\naction = \"pass\"\nrespond = \"git\"\n",
        "p",
    )
    .expect_err("refused")
    .to_string();
    assert!(error.contains("only a stage rule"), "{error}");
}

#[test]
fn the_forge_example_names_its_adapters() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies/forge.toml");
    let policy = Policy::load(&path).expect("the example policy loads");
    let adapters: Vec<(&str, Option<&str>)> = policy
        .rules()
        .iter()
        .map(|rule| (rule.id(), rule.adapter()))
        .collect();
    assert_eq!(
        adapters,
        [
            ("github-reads", None),
            ("git-push", Some("git")),
            ("api-reads", None),
            ("api-graphql", Some("graphql")),
            ("api-writes", Some("github")),
            ("slack", Some("slack")),
        ]
    );
}
