//! The env-mode warning about Node below 24: only Node 24+ reads `NODE_USE_ENV_PROXY`
//! (Node 24 release notes, "Proxy support"), so an older `node`'s `fetch` and `https`
//! ignore the proxy variables and reach the network unstaged (docs/containment.md,
//! "env mode: wget, npm and Node").

use std::path::{Path, PathBuf};

/// The first Node major version that honours `NODE_USE_ENV_PROXY`.
pub(crate) const NODE_ENV_PROXY_MAJOR: u64 = 24;

/// The `node` that `path` (a `PATH` value) finds first, when it is a file.
fn find_node(path: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join("node"))
        .find(|candidate| candidate.is_file())
}

/// `v20.20.2` → `(20, "v20.20.2")`; `None` for anything else.
fn parse_version(printed: &str) -> Option<(u64, String)> {
    let text = printed.trim();
    let major = text.strip_prefix('v')?.split('.').next()?.parse().ok()?;
    Some((major, text.to_owned()))
}

/// The warning for the `node` on the caller's `PATH` when it is older than 24 (asked with
/// `node --version`); `None` when there is no node, it is 24 or newer, or it cannot say.
pub(crate) fn old_node_warning() -> Option<String> {
    let node = find_node(&std::env::var_os("PATH")?)?;
    let output = std::process::Command::new(&node)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let (major, version) = parse_version(&String::from_utf8_lossy(&output.stdout))?;
    (major < NODE_ENV_PROXY_MAJOR).then(|| warning(&node, &version))
}

fn warning(node: &Path, version: &str) -> String {
    format!(
        "node {version} ({}) is older than {NODE_ENV_PROXY_MAJOR} and ignores NODE_USE_ENV_PROXY: \
         its fetch and https reach the network without airlock, unstaged. What works: undici's \
         EnvHttpProxyAgent (setGlobalDispatcher(new EnvHttpProxyAgent())), global-agent \
         (GLOBAL_AGENT_HTTP_PROXY=$https_proxy node -r global-agent/bootstrap …), or \
         `airlock run --network isolated` (docs/containment.md, \"env mode: wget, npm and Node\")",
        node.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_as_node_prints_them() {
        assert_eq!(parse_version("v20.20.2\n"), Some((20, "v20.20.2".into())));
        assert_eq!(parse_version("v24.0.0"), Some((24, "v24.0.0".into())));
        assert_eq!(parse_version("20.1.0"), None);
        assert_eq!(parse_version(""), None);
    }
}
