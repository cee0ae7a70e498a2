//! The proxy environment a sandbox needs (DESIGN.md "Runs in step with the filesystem"):
//! clients disagree on what they read, so every variable is set.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

/// Variables naming the proxy, in both cases (curl reads lower case `http_proxy` only;
/// Go and Python read either: CASES.md C18).
const PROXY_VARS: [&str; 6] = [
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
];

/// Variables naming the CA bundle for OpenSSL, Python requests, curl, pip, Node, git,
/// cargo, the AWS SDKs and gRPC.
const CA_VARS: [&str; 9] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "AWS_CA_BUNDLE",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
];

/// The address clients should dial for a listener bound to `addr` (an unspecified bind
/// address is reached on loopback).
pub fn reachable(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), addr.port())
    } else {
        addr
    }
}

/// `http://RUN:TOKEN@HOST:PORT` for a run.
pub fn proxy_url(proxy: SocketAddr, run_id: &str, token: &str) -> String {
    format!("http://{run_id}:{token}@{}", reachable(proxy))
}

/// The full environment block for a run.
pub fn proxy_env(
    proxy: SocketAddr,
    run_id: &str,
    token: &str,
    ca_file: &Path,
) -> BTreeMap<String, String> {
    let url = proxy_url(proxy, run_id, token);
    let ca = ca_file.display().to_string();
    let addr = reachable(proxy);
    let mut env = BTreeMap::new();
    for name in PROXY_VARS {
        env.insert(name.to_owned(), url.clone());
    }
    env.insert("no_proxy".into(), String::new());
    env.insert("NO_PROXY".into(), String::new());
    env.insert("NODE_USE_ENV_PROXY".into(), "1".into());
    for name in CA_VARS {
        env.insert(name.to_owned(), ca.clone());
    }
    env.insert(
        "JAVA_TOOL_OPTIONS".into(),
        format!(
            "-Dhttp.proxyHost={host} -Dhttp.proxyPort={port} -Dhttps.proxyHost={host} -Dhttps.proxyPort={port} \
             -Dhttp.proxyUser={run_id} -Dhttp.proxyPassword={token} -Dhttps.proxyUser={run_id} -Dhttps.proxyPassword={token} \
             -Djdk.http.auth.tunneling.disabledSchemes= -Djdk.http.auth.proxying.disabledSchemes=",
            host = addr.ip(),
            port = addr.port()
        ),
    );
    env
}

/// Shell `export` lines for an environment block, values single-quoted.
pub fn shell_exports(env: &BTreeMap<String, String>) -> String {
    env.iter()
        .map(|(k, v)| format!("export {k}='{}'\n", v.replace('\'', "'\\''")))
        .collect()
}
