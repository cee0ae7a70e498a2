//! The workspace steps of a decision under their time limits (docs/run.md, "Time
//! limits"): each runs in the blocking pool, bounded by the server's
//! `--workspace-step-timeout`, and a step that fails or times out becomes a note, residue
//! or an outcome, never a decision that hangs.

use std::sync::Arc;

use airlock_ledger::RunId;
use tracing::warn;

use super::{excludes, store, Result, WorkspaceError};
use crate::snapshot::{Notes, SnapshotError, Step, GRACE};
use crate::Control;

/// Runs `f` as workspace step `name` in the blocking pool, under the server's step time
/// limit. `f` checks the [`Step`] itself; should it be stuck in a system call, it is
/// given up [`GRACE`] past the deadline (the thread is left to finish on its own).
///
/// Errors: `f`'s; [`SnapshotError::TimedOut`] naming what the step was processing.
pub(super) async fn bounded<T: Send + 'static>(
    shared: &Control,
    name: &'static str,
    f: impl FnOnce(&Step) -> Result<T> + Send + 'static,
) -> Result<T> {
    let step = Step::new(name, shared.workspace_step_timeout);
    let inner = step.clone();
    let task = tokio::task::spawn_blocking(move || f(&inner));
    match tokio::time::timeout(step.timeout() + GRACE, task).await {
        Ok(joined) => joined.map_err(|e| WorkspaceError::Task(e.to_string()))?,
        Err(_) => Err(step.timed_out().into()),
    }
}

/// The diff step: the workspace's changes since `snapshot`, for the record, and the notes
/// of what it could not see whole (the snapshot's, then today's). A damaged snapshot
/// store or a diff that times out must not stop the decision from being written (its
/// rollback then fails and says so), so an error gives no changes and a note saying why.
pub(super) async fn changes_since(
    shared: &Arc<Control>,
    snapshot: &str,
) -> (airlock_ledger::Changes, Vec<String>) {
    let (shared2, id) = (shared.clone(), snapshot.to_owned());
    let listed = bounded(shared, "diff", move |step| {
        let store = store(&shared2);
        let manifest = store.load(&id)?;
        let (changes, now) = store.changes(&manifest, &excludes(&shared2), step)?;
        let mut notes = manifest.notes;
        for (path, why) in now {
            notes.entry(path).or_insert(why);
        }
        Ok((changes, crate::snapshot::note_lines(&notes)))
    })
    .await;
    match listed {
        Ok(listed) => listed,
        Err(error) => {
            warn!(snapshot, error = %error, "cannot list the workspace's changes");
            (
                airlock_ledger::Changes::default(),
                vec![format!("the changes could not be listed: {error}")],
            )
        }
    }
}

/// The outcome of a keep whose commit or seal passed the step's time limit.
pub(super) fn keep_timed_out(limit: std::time::Duration, run: &RunId, doing: &str) -> String {
    let error = SnapshotError::TimedOut {
        step: "keep",
        secs: limit.as_secs_f64(),
        at: format!("{doing} run {run}"),
    };
    format!(
        "files kept; {error}: it goes on in the background, and `airlock runs show {run}` \
         shows how it ended"
    )
}

/// The rollback step, then the residue check, each under its own time limit. Returns the
/// residue (empty when the rollback is verified).
pub(super) async fn restore_and_check(shared: &Arc<Control>, snapshot: &str) -> Vec<String> {
    let (shared2, id) = (shared.clone(), snapshot.to_owned());
    let restored = bounded(shared, "rollback", move |step| {
        let store = store(&shared2);
        let manifest = store.load(&id)?;
        let not_restored = store.restore(&manifest, &excludes(&shared2), step)?;
        Ok((manifest, not_restored))
    })
    .await;
    let (manifest, not_restored): (_, Notes) = match restored {
        Ok(restored) => restored,
        Err(error) => return vec![format!("restore failed: {error}")],
    };
    let shared2 = shared.clone();
    let checked = bounded(shared, "residue check", move |step| {
        Ok(store(&shared2).residue(&manifest, &excludes(&shared2), &not_restored, step)?)
    })
    .await;
    checked.unwrap_or_else(|error| vec![format!("residue check failed: {error}")])
}

/// After the final rollback was verified: what the driver kept for the run outside the
/// workspace goes (the `overlay` driver's state directory). Best effort.
pub(super) async fn discard_snapshot(shared: &Arc<Control>, snapshot: &str) {
    let (shared2, id) = (shared.clone(), snapshot.to_owned());
    let _ = bounded(shared, "rollback", move |_| {
        let store = store(&shared2);
        store.discard(&store.load(&id)?);
        Ok(())
    })
    .await;
}

/// The keep step's files, under the step's time limit: for the `overlay` driver, merges
/// what the steps wrote into the workspace and checks it. Returns `None` for the other
/// drivers (their steps wrote the workspace itself), else the keep's residue (empty when
/// verified; a merge that failed or timed out is residue too: `keep failed: …`) and,
/// under `--scope root`, the steps' writes outside the workspace it did not apply.
pub(super) async fn keep_files(
    shared: &Arc<Control>,
    snapshot: &str,
) -> Option<(Vec<String>, Vec<String>)> {
    let (shared2, id) = (shared.clone(), snapshot.to_owned());
    let kept = bounded(shared, "keep", move |step| {
        let store = store(&shared2);
        let manifest = store.load(&id)?;
        Ok(store.keep(&manifest, step)?)
    })
    .await;
    match kept {
        Ok(None) => None,
        Ok(Some(kept)) => Some((kept.residue, kept.outside)),
        Err(error) => Some((vec![format!("keep failed: {error}")], Vec::new())),
    }
}
