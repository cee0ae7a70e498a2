//! The `cmd` driver: user-given shell commands take and restore the snapshot (a VM
//! snapshot, ZFS, LVM…); airlock keeps a manifest (hashes only, no copy) to list changes
//! and to check the restored tree afterwards. The commands run with `sh -c` in the
//! workspace, with `AIRLOCK_SNAPSHOT` (the snapshot id), `AIRLOCK_WORKSPACE` and
//! `AIRLOCK_RUN` set.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{walk, Commands, Manifest, SnapshotError};

fn run(
    command: &str,
    workspace: &Path,
    snapshot: &str,
    run: &str,
    what: &str,
) -> Result<(), SnapshotError> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(workspace)
        .env("AIRLOCK_SNAPSHOT", snapshot)
        .env("AIRLOCK_WORKSPACE", workspace)
        .env("AIRLOCK_RUN", run)
        .output()
        .map_err(|e| SnapshotError::Command {
            what: what.to_owned(),
            detail: format!("cannot run sh: {e}"),
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(SnapshotError::Command {
        what: what.to_owned(),
        detail: format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    })
}

/// Runs the snapshot command, then records the manifest of what it snapshotted.
pub(super) fn take(
    workspace: &Path,
    run_id: &str,
    id: &str,
    exclude: &[PathBuf],
    commands: &Commands,
) -> Result<Manifest, SnapshotError> {
    let entries = walk(workspace, exclude, None)?;
    run(
        &commands.snapshot,
        workspace,
        id,
        run_id,
        "the snapshot command",
    )?;
    Ok(Manifest {
        id: id.to_owned(),
        driver: "cmd".into(),
        workspace: workspace.display().to_string(),
        created_at_ms: airlock_ledger::now_ms(),
        entries,
        git: None,
        commands: Some(commands.clone()),
    })
}

/// Runs the rollback command.
pub(super) fn restore(workspace: &Path, manifest: &Manifest) -> Result<(), SnapshotError> {
    let commands = manifest.commands.as_ref().ok_or_else(|| {
        SnapshotError::Unsupported(format!("snapshot {} has no commands", manifest.id))
    })?;
    run(
        &commands.rollback,
        workspace,
        &manifest.id,
        "",
        "the rollback command",
    )
}
