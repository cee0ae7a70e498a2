//! Placeholders written in an encoding the origin decodes (percent-encoding, a header
//! name, `Basic` credentials, JSON `\u` escapes, a re-spelt number) and bodies too large to
//! search: a staged effect's placeholder never reaches an origin (docs/lineage.md, "Where
//! placeholders are searched").

use std::collections::BTreeMap;

use airlock_tests::{curl, Airlock, CurlResult, Fixture, Origin, Reply};
use serde_json::json;

use super::{items_origin, items_policy};

/// A run that has handed out a number and a string placeholder (its item was staged),
/// against an items origin that also passes `POST /search`.
struct Out {
    _fx: Fixture,
    origin: Origin,
    airlock: Airlock,
    run: String,
    env: BTreeMap<String, String>,
    base: String,
    number: String,
    string: String,
}

async fn placeholders_out(args: &[&str]) -> Out {
    let fx = Fixture::new();
    let origin = items_origin(&fx, Reply::json(201, &json!({"id": 77, "node_id": "N_77"}))).await;
    let port = origin.addr().port();
    let policy = format!(
        r#"{}
[[rule]]
id = "search"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/search"
action = "pass"
"#,
        items_policy(port)
    );
    let (airlock, run, env) = fx.start_run(&policy, args).await;
    let base = format!("https://127.0.0.1:{port}");
    let created = curl(
        &env,
        &["-X", "POST", "--data", "{}", &format!("{base}/items")],
    )
    .await;
    assert_eq!(created.status, 201);
    let number = created.json()["id"].as_u64().expect("id").to_string();
    let string = created.json()["node_id"]
        .as_str()
        .expect("node id")
        .to_owned();
    assert!(string.starts_with("ph_"), "{string}");
    assert!(origin.received().is_empty(), "the parent is staged");
    Out {
        _fx: fx,
        origin,
        airlock,
        run,
        env,
        base,
        number,
        string,
    }
}

impl Out {
    /// Asserts `sent` was staged as a child of the item, found in `found_in`.
    async fn staged(&self, sent: &CurlResult, found_in: &str) {
        assert_eq!(sent.status, 202, "{}", String::from_utf8_lossy(&sent.body));
        let child = sent.header("airlock-effect").expect("effect id");
        let shown = self
            .airlock
            .admin
            .get(&format!("/v1/effects/{child}"))
            .await
            .expect("show");
        assert_eq!(shown["depends_on"][0]["found_in"], found_in, "{shown}");
    }

    fn origin_saw_nothing(&self) {
        let received = self.origin.received();
        assert!(
            received.is_empty(),
            "the origin received {:?}",
            received.iter().map(|r| &r.path).collect::<Vec<_>>()
        );
    }
}

/// `text` with every byte percent-encoded.
fn percent_all(text: &str) -> String {
    text.bytes().map(|b| format!("%{b:02X}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_percent_encoded_placeholder_in_a_query_never_reaches_the_origin() {
    let out = placeholders_out(&[]).await;
    let (base, env) = (&out.base, &out.env);
    let encoded = percent_all(&out.string);
    let sent = curl(env, &[&format!("{base}/items?q={encoded}")]).await;
    out.staged(&sent, "url (encoded)").await;
    // A JSON filter, percent-encoded, whose placeholder had its `_` encoded before.
    let filter = percent_all(&format!(
        r#"{{"node":"{}"}}"#,
        out.string.replace('_', "%5F")
    ));
    let sent = curl(env, &[&format!("{base}/items?filter={filter}")]).await;
    out.staged(&sent, "url (encoded)").await;
    let form = format!("q={}", out.string.replace('_', "%5f"));
    let sent = curl(env, &["--data", &form, &format!("{base}/search")]).await;
    out.staged(&sent, "body (encoded)").await;
    out.origin_saw_nothing();
    // At commit the parent is released; airlock cannot substitute inside an encoding, so
    // the children fail unsent.
    let report = out.airlock.commit_pending(&out.run).await;
    let states = airlock_tests::effect_states(&report);
    assert_eq!(
        states,
        vec![
            json!("released"),
            json!("failed"),
            json!("failed"),
            json!("failed")
        ],
        "{report}"
    );
    for child in &report["effects"].as_array().expect("effects")[1..] {
        assert!(
            child["reason"]
                .as_str()
                .unwrap_or("")
                .contains("cannot substitute"),
            "{child}"
        );
    }
    let received = out.origin.received();
    assert_eq!(received.len(), 1, "only the parent reached the origin");
    assert_eq!(received[0].path, "/items");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_in_a_header_name_never_reaches_the_origin() {
    let out = placeholders_out(&[]).await;
    let header = format!("x-{}: 1", out.string);
    let sent = curl(&out.env, &["-H", &header, &format!("{}/items", out.base)]).await;
    out.staged(&sent, "header name").await;
    out.origin_saw_nothing();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_inside_basic_credentials_never_reaches_the_origin() {
    let out = placeholders_out(&[]).await;
    let url = format!("{}/items", out.base);
    let user = format!("agent:{}", out.string);
    let sent = curl(&out.env, &["-u", &user, &url]).await;
    out.staged(&sent, "header:authorization (encoded)").await;
    // A number placeholder as a short password: base64 shorter than any run searched.
    let user = format!("a:{}", out.number);
    let sent = curl(&out.env, &["-u", &user, &url]).await;
    out.staged(&sent, "header:authorization (encoded)").await;
    out.origin_saw_nothing();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_spelt_in_json_unicode_escapes_never_reaches_the_origin() {
    let out = placeholders_out(&[]).await;
    let escaped: String = out
        .string
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let body = format!(r#"{{"q":"{escaped}"}}"#);
    let sent = curl(
        &out.env,
        &[
            "-H",
            "content-type: application/json",
            "--data",
            &body,
            &format!("{}/search", out.base),
        ],
    )
    .await;
    out.staged(&sent, "body (encoded)").await;
    out.origin_saw_nothing();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_number_placeholder_respelt_with_leading_zeros_or_as_a_float_never_reaches_the_origin() {
    let out = placeholders_out(&[]).await;
    let sent = curl(&out.env, &[&format!("{}/items/00{}", out.base, out.number)]).await;
    out.staged(&sent, "url").await;
    let n = &out.number;
    let float = format!(r#"{{"item": {}.{}e15}}"#, &n[..1], &n[1..]);
    let sent = curl(
        &out.env,
        &[
            "-H",
            "content-type: application/json",
            "--data",
            &float,
            &format!("{}/search", out.base),
        ],
    )
    .await;
    out.staged(&sent, "body (encoded)").await;
    out.origin_saw_nothing();
    // At commit the zero-led one carries the real id (an origin reads 0077 as 77); the
    // float cannot be substituted and fails unsent.
    let report = out.airlock.commit_pending(&out.run).await;
    assert_eq!(
        airlock_tests::effect_states(&report),
        vec![json!("released"), json!("released"), json!("failed")],
        "{report}"
    );
    let paths: Vec<String> = out
        .origin
        .received()
        .iter()
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(paths, vec!["/items".to_owned(), "/items/0077".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_body_too_large_to_search_is_refused_while_placeholders_are_out() {
    let out = placeholders_out(&["--stage-body-limit", "1024"]).await;
    let url = format!("{}/search", out.base);
    let big = format!(r#"{{"pad":"{}","q":"{}"}}"#, "x".repeat(4096), out.string);
    let sent = curl(
        &out.env,
        &["-H", "content-type: application/json", "--data", &big, &url],
    )
    .await;
    assert_eq!(sent.status, 413, "{}", String::from_utf8_lossy(&sent.body));
    let refusal = sent.json();
    assert_eq!(refusal["reason_code"], "body_unsearchable", "{refusal}");
    assert_eq!(refusal["limit"], 1024, "{refusal}");
    assert!(
        refusal["reason"]
            .as_str()
            .unwrap_or("")
            .contains("--stage-body-limit"),
        "{refusal}"
    );
    // Sent chunked (no declared length), it is refused once it passes the limit.
    let sent = curl(
        &out.env,
        &["-H", "transfer-encoding: chunked", "--data", &big, &url],
    )
    .await;
    assert_eq!(sent.status, 413);
    assert_eq!(sent.json()["reason_code"], "body_unsearchable");
    out.origin_saw_nothing();
    // A body within the limit that carries no placeholder passes.
    let sent = curl(&out.env, &["--data", "q=ordinary", &url]).await;
    assert_eq!(sent.status, 201);
    // A run that handed out no placeholder streams a large body on.
    let (_, fresh) = out.airlock.create_run().await;
    let sent = curl(&fresh, &["--data", &"y".repeat(4096), &url]).await;
    assert_eq!(sent.status, 201);
    let sizes: Vec<usize> = out.origin.received().iter().map(|r| r.body.len()).collect();
    assert_eq!(sizes, vec![10, 4096]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_in_xml_character_references_or_a_wrapped_base64_part_never_reaches_the_origin(
) {
    use base64::Engine as _;
    let out = placeholders_out(&[]).await;
    let url = format!("{}/search", out.base);
    let referenced: String = out
        .string
        .chars()
        .map(|c| format!("&#{};", c as u32))
        .collect();
    let xml = format!("<search><q>{referenced}</q></search>");
    let sent = curl(
        &out.env,
        &["-H", "content-type: application/xml", "--data", &xml, &url],
    )
    .await;
    out.staged(&sent, "body (encoded)").await;
    // A file part in base64 wrapped at 76 columns (RFC 2045 §6.8), the placeholder across
    // a line break.
    let file = format!("{}{}", "line of a file ".repeat(3), out.string);
    let encoded = base64::engine::general_purpose::STANDARD.encode(file);
    let wrapped: Vec<&str> = encoded
        .as_bytes()
        .chunks(76)
        .map(|c| std::str::from_utf8(c).expect("base64"))
        .collect();
    let multipart = format!(
        "--b0undary\r\ncontent-disposition: form-data; name=\"file\"; filename=\"f.txt\"\r\ncontent-transfer-encoding: base64\r\n\r\n{}\r\n--b0undary--\r\n",
        wrapped.join("\r\n")
    );
    let sent = curl(
        &out.env,
        &[
            "-H",
            "content-type: multipart/form-data; boundary=b0undary",
            "--data-binary",
            &multipart,
            &url,
        ],
    )
    .await;
    out.staged(&sent, "body (encoded)").await;
    out.origin_saw_nothing();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_unpadded_base64_and_hex_placeholders_are_staged_and_released_in_their_encoding() {
    use base64::Engine as _;
    let out = placeholders_out(&[]).await;
    // The 16-digit number placeholder as unpadded base64: 22 characters.
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&out.number);
    assert_eq!(b64.len(), 22);
    let sent = curl(&out.env, &[&format!("{}/items/{b64}", out.base)]).await;
    out.staged(&sent, "url (encoded)").await;
    // The `ph_…` placeholder as hex, in a passed JSON body.
    let hex: String = out.string.bytes().map(|b| format!("{b:02x}")).collect();
    let body = format!(r#"{{"q":"{hex}"}}"#);
    let sent = curl(
        &out.env,
        &[
            "-H",
            "content-type: application/json",
            "--data",
            &body,
            &format!("{}/search", out.base),
        ],
    )
    .await;
    out.staged(&sent, "body (encoded)").await;
    assert!(
        sent.json().get("error").is_none(),
        "the client saw a synthetic answer: {}",
        String::from_utf8_lossy(&sent.body)
    );
    out.origin_saw_nothing();
    // At commit each carries the real value in the same encoding.
    let report = out.airlock.commit_pending(&out.run).await;
    assert_eq!(
        airlock_tests::effect_states(&report),
        vec![json!("released"), json!("released"), json!("released")],
        "{report}"
    );
    let received = out.origin.received();
    let real_b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("77");
    assert_eq!(received[1].path, format!("/items/{real_b64}"));
    let real_hex: String = "N_77".bytes().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        String::from_utf8_lossy(&received[2].body),
        format!(r#"{{"q":"{real_hex}"}}"#)
    );
    for request in &received {
        let text = format!(
            "{} {}",
            request.path,
            String::from_utf8_lossy(&request.body)
        );
        assert!(!text.contains(&b64) && !text.contains(&hex), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abbreviated_sha_placeholder_is_staged_and_released_as_the_real_prefix() {
    const REAL: &str = "0123456789abcdef0123456789abcdef01234567";
    let fx = Fixture::new();
    let origin = Origin::start(
        Some(&fx.origin_ca),
        std::sync::Arc::new(|req: &airlock_tests::Received| {
            match (req.method.as_str(), req.path.as_str()) {
                ("POST", "/commits") => Reply::json(201, &json!({"sha": REAL})),
                _ => Reply::json(200, &json!({"ok": true})),
            }
        }),
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let policy = format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "commit"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/commits"
action = "stage"
[rule.respond]
status = 201
body = '{{"sha": "{{{{placeholder:sha1:/sha}}}}"}}'

[[rule]]
id = "reads"
host = "127.0.0.1"
port = {port}
method = "read"
action = "pass"
"#
    );
    let (airlock, run, env) = fx.start_run(&policy, &[]).await;
    let base = format!("https://127.0.0.1:{port}");
    let created = curl(
        &env,
        &["-X", "POST", "--data", "{}", &format!("{base}/commits")],
    )
    .await;
    assert_eq!(created.status, 201);
    let sha = created.json()["sha"].as_str().expect("sha").to_owned();
    assert!(sha.starts_with("ffffffff") && sha.len() == 40, "{sha}");
    // `git show` style: the first 12 digits, then a longer prefix in a query.
    let short = &sha[..12];
    let sent = curl(
        &env,
        &[&format!("{base}/commits/{short}?full={}", &sha[..20])],
    )
    .await;
    assert_eq!(sent.status, 202, "{}", String::from_utf8_lossy(&sent.body));
    let child = sent.header("airlock-effect").expect("effect id");
    let shown = airlock
        .admin
        .get(&format!("/v1/effects/{child}"))
        .await
        .expect("show");
    assert_eq!(shown["depends_on"][0]["value"], sha.as_str(), "{shown}");
    // 11 digits are no placeholder: passed as they are.
    let passed = curl(&env, &[&format!("{base}/commits/{}", &sha[..11])]).await;
    assert_eq!(passed.status, 200);
    assert_eq!(
        origin.received().len(),
        1,
        "only the 11-digit read reached the origin"
    );
    let report = airlock.commit_pending(&run).await;
    assert_eq!(
        airlock_tests::effect_states(&report),
        vec![json!("released"), json!("released")],
        "{report}"
    );
    let paths: Vec<String> = origin.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        paths[1..],
        [
            "/commits".to_owned(),
            format!("/commits/{}?full={}", &REAL[..12], &REAL[..20])
        ]
    );
}
