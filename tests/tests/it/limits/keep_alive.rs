//! `--keep-alive-timeout`: idle connections closed; slow requests, slow readers, long uploads not.

use std::sync::Arc;
use std::time::Duration;

use airlock_tests::{connect_tunnel, loopback_policy, Fixture, Origin, Received, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::{assert_counted, basic, expect_closed, get_raw, read_head, slow_origin};

/// `--keep-alive-timeout 1` (and a long `--header-read-timeout`, which hyper also runs on
/// an idle HTTP/1.1 connection, so that only the keep-alive timeout can close it): a
/// request whose origin answers after 3 s completes, then the idle connection is closed:
/// intercepted HTTP/1.1 and h2 inside CONNECT+TLS, and a plain proxy connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_but_a_slow_request_completes() {
    use http_body_util::BodyExt as _;
    let fx = Fixture::new();
    let origin = slow_origin(Some(&fx.origin_ca)).await;
    let port = origin.addr().port();
    let plain = slow_origin(None).await;
    let policy = format!(
        "{}\n[[rule]]\nid = \"plain\"\nhost = \"127.0.0.1\"\nport = {}\nmethod = \"read\"\naction = \"pass\"\n",
        loopback_policy(port),
        plain.addr().port()
    );
    let (airlock, run, _) = fx
        .start_run(
            &policy,
            &["--keep-alive-timeout", "1", "--header-read-timeout", "300"],
        )
        .await;
    let token = airlock.run_token(&run).await;
    let authority = format!("127.0.0.1:{port}");
    let ca = std::fs::read_to_string(airlock.ca_file()).expect("ca");
    for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
        let label = String::from_utf8_lossy(alpn).into_owned();
        let stream = connect_tunnel(&airlock.proxy, &run, &token, &authority).await;
        let connector = airlock_tests::tls_trusting(&ca, &[alpn]);
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let tls = connector.connect(name, stream).await.expect("tls");
        let io = hyper_util::rt::TokioIo::new(tls);
        let request = |path: &str| {
            let mut builder = http::Request::get(format!("https://{authority}{path}"));
            if alpn != b"h2" {
                builder = builder.header("host", &authority);
            }
            builder
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .expect("request")
        };
        // The connection task ends when airlock closes the connection (the sender is
        // kept: dropping it would end the task too).
        let (response, conn, _sender): (_, _, Box<dyn std::any::Any + Send>) = if alpn == b"h2" {
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                    .await
                    .expect("h2");
            let conn = tokio::spawn(conn);
            let response = sender.send_request(request("/slow")).await;
            (response, conn, Box::new(sender))
        } else {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.expect("h1");
            let conn = tokio::spawn(conn);
            let response = sender.send_request(request("/slow")).await;
            (response, conn, Box::new(sender))
        };
        let response =
            response.unwrap_or_else(|e| panic!("{label}: the slow request completes: {e}"));
        assert_eq!(response.status(), 200, "{label}");
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("/slow"), "{label}");
        let _ = tokio::time::timeout(Duration::from_secs(60), conn)
            .await
            .unwrap_or_else(|_| panic!("{label}: airlock closes the idle connection (bound: 60 s)"))
            .expect("the connection task");
    }

    // A plain proxy connection (absolute-form http://): the same.
    let mut stream = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let url = format!("http://127.0.0.1:{}/slow", plain.addr().port());
    let (status, body) = get_raw(&mut stream, &url, Some((&run, &token))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["path"], "/slow");
    expect_closed(&mut stream, "an idle plain proxy connection").await;
    let metrics = airlock.admin.get_text("/metrics").await.expect("metrics");
    assert_counted(
        &metrics,
        "airlock_client_connections_timed_out_total{timeout=\"keep_alive_timeout\"}",
    );
}

/// `--keep-alive-timeout 1`: clients that stop reading a large response for 8 s (past the
/// timeout and the close grace) still get every byte: a connection waiting for its client
/// to read is not idle, even once hyper has taken the whole body from the origin and only
/// its own buffers hold the rest. Where that happens depends on the kernel's socket
/// buffers, so 15 sizes from 1 to 8 MiB run at once, each on its own connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_the_client_reads_slowly_is_not_cut_by_the_keep_alive_timeout() {
    let fx = Fixture::new();
    let origin = Origin::start(
        None,
        Arc::new(|req: &Received| {
            let size: usize = req
                .path
                .trim_start_matches("/big/")
                .parse()
                .unwrap_or_default();
            let mut reply = Reply::text(200, "");
            reply.headers = vec![("content-type".into(), "application/octet-stream".into())];
            reply.body = vec![b'x'; size];
            reply
        }),
    )
    .await
    .expect("origin");
    let port = origin.addr().port();
    let (airlock, run, _) = fx
        .start_run(
            &loopback_policy(port),
            &["--keep-alive-timeout", "1", "--header-read-timeout", "300"],
        )
        .await;
    let token = airlock.run_token(&run).await;
    let credentials = basic(&run, &token);
    let mut readers = Vec::new();
    for step in 2..=16 {
        let size = step * (512 << 10);
        let proxy = airlock.proxy.clone();
        let credentials = credentials.clone();
        readers.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(&proxy).await.expect("connect");
            let head = format!(
                "GET http://127.0.0.1:{port}/big/{size} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: Basic {credentials}\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await.expect("send");
            let head = read_head(&mut stream).await;
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            tokio::time::sleep(Duration::from_secs(8)).await;
            let mut received = 0usize;
            let mut buf = vec![0u8; 64 * 1024];
            while received < size {
                match tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => received += n,
                    _ => break,
                }
            }
            (size, received)
        }));
    }
    for reader in readers {
        let (size, received) = reader.await.expect("reader");
        assert_eq!(received, size, "a {size}-byte response was cut");
    }
}

/// `--keep-alive-timeout 1`: an origin answers a POST before its body is complete; the
/// client sends the rest of the body 8 s later (past the timeout and the close grace) and
/// the origin still receives all of it: a request body still being sent is in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_goes_on_after_an_early_answer_is_not_cut_by_the_keep_alive_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        read_head(&mut socket).await;
        let mut buffered: Vec<u8> = Vec::new();
        socket
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .expect("answer early");
        let mut buf = [0u8; 64];
        while buffered.len() < 40 {
            match socket.read(&mut buf).await {
                Ok(n) if n > 0 => buffered.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        let _ = tx.send(buffered.len());
    });
    let fx = Fixture::new();
    let policy = format!(
        "version = 1\ndefault = \"deny\"\nallow_private = [\"127.0.0.0/8\"]\n\n[[rule]]\nid = \"upload\"\nhost = \"127.0.0.1\"\nport = {port}\nmethod = [\"POST\"]\naction = \"pass\"\n"
    );
    let (airlock, run, _) = fx
        .start_run(
            &policy,
            &["--keep-alive-timeout", "1", "--header-read-timeout", "300"],
        )
        .await;
    let token = airlock.run_token(&run).await;
    let mut stream = TcpStream::connect(&airlock.proxy).await.expect("connect");
    let head = format!(
        "POST http://127.0.0.1:{port}/upload HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: Basic {}\r\nContent-Length: 40\r\n\r\n0123456789",
        basic(&run, &token)
    );
    stream.write_all(head.as_bytes()).await.expect("send");
    let answer = read_head(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    tokio::time::sleep(Duration::from_secs(8)).await;
    // The rest of the body: the connection must still be open for it.
    stream
        .write_all(b"abcdefghijklmnopqrstuvwxyz0123")
        .await
        .expect("the rest of the body");
    let got = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("the origin finishes reading")
        .expect("a count");
    assert_eq!(got, 40, "the origin received the whole body");
}
