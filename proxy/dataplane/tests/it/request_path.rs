//! Pass, stage and deny through the proxy listener, asserting what the origin received
//! and what the in-memory ledger holds.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use airlock_dataplane::policy_store::PolicyStore;
use airlock_dataplane::{DataPlane, DataPlaneInputs, Limits};
use airlock_ledger::{EffectState, MemoryStore, Run, Store};
use airlock_net::dial::Dialer;
use airlock_net::limits::Connections;
use airlock_net::upstream::{client, client_tls};
use airlock_origin::{Handler, Origin, Reply};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::net::{TcpListener, TcpStream};

/// A data plane on the in-memory store, listening on 127.0.0.1, with its policy.
struct Plane {
    proxy: SocketAddr,
    ledger: Arc<dyn Store>,
    tokens: airlock_ledger::RunTokens,
    _dir: tempfile::TempDir,
}

fn policy(port: u16) -> String {
    format!(
        r#"version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "no-admin"
host = "127.0.0.1"
port = {port}
path = "/admin/**"
action = "deny"
reason = "nothing under /admin leaves"

[[rule]]
id = "reads"
host = "127.0.0.1"
port = {port}
method = "read"
action = "pass"

[[rule]]
id = "writes"
host = "127.0.0.1"
port = {port}
method = ["POST"]
action = "stage"
"#
    )
}

async fn start(origin_port: u16) -> Plane {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy_path = dir.path().join("policy.toml");
    std::fs::write(&policy_path, policy(origin_port)).expect("write policy");
    let policy = Arc::new(PolicyStore::load(&policy_path, None, dir.path()).expect("policy"));
    let ca =
        Arc::new(airlock_net::ca::CertificateAuthority::load_or_create(dir.path()).expect("ca"));
    let ledger: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let proxy = listener.local_addr().expect("addr");
    let dialer = Dialer::new(policy.clone(), vec![proxy], Duration::from_secs(5));
    let tls = client_tls(None).expect("tls");
    let mut http1 = tls.clone();
    http1.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tokens = airlock_ledger::RunTokens::from_key([5; 32]);
    let data = DataPlane::new(DataPlaneInputs {
        reads_in_flight: None,
        ledger: ledger.clone(),
        run_tokens: tokens.clone(),
        policy,
        ca,
        upstream: client(dialer.clone(), tls),
        upstream_http1: client(dialer.clone(), http1),
        dialer,
        limits: Limits {
            stage_body_bytes: 1024 * 1024,
            release_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            keep_alive_timeout: Duration::from_secs(60),
            auth_timeout: Duration::from_secs(10),
            body_read_timeout: airlock_dataplane::request::DEFAULT_BODY_READ_TIMEOUT,
            dns_queries_per_second: airlock_dataplane::DEFAULT_DNS_QUERIES_PER_SECOND,
        },
        proxy_addr: proxy,
        connections: Connections::new(64, 16, 16),
        closed_runs: Default::default(),
        changes: ledger.subscribe(),
    });
    tokio::spawn(airlock_dataplane::listener::serve(data, listener));
    Plane {
        proxy,
        ledger,
        tokens,
        _dir: dir,
    }
}

/// Sends one absolute-form request through the proxy with the run's credentials; returns
/// the status, the `airlock-effect` header and the body.
async fn send(
    plane: &Plane,
    run: &Run,
    method: &str,
    url: &str,
    body: &'static str,
) -> (u16, Option<String>, serde_json::Value) {
    let stream = TcpStream::connect(plane.proxy).await.expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(connection);
    // A test's run that carries a plaintext token presents it instead of its own.
    let token = run
        .plaintext_token
        .clone()
        .unwrap_or_else(|| plane.tokens.token_for(&run.id));
    let credentials =
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{token}", run.id));
    let authority = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let request = http::Request::builder()
        .method(method)
        .uri(url)
        .header("host", authority)
        .header("proxy-authorization", format!("Basic {credentials}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("request");
    let response = sender.send_request(request).await.expect("response");
    let status = response.status().as_u16();
    let effect = response
        .headers()
        .get("airlock-effect")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, effect, json)
}

fn origin_handler() -> Handler {
    Arc::new(|_| Reply::json(200, &serde_json::json!({ "customers": ["ada", "grace"] })))
}

#[tokio::test]
async fn pass_reaches_the_origin_and_is_journaled_as_a_read() {
    let origin = Origin::start(None, origin_handler()).await.expect("origin");
    let plane = start(origin.addr().port()).await;
    let run = plane.ledger.create_run(None).expect("run");
    let url = format!("http://{}/customers", origin.addr());
    let (status, effect, body) = send(&plane, &run, "GET", &url, "").await;
    assert_eq!(status, 200);
    assert_eq!(effect, None);
    assert_eq!(body["customers"][1], "grace");
    assert_eq!(origin.received().len(), 1, "the origin got the read once");
    // The read is journaled when its response body has been relayed.
    let mut reads = Vec::new();
    for _ in 0..100 {
        reads = plane.ledger.reads(&run.id).expect("reads");
        if !reads.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(reads.len(), 1, "one read journaled");
    assert_eq!(reads[0].method, "GET");
    assert_eq!(reads[0].status, Some(200));
}

#[tokio::test]
async fn stage_answers_at_once_and_the_origin_receives_nothing() {
    let origin = Origin::start(None, origin_handler()).await.expect("origin");
    let plane = start(origin.addr().port()).await;
    let run = plane.ledger.create_run(None).expect("run");
    let url = format!("http://{}/hooks/deliver", origin.addr());
    let (status, effect, _) = send(&plane, &run, "POST", &url, r#"{"text":"hi"}"#).await;
    assert_eq!(status, 202);
    let effect = effect.expect("an airlock-effect header");
    assert!(origin.received().is_empty(), "nothing reached the origin");
    let effects = plane.ledger.effects(&run.id).expect("effects");
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0].id.as_str(), effect);
    assert_eq!(effects[0].state, EffectState::Staged);
    assert_eq!(effects[0].rule.as_deref(), Some("writes"));
    let body = plane
        .ledger
        .body(&effects[0].body_digest)
        .expect("body")
        .expect("stored");
    assert_eq!(body, br#"{"text":"hi"}"#);
}

#[tokio::test]
async fn deny_names_the_rule_and_nothing_is_staged_or_sent() {
    let origin = Origin::start(None, origin_handler()).await.expect("origin");
    let plane = start(origin.addr().port()).await;
    let run = plane.ledger.create_run(None).expect("run");
    let url = format!("http://{}/admin/users", origin.addr());
    let (status, effect, body) = send(&plane, &run, "POST", &url, "{}").await;
    assert_eq!(status, 403);
    assert_eq!(effect, None);
    assert_eq!(body["rule"], "no-admin");
    assert_eq!(body["reason"], "nothing under /admin leaves");
    assert!(origin.received().is_empty());
    assert!(plane.ledger.effects(&run.id).expect("effects").is_empty());
    assert_eq!(plane.ledger.denials(&run.id).expect("denials").len(), 1);
}

#[tokio::test]
async fn a_request_without_run_credentials_gets_407() {
    let origin = Origin::start(None, origin_handler()).await.expect("origin");
    let plane = start(origin.addr().port()).await;
    let fake = Run {
        plaintext_token: Some("not-the-token".into()),
        ..plane.ledger.create_run(None).expect("run")
    };
    let url = format!("http://{}/customers", origin.addr());
    let (status, _, _) = send(&plane, &fake, "GET", &url, "").await;
    assert_eq!(status, 407);
    assert!(origin.received().is_empty());
}

/// The data plane follows the store's change notifications: a run aborted by another
/// writer of the same store (here, a direct store call standing in for another process
/// on a shared ledger) refuses requests on this plane too, without a restart.
#[tokio::test]
async fn a_run_closed_by_another_writer_refuses_requests_here() {
    let origin = Origin::start(None, origin_handler()).await.expect("origin");
    let plane = start(origin.addr().port()).await;
    let run = plane.ledger.create_run(None).expect("run");
    let url = format!("http://{}/customers", origin.addr());
    let (status, _, _) = send(&plane, &run, "GET", &url, "").await;
    assert_eq!(status, 200, "an open run's read passes");
    plane
        .ledger
        .abort(&run.id, "another writer")
        .expect("abort");
    let mut last = 0;
    for _ in 0..100 {
        let (status, _, body) = send(&plane, &run, "GET", &url, "").await;
        last = status;
        if status == 409 {
            assert_eq!(body["reason_code"], "run_not_open", "{body}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(last, 409, "the closed run is refused");
    assert_eq!(
        origin.received().len(),
        1,
        "only the first read reached the origin"
    );
}
