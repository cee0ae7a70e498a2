//! The one place that names the environment variables airlock reads and the files of its
//! data directory.

/// Variables naming the proxy, in both cases (curl reads lower case `http_proxy` only;
/// Go and Python read either: docs/cases.md C18). Set for every run; inside a fence they
/// name the relay's port, and `offline` removes them.
pub const PROXY_VARS: [&str; 8] = [
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    // npm's own settings (npm docs, "config": `proxy`, `https-proxy`): the environment
    // outranks an npmrc that names another proxy.
    "npm_config_proxy",
    "npm_config_https_proxy",
];

/// Variables naming the CA bundle for OpenSSL, Python requests, curl, pip, Node, git,
/// cargo, the AWS SDKs and gRPC.
pub const CA_VARS: [&str; 9] = [
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

/// Environment variable: the admin API's base URL for CLI commands (`http://127.0.0.1:8081`).
pub const ENV_ADMIN: &str = "AIRLOCK_ADMIN";
/// Environment variable: the admin bearer token for CLI commands.
pub const ENV_TOKEN: &str = "AIRLOCK_TOKEN";
/// Environment variable: the data directory (default `./airlock-data`).
pub const ENV_DATA: &str = "AIRLOCK_DATA";
/// Environment variable: log filter in `tracing-subscriber` EnvFilter syntax (default `info`).
pub const ENV_LOG: &str = "AIRLOCK_LOG";

/// Environment variable, for tests only: the name of a step of `airlock run`
/// (`after_decision`, `rollback_midway`) where the process stops for good, so a test can
/// SIGKILL it exactly there.
pub const ENV_TEST_PAUSE_AT: &str = "AIRLOCK_TEST_PAUSE_AT";

/// File in the data directory holding the admin bearer token (mode 0600).
pub const ADMIN_TOKEN_FILE: &str = "admin.token";
/// File in the data directory holding this instance's id, the holder of the release
/// leases it takes (created on first start; a restart on the same directory takes over
/// its own leases at once).
pub const INSTANCE_ID_FILE: &str = "instance-id";
/// File in the data directory where a running server writes the addresses it listens on.
pub const ADDRESSES_FILE: &str = "addresses.json";
/// Directory in the data directory holding the sled ledger.
pub const LEDGER_DIR: &str = "ledger";
/// File in the data directory holding the key credential placeholders are derived from
/// (hex, mode 0600).
pub const PLACEHOLDER_KEY_FILE: &str = "placeholder.key";
/// Unix socket in the data directory where fence relays reach the data plane (mode 0600;
/// docs/containment.md).
pub const FENCE_SOCKET_FILE: &str = "fence.sock";
/// File in the data directory holding the PKCS12 Java truststore (password `changeit`)
/// of the system roots and airlock's CA, named in runs' `JAVA_TOOL_OPTIONS`.
pub const JAVA_TRUSTSTORE_FILE: &str = "java-truststore.p12";
/// File in the data directory holding a PEM bundle of the system roots and airlock's CA,
/// named in runs' `npm_config_cafile` (npm's `cafile` replaces its trust).
pub const CA_BUNDLE_FILE: &str = "ca-bundle.pem";
/// File in the data directory holding the wgetrc named in runs' `WGETRC`
/// (`ca_certificate`: wget reads none of the CA variables).
pub const WGETRC_FILE: &str = "wgetrc";
