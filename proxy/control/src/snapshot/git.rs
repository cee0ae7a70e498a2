//! The `git` driver: everything not ignored (tracked and untracked) committed on a private
//! ref `refs/airlock/snapshots/RUN/ID` through a temporary index, so the user's index, HEAD
//! and branches are untouched; the real index file and HEAD are saved beside it. Restore
//! checks the snapshot tree out through a temporary index, removes files that are not in
//! it (ignored files stay), and puts the saved index file and HEAD back byte for byte.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{
    entry_of, io, pause_point, write_durable, Entry, GitState, Manifest, SnapshotError, Store,
};

fn git(workspace: &Path, index: Option<&Path>, args: &[&str]) -> Result<Vec<u8>, SnapshotError> {
    let mut command = Command::new("git");
    // The workspace's repository is the sandbox's: a command may have written its
    // config, and git runs here outside any fence. So no fsmonitor and no hooks, whatever
    // that config says. (Filter drivers it names still run: docs/containment.md.)
    command
        .args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .arg("-C")
        .arg(workspace)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "airlock")
        .env("GIT_AUTHOR_EMAIL", "airlock@localhost")
        .env("GIT_COMMITTER_NAME", "airlock")
        .env("GIT_COMMITTER_EMAIL", "airlock@localhost")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
    match index {
        Some(index) => command.env("GIT_INDEX_FILE", index),
        None => command.env_remove("GIT_INDEX_FILE"),
    };
    let out = command.output().map_err(|e| SnapshotError::Git {
        command: args.join(" "),
        stderr: format!("cannot run git: {e}"),
    })?;
    if !out.status.success() {
        return Err(SnapshotError::Git {
            command: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(out.stdout)
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).trim().to_owned()
}

/// The repository's index file (absolute).
fn index_path(workspace: &Path) -> Result<PathBuf, SnapshotError> {
    let path = PathBuf::from(text(git(
        workspace,
        None,
        &["rev-parse", "--git-path", "index"],
    )?));
    Ok(if path.is_absolute() {
        path
    } else {
        workspace.join(path)
    })
}

/// Paths listed NUL-separated by `git ls-files`.
fn listed(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect()
}

/// `exclude` (absolute) as workspace-relative prefixes.
fn excluded(workspace: &Path, exclude: &[PathBuf]) -> Vec<String> {
    exclude
        .iter()
        .filter_map(|e| e.strip_prefix(workspace).ok())
        .filter_map(|e| e.to_str())
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect()
}

fn is_excluded(path: &str, excluded: &[String]) -> bool {
    excluded
        .iter()
        .any(|e| path == e || path.starts_with(&format!("{e}/")))
}

/// Manifest entries of the files git sees (tracked and untracked, not ignored) that exist.
pub(super) fn current(
    workspace: &Path,
    exclude: &[PathBuf],
) -> Result<BTreeMap<String, Entry>, SnapshotError> {
    let skip = excluded(workspace, exclude);
    let files = git(
        workspace,
        None,
        &[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
    )?;
    let files: Vec<String> = listed(&files)
        .into_iter()
        .filter(|p| !is_excluded(p, &skip))
        .collect();
    entries_of(workspace, &files)
}

fn entries_of(
    workspace: &Path,
    paths: &[String],
) -> Result<BTreeMap<String, Entry>, SnapshotError> {
    let mut entries = BTreeMap::new();
    for path in paths {
        let full = workspace.join(path);
        if full.symlink_metadata().is_ok() {
            entries.insert(path.clone(), entry_of(&full, None)?);
        }
    }
    Ok(entries)
}

/// Takes a `git` snapshot: requires `workspace` to be the top of a work tree.
pub(super) fn take(
    store: &Store,
    workspace: &Path,
    run: &str,
    id: &str,
    exclude: &[PathBuf],
) -> Result<Manifest, SnapshotError> {
    let skip = excluded(workspace, exclude);
    let top = git(workspace, None, &["rev-parse", "--show-toplevel"]).map_err(|_| {
        SnapshotError::Unsupported(format!(
            "{} is not in a git work tree; use --snapshot dir",
            workspace.display()
        ))
    })?;
    let top = std::fs::canonicalize(text(top)).map_err(io("cannot resolve", workspace))?;
    if top != workspace {
        return Err(SnapshotError::Unsupported(format!(
            "the git driver snapshots a whole work tree: use --workspace {}",
            top.display()
        )));
    }
    let real_index = index_path(workspace)?;
    let saved_index = store.git_index_path(id);
    let had_index = real_index.exists();
    let tmp_dir = store.tmp_dir();
    std::fs::create_dir_all(&tmp_dir).map_err(io("cannot create", &tmp_dir))?;
    let tmp_index = tmp_dir.join(format!("{id}.index"));
    if had_index {
        let bytes = std::fs::read(&real_index).map_err(io("cannot read", &real_index))?;
        write_durable(&saved_index, &bytes)?;
        std::fs::write(&tmp_index, &bytes).map_err(io("cannot write", &tmp_index))?;
    }
    let mut add = vec!["add".to_owned(), "-A".into(), "--".into(), ".".into()];
    add.extend(skip.iter().map(|e| format!(":(exclude){e}")));
    let add: Vec<&str> = add.iter().map(String::as_str).collect();
    git(workspace, Some(&tmp_index), &add)?;
    let tree = text(git(workspace, Some(&tmp_index), &["write-tree"])?);
    let files = listed(&git(workspace, Some(&tmp_index), &["ls-files", "-z"])?);
    let _ = std::fs::remove_file(&tmp_index);
    let head_commit = git(workspace, None, &["rev-parse", "-q", "--verify", "HEAD"])
        .ok()
        .map(text)
        .filter(|s| !s.is_empty());
    let head_ref = git(workspace, None, &["symbolic-ref", "-q", "HEAD"])
        .ok()
        .map(text)
        .filter(|s| !s.is_empty());
    let message = format!("airlock snapshot {id} of run {run}");
    let mut args = vec!["commit-tree", tree.as_str(), "-m", message.as_str()];
    if let Some(head) = &head_commit {
        args.extend(["-p", head.as_str()]);
    }
    let commit = text(git(workspace, None, &args)?);
    let reference = format!("refs/airlock/snapshots/{run}/{id}");
    git(workspace, None, &["update-ref", &reference, &commit])?;
    Ok(Manifest {
        id: id.to_owned(),
        driver: "git".into(),
        workspace: workspace.display().to_string(),
        created_at_ms: airlock_ledger::now_ms(),
        entries: entries_of(workspace, &files)?,
        git: Some(GitState {
            commit,
            reference,
            head_ref,
            head_commit,
            had_index,
        }),
        commands: None,
    })
}

/// Restores a `git` snapshot. Idempotent.
pub(super) fn restore(
    store: &Store,
    workspace: &Path,
    manifest: &Manifest,
    exclude: &[PathBuf],
) -> Result<(), SnapshotError> {
    let skip = excluded(workspace, exclude);
    let state = manifest.git.as_ref().ok_or_else(|| {
        SnapshotError::Unsupported(format!("snapshot {} has no git state", manifest.id))
    })?;
    let tmp_dir = store.tmp_dir();
    std::fs::create_dir_all(&tmp_dir).map_err(io("cannot create", &tmp_dir))?;
    let tmp_index = tmp_dir.join(format!("{}.restore.index", manifest.id));
    let _ = std::fs::remove_file(&tmp_index);
    git(workspace, Some(&tmp_index), &["read-tree", &state.commit])?;
    git(workspace, Some(&tmp_index), &["checkout-index", "-a", "-f"])?;
    // Files not in the snapshot, and not ignored: created since; remove them.
    let extra = listed(&git(
        workspace,
        Some(&tmp_index),
        &["ls-files", "-z", "--others", "--exclude-standard"],
    )?);
    for path in extra.iter().filter(|p| !is_excluded(p, &skip)) {
        let full = workspace.join(path);
        if let Err(e) = std::fs::remove_file(&full) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(io("cannot remove", &full)(e));
            }
        }
        let mut parent = full.parent();
        while let Some(dir) = parent.filter(|d| *d != workspace) {
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
            parent = dir.parent();
        }
    }
    let _ = std::fs::remove_file(&tmp_index);
    pause_point("rollback_midway");
    let real_index = index_path(workspace)?;
    if state.had_index {
        let saved = store.git_index_path(&manifest.id);
        let bytes = std::fs::read(&saved).map_err(io("cannot read", &saved))?;
        write_durable(&real_index, &bytes)?;
    } else {
        let _ = std::fs::remove_file(&real_index);
    }
    match (&state.head_ref, &state.head_commit) {
        (Some(branch), Some(commit)) => {
            git(workspace, None, &["update-ref", branch, commit])?;
            git(workspace, None, &["symbolic-ref", "HEAD", branch])?;
        }
        (Some(branch), None) => {
            let _ = git(workspace, None, &["update-ref", "-d", branch]);
            git(workspace, None, &["symbolic-ref", "HEAD", branch])?;
        }
        (None, Some(commit)) => {
            git(
                workspace,
                None,
                &["update-ref", "--no-deref", "HEAD", commit],
            )?;
        }
        (None, None) => {}
    }
    Ok(())
}
