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

/// Programs that are Node or start it: `node` itself and its package managers and
/// runners.
const NODE_PROGRAMS: [&str; 10] = [
    "node", "nodejs", "npm", "npx", "yarn", "pnpm", "corepack", "tsx", "ts-node", "bun",
];

fn is_node_program(word: &str) -> bool {
    let name = word.rsplit('/').next().unwrap_or(word);
    NODE_PROGRAMS.contains(&name)
}

/// Whether a script file's first line is a shebang naming Node (`#!/usr/bin/env node`).
fn node_shebang(path: &Path) -> bool {
    use std::io::Read as _;
    let mut head = [0u8; 128];
    let Ok(read) = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)) else {
        return false;
    };
    let head = String::from_utf8_lossy(&head[..read]);
    head.starts_with("#!")
        && head
            .lines()
            .next()
            .is_some_and(|line| line.split_whitespace().any(is_node_program))
}

/// Whether `command` (the program and its arguments, as `airlock run` got them) runs
/// Node: the program is one of [`NODE_PROGRAMS`] or a script with a Node shebang, or an
/// argument (a `sh -c` line, a script it names) has a word that is one, or names a file
/// with a Node shebang, or a `package.json`. A guess that errs towards warning: a word
/// `node` in a shell line counts.
pub(crate) fn runs_node(command: &[String]) -> bool {
    command.iter().any(|arg| {
        arg.split(|c: char| {
            c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '`' | '\'' | '"')
        })
        .filter(|word| !word.is_empty())
        .any(|word| {
            is_node_program(word)
                || word.ends_with("package.json")
                || ((word.contains('/') || word.contains('.'))
                    && Path::new(word).is_file()
                    && node_shebang(Path::new(word)))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_is_recognised_in_the_command_its_shell_line_and_its_scripts() {
        let words = |line: &str| line.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert!(runs_node(&words("node server.js")));
        assert!(runs_node(&words("/usr/local/bin/npm install")));
        assert!(runs_node(&[
            "sh".into(),
            "-c".into(),
            "cd app && npx tsc; echo done".into()
        ]));
        assert!(!runs_node(&words("curl -sS https://example.com")));
        assert!(!runs_node(&words("git push origin main")));
        assert!(!runs_node(&[
            "sh".into(),
            "-c".into(),
            "echo nodes > nodelist".into()
        ]));
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("agent");
        std::fs::write(&script, "#!/usr/bin/env node\nconsole.log(1)\n").expect("write");
        assert!(runs_node(&[script.display().to_string()]));
        let shell = dir.path().join("agent.sh");
        std::fs::write(&shell, "#!/bin/sh\necho hi\n").expect("write");
        assert!(!runs_node(&[shell.display().to_string()]));
    }

    #[test]
    fn versions_parse_as_node_prints_them() {
        assert_eq!(parse_version("v20.20.2\n"), Some((20, "v20.20.2".into())));
        assert_eq!(parse_version("v24.0.0"), Some((24, "v24.0.0".into())));
        assert_eq!(parse_version("20.1.0"), None);
        assert_eq!(parse_version(""), None);
    }
}
