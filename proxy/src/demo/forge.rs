//! The demo's forge: a GitHub-like REST endpoint for pull requests and a git smart-HTTP
//! remote (`git http-backend`) on the demo origin. The agent pushes a branch and opens a
//! pull request; both are staged (answered by the `git` and `github` adapters) and
//! released on commit. The push part runs only where `git` is installed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

use airlock_origin::{git_http, Received, Reply};

/// The policy rules for the forge, appended to the demo's policy.
pub(super) fn policy(port: u16) -> String {
    format!(
        r#"
# GitHub-style writes are answered like GitHub (201 and a pull request object with a
# placeholder number); a git push is answered with git's report-status.
[[rule]]
id = "github-writes"
host = "127.0.0.1"
port = {port}
method = "write"
path = "/repos/**"
action = "stage"
respond = "github"

[[rule]]
id = "git-push"
host = "127.0.0.1"
port = {port}
method = ["POST"]
path = "/widgets.git/git-receive-pack"
action = "stage"
respond = "git"
"#
    )
}

/// The forge's state: the directory holding `widgets.git`, when git is installed.
pub(super) struct Forge {
    root: PathBuf,
    git: bool,
}

impl Forge {
    /// A bare `widgets.git` with one commit on `main` under `dir/forge` (when git is
    /// installed).
    pub(super) fn new(dir: &Path) -> anyhow::Result<Self> {
        let root = dir.join("forge");
        std::fs::create_dir_all(&root)?;
        let git = git_http::available();
        if git {
            let seed = root.join("seed");
            std::fs::create_dir_all(&seed)?;
            run_git(&seed, &["init", "-q", "-b", "main"])?;
            std::fs::write(seed.join("README.md"), "# widgets\n")?;
            run_git(&seed, &["add", "README.md"])?;
            run_git(&seed, &["commit", "-q", "-m", "initial commit"])?;
            run_git(&root, &["clone", "-q", "--bare", "seed", "widgets.git"])?;
        }
        Ok(Self { root, git })
    }

    /// Answers forge requests on the demo origin; `None` for other paths.
    pub(super) fn answer(&self, req: &Received) -> Option<Reply> {
        if req.path.starts_with("/widgets.git/") {
            return Some(if self.git {
                (git_http::backend(self.root.clone()))(req)
            } else {
                Reply::text(404, "git is not installed\n")
            });
        }
        match (req.method.as_str(), req.path.as_str()) {
            ("POST", "/repos/acme/widgets/pulls") => Some(Reply::json(
                201,
                &json!({"number": 7, "id": 880001, "node_id": "PR_kwDemo7", "state": "open",
                        "head": {"sha": "0000000000000000000000000000000000000001"},
                        "base": {"sha": "0000000000000000000000000000000000000002"}}),
            )),
            _ => None,
        }
    }

    /// Whether `path` belongs to the forge.
    pub(super) fn owns(path: &str) -> bool {
        path.starts_with("/widgets.git/") || path.starts_with("/repos/")
    }

    /// The agent's work: push `agent/sync` (when git is installed), then open a pull
    /// request from it. Prints what it sees.
    pub(super) async fn agent(
        &self,
        env: &[(String, String)],
        base: &str,
        curl: impl AsyncFn(&[&str]) -> anyhow::Result<(u16, String)>,
    ) -> anyhow::Result<()> {
        if self.git {
            super::say("the agent pushes a branch: git push origin agent/sync  -> staged; git's report-status says ok");
            let work = self.root.join("agent-work");
            run_git(&self.root, &["clone", "-q", "widgets.git", "agent-work"])?;
            run_git(&work, &["checkout", "-q", "-b", "agent/sync"])?;
            std::fs::write(work.join("SYNC.md"), "nightly sync: all rows synced\n")?;
            run_git(&work, &["add", "SYNC.md"])?;
            run_git(&work, &["commit", "-q", "-m", "Record the nightly sync"])?;
            run_git(
                &work,
                &[
                    "remote",
                    "set-url",
                    "origin",
                    &format!("{base}/widgets.git"),
                ],
            )?;
            let mut command = tokio::process::Command::new("git");
            command
                .args(["push", "origin", "agent/sync"])
                .current_dir(&work)
                .env("GIT_TERMINAL_PROMPT", "0")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null");
            for (k, v) in env {
                command.env(k, v);
            }
            let out = command.output().await.context("cannot run git")?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() {
                bail!("git push failed: {}", stderr.trim());
            }
            println!("   git push exited 0:");
            print!("{}", super::indent(stderr.trim_end()));
        } else {
            super::say("git is not installed: the push part of the demo is skipped");
        }
        super::say("the agent opens a pull request: POST /repos/acme/widgets/pulls  -> staged; answered like GitHub");
        let (status, body) = curl(&[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "-H",
            "accept: application/vnd.github+json",
            "--data",
            r#"{"title":"Record the nightly sync","head":"agent/sync","base":"main","body":"All rows synced."}"#,
            &format!("{base}/repos/acme/widgets/pulls"),
        ])
        .await?;
        let pr: Value = serde_json::from_str(&body).unwrap_or_default();
        println!(
            "   HTTP {status}: pull request #{} '{}' ({}), state {}",
            pr["number"],
            pr["title"].as_str().unwrap_or(""),
            pr["html_url"].as_str().unwrap_or(""),
            pr["state"].as_str().unwrap_or("")
        );
        Ok(())
    }

    /// After the commit: the remote has the branch, the forge received the pull request.
    pub(super) fn check(&self, received: &[Received]) -> anyhow::Result<String> {
        if !received
            .iter()
            .any(|r| r.path == "/repos/acme/widgets/pulls")
        {
            bail!("the forge should have received the pull request");
        }
        if !self.git {
            return Ok("the pull request was opened (git is not installed: no push)".into());
        }
        let head = run_git(
            &self.root.join("widgets.git"),
            &["rev-parse", "--verify", "-q", "refs/heads/agent/sync"],
        )
        .context("the remote should have the pushed branch agent/sync")?;
        Ok(format!(
            "the remote now has agent/sync at {} and the pull request was opened",
            &head[..head.len().min(7)]
        ))
    }
}

/// Runs git in `dir` with a demo identity; its stdout.
fn run_git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "airlock demo")
        .env("GIT_AUTHOR_EMAIL", "demo@airlock.invalid")
        .env("GIT_COMMITTER_NAME", "airlock demo")
        .env("GIT_COMMITTER_EMAIL", "demo@airlock.invalid")
        .output()
        .with_context(|| format!("cannot run git {args:?}"))?;
    if !out.status.success() {
        bail!(
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
