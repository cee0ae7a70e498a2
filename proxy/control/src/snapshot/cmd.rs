//! The `cmd` driver: user-given shell commands take and restore the snapshot (a VM
//! snapshot, ZFS, LVM…); airlock keeps a manifest (hashes only, no copy) to list changes
//! and to check the restored tree afterwards. The commands run with `sh -c` in the
//! workspace, with `AIRLOCK_SNAPSHOT` (the snapshot id), `AIRLOCK_WORKSPACE` and
//! `AIRLOCK_RUN` set, under the step's time limit (killed, with their process group, when
//! it passes).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{step, walk, Commands, Hashing, Manifest, Notes, SnapshotError, Step};

fn run(
    command: &str,
    workspace: &Path,
    snapshot: &str,
    run: &str,
    what: &str,
    step: &Step,
) -> Result<(), SnapshotError> {
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(command)
        .current_dir(workspace)
        .env("AIRLOCK_SNAPSHOT", snapshot)
        .env("AIRLOCK_WORKSPACE", workspace)
        .env("AIRLOCK_RUN", run);
    let out = step::output(sh, step, &format!("{what} `{command}`"), None)?.map_err(|e| {
        SnapshotError::Command {
            what: what.to_owned(),
            detail: format!("cannot run sh: {e}"),
        }
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
    step: &Step,
) -> Result<Manifest, SnapshotError> {
    let walked = walk(workspace, exclude, Hashing::default(), step)?;
    run(
        &commands.snapshot,
        workspace,
        id,
        run_id,
        "the snapshot command",
        step,
    )?;
    Ok(Manifest {
        id: id.to_owned(),
        driver: "cmd".into(),
        workspace: workspace.display().to_string(),
        created_at_ms: airlock_ledger::now_ms(),
        entries: walked.entries,
        git: None,
        commands: Some(commands.clone()),
        overlay: None,
        notes: walked.notes,
    })
}

/// Runs the rollback command. What it did is for the residue check to find; it reports
/// nothing as not restored itself.
pub(super) fn restore(
    workspace: &Path,
    manifest: &Manifest,
    step: &Step,
) -> Result<Notes, SnapshotError> {
    let commands = manifest.commands.as_ref().ok_or_else(|| {
        SnapshotError::Unsupported(format!("snapshot {} has no commands", manifest.id))
    })?;
    run(
        &commands.rollback,
        workspace,
        &manifest.id,
        "",
        "the rollback command",
        step,
    )?;
    Ok(Notes::new())
}
