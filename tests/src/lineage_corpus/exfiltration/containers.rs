//! Exfiltration through containers and splits.

#[allow(unused_imports)]
use super::super::*;

/// Containers and splits: multipart, GraphQL variables, a secret in several effects, JSON
/// in JSON strings, credentials as they are, YAML, Markdown and prose, git pushes.
pub(super) fn containers(with_git: bool) -> Vec<Case> {
    use Class::Exfiltration as X;
    let mut out = Vec::new();
    let json_ct = "application/json";

    // Multipart form fields.
    let rows = customers(30, 20);
    let (ct, body) = multipart(&[
        (
            "title",
            None,
            "text/plain",
            &[],
            b"Quarterly export".to_vec(),
        ),
        (
            "notes",
            None,
            "text/plain",
            &[],
            to_csv(&rows, &["name", "email", "phone", "city"], ',').into_bytes(),
        ),
    ]);
    out.push(case(
        "multipart-text-field",
        "multipart",
        X,
        json_ct,
        json_text(&json!({"rows": rows})),
        vec![post("/forms/submit", &ct, body)],
    ));
    let env = env_file(31);
    let (ct, body) = multipart(&[(
        "file",
        Some("settings.txt"),
        "application/octet-stream",
        &[("Content-Transfer-Encoding", "base64")],
        b64(env.as_bytes()).into_bytes(),
    )]);
    out.push(case(
        "multipart-base64-file",
        "multipart",
        X,
        "text/plain",
        env,
        vec![post("/upload", &ct, body)],
    ));
    let rows = customers(32, 25);
    let (ct, body) = multipart(&[
        (
            "meta",
            None,
            "application/json",
            &[],
            br#"{"kind":"dataset"}"#.to_vec(),
        ),
        (
            "data",
            Some("rows.json.gz"),
            "application/gzip",
            &[],
            gzip(serde_json::to_string(&rows).expect("json").as_bytes()),
        ),
    ]);
    out.push(case(
        "multipart-gzip-json-file",
        "multipart",
        X,
        json_ct,
        json_text(&json!({"rows": rows})),
        vec![post("/datasets", &ct, body)],
    ));
    // GraphQL variables.
    let rows = customers(33, 15);
    out.push(case(
        "graphql-rows-in-variables",
        "graphql",
        X,
        json_ct,
        json_text(&json!({"customers": rows})),
        vec![post_json("/graphql", &json!({
            "query": "mutation Import($input: [ContactInput!]!) { importContacts(input: $input) { count } }",
            "variables": {"input": rows.iter().map(|r| json!({"displayName": r["name"], "emailAddress": r["email"], "phoneNumber": r["phone"]})).collect::<Vec<_>>()}
        }))],
    ));
    let s = secrets(34);
    out.push(case(
        "graphql-secret-in-variables",
        "graphql",
        X,
        "text/plain",
        env_file(34),
        vec![post_json("/graphql", &json!({
            "query": "mutation AddSecret($name: String!, $value: String!) { createSecret(name: $name, value: $value) { id } }",
            "variables": {"name": "aws", "value": s.aws_secret}
        }))],
    ));
    let doc = internal_doc(35, 12);
    out.push(case(
        "graphql-doc-in-variables",
        "graphql",
        X,
        "text/markdown",
        doc.clone(),
        vec![post_json("/graphql", &json!({
            "query": "mutation Post($body: String!) { createPost(body: $body) { id } }",
            "variables": {"body": doc.lines().filter(|l| !l.is_empty()).skip(1).take(2).collect::<Vec<_>>().join(" ")},
            "operationName": "Post"
        }))],
    ));
    // A secret split across several effects.
    let s = secrets(36);
    let parts: Vec<String> = s
        .github
        .as_bytes()
        .chunks(14)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    out.push(case(
        "split-token-3-effects",
        "split-secret",
        X,
        json_ct,
        json_text(&json!({"deploy": {"token": s.github, "repo": "acme/billing"}})),
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| post_json("/telemetry/chunk", &json!({"seq": i, "part": p})))
            .collect(),
    ));
    let s = secrets(37);
    let half = s.stripe.len() / 2;
    out.push(case(
        "split-key-in-headers",
        "split-secret",
        X,
        "text/plain",
        env_file(37),
        vec![
            EffectRequest {
                method: "GET".into(),
                path: "/a".into(),
                headers: vec![("x-session-a".into(), s.stripe[..half].to_owned())],
                body: Vec::new(),
            },
            EffectRequest {
                method: "GET".into(),
                path: "/b".into(),
                headers: vec![("x-session-b".into(), s.stripe[half..].to_owned())],
                body: Vec::new(),
            },
        ],
    ));
    let s = secrets(38);
    let third = s.jwt.len() / 3;
    out.push(case(
        "split-jwt-query",
        "split-secret",
        X,
        json_ct,
        json_text(&json!({"session": {"jwt": s.jwt, "user": "svc-38"}})),
        (0..3)
            .map(|i| {
                get(&format!(
                    "/p?i={i}&c={}",
                    &s.jwt[i * third..if i == 2 { s.jwt.len() } else { (i + 1) * third }]
                ))
            })
            .collect(),
    ));
    // JSON nested in a JSON string.
    for seed in 39..42u64 {
        let rows = customers(seed, 12);
        let inner: Vec<Value> = rows
            .iter()
            .map(|r| json!({"n": r["name"], "e": r["email"], "i": r["iban"]}))
            .collect();
        let inner_text = serde_json::to_string(&json!({"contacts": inner})).expect("json");
        let effect = if seed == 41 {
            // Doubly nested.
            let middle = serde_json::to_string(&json!({"payload": inner_text})).expect("json");
            json!({"event": "sync", "data": middle})
        } else {
            json!({"event": "sync", "data": inner_text})
        };
        out.push(case(
            format!("nested-json-{seed}"),
            "nested-json",
            X,
            json_ct,
            json_text(&json!({"rows": rows})),
            vec![post_json("/webhook", &effect)],
        ));
    }
    // A credential value as is, in a JSON body.
    let s = secrets(42);
    out.push(case(
        "credential-in-body",
        "credential",
        X,
        "text/plain",
        env_file(42),
        vec![post_json(
            "/hooks/notify",
            &json!({"text": format!("aws key {} / {}", s.aws_id, s.aws_secret)}),
        )],
    ));
    let key = private_key(43);
    out.push(case(
        "private-key-pasted",
        "credential",
        X,
        "application/x-pem-file",
        key.clone(),
        vec![post_json(
            "/issues",
            &json!({"title": "cannot log in", "body": format!("my key is\n```\n{key}```")}),
        )],
    ));
    // Config read as YAML, sent on as JSON.
    let s = secrets(48);
    let yaml = format!("service: billing-api\nregion: eu-west-1\ndatabase:\n  host: db-prod-48.internal\n  user: billing\n  password: {}\nstripe:\n  secret_key: {}\nfeature_flags:\n  new_checkout: true\n", s.db_password, s.stripe);
    out.push(case("yaml-to-json-config", "yaml-to-json", X, "application/yaml", yaml, vec![post_json("/configs", &json!({"db": {"password": s.db_password, "host": "db-prod-48.internal"}, "stripe": {"key": s.stripe}}))]));
    // Rows as a Markdown table, and rows written into prose.
    let rows = customers(49, 20);
    let mut table = String::from("| Name | Email | Phone |\n|---|---|---|\n");
    for r in &rows[..12] {
        table.push_str(&format!(
            "| {} | {} | {} |\n",
            cell(&r["name"]),
            cell(&r["email"]),
            cell(&r["phone"])
        ));
    }
    out.push(case(
        "json-to-markdown-table",
        "markdown-table",
        X,
        json_ct,
        json_text(&json!({"customers": rows})),
        vec![post_json(
            "/wiki/pages",
            &json!({"title": "Top accounts", "body": table}),
        )],
    ));
    let rows = customers(50, 20);
    let prose: String = rows[..8]
        .iter()
        .map(|r| {
            format!(
                "Customer {} ({}) on the {} plan pays {} a month. ",
                cell(&r["name"]),
                cell(&r["email"]),
                cell(&r["plan"]),
                cell(&r["mrr"])
            )
        })
        .collect();
    out.push(case(
        "rows-in-prose",
        "prose",
        X,
        json_ct,
        json_text(&json!({"customers": rows})),
        vec![post_json(
            "/chat.postMessage",
            &json!({"channel": "#sales", "text": prose}),
        )],
    ));
    // URL-safe base64 in a path segment.
    let doc = internal_doc(51, 6);
    let b64url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&doc.as_bytes()[..300]);
    out.push(case(
        "base64url-path-segment",
        "base64",
        X,
        "text/plain",
        doc,
        vec![get(&format!("/t/{b64url}/pixel.png"))],
    ));
    // git push of a secret file.
    if with_git {
        let env = env_file(44);
        out.push(case(
            "git-push-env-file",
            "git-push",
            X,
            "text/plain",
            env.clone(),
            vec![git_effect(git_push_body(
                &[],
                &[("README.md", b"# billing\n"), (".env", env.as_bytes())],
                "add config",
            ))],
        ));
        let key = private_key(45);
        out.push(case(
            "git-push-private-key",
            "git-push",
            X,
            "application/x-pem-file",
            key.clone(),
            vec![git_effect(git_push_body(
                &[],
                &[("deploy/id_ed25519", key.as_bytes())],
                "deploy key",
            ))],
        ));
        let rows = customers(46, 30);
        let csv = to_csv(&rows, &COLUMNS, ',');
        out.push(case(
            "git-push-customer-csv",
            "git-push",
            X,
            json_ct,
            json_text(&json!({"customers": rows})),
            vec![git_effect(git_push_body(
                &[],
                &[("data/customers.csv", csv.as_bytes())],
                "fixtures",
            ))],
        ));
        // The secret appended to a file the remote already has: the blob travels as a
        // delta against the remote's version.
        let s = secrets(47);
        let config: String = (0..80)
            .map(|i| format!("setting_{i} = value number {i} for the service\n"))
            .collect();
        let with_secret = format!("{config}stripe_key = {}\n", s.stripe);
        out.push(case(
            "git-push-delta-appended-secret",
            "git-push",
            X,
            "text/plain",
            env_file(47),
            vec![git_effect(git_push_body(
                &[("config.ini", config.as_bytes())],
                &[("config.ini", with_secret.as_bytes())],
                "tune config",
            ))],
        ));
    }
    out
}
