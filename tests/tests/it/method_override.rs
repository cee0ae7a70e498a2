//! Issue 37 item 4: a method override makes the request the method it names, for rule
//! matching and flows alike. A `GET` that asks to be a `POST` (`X-HTTP-Method-Override`,
//! `X-HTTP-Method`, `X-Method-Override`, a `_method` query field) is a write, staged and
//! never passed; a `POST` that asks to be a `GET` stays a write.

use airlock_tests::{curl, loopback_policy, ok_origin, Fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_that_asks_to_be_a_post_is_staged_as_a_write() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx.start_run(&loopback_policy(port), &[]).await;
    let base = format!("https://127.0.0.1:{port}");
    let overridden: Vec<Vec<String>> = vec![
        vec![
            "-H".into(),
            "X-HTTP-Method-Override: POST".into(),
            format!("{base}/items?secret=s3cr3t"),
        ],
        vec![
            "-H".into(),
            "X-HTTP-Method: delete".into(),
            format!("{base}/items/1"),
        ],
        vec![
            "-H".into(),
            "X-Method-Override: PATCH".into(),
            format!("{base}/items/2"),
        ],
        vec![format!("{base}/items/3?_method=PUT")],
        vec![
            "-X".into(),
            "POST".into(),
            "-H".into(),
            "X-HTTP-Method-Override: GET".into(),
            "--data".into(),
            "x".into(),
            format!("{base}/items/4"),
        ],
    ];
    for args in &overridden {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = curl(&env, &args).await;
        assert_eq!(
            out.status, 202,
            "{args:?} is staged as a write: {}",
            out.headers
        );
    }
    assert!(
        origin.received().is_empty(),
        "nothing overridden passed: {:?}",
        origin.received()
    );
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), overridden.len());
    assert!(effects.iter().all(|e| e["rule"] == "writes"), "{effects:?}");
    // A plain GET, and one whose override names a read, still pass.
    for args in [
        vec![format!("{base}/items")],
        vec![
            "-H".into(),
            "X-HTTP-Method-Override: HEAD".into(),
            format!("{base}/items"),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = curl(&env, &args).await;
        assert_eq!(out.status, 200, "{args:?}: {}", out.headers);
    }
    assert_eq!(origin.received().len(), 2);
}
