//! The admin API's OpenAPI document: generated from the handlers (`airlock openapi`),
//! served at `/v1/openapi.json`, and kept in docs/openapi.json; the three never drift.

use airlock_tests::{airlock_bin, loopback_policy, Fixture};
use serde_json::Value;

/// docs/openapi.json in the repository.
fn committed_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_served_generated_and_committed_are_the_same() {
    let generated = std::process::Command::new(airlock_bin())
        .arg("openapi")
        .output()
        .expect("run airlock openapi");
    assert!(generated.status.success(), "{generated:?}");
    let generated = String::from_utf8(generated.stdout).expect("utf-8");
    if std::env::var_os("AIRLOCK_WRITE_OPENAPI").is_some() {
        std::fs::write(committed_path(), &generated).expect("write docs/openapi.json");
    }
    let committed = std::fs::read_to_string(committed_path()).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json differs from what the handlers generate; regenerate it with \
         `cargo run -p airlock -- openapi > docs/openapi.json` (or run this test with \
         AIRLOCK_WRITE_OPENAPI=1) and commit it"
    );

    let fx = Fixture::new();
    let airlock = fx.start(&loopback_policy(1), &[]);
    // No token: the document holds no state.
    let served = reqwest_free_get(&format!("{}/v1/openapi.json", airlock.admin_url)).await;
    assert_eq!(
        served, generated,
        "GET /v1/openapi.json serves the generated document"
    );

    let doc: Value = serde_json::from_str(&generated).expect("JSON");
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );
    // Every endpoint docs/admin-api.md names is in the document, with its method.
    let reference = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/admin-api.md"),
    )
    .expect("docs/admin-api.md");
    let mut named = 0;
    for word in reference.split('`') {
        let Some((method, path)) = word.split_once(' ') else {
            continue;
        };
        if !matches!(method, "GET" | "POST") || !path.starts_with('/') || path.contains(' ') {
            continue;
        }
        let path = path.split('?').next().unwrap_or(path);
        named += 1;
        let operation = &doc["paths"][path][method.to_ascii_lowercase()];
        assert!(
            operation.is_object(),
            "{method} {path} (docs/admin-api.md) is not in the document"
        );
        assert!(
            operation["responses"]
                .as_object()
                .is_some_and(|r| r.keys().any(|s| s.starts_with('2'))),
            "{method} {path} has no success response"
        );
        if path != "/healthz" && path != "/v1/openapi.json" {
            assert_eq!(
                operation["responses"]["401"]["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/ApiErrorBody",
                "{method} {path} documents the error shape"
            );
        }
    }
    assert!(
        named >= 30,
        "only {named} endpoints found in docs/admin-api.md"
    );
}

/// `GET url` with no credentials over plain HTTP; the body.
async fn reqwest_free_get(url: &str) -> String {
    let output = tokio::process::Command::new("curl")
        .args(["-sS", "--fail", "--noproxy", "*", url])
        .output()
        .await
        .expect("run curl");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).expect("utf-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_commit_query_is_answered_in_the_json_error_shape() {
    // Found by schemathesis (tests/schemathesis/run.sh): axum's plain-text rejection.
    let fx = Fixture::new();
    let airlock = fx.start(&loopback_policy(1), &[]);
    let (run, _) = airlock.create_run().await;
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let output = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--noproxy",
            "*",
            "-X",
            "POST",
            "-H",
            &format!("Authorization: Bearer {}", token.trim()),
            "-w",
            "\n%{http_code} %{content_type}",
            &format!(
                "{}/v1/runs/{run}/commit?approve_pending=null",
                airlock.admin_url
            ),
        ])
        .output()
        .await
        .expect("run curl");
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let (body, tail) = text.rsplit_once('\n').expect("status line");
    assert_eq!(tail, "400 application/json", "{text}");
    let body: Value = serde_json::from_str(body).expect("a JSON error body");
    assert_eq!(body["reason_code"], "bad_query", "{body}");
    assert_eq!(airlock.effects(&run).await.len(), 0);
    let shown = airlock
        .admin
        .get(&format!("/v1/runs/{run}"))
        .await
        .expect("run");
    assert_eq!(
        shown["state"], "open",
        "a refused commit changes nothing: {shown}"
    );
}

/// Whether `schema` (a response body's schema, or a component it names) says nothing of
/// its fields: an object with no `properties`, `allOf`, `oneOf` or `anyOf`.
fn untyped(doc: &Value, schema: &Value) -> bool {
    if let Some(name) = schema["$ref"].as_str() {
        let name = name.trim_start_matches("#/components/schemas/");
        return untyped(doc, &doc["components"]["schemas"][name]);
    }
    let object = match &schema["type"] {
        Value::String(t) => t == "object",
        Value::Array(types) => types.iter().any(|t| t == "object"),
        _ => false,
    };
    let described = ["properties", "allOf", "oneOf", "anyOf"]
        .iter()
        .any(|key| !schema[*key].is_null());
    object && !described
}

#[test]
fn openapi_no_success_response_is_an_untyped_object() {
    // #21: every 2xx JSON answer is one of the handlers' typed bodies. The one exception
    // is `GET /v1/openapi.json`, whose body is an OpenAPI document (its schema is the
    // OpenAPI 3.1 meta-schema, not the admin API's to restate).
    let generated = std::process::Command::new(airlock_bin())
        .arg("openapi")
        .output()
        .expect("run airlock openapi");
    assert!(generated.status.success(), "{generated:?}");
    let doc: Value = serde_json::from_slice(&generated.stdout).expect("JSON");
    let mut untyped_answers = Vec::new();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        if path == "/v1/openapi.json" {
            continue;
        }
        for (method, operation) in item.as_object().expect("path item") {
            let Some(responses) = operation["responses"].as_object() else {
                continue;
            };
            for (status, response) in responses {
                if !status.starts_with('2') {
                    continue;
                }
                let Some(content) = response["content"].as_object() else {
                    continue;
                };
                for (media, body) in content {
                    checked += 1;
                    if untyped(&doc, &body["schema"]) {
                        untyped_answers.push(format!("{method} {path} {status} ({media})"));
                    }
                }
            }
        }
    }
    assert!(checked >= 30, "only {checked} success bodies found");
    assert!(
        untyped_answers.is_empty(),
        "success answers documented as an untyped object: {untyped_answers:#?}"
    );
}
