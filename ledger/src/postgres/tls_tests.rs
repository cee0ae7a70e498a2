//! TLS to a live server ([`TestServer::start_tls`]: TCP over TLS only): a verified store
//! works and its connections are encrypted; a wrong CA, a wrong host name and plain TCP
//! are refused; a SCRAM password login binds to the TLS channel; bad TLS parameters are
//! refused at open without the password.

use crate::conformance::contracts::new_effect;
use crate::conformance::postgres::TestServer;
use crate::{EffectStore, PgOpenError, PgStore, RunStore};

use super::pool::{chain, parse_url};

/// The password the refusals must never show (trust authentication ignores it).
const SECRET: &str = "s3cret";

/// `(ssl of this connection, connections of other backends on this database, how many
/// of those are encrypted)`, on a connection made as the store makes its own.
fn ssl_seen(url: &str) -> (bool, i64, i64) {
    let url = url.to_owned();
    // The sync client must not run inside a caller's async runtime: its own thread.
    std::thread::spawn(move || {
        let mut client = parse_url(&url)
            .expect("the URL parses")
            .connect()
            .expect("connect");
        let own: bool = client
            .query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .expect("own ssl")
            .get(0);
        let row = client
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE s.ssl)
                 FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
                 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()",
                &[],
            )
            .expect("the others' ssl");
        (own, row.get(0), row.get(1))
    })
    .join()
    .expect("the query thread")
}

/// The URL of `database` on `server` with `host` (TCP to 127.0.0.1 whatever the name)
/// and `params`, with a password.
fn url_with(server: &TestServer, database: &str, host: &str, params: &str) -> String {
    let name = database
        .split('?')
        .next()
        .and_then(|s| s.rsplit('/').next());
    format!(
        "postgres://postgres:{SECRET}@{host}:{}/{}?hostaddr=127.0.0.1&{params}",
        server.port(),
        name.expect("a database name")
    )
}

/// The refusal of `url` at open, with its causes.
fn refusal(url: &str) -> (PgOpenError, String) {
    let error = PgStore::open(url, 1).expect_err("refused");
    let text = chain(&error);
    assert!(!text.contains(SECRET), "the password shows: {text}");
    assert!(!format!("{error:?}").contains(SECRET), "{error:?}");
    (error, text)
}

#[test]
fn verify_full_stages_and_reads_back_over_tls() {
    let Some(server) = TestServer::start_tls() else {
        return;
    };
    let url = server.database();
    assert!(url.contains("sslmode=verify-full"), "{url}");
    let store = PgStore::open(&url, 2).expect("open over TLS");
    let run = store.create_run(None).expect("run");
    let staged = store
        .stage(new_effect(&run.id, b"over tls", Vec::new()))
        .expect("stage");
    let effects = store.effects(&run.id).expect("effects");
    assert_eq!(
        effects.iter().map(|e| &e.id).collect::<Vec<_>>(),
        vec![&staged.id]
    );
    let (own, others, encrypted) = ssl_seen(&url);
    assert!(own, "the connection is not encrypted");
    // The store's listener and its pooled connection, both encrypted.
    assert!(others >= 2, "{others} other connections");
    assert_eq!(encrypted, others, "a store connection is not encrypted");
    // By DNS name (the leaf's `localhost`), and with no sslmode: a root alone means
    // verify-full, never plain (the server would refuse plain anyway).
    let ca = server
        .ca_file()
        .expect("a TLS server")
        .display()
        .to_string();
    let by_name = url_with(&server, &url, "localhost", &format!("sslrootcert={ca}"));
    let again = PgStore::open(&by_name, 1).expect("open by name");
    assert_eq!(again.effects(&run.id).expect("effects"), effects);
    assert!(ssl_seen(&by_name).0);
}

#[test]
fn the_ssl_check_tells_a_plain_connection() {
    // The control of the check above: on a plain server it says false.
    let Some(server) = TestServer::start() else {
        return;
    };
    let url = server.database();
    let _store = PgStore::open(&url, 1).expect("open");
    let (own, others, encrypted) = ssl_seen(&url);
    assert!(!own);
    assert!(others >= 1);
    assert_eq!(encrypted, 0);
}

#[test]
fn a_wrong_ca_a_wrong_name_and_plain_tcp_are_refused() {
    let Some(server) = TestServer::start_tls() else {
        return;
    };
    let url = server.database();
    let ca = server
        .ca_file()
        .expect("a TLS server")
        .display()
        .to_string();
    let other = server.other_ca_file().expect("a TLS server").display();
    // A CA that did not sign the server's certificate.
    let (error, text) = refusal(&url_with(
        &server,
        &url,
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={other}"),
    ));
    assert!(matches!(error, PgOpenError::Connect { .. }), "{error:?}");
    assert!(
        text.contains("invalid peer certificate: UnknownIssuer"),
        "{text}"
    );
    // verify-ca checks the chain too.
    let (_, text) = refusal(&url_with(
        &server,
        &url,
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={other}"),
    ));
    assert!(text.contains("UnknownIssuer"), "{text}");
    // The right CA, a name the certificate does not hold.
    let wrong_name = |mode: &str| {
        url_with(
            &server,
            &url,
            "db.invalid",
            &format!("sslmode={mode}&sslrootcert={ca}"),
        )
    };
    let (error, text) = refusal(&wrong_name("verify-full"));
    assert!(matches!(error, PgOpenError::Connect { .. }), "{error:?}");
    assert!(
        text.contains("certificate not valid for name \"db.invalid\""),
        "{text}"
    );
    // …which verify-ca, by definition, accepts.
    let store = PgStore::open(&wrong_name("verify-ca"), 1).expect("verify-ca ignores the name");
    store.create_run(None).expect("a run over verify-ca");
    // Without TLS the server refuses: it really requires TLS.
    let (error, text) = refusal(&url_with(&server, &url, "127.0.0.1", "sslmode=disable"));
    assert!(matches!(error, PgOpenError::Connect { .. }), "{error:?}");
    assert!(text.contains("no encryption"), "{text}");
}

#[test]
fn bad_tls_parameters_are_refused_naming_them_without_the_password() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "no certificate here\n").expect("write");
    let base = format!("postgres://u:{SECRET}@127.0.0.1:1/db");
    let cases = [
        (
            format!("{base}?sslmode=allow"),
            "sslmode",
            "unknown value `allow`",
        ),
        (
            format!("{base}?sslmode=verify"),
            "sslmode",
            "unknown value `verify`",
        ),
        (
            format!("{base}?sslmode=require"),
            "sslrootcert",
            "sslmode=require needs sslrootcert",
        ),
        (
            format!("{base}?sslmode=verify-full"),
            "sslrootcert",
            "needs sslrootcert",
        ),
        (
            format!("{base}?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"),
            "sslrootcert",
            "/nonexistent/ca.pem: cannot be read",
        ),
        (
            format!("{base}?sslrootcert={}", not_pem.display()),
            "sslrootcert",
            "holds no PEM CERTIFICATE block",
        ),
        (
            format!("{base}?sslmode=disable&sslrootcert=system"),
            "sslrootcert",
            "sslmode=disable",
        ),
        (
            format!("{base}?sslmode=verify-ca&sslrootcert=system"),
            "sslmode",
            "use verify-full",
        ),
        (
            format!("host=127.0.0.1 password={SECRET} sslmode=verify-full"),
            "sslrootcert",
            "needs sslrootcert",
        ),
        (
            format!(
                "host=/run/postgresql password={SECRET} sslmode=verify-full sslrootcert=system"
            ),
            "sslmode",
            "unix socket",
        ),
        (
            format!("{base}?sslmode=verify-full&sslrootcert=system&sslcert=/c.pem&sslkey=/k.pem"),
            "sslcert",
            "client certificates are not supported",
        ),
        (
            format!("host=127.0.0.1 password={SECRET} sslkey='/k.pem'"),
            "sslkey",
            "client certificates are not supported",
        ),
    ];
    for (url, parameter, says) in cases {
        let (error, text) = refusal(&url);
        match &error {
            PgOpenError::Tls {
                parameter: named, ..
            } => assert_eq!(*named, parameter, "{url}"),
            other => panic!("{url}: expected Tls, got {other:?}"),
        }
        assert!(
            text.contains(parameter) && text.contains(says),
            "{url}: {text}"
        );
    }
}

#[test]
fn a_password_login_over_tls_binds_to_the_channel() {
    let Some(server) = TestServer::start_tls() else {
        return;
    };
    let url = server.database();
    let database = url
        .split('?')
        .next()
        .and_then(|s| s.rsplit('/').next())
        .expect("a database name");
    // Members of `scram` log in by scram-sha-256 (the harness's pg_hba.conf).
    server.execute(&format!(
        "CREATE ROLE scram NOLOGIN; CREATE ROLE airlock_pw LOGIN PASSWORD '{SECRET}' IN ROLE scram;
         ALTER DATABASE {database} OWNER TO airlock_pw"
    ));
    let ca = server
        .ca_file()
        .expect("a TLS server")
        .display()
        .to_string();
    let login = |password: &str| {
        format!(
            "postgres://airlock_pw:{password}@127.0.0.1:{}/{database}?sslmode=verify-full&sslrootcert={ca}&channel_binding=require",
            server.port()
        )
    };
    // channel_binding=require: SCRAM-SHA-256-PLUS with the certificate's hash, or no login.
    let store = PgStore::open(&login(SECRET), 1).expect("a password login over TLS");
    let run = store.create_run(None).expect("a run");
    assert!(store.run(&run.id).expect("read").is_some());
    let (error, text) = refusal(&login("wrong"));
    assert!(matches!(error, PgOpenError::Connect { .. }), "{error:?}");
    assert!(text.contains("password authentication failed"), "{text}");
}
