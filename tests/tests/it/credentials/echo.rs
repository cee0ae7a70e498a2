//! An origin's echo of the secret: scrubbed while it streams, decoded and scrubbed when compressed.

use std::sync::Arc;

use airlock_tests::{curl, Fixture, Origin, Received, Reply};
use serde_json::json;

use super::{github_policy, other_origin, start, SECRET};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_echo_is_scrubbed_while_it_streams() {
    let fx = Fixture::new();
    // The secret straddles the 16 KiB TLS record boundary, and appears again later.
    let handler = Arc::new(|received: &Received| {
        let seen = received.header("authorization").unwrap_or("").to_owned();
        let mut body = "a".repeat(16_384 - 10);
        body.push_str(&seen);
        body.push_str(&"b".repeat(40_000));
        body.push_str(&seen);
        Reply::text(200, &body)
    });
    let origin = Origin::start(Some(&fx.origin_ca), handler)
        .await
        .expect("origin");
    let other = other_origin().await;
    let airlock = start(
        &fx,
        &github_policy(origin.addr().port(), other.addr().port(), false),
    );
    let (_, env) = airlock.create_run().await;
    let read = curl(
        &env,
        &[&format!(
            "https://127.0.0.1:{}/repos/o/r",
            origin.addr().port()
        )],
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.stderr);
    let text = String::from_utf8_lossy(&read.body);
    let seen = format!("Bearer {SECRET}");
    assert_eq!(
        read.body.len(),
        16_384 - 10 + 40_000 + 2 * seen.len(),
        "the length is kept"
    );
    assert!(!text.contains(SECRET));
    assert_eq!(text.matches(&"*".repeat(SECRET.len())).count(), 2);
    assert_eq!(
        read.header("content-length").as_deref(),
        Some(read.body.len().to_string().as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echo_in_a_compressed_answer_is_decoded_and_scrubbed_or_withheld() {
    use std::io::Write as _;
    let fx = Fixture::new();
    // An origin that ignores `Accept-Encoding: identity`: gzip on /gz, deflate on /zz,
    // brotli-labelled bytes on /br.
    let handler = Arc::new(|received: &Received| {
        let seen = received.header("authorization").unwrap_or("").to_owned();
        let plain = json!({ "seen": seen }).to_string();
        let (coding, body) = match received.path.as_str() {
            "/gz" => {
                let mut e =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(plain.as_bytes()).expect("gzip");
                ("gzip", e.finish().expect("gzip"))
            }
            "/zz" => {
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(plain.as_bytes()).expect("zlib");
                ("deflate", e.finish().expect("zlib"))
            }
            _ => ("br", plain.into_bytes()),
        };
        let mut reply = Reply::text(200, "");
        reply.body = body;
        reply.headers = vec![
            ("content-type".into(), "application/json".into()),
            ("content-encoding".into(), coding.into()),
        ];
        reply
    });
    let origin = Origin::start(Some(&fx.origin_ca), handler)
        .await
        .expect("origin");
    let other = other_origin().await;
    let airlock = start(
        &fx,
        &github_policy(origin.addr().port(), other.addr().port(), false),
    );
    let (_, env) = airlock.create_run().await;
    let base = format!("https://127.0.0.1:{}", origin.addr().port());
    for path in ["/gz", "/zz"] {
        let out = curl(&env, &["--compressed", &format!("{base}{path}")]).await;
        assert_eq!(out.status, 200, "{path}: {}", out.stderr);
        let text = String::from_utf8_lossy(&out.body);
        assert!(
            !text.contains(SECRET),
            "{path}: the secret reached the sandbox: {text}"
        );
        assert!(text.contains(&"*".repeat(SECRET.len())), "{path}: {text}");
        assert_eq!(
            out.header("content-encoding"),
            None,
            "{path}: relayed decoded"
        );
    }
    let out = curl(&env, &[&format!("{base}/br")]).await;
    assert_eq!(
        out.status, 502,
        "an answer airlock cannot decode is withheld"
    );
    assert!(!String::from_utf8_lossy(&out.body).contains(SECRET));
    assert!(
        out.json()["reason"]
            .as_str()
            .is_some_and(|r| r.contains("Content-Encoding br")),
        "{}",
        String::from_utf8_lossy(&out.body)
    );
}
