//! issue #19 item 4: a proxy never passes a request that carries a placeholder issued on
//! another proxy of the same PostgreSQL store, however soon after the other proxy's
//! answer it comes (no wait for the change notification), and what that check costs on
//! the pass path (an ignored test that prints figures).

use std::time::{Duration, Instant};

use airlock_ledger::conformance::postgres::TestServer;
use airlock_tests::{Airlock, Fixture};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use serde_json::Value;

use super::{items_origin, policy, start_second};

/// A kept-alive HTTP/1.1 connection through one airlock's proxy listener (a CONNECT
/// tunnel, then TLS to airlock's leaf for the origin), so a request goes out without a
/// client start, a CONNECT or a handshake in front of it.
struct Through {
    sender: SendRequest<Full<Bytes>>,
    authority: String,
}

/// An answer: status, headers, body.
struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Through {
    async fn open(airlock: &Airlock, run: &str, token: &str, authority: &str) -> Self {
        let sender = airlock_tests::tunnel::h1_through(airlock, run, token, authority).await;
        Self {
            sender,
            authority: authority.to_owned(),
        }
    }

    async fn send(&mut self, method: &str, path: &str, body: &str) -> Answer {
        let request = http::Request::builder()
            .method(method)
            .uri(format!("https://{}{path}", self.authority))
            .header("host", &self.authority)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_owned())))
            .expect("request");
        self.sender
            .ready()
            .await
            .expect("the connection is kept alive");
        let response = self.sender.send_request(request).await.expect("answered");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_issued_through_one_proxy_is_held_by_the_other_at_once() {
    let Some(pg) = TestServer::start() else {
        return;
    };
    let url = pg.database();
    let fx = Fixture::new();
    let origin = items_origin(&fx).await;
    let authority = format!("127.0.0.1:{}", origin.addr().port());
    let x = fx.start(&policy(origin.addr().port()), &["--store", &url]);
    let y = start_second(&fx, &url);
    let (run, _) = x.create_run().await;
    let token = x.run_token(&run).await;
    let mut via_x = Through::open(&x, &run, &token, &authority).await;
    let mut via_y = Through::open(&y, &run, &token, &authority).await;
    let mut held = Vec::new();
    for n in 0..20 {
        // Y stages in the run first, so its cache holds the run's placeholders: all but
        // the one X issues next.
        let warm = via_y.send("POST", &format!("/hooks/{n}"), "{}").await;
        assert_eq!(warm.status, 202, "{}", warm.text());
        let created = via_x.send("POST", "/items", r#"{"title":"t"}"#).await;
        assert_eq!(created.status, 201, "{}", created.text());
        let placeholder = created.json()["id"].as_u64().expect("a number placeholder");
        let parent = created.header("airlock-effect").expect("effect");
        // At once, on a connection already open: no wait for X's notification. First a
        // staged POST through Y carrying it in its body only (its URL has no placeholder's
        // shape): it depends on X's effect.
        let post = via_y
            .send(
                "POST",
                &format!("/hooks/body-{n}"),
                &format!(r#"{{"item":{placeholder}}}"#),
            )
            .await;
        assert_eq!(post.status, 202, "{}", post.text());
        held.push((parent, post.header("airlock-effect").expect("effect")));
        // Then a read through Y carrying a second placeholder X issues now.
        let created = via_x.send("POST", "/items", r#"{"title":"u"}"#).await;
        assert_eq!(created.status, 201, "{}", created.text());
        let placeholder = created.json()["id"].as_u64().expect("a number placeholder");
        let parent = created.header("airlock-effect").expect("effect");
        let read = via_y
            .send("GET", &format!("/items/{placeholder}"), "")
            .await;
        assert_eq!(
            read.status,
            202,
            "iteration {n}: a read through Y carrying X's placeholder {placeholder} is held, not passed: {}",
            read.text()
        );
        let child = read
            .header("airlock-effect")
            .expect("the held read's effect");
        held.push((parent, child));
        assert!(
            origin.received().is_empty(),
            "iteration {n}: nothing reached the origin: {:?}",
            origin.received()
        );
    }
    for (parent, child) in &held {
        let shown = x
            .admin
            .get(&format!("/v1/effects/{child}"))
            .await
            .expect("show");
        assert_eq!(shown["depends_on"][0]["effect"], parent.as_str(), "{shown}");
    }
}

/// Passed GETs through a PostgreSQL-backed proxy in a run with one placeholder: the pass
/// path without and with the per-request placeholder check, one request at a time on one
/// kept-alive connection, then on `AIRLOCK_PASS_CONNECTIONS` connections at once (default 8). Prints
/// figures; asserts nothing about time. Run with
/// `cargo test -p airlock-tests --test it placeholder_check_cost -- --ignored --nocapture`
/// (`AIRLOCK_PASS_GETS` sets how many per line, default 2,000; `AIRLOCK_BIN` the binary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: prints figures"]
async fn placeholder_check_cost_on_the_pass_path() {
    let Some(pg) = TestServer::start() else {
        return;
    };
    let url = pg.database();
    let fx = Fixture::new();
    let origin = items_origin(&fx).await;
    let authority = format!("127.0.0.1:{}", origin.addr().port());
    let x = fx.start(&policy(origin.addr().port()), &["--store", &url]);
    let (run, _) = x.create_run().await;
    let token = x.run_token(&run).await;
    let setting = |name: &str, default: usize| -> usize {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let n = setting("AIRLOCK_PASS_GETS", 2_000);
    let connections = setting("AIRLOCK_PASS_CONNECTIONS", 8).max(1);
    let mut through = Vec::new();
    for _ in 0..connections {
        through.push(Through::open(&x, &run, &token, &authority).await);
    }
    let created = through[0].send("POST", "/items", r#"{"title":"t"}"#).await;
    assert_eq!(created.status, 201, "{}", created.text());
    for one in &mut through {
        for _ in 0..50 {
            assert_eq!(one.send("GET", "/ok", "").await.status, 200);
        }
    }
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    // `/ok` has no placeholder's shape, so the store is not asked; the 16-digit query value
    // has a number placeholder's shape (not one issued), so the count is read.
    for (path, what) in [
        ("/ok", "no placeholder's shape: no store call"),
        (
            "/ok?n=1234567890123456",
            "a placeholder's shape: the store's count is read",
        ),
    ] {
        let mut took = Vec::with_capacity(n);
        let started = Instant::now();
        for _ in 0..n {
            let one = Instant::now();
            assert_eq!(through[0].send("GET", path, "").await.status, 200);
            took.push(one.elapsed());
        }
        let total = started.elapsed();
        took.sort();
        let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize];
        eprintln!(
            "figure: {n} passed GETs of {path} ({what}) one at a time through a PostgreSQL-backed proxy: {:.0} requests/s, p50 {:.0} µs, p90 {:.0} µs, p99 {:.0} µs",
            n as f64 / total.as_secs_f64(),
            micros(at(0.5)),
            micros(at(0.9)),
            micros(at(0.99)),
        );
    }
    let started = Instant::now();
    let tasks: Vec<_> = through
        .into_iter()
        .map(|mut one| {
            tokio::spawn(async move {
                for _ in 0..n / connections {
                    assert_eq!(one.send("GET", "/ok", "").await.status, 200);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a client task");
    }
    let sent = n / connections * connections;
    eprintln!(
        "figure: {sent} passed GETs on {connections} connections at once: {:.0} requests/s",
        sent as f64 / started.elapsed().as_secs_f64()
    );
}
