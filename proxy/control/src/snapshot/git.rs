//! The `git` driver: everything not ignored (tracked and untracked) committed on a private
//! ref `refs/airlock/snapshots/RUN/ID` through a temporary index, so the user's index, HEAD
//! and branches are untouched; the real index file and HEAD are saved beside it. Restore
//! checks the snapshot tree out through a temporary index, removes files that are not in
//! it (ignored files stay), and puts the saved index file and HEAD back byte for byte.
//!
//! git does not track special files (it skips FIFOs, sockets and device nodes without a
//! word), so the driver finds those that are not ignored itself, by `lstat` alone, and
//! keeps them in the manifest: a rollback removes those the snapshot did not have and
//! recreates its FIFOs. Every git command runs under the step's time limit.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{
    entry_of, io, pause_point, relative, step, write_durable, Entry, GitState, Hashing, Manifest,
    Notes, SnapshotError, Step, Store, Walked,
};

fn git(
    workspace: &Path,
    index: Option<&Path>,
    args: &[&str],
    step: &Step,
) -> Result<Vec<u8>, SnapshotError> {
    let out = git_output(workspace, index, args, step)?;
    if !out.status.success() {
        return Err(SnapshotError::Git {
            command: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(out.stdout)
}

fn git_output(
    workspace: &Path,
    index: Option<&Path>,
    args: &[&str],
    step: &Step,
) -> Result<std::process::Output, SnapshotError> {
    git_with_input(workspace, index, args, step, None)
}

fn git_with_input(
    workspace: &Path,
    index: Option<&Path>,
    args: &[&str],
    step: &Step,
    input: Option<Vec<u8>>,
) -> Result<std::process::Output, SnapshotError> {
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
    step::output(command, step, &format!("git {}", args.join(" ")), input)?.map_err(|e| {
        SnapshotError::Git {
            command: args.join(" "),
            stderr: format!("cannot run git: {e}"),
        }
    })
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).trim().to_owned()
}

/// The repository's index file (absolute).
fn index_path(workspace: &Path, step: &Step) -> Result<PathBuf, SnapshotError> {
    let path = PathBuf::from(text(git(
        workspace,
        None,
        &["rev-parse", "--git-path", "index"],
        step,
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

/// Manifest entries of the files git sees (tracked and untracked, not ignored) that exist,
/// and of the special files git does not see.
pub(super) fn current(
    workspace: &Path,
    exclude: &[PathBuf],
    step: &Step,
) -> Result<Walked, SnapshotError> {
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
        step,
    )?;
    let files: Vec<String> = listed(&files)
        .into_iter()
        .filter(|p| !is_excluded(p, &skip))
        .collect();
    let mut walked = entries_of(workspace, &files, step)?;
    let special = special_files(workspace, &skip, step)?;
    walked.entries.extend(special.entries);
    walked.notes.extend(special.notes);
    Ok(walked)
}

fn entries_of(workspace: &Path, paths: &[String], step: &Step) -> Result<Walked, SnapshotError> {
    let mut walked = Walked::default();
    for path in paths {
        let full = workspace.join(path);
        if let Some(entry) = entry_of(&full, path, Hashing::default(), step, &mut walked.notes)? {
            walked.entries.insert(path.clone(), entry);
        }
    }
    Ok(walked)
}

fn is_special(kind: std::fs::FileType) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    kind.is_fifo() || kind.is_socket() || kind.is_char_device() || kind.is_block_device()
}

/// The FIFOs, sockets and device nodes of the work tree that are not ignored (git sees
/// none of them), found by `lstat` alone: `.git`, excluded paths, ignored directories
/// and nested repositories are not entered.
fn special_files(workspace: &Path, skip: &[String], step: &Step) -> Result<Walked, SnapshotError> {
    let ignored: std::collections::BTreeSet<String> = listed(&git(
        workspace,
        None,
        &[
            "ls-files",
            "-z",
            "--others",
            "--ignored",
            "--exclude-standard",
            "--directory",
        ],
        step,
    )?)
    .into_iter()
    .map(|p| p.trim_end_matches('/').to_owned())
    .collect();
    let mut found = Vec::new();
    let mut stack = vec![workspace.to_path_buf()];
    while let Some(dir) = stack.pop() {
        step.at(dir.display());
        step.check()?;
        // What cannot be listed git cannot see either; it reports that itself.
        let Ok(listing) = std::fs::read_dir(&dir) else {
            continue;
        };
        for item in listing.flatten() {
            let path = item.path();
            let rel = relative(workspace, &path)?;
            if rel == ".git" || is_excluded(&rel, skip) || ignored.contains(&rel) {
                continue;
            }
            let Ok(kind) = item.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if std::fs::symlink_metadata(path.join(".git")).is_err() {
                    stack.push(path);
                }
            } else if is_special(kind) {
                found.push(rel);
            }
        }
    }
    // Ignored special files: git check-ignore reads the rules without looking at the file.
    let mut ignored_files = std::collections::BTreeSet::new();
    if !found.is_empty() {
        let input: Vec<u8> = found.iter().flat_map(|p| p.bytes().chain([0])).collect();
        let out = git_with_input(
            workspace,
            None,
            &["check-ignore", "-z", "--stdin"],
            step,
            Some(input),
        )?;
        // Exit 1: none of them is ignored.
        if !out.status.success() && out.status.code() != Some(1) {
            return Err(SnapshotError::Git {
                command: "check-ignore -z --stdin".into(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        ignored_files.extend(listed(&out.stdout));
    }
    found.retain(|p| !ignored_files.contains(p));
    let mut walked = entries_of(workspace, &found, step)?;
    walked.entries.retain(|_, e| {
        matches!(
            e,
            Entry::Fifo { .. } | Entry::Socket { .. } | Entry::Device { .. }
        )
    });
    for (path, entry) in &walked.entries {
        walked.notes.entry(path.clone()).or_insert_with(|| {
            format!(
                "a {} git does not track: airlock recorded it and a rollback recreates it",
                entry.kind()
            )
        });
    }
    Ok(walked)
}

/// Whether `git add --ignore-errors` failed only on files it could not read.
fn only_unreadable(stderr: &[u8]) -> bool {
    String::from_utf8_lossy(stderr).lines().all(|line| {
        line.starts_with("error: open(")
            || line.starts_with("error: unable to index file")
            || line.starts_with("warning:")
            || line.trim().is_empty()
    })
}

/// Takes a `git` snapshot: requires `workspace` to be the top of a work tree.
pub(super) fn take(
    store: &Store,
    workspace: &Path,
    run: &str,
    id: &str,
    exclude: &[PathBuf],
    step: &Step,
) -> Result<Manifest, SnapshotError> {
    let skip = excluded(workspace, exclude);
    let top = git(workspace, None, &["rev-parse", "--show-toplevel"], step).map_err(|e| {
        if let SnapshotError::TimedOut { .. } = e {
            return e;
        }
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
    let real_index = index_path(workspace, step)?;
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
    let mut add = vec![
        "add".to_owned(),
        "-A".into(),
        "--ignore-errors".into(),
        "--".into(),
        ".".into(),
    ];
    add.extend(skip.iter().map(|e| format!(":(exclude){e}")));
    let add: Vec<&str> = add.iter().map(String::as_str).collect();
    let added = git_output(workspace, Some(&tmp_index), &add, step)?;
    if !added.status.success() && !only_unreadable(&added.stderr) {
        return Err(SnapshotError::Git {
            command: add.join(" "),
            stderr: String::from_utf8_lossy(&added.stderr).trim().to_owned(),
        });
    }
    let tree = text(git(workspace, Some(&tmp_index), &["write-tree"], step)?);
    let mut files = listed(&git(
        workspace,
        Some(&tmp_index),
        &["ls-files", "-z"],
        step,
    )?);
    if !added.status.success() {
        // Files git could not read stay untracked by the snapshot: recorded by airlock
        // (as unreadable, with a note), and a rollback leaves them alone.
        files.extend(
            listed(&git(
                workspace,
                Some(&tmp_index),
                &["ls-files", "-z", "--others", "--exclude-standard"],
                step,
            )?)
            .into_iter()
            .filter(|p| !is_excluded(p, &skip)),
        );
    }
    let _ = std::fs::remove_file(&tmp_index);
    let optional = |args: &[&str]| match git(workspace, None, args, step) {
        Ok(out) => Ok(Some(text(out)).filter(|s| !s.is_empty())),
        Err(e @ SnapshotError::TimedOut { .. }) => Err(e),
        Err(_) => Ok(None),
    };
    let head_commit = optional(&["rev-parse", "-q", "--verify", "HEAD"])?;
    let head_ref = optional(&["symbolic-ref", "-q", "HEAD"])?;
    let message = format!("airlock snapshot {id} of run {run}");
    let mut args = vec!["commit-tree", tree.as_str(), "-m", message.as_str()];
    if let Some(head) = &head_commit {
        args.extend(["-p", head.as_str()]);
    }
    let commit = text(git(workspace, None, &args, step)?);
    let reference = format!("refs/airlock/snapshots/{run}/{id}");
    git(workspace, None, &["update-ref", &reference, &commit], step)?;
    let mut walked = entries_of(workspace, &files, step)?;
    let special = special_files(workspace, &skip, step)?;
    walked.entries.extend(special.entries);
    walked.notes.extend(special.notes);
    Ok(Manifest {
        id: id.to_owned(),
        driver: "git".into(),
        workspace: workspace.display().to_string(),
        created_at_ms: airlock_ledger::now_ms(),
        entries: walked.entries,
        git: Some(GitState {
            commit,
            reference,
            head_ref,
            head_commit,
            had_index,
        }),
        commands: None,
        overlay: None,
        notes: walked.notes,
    })
}

/// Restores a `git` snapshot. Idempotent.
pub(super) fn restore(
    store: &Store,
    workspace: &Path,
    manifest: &Manifest,
    exclude: &[PathBuf],
    step: &Step,
) -> Result<Notes, SnapshotError> {
    let skip = excluded(workspace, exclude);
    let state = manifest.git.as_ref().ok_or_else(|| {
        SnapshotError::Unsupported(format!("snapshot {} has no git state", manifest.id))
    })?;
    let tmp_dir = store.tmp_dir();
    std::fs::create_dir_all(&tmp_dir).map_err(io("cannot create", &tmp_dir))?;
    let tmp_index = tmp_dir.join(format!("{}.restore.index", manifest.id));
    let _ = std::fs::remove_file(&tmp_index);
    git(
        workspace,
        Some(&tmp_index),
        &["read-tree", &state.commit],
        step,
    )?;
    git(
        workspace,
        Some(&tmp_index),
        &["checkout-index", "-a", "-f"],
        step,
    )?;
    // Files not in the snapshot, and not ignored: created since; remove them.
    let extra = listed(&git(
        workspace,
        Some(&tmp_index),
        &["ls-files", "-z", "--others", "--exclude-standard"],
        step,
    )?);
    let unreadable = |p: &String| matches!(manifest.entries.get(p), Some(Entry::Unreadable { .. }));
    for path in extra
        .iter()
        .filter(|p| !is_excluded(p, &skip) && !unreadable(p))
    {
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
    let not_restored = restore_special(workspace, manifest, &skip, step)?;
    pause_point("rollback_midway");
    let real_index = index_path(workspace, step)?;
    if state.had_index {
        let saved = store.git_index_path(&manifest.id);
        let bytes = std::fs::read(&saved).map_err(io("cannot read", &saved))?;
        write_durable(&real_index, &bytes)?;
    } else {
        let _ = std::fs::remove_file(&real_index);
    }
    match (&state.head_ref, &state.head_commit) {
        (Some(branch), Some(commit)) => {
            git(workspace, None, &["update-ref", branch, commit], step)?;
            git(workspace, None, &["symbolic-ref", "HEAD", branch], step)?;
        }
        (Some(branch), None) => {
            if let Err(e @ SnapshotError::TimedOut { .. }) =
                git(workspace, None, &["update-ref", "-d", branch], step)
            {
                return Err(e);
            }
            git(workspace, None, &["symbolic-ref", "HEAD", branch], step)?;
        }
        (None, Some(commit)) => {
            git(
                workspace,
                None,
                &["update-ref", "--no-deref", "HEAD", commit],
                step,
            )?;
        }
        (None, None) => {}
    }
    Ok(not_restored)
}

/// Puts the snapshot's special files back: removes those it did not have, recreates its
/// FIFOs, and returns its sockets and device nodes that are gone as not restored.
fn restore_special(
    workspace: &Path,
    manifest: &Manifest,
    skip: &[String],
    step: &Step,
) -> Result<Notes, SnapshotError> {
    use std::os::unix::fs::PermissionsExt as _;
    let same_kind = |a: &Entry, b: &Entry| std::mem::discriminant(a) == std::mem::discriminant(b);
    let now = special_files(workspace, skip, step)?.entries;
    for (path, entry) in &now {
        if manifest
            .entries
            .get(path)
            .is_some_and(|w| same_kind(w, entry))
        {
            continue;
        }
        let full = workspace.join(path);
        match std::fs::remove_file(&full) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io("cannot remove", &full)(e))
            }
            _ => {}
        }
    }
    let mut not_restored = Notes::new();
    for (path, wanted) in &manifest.entries {
        let there = now.get(path).is_some_and(|n| same_kind(n, wanted));
        let full = workspace.join(path);
        match wanted {
            Entry::Fifo { mode } => {
                step.at(full.display());
                if !there {
                    if let Ok(metadata) = std::fs::symlink_metadata(&full) {
                        if metadata.is_dir() {
                            let _ = std::fs::remove_dir_all(&full);
                        } else {
                            let _ = std::fs::remove_file(&full);
                        }
                    }
                    if let Some(parent) = full.parent() {
                        std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
                    }
                    rustix::fs::mkfifoat(
                        rustix::fs::CWD,
                        &full,
                        rustix::fs::Mode::from_raw_mode(*mode),
                    )
                    .map_err(|e| io("cannot recreate the FIFO", &full)(e.into()))?;
                }
                std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*mode))
                    .map_err(io("cannot set the mode of", &full))?;
            }
            Entry::Socket { .. } | Entry::Device { .. } if !there => {
                not_restored.insert(
                    path.clone(),
                    format!(
                        "not restored: a {} is not recreated by a rollback",
                        wanted.kind()
                    ),
                );
            }
            _ => {}
        }
    }
    Ok(not_restored)
}
