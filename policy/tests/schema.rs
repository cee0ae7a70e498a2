//! The JSON Schema in docs/ is the one the loader's types generate (no drift).

#[test]
fn docs_policy_schema_json_is_the_generated_schema() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/policy.schema.json");
    let generated =
        serde_json::to_string_pretty(&airlock_policy::json_schema()).expect("json") + "\n";
    if std::env::var_os("AIRLOCK_UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).expect("write docs/policy.schema.json");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/policy.schema.json is stale: regenerate it with \
         `AIRLOCK_UPDATE_SCHEMA=1 cargo test -p airlock-policy --test schema` \
         (or `airlock policy schema > docs/policy.schema.json`)"
    );
}

#[test]
fn the_schema_describes_every_rule_key_and_refuses_unknown_ones() {
    let schema = airlock_policy::json_schema();
    let rule = &schema["$defs"]["Rule"];
    assert_eq!(rule["additionalProperties"], false, "{rule:#}");
    for key in [
        "id",
        "host",
        "port",
        "scheme",
        "method",
        "path",
        "action",
        "reason",
        "allow_private",
        "respond",
    ] {
        assert!(
            rule["properties"].get(key).is_some(),
            "rule key {key} missing: {rule:#}"
        );
    }
    assert_eq!(schema["additionalProperties"], false);
}

#[test]
fn docs_policy_md_documents_every_key_of_the_schema() {
    let schema = airlock_policy::json_schema();
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/policy.md"),
    )
    .expect("docs/policy.md");
    let mut keys = std::collections::BTreeSet::new();
    let mut collect = |properties: &serde_json::Value| {
        if let Some(properties) = properties.as_object() {
            keys.extend(properties.keys().cloned());
        }
    };
    collect(&schema["properties"]);
    for definition in schema["$defs"].as_object().expect("$defs").values() {
        collect(&definition["properties"]);
    }
    let missing: Vec<&String> = keys
        .iter()
        .filter(|key| {
            // A key is documented when the reference shows it as code: `key`, `key = …`
            // in an example, or `[key.…]` / `[[key]]` tables.
            !(docs.contains(&format!("`{key}`"))
                || docs.contains(&format!("\n{key} = "))
                || docs.contains(&format!(" {key} = "))
                || docs.contains(&format!("{{ {key} = "))
                || docs.contains(&format!("[{key}."))
                || docs.contains(&format!("[[{key}]]")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/policy.md does not document these policy keys: {missing:?}"
    );
}
