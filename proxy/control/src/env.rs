//! The proxy environment a sandbox needs (docs/design.md "Runs in step with the filesystem"):
//! clients disagree on what they read, so every variable is set.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use airlock_net::config::{CA_VARS, PROXY_VARS};

/// The address clients should dial for a listener bound to `addr` (an unspecified bind
/// address is reached on loopback).
pub fn reachable(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), addr.port())
    } else {
        addr
    }
}

/// Where a sandbox reaches the proxy and finds the CA: by default the proxy listener's own
/// address and the data directory's `ca.pem`; `airlock serve --advertise-proxy HOST:PORT
/// --advertise-ca PATH` when the sandbox sees them elsewhere (a container, a network
/// namespace, a CA mounted at another path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    /// Host name or IP address (no brackets) the sandbox dials.
    pub host: String,
    /// Port the sandbox dials.
    pub port: u16,
    /// The CA certificate's path as the sandbox sees it.
    pub ca_file: std::path::PathBuf,
    /// A PKCS12 truststore (password `changeit`) of the system roots and airlock's CA, as
    /// the sandbox sees it, for `JAVA_TOOL_OPTIONS`; `None` when there is none.
    pub truststore: Option<std::path::PathBuf>,
    /// A PEM bundle of the system roots and airlock's CA, as the sandbox sees it, for
    /// `npm_config_cafile` (npm's `cafile` replaces its trust instead of adding to it, so
    /// the bundle keeps tunnelled hosts' real certificates trusted too); `None`: npm is
    /// given `ca_file` alone.
    pub ca_bundle: Option<std::path::PathBuf>,
    /// A generated wgetrc naming the CA (`ca_certificate`), as the sandbox sees it, for
    /// `WGETRC`: wget reads none of the CA variables; `None` when there is none.
    pub wgetrc: Option<std::path::PathBuf>,
}

impl Advertised {
    /// The listener's own address ([`reachable`]) and `ca_file`.
    pub fn local(proxy: SocketAddr, ca_file: &Path) -> Self {
        let addr = reachable(proxy);
        Self {
            host: addr.ip().to_string(),
            port: addr.port(),
            ca_file: ca_file.to_owned(),
            truststore: None,
            ca_bundle: None,
            wgetrc: None,
        }
    }

    /// `HOST:PORT` (IPv6 literals bracketed).
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Parses `--advertise-proxy HOST:PORT` (`[v6]:PORT` for IPv6).
///
/// # Errors
/// A message when there is no port, the port is not 1–65535, or the host is empty.
pub fn parse_advertised_proxy(raw: &str) -> Result<(String, u16), String> {
    let (host, port) = raw
        .rsplit_once(':')
        .ok_or_else(|| format!("{raw:?}: expected HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("{raw:?}: {port:?} is not a port (1-65535)"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("{raw:?}: the host is empty"));
    }
    Ok((host.to_owned(), port))
}

/// `http://RUN:TOKEN@HOST:PORT` for a run.
pub fn proxy_url(proxy: &Advertised, run_id: &str, token: &str) -> String {
    format!("http://{run_id}:{token}@{}", proxy.authority())
}

/// The full environment block for a run. `java_port` is the run's bound proxy port
/// (`airlock_dataplane::bound`), when it has one: the JDK cannot send proxy credentials
/// from system properties, so Java dials a port that needs none.
pub fn proxy_env(
    proxy: &Advertised,
    run_id: &str,
    token: &str,
    java_port: Option<u16>,
) -> BTreeMap<String, String> {
    let url = proxy_url(proxy, run_id, token);
    let ca = proxy.ca_file.display().to_string();
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
    for (name, value) in client_files(proxy) {
        env.insert(name.to_owned(), value);
    }
    env.insert("JAVA_TOOL_OPTIONS".into(), java_options(proxy, java_port));
    // Where the agent reads what its run may do (docs/policy.md, "The agent's manifest").
    env.insert(
        "AIRLOCK_MANIFEST_URL".into(),
        airlock_net::respond::MANIFEST_URL.into(),
    );
    env
}

/// The variables of clients that read none of [`CA_VARS`], each naming a file the server
/// wrote for it:
/// - `npm_config_cafile`: npm's own `cafile` setting (npm docs, "config": an explicit
///   `cafile` in an npmrc replaces Node's roots, so `NODE_EXTRA_CA_CERTS` is then
///   ignored); the environment outranks every npmrc. It names the bundle of system
///   roots and airlock's CA, or airlock's CA alone when there is no bundle.
/// - `WGETRC`: wget's startup file (GNU Wget manual, "Startup File"), generated with
///   `ca_certificate`; it replaces `~/.wgetrc` (the system `/etc/wgetrc` is still read).
///   wget takes the proxy and its credentials from `https_proxy` itself.
pub fn client_files(proxy: &Advertised) -> Vec<(&'static str, String)> {
    let cafile = proxy.ca_bundle.as_ref().unwrap_or(&proxy.ca_file);
    let mut out = vec![("npm_config_cafile", cafile.display().to_string())];
    if let Some(wgetrc) = &proxy.wgetrc {
        out.push(("WGETRC", wgetrc.display().to_string()));
    }
    out
}

/// The text of the generated wgetrc: `ca_certificate = CA` (a path with no quoting, as
/// wget reads the rest of the line) and `content_on_error = on`, so that the JSON body of
/// a refusal (its rule, reason and manifest) is saved instead of dropped (GNU Wget manual,
/// "Wgetrc Commands").
pub fn wgetrc_text(ca_file: &Path) -> String {
    format!(
        "# Written by airlock for sandboxes (WGETRC): wget reads none of the CA variables.\n\
         ca_certificate = {}\n\
         content_on_error = on\n",
        ca_file.display()
    )
}

/// Shell `export` lines for an environment block, values single-quoted.
pub fn shell_exports(env: &BTreeMap<String, String>) -> String {
    env.iter()
        .map(|(k, v)| format!("export {k}='{}'\n", v.replace('\'', "'\\''")))
        .collect()
}

/// `JAVA_TOOL_OPTIONS` for a run: the proxy as the JDK's `http(s).proxyHost` and
/// `http(s).proxyPort` (read by `java.net.http.HttpClient`'s default `ProxySelector` and
/// `HttpURLConnection`; JDK "Networking Properties"), with `http.nonProxyHosts` emptied
/// so loopback origins go through airlock too; and the truststore, since the JDK reads
/// none of the CA variables. The port is the run's bound port when it has one; without
/// one the JDK's requests get 407, as it sends no proxy credentials.
pub fn java_options(proxy: &Advertised, java_port: Option<u16>) -> String {
    let port = java_port.unwrap_or(proxy.port);
    let mut options = format!(
        "-Dhttp.proxyHost={host} -Dhttp.proxyPort={port} -Dhttps.proxyHost={host} -Dhttps.proxyPort={port} -Dhttp.nonProxyHosts=",
        host = proxy.host
    );
    if let Some(truststore) = &proxy.truststore {
        options.push_str(&format!(
            " -Djavax.net.ssl.trustStore={} -Djavax.net.ssl.trustStorePassword=changeit -Djavax.net.ssl.trustStoreType=PKCS12",
            truststore.display()
        ));
    }
    options
}
