//! Case C22: Java, which reads no proxy variable and sends no proxy credentials from
//! system properties. In the fence its `HttpClient` is captured with no proxy settings;
//! under `--network env` it goes through the run's bound proxy port, named with the
//! server's truststore in `JAVA_TOOL_OPTIONS`, with no credentials and no truststore made
//! by hand.

use std::process::Command;

use airlock_tests::{in_ci, ok_origin, Fixture};

use super::{fence_or_skip, policy, requests, Fenced, HOST};

/// A Java 11+ `HttpClient` with no proxy and no truststore of its own: GETs `ARG/read`
/// (must pass: 200) and POSTs `ARG/hook` (must be staged: 202), then writes what it saw.
const JAVA_CLIENT: &str = r#"
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;

public class Client {
    public static void main(String[] args) throws Exception {
        HttpClient client = HttpClient.newHttpClient();
        HttpResponse<String> read = client.send(
            HttpRequest.newBuilder(URI.create(args[0] + "/read")).GET().build(),
            HttpResponse.BodyHandlers.ofString());
        HttpResponse<String> posted = client.send(
            HttpRequest.newBuilder(URI.create(args[0] + "/hook"))
                .header("content-type", "text/plain")
                .POST(HttpRequest.BodyPublishers.ofString("from java"))
                .build(),
            HttpResponse.BodyHandlers.ofString());
        String proxy = System.getProperty("https.proxyHost") + "," + System.getProperty("http.proxyUser");
        Files.writeString(Path.of("java.txt"),
            read.statusCode() + "\n" + posted.statusCode() + "\n" + proxy + "\n"
            + System.getProperty("javax.net.ssl.trustStore") + "\n");
    }
}
"#;

/// Whether `javac` and `java` can run; skips outside CI with a message when not.
fn jdk_or_skip(test: &str) -> bool {
    let works = |program: &str| {
        Command::new(program)
            .arg("-version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works("javac") && works("java") {
        return true;
    }
    assert!(
        !in_ci(),
        "{test} needs a JDK in CI (.ci/run installs default-jdk-headless)"
    );
    eprintln!("SKIPPED {test}: no JDK (javac and java; apt-get install default-jdk-headless)");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_java_httpclient_with_no_proxy_settings_reads_pass_and_writes_stage() {
    let test = "case_c22_java_httpclient_with_no_proxy_settings_reads_pass_and_writes_stage";
    if !fence_or_skip(test) || !jdk_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let fenced = Fenced::start(fx, &policy(port));
    let source = fenced.helper("Client.java", JAVA_CLIENT);
    let script = format!("java {} https://{HOST}:{port}", source.display());
    let ran = fenced.run("isolated", &[], &script).await;
    ran.assert_success();
    let lines: Vec<String> = fenced.read("java.txt").lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 4, "java.txt: {lines:?}\n{}", ran.stderr());
    assert_eq!(lines[0], "200", "the GET passed");
    assert_eq!(lines[1], "202", "the POST was staged");
    assert_eq!(lines[2], "null,null", "Java had no proxy settings");
    assert!(
        lines[3].ends_with("truststore.p12") && lines[3].contains("airlock-fence-"),
        "trust came from the fence's JAVA_TOOL_OPTIONS: {}",
        lines[3]
    );
    assert_eq!(ran.count("proxy_connections"), 0, "{:#}", ran.report);
    assert!(ran.count("connections_captured") >= 1, "{:#}", ran.report);
    assert_eq!(requests(&origin), vec!["GET /read".to_owned()]);
    let effects = ran.report["effects"].as_array().expect("effects");
    assert_eq!(effects.len(), 1, "{effects:#?}");
    assert_eq!(effects[0]["method"], "POST");

    let report = fenced.airlock.commit_pending(&ran.run()).await;
    assert_eq!(report["state"], "committed", "{report:#}");
    assert_eq!(
        requests(&origin),
        vec!["GET /read".to_owned(), "POST /hook".to_owned()],
        "the POST was released once, after commit"
    );
    assert_eq!(origin.received()[1].body, b"from java");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_c22_java_in_env_mode_needs_no_proxy_credentials_and_no_hand_made_truststore() {
    let test = "case_c22_java_in_env_mode_needs_no_proxy_credentials_and_no_hand_made_truststore";
    // No fence: under `env` the JDK dials the proxy named in `JAVA_TOOL_OPTIONS`.
    if !jdk_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let port = origin.addr().port();
    let fenced = Fenced::start(fx, &policy(port));
    let source = fenced.helper("Client.java", JAVA_CLIENT);
    let script = format!(
        "printf '%s\\n' \"$JAVA_TOOL_OPTIONS\" > options.txt; java {} https://{HOST}:{port}",
        source.display()
    );
    let ran = fenced.run("env", &[], &script).await;
    ran.assert_success();
    assert_eq!(ran.containment()["network"], "env", "{:#}", ran.report);
    let lines: Vec<String> = fenced.read("java.txt").lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 4, "java.txt: {lines:?}\n{}", ran.stderr());
    assert_eq!(lines[0], "200", "the GET passed");
    assert_eq!(lines[1], "202", "the POST was staged");
    assert_eq!(
        lines[2], "127.0.0.1,null",
        "Java dialed a proxy on loopback, with no proxy credentials"
    );
    let truststore = fenced.fx.data_dir().join("java-truststore.p12");
    assert_eq!(
        lines[3],
        truststore.display().to_string(),
        "trust came from the server's truststore, named in JAVA_TOOL_OPTIONS"
    );
    // The port Java dialed is the run's bound port, not the proxy listener (where a
    // client without credentials gets 407).
    let options = fenced.read("options.txt");
    let java_port = options
        .split_whitespace()
        .find_map(|o| o.strip_prefix("-Dhttps.proxyPort="))
        .unwrap_or_else(|| panic!("no https.proxyPort in JAVA_TOOL_OPTIONS: {options}"));
    let listener_port = fenced.airlock.proxy.rsplit(':').next().unwrap_or_default();
    assert_ne!(
        java_port, listener_port,
        "JAVA_TOOL_OPTIONS names the run's bound port: {options}"
    );
    assert!(
        !options.contains("proxyUser") && !options.contains("proxyPassword"),
        "no credentials in JAVA_TOOL_OPTIONS: {options}"
    );
    assert_eq!(requests(&origin), vec!["GET /read".to_owned()]);
    let effects = ran.report["effects"].as_array().expect("effects");
    assert_eq!(effects.len(), 1, "{effects:#?}");
    assert_eq!(effects[0]["method"], "POST");
    assert_eq!(effects[0]["url"], format!("https://{HOST}:{port}/hook"));
    assert_eq!(effects[0]["state"], "staged");

    let report = fenced.airlock.commit_pending(&ran.run()).await;
    assert_eq!(report["state"], "committed", "{report:#}");
    assert_eq!(
        requests(&origin),
        vec!["GET /read".to_owned(), "POST /hook".to_owned()],
        "the POST was released once, after commit"
    );
    assert_eq!(origin.received()[1].body, b"from java");
}
