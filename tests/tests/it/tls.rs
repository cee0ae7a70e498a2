//! Certificates strict verifiers accept (docs/cases.md C14), and Python `requests` through the proxy.

use airlock_tests::{loopback_policy, ok_origin, run_client_async, Fixture};
use base64::Engine as _;

/// Opens a CONNECT tunnel through airlock and returns the leaf certificate it presents for
/// `host`, verified by rustls against airlock's CA.
async fn leaf_through_proxy(
    proxy: &str,
    run: &str,
    token: &str,
    host: &str,
    port: u16,
    ca_pem: &str,
) -> Vec<u8> {
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let stream = airlock_tests::connect_tunnel(proxy, run, token, &authority).await;
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).expect("server name");
    let tls = airlock_tests::tls_trusting(ca_pem, &[])
        .connect(name, stream)
        .await
        .expect("rustls accepts airlock's leaf");
    tls.get_ref().1.peer_certificates().expect("certs")[0].to_vec()
}

fn to_pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(chunk).expect("ascii"));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c14_minted_leaves_pass_openssl_x509_strict() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = format!(
        "{}\n[[rule]]\nid = \"named\"\nhost = \"api.example.test\"\naction = \"pass\"\n",
        loopback_policy(origin.addr().port())
    );
    let (airlock, run, _) = fx.start_run(&policy, &[]).await;
    let token = airlock.run_token(&run).await;
    let ca_pem = std::fs::read_to_string(airlock.ca_file()).expect("ca.pem");

    for (host, port) in [
        ("127.0.0.1", origin.addr().port()),
        ("api.example.test", 443),
    ] {
        let leaf = leaf_through_proxy(&airlock.proxy, &run, &token, host, port, &ca_pem).await;
        let leaf_file = fx.dir.path().join(format!("leaf-{host}.pem"));
        std::fs::write(&leaf_file, to_pem(&leaf)).expect("write leaf");
        let ca_file = airlock.ca_file();
        let out = std::process::Command::new("openssl")
            .args(["verify", "-x509_strict", "-purpose", "sslserver", "-CAfile"])
            .arg(&ca_file)
            .arg(&leaf_file)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl verify -x509_strict rejected the leaf for {host}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::process::Command::new("openssl")
            .args(["x509", "-noout", "-text", "-in"])
            .arg(&leaf_file)
            .output()
            .expect("openssl x509");
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains("TLS Web Server Authentication"),
            "EKU serverAuth: {text}"
        );
        assert!(text.contains("Authority Key Identifier"), "AKI: {text}");
        if host == "127.0.0.1" {
            assert!(
                text.contains("IP Address:127.0.0.1"),
                "IP SAN for an IP host: {text}"
            );
            assert!(
                !text.contains("DNS:127.0.0.1"),
                "no DNS SAN holding an IP: {text}"
            );
        } else {
            assert!(text.contains("DNS:api.example.test"), "DNS SAN: {text}");
        }
    }
    // The CA: CA:TRUE, keyCertSign, a Subject Key Identifier; its key file is private.
    let ca_text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(airlock.ca_file())
        .output()
        .expect("openssl x509");
    let ca_text = String::from_utf8_lossy(&ca_text.stdout);
    assert!(ca_text.contains("CA:TRUE"), "{ca_text}");
    assert!(ca_text.contains("Certificate Sign"), "{ca_text}");
    assert!(ca_text.contains("Subject Key Identifier"), "{ca_text}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let key = fx.data_dir().join("ca-key.pem");
        let mode = std::fs::metadata(&key)
            .expect("key file")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "the CA key is readable by its owner only");
        let token = fx.data_dir().join("admin.token");
        let mode = std::fs::metadata(&token)
            .expect("token file")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }
}

const PYTHON_CLIENT: &str = r#"
import sys, requests
r = requests.get(sys.argv[1], timeout=20)
print(r.status_code)
print(r.text)
r = requests.post(sys.argv[2], json={"from": "python"}, timeout=20)
print(r.status_code)
print(r.headers.get("airlock-effect"))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c14_python_requests_works_through_the_proxy() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let (airlock, run, env) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let base = format!("https://127.0.0.1:{}", origin.addr().port());
    let out = run_client_async(
        "python3",
        &[
            "-c",
            PYTHON_CLIENT,
            &format!("{base}/status"),
            &format!("{base}/hooks/py"),
        ],
        &env,
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "200");
    assert_eq!(lines[1], r#"{"ok":true}"#);
    assert_eq!(lines[2], "202");
    assert!(lines[3].starts_with("eff_"), "{stdout}");
    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["id"], lines[3]);
    assert_eq!(
        origin.received().len(),
        1,
        "only the GET reached the origin"
    );
}
