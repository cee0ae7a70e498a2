//! squid with `ssl_bump` as a peer (issue 39): the classic egress MITM proxy an operator
//! would pick instead of airlock, from Debian's `squid-openssl`. Configured for the bench
//! alone: it listens on 127.0.0.1, bumps every CONNECT with a throwaway CA, verifies the
//! origin against the origin's CA by name (squid 5 checks no IP SANs, so the origin is
//! `localhost`, pinned to 127.0.0.1 by squid's own `hosts_file`), caches nothing, and
//! writes an access log, as a deployment would.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Stdio;

use tokio::process::Command;

use crate::load::Route;
use crate::procs::Proxy;
use crate::BoxError;

/// Where Debian's squid keeps its certificate generator.
const CERTGEN: &str = "/usr/lib/squid/security_file_certgen";

/// Starts squid, or `Ok(None)` when no squid built with OpenSSL is installed (the
/// caller prints that it was skipped). Its files go in `bench_dir/squid`; `upstream_ca`
/// is the origin's CA (PEM).
///
/// Errors: the configuration cannot be written, the certificate database cannot be
/// made, or squid does not listen within the wait.
pub async fn start_squid(bench_dir: &Path, upstream_ca: &Path) -> Result<Option<Proxy>, BoxError> {
    let Ok(output) = std::process::Command::new("squid").arg("-v").output() else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&output.stdout);
    if !text.contains("--with-openssl") || !Path::new(CERTGEN).exists() {
        return Ok(None);
    }
    let version = text
        .lines()
        .next()
        .and_then(|l| l.split("Version ").nth(1))
        .map(|v| format!("squid {}", v.trim()))
        .unwrap_or_else(|| "squid".to_owned());
    // squid drops to the `proxy` user when started as root: its files live in a
    // directory that user can write.
    let dir = bench_dir.join("squid");
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(bench_dir, std::fs::Permissions::from_mode(0o755))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))?;
    let ca = crate::tls::ThrowawayCa::new("airlock-bench squid CA")?;
    let (cert, key, cafile) = (
        dir.join("squid-ca.pem"),
        dir.join("squid-ca-key.pem"),
        dir.join("origin-ca.pem"),
    );
    std::fs::write(&cert, &ca.cert_pem)?;
    std::fs::write(&key, &ca.key_pem)?;
    std::fs::copy(upstream_ca, &cafile)?;
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n")?;
    for file in [&cert, &key, &cafile, &hosts] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644))?;
    }
    let ssl_db = dir.join("ssl_db");
    let made = std::process::Command::new(CERTGEN)
        .arg("-c")
        .arg("-s")
        .arg(&ssl_db)
        .arg("-M")
        .arg("16MB")
        .output()?;
    if !made.status.success() {
        return Err(format!(
            "{CERTGEN} -c failed: {}",
            String::from_utf8_lossy(&made.stderr)
        )
        .into());
    }
    // The helper runs as `proxy` too.
    let _ = std::process::Command::new("chown")
        .arg("-R")
        .arg("proxy:proxy")
        .arg(&dir)
        .status();
    let port = crate::origin::free_port()?;
    let conf = dir.join("squid.conf");
    std::fs::write(
        &conf,
        format!(
            "http_port 127.0.0.1:{port} ssl-bump tls-cert={cert} tls-key={key} generate-host-certificates=on dynamic_cert_mem_cache_size=16MB\n\
             sslcrtd_program {CERTGEN} -s {ssl_db} -M 16MB\n\
             sslcrtd_children 4 startup=1 idle=1\n\
             acl step1 at_step SslBump1\n\
             ssl_bump peek step1\n\
             ssl_bump bump all\n\
             tls_outgoing_options cafile={cafile}\n\
             http_access allow localhost\n\
             http_access deny all\n\
             hosts_file {hosts}\n\
             dns_nameservers 127.0.0.1\n\
             cache deny all\n\
             cache_mem 0 MB\n\
             access_log stdio:{dir}/access.log\n\
             cache_log {dir}/cache.log\n\
             pid_filename {dir}/squid.pid\n\
             coredump_dir {dir}\n\
             shutdown_lifetime 0 seconds\n\
             workers 1\n",
            cert = cert.display(),
            key = key.display(),
            ssl_db = ssl_db.display(),
            cafile = cafile.display(),
            hosts = hosts.display(),
            dir = dir.display(),
        ),
    )?;
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644))?;
    let child = Command::new("squid")
        .arg("-N")
        .arg("-f")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr.log"))?)
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("squid exited at once")?;
    if let Err(error) = crate::origin::wait_for_port(port).await {
        let log = std::fs::read_to_string(dir.join("cache.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        return Err(format!("{error}; cache.log ends: {tail:?}").into());
    }
    Ok(Some(Proxy {
        name: version,
        route: Route::Proxy {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            auth: None,
        },
        pid,
        ca_pem: ca.cert_pem,
        child,
    }))
}
