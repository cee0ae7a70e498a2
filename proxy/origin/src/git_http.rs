//! A smart-HTTP git origin for the demo and tests: git's own `git http-backend` run as CGI
//! (RFC 3875) for each request, over the bare repositories under a root, pushes enabled.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use super::{Handler, Received, Reply};

/// A [`Handler`] that answers with `git http-backend` over the bare repositories in `root`
/// (`GIT_HTTP_EXPORT_ALL`, `http.receivepack=true`).
pub fn backend(root: PathBuf) -> Handler {
    Arc::new(move |req| cgi(&root, req))
}

fn cgi(root: &Path, req: &Received) -> Reply {
    let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
    let mut command = Command::new("git");
    // The repositories are the origin's own; a test may give them to the user it runs a
    // fence as, and git then refuses them as "dubious ownership" without this.
    command
        .args([
            "-c",
            "http.receivepack=true",
            "-c",
            "safe.directory=*",
            "http-backend",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &req.method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_LENGTH", req.body.len().to_string())
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REMOTE_USER", "tester")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, var) in [
        ("content-type", "CONTENT_TYPE"),
        ("content-encoding", "HTTP_CONTENT_ENCODING"),
        ("git-protocol", "GIT_PROTOCOL"),
    ] {
        if let Some(value) = req.header(name) {
            command.env(var, value);
        }
    }
    let Ok(mut child) = command.spawn() else {
        return Reply::text(500, "cannot run git http-backend\n");
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&req.body);
    }
    let Ok(out) = child.wait_with_output() else {
        return Reply::text(500, "git http-backend failed\n");
    };
    parse_cgi(&out.stdout)
}

/// Splits CGI output into `Status`, headers and body.
fn parse_cgi(text: &[u8]) -> Reply {
    let split = text
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4))
        .or_else(|| {
            text.windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (i, i + 2))
        })
        .unwrap_or((text.len(), text.len()));
    let head = String::from_utf8_lossy(&text[..split.0]).into_owned();
    let mut reply = Reply::text(200, "");
    reply.headers.clear();
    for line in head.lines() {
        if let Some((name, value)) = line.split_once(':') {
            let (name, value) = (name.trim(), value.trim());
            if name.eq_ignore_ascii_case("status") {
                reply.status = value
                    .split_whitespace()
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(500);
            } else {
                reply
                    .headers
                    .push((name.to_ascii_lowercase(), value.to_owned()));
            }
        }
    }
    reply.body = text[split.1..].to_vec();
    reply
}

/// Whether `git` is installed.
pub fn available() -> bool {
    Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}
