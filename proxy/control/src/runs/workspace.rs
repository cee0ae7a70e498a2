//! Runs in step with the filesystem (docs/design.md): the server side of `airlock run`. It
//! attaches a workspace and its snapshot to a run, takes savepoints, and writes and applies
//! the one decision that keeps or rolls back files and effects together.
//!
//! Every decision is written to the ledger (flushed) before it is acted on; applying it is
//! idempotent on both sides, so whoever finds it unfinished (a restart, `airlock run
//! --resume`, `airlock runs show`) finishes it the same way. See docs/run.md.
//!
//! Each step (snapshot, diff, rollback, keep, residue check) runs under the server's
//! `--workspace-step-timeout`: a step that passes it ends with an error naming the step
//! and the path or command it was processing, and the decision still completes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use airlock_ledger::{
    now_ms, DecisionKind, LedgerError, RunId, Savepoint, WorkspaceDecision, WorkspaceRecord,
};
use serde::Serialize;
use serde_json::Value;
use tracing::{info, warn};

mod apply;
mod steps;

use crate::release::{CommitError, CommitReport};
use crate::snapshot::{pause_point, Commands, Driver, SnapshotError, Store};
use crate::Control;
use apply::{apply, report};
use steps::{bounded, changes_since};

/// Errors of workspace operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The ledger refused or failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A snapshot could not be taken or restored.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The commit failed.
    #[error(transparent)]
    Commit(#[from] CommitError),
    /// The request is not possible as asked.
    #[error("{0}")]
    Invalid(String),
    /// A blocking task panicked or was cancelled.
    #[error("a workspace task failed: {0}")]
    Task(String),
}

type Result<T, E = WorkspaceError> = std::result::Result<T, E>;

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| WorkspaceError::Task(e.to_string()))?
}

/// One lock per run, so a decision is applied by one task at a time.
fn run_lock(run: &RunId) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<RunId, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let mut locks = LOCKS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    locks.entry(run.clone()).or_default().clone()
}

fn store(shared: &Control) -> Store {
    Store::new(&shared.data_dir)
}

/// Paths a snapshot never covers: airlock's own data directory.
fn excludes(shared: &Control) -> Vec<PathBuf> {
    vec![shared.data_dir.clone()]
}

/// What a decision did, for the API and the summary of `airlock run`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DecisionReport {
    /// The run id (`run_…`).
    #[schema(value_type = String)]
    pub run: RunId,
    /// The run's state afterwards.
    pub state: String,
    /// The decision applied: `{kind, by, reason, commit, at_ms, finished_at_ms, …}`.
    #[schema(value_type = Object)]
    pub decision: WorkspaceDecision,
    /// The decision was written earlier (this call finished or reported it).
    pub already_decided: bool,
    /// Whether a rollback could not be verified.
    pub rollback_unverified: bool,
    /// The commit's report, when the decision committed.
    pub commit: Option<CommitReport>,
    /// The run's effects afterwards, in staging order: `{id, seq, method, url, state,
    /// state_reason, depends_on: [ID…]}` each.
    #[schema(value_type = Vec<Object>)]
    pub effects: Vec<Value>,
    /// The workspace record (without `run`).
    #[schema(value_type = crate::admin::views::WorkspaceView)]
    pub workspace: WorkspaceRecord,
}

/// Attaches `path` to `run` and takes the starting snapshot with `driver`. Attaching again
/// returns the first record.
pub async fn attach(
    shared: &Arc<Control>,
    run: &RunId,
    path: &str,
    driver: &str,
    commands: Option<Commands>,
) -> Result<(WorkspaceRecord, String)> {
    let driver = Driver::parse(driver)?;
    if driver == Driver::Cmd && !shared.danger_allow_snapshot_commands {
        return Err(SnapshotError::Unsupported(
            "this server does not run snapshot commands; start it with \
             --danger-allow-snapshot-commands, or use airlock run's embedded server"
                .into(),
        )
        .into());
    }
    let (shared, run, path) = (shared.clone(), run.clone(), PathBuf::from(path));
    let limits = shared.clone();
    bounded(&limits, "snapshot", move |step| {
        if let Some(existing) = shared.ledger().workspace(&run)? {
            return Ok((existing, "already attached".to_owned()));
        }
        if shared.ledger().run(&run)?.is_none() {
            return Err(LedgerError::NotFound {
                kind: "run",
                id: run.0.clone(),
            }
            .into());
        }
        let workspace = std::fs::canonicalize(&path)
            .ok()
            .filter(|p| p.is_dir())
            .ok_or_else(|| {
                WorkspaceError::Invalid(format!("{} is not a directory", path.display()))
            })?;
        if shared.data_dir == workspace {
            return Err(WorkspaceError::Invalid(
                "the workspace cannot be airlock's data directory".into(),
            ));
        }
        let manifest = store(&shared).take(
            driver,
            &workspace,
            run.as_str(),
            &excludes(&shared),
            commands.as_ref(),
            step,
        )?;
        let record = WorkspaceRecord {
            path: workspace.display().to_string(),
            driver: driver.as_str().to_owned(),
            snapshot: manifest.id.clone(),
            created_at_ms: now_ms(),
            steps: Vec::new(),
            savepoints: Vec::new(),
            decisions: Vec::new(),
            rollback_unverified: false,
            snapshot_notes: manifest.note_lines(),
        };
        let record = shared.ledger().attach_workspace(&run, record)?;
        Ok((record, manifest.describe()))
    })
    .await
}

fn must_workspace(shared: &Control, run: &RunId) -> Result<WorkspaceRecord> {
    shared.ledger().workspace(run)?.ok_or_else(|| {
        LedgerError::NotFound {
            kind: "workspace of run",
            id: run.0.clone(),
        }
        .into()
    })
}

/// Takes a savepoint: a snapshot of the workspace and the run's ledger position.
pub async fn savepoint(
    shared: &Arc<Control>,
    run: &RunId,
    name: Option<String>,
) -> Result<(Savepoint, Vec<String>)> {
    let (shared, run) = (shared.clone(), run.clone());
    let limits = shared.clone();
    bounded(&limits, "snapshot", move |step| {
        let record = must_workspace(&shared, &run)?;
        let name = name.unwrap_or_else(|| format!("sp{}", record.savepoints.len() + 1));
        if record.savepoints.iter().any(|s| s.name == name) {
            return Err(WorkspaceError::Invalid(format!(
                "run {run} already has a savepoint named {name:?}"
            )));
        }
        let driver = Driver::parse(&record.driver)?;
        // The cmd driver's commands are those given when the workspace was attached.
        let commands = match driver {
            Driver::Cmd => store(&shared).load(&record.snapshot)?.commands,
            _ => None,
        };
        let manifest = store(&shared).take(
            driver,
            std::path::Path::new(&record.path),
            run.as_str(),
            &excludes(&shared),
            commands.as_ref(),
            step,
        )?;
        let savepoint = shared.ledger().add_savepoint(&run, &name, &manifest.id)?;
        Ok((savepoint, manifest.note_lines()))
    })
    .await
}

/// What `airlock run` asks for once the command and verify ended.
#[derive(Debug, Clone)]
pub struct DecideRequest {
    /// Keep the files (both passed), or roll back.
    pub keep: bool,
    /// On keep: commit (else hold the effects for review).
    pub commit: bool,
    /// On commit: approve undecided effects first.
    pub approve_all: bool,
    /// Why, in words.
    pub reason: String,
    /// Who decides.
    pub by: String,
}

/// Writes the run's final decision (or finds the one already written) and applies it.
pub async fn decide(
    shared: &Arc<Control>,
    run: &RunId,
    request: DecideRequest,
) -> Result<DecisionReport> {
    let lock = run_lock(run);
    let _serial = lock.lock().await;
    let record = {
        let (shared, run) = (shared.clone(), run.clone());
        blocking(move || must_workspace(&shared, &run)).await?
    };
    let (changes, notes) = changes_since(shared, &record.snapshot).await;
    let (decision, fresh) = {
        let (shared, run) = (shared.clone(), run.clone());
        blocking(move || {
            let decision = WorkspaceDecision {
                kind: if request.keep {
                    DecisionKind::Keep
                } else {
                    DecisionKind::Rollback
                },
                snapshot: record.snapshot.clone(),
                savepoint: None,
                after_seq: None,
                commit: request.keep && request.commit,
                approve_all: request.approve_all,
                reason: request.reason,
                by: request.by,
                at_ms: now_ms(),
                changes,
                finished_at_ms: None,
                residue: Vec::new(),
                outcome: None,
                notes,
            };
            Ok(shared.ledger().decide_workspace(&run, decision)?)
        })
        .await?
    };
    if fresh {
        info!(run.id = %run, decision = decision.kind.as_str(), "workspace decision written");
        pause_point("after_decision");
    }
    apply(shared, run, decision, !fresh).await
}

/// Rolls the run back to savepoint `name`: one decision, recorded as `by`'s, restores the
/// files to its snapshot and discards every effect staged after it (and their dependents).
pub async fn rollback_to(
    shared: &Arc<Control>,
    run: &RunId,
    name: &str,
    by: &str,
) -> Result<DecisionReport> {
    let lock = run_lock(run);
    let serial = lock.lock().await;
    let savepoint = {
        let (shared, run, name) = (shared.clone(), run.clone(), name.to_owned());
        blocking(move || {
            let record = must_workspace(&shared, &run)?;
            let savepoint = record
                .savepoints
                .iter()
                .find(|s| s.name == name)
                .cloned()
                .ok_or_else(|| {
                    WorkspaceError::Invalid(format!("run {run} has no savepoint named {name:?}"))
                })?;
            // Refused before a decision is written when the driver cannot restore now
            // (a step running on the overlay).
            let store = store(&shared);
            store.ready_to_restore(&store.load(&savepoint.snapshot)?)?;
            Ok(savepoint)
        })
        .await?
    };
    let (changes, notes) = changes_since(shared, &savepoint.snapshot).await;
    let (decision, fresh) = {
        let (shared, run, by) = (shared.clone(), run.clone(), by.to_owned());
        blocking(move || {
            let decision = WorkspaceDecision {
                kind: DecisionKind::RollbackTo,
                snapshot: savepoint.snapshot.clone(),
                savepoint: Some(savepoint.name.clone()),
                after_seq: Some(savepoint.effect_seq),
                commit: false,
                approve_all: false,
                reason: format!("rollback to savepoint {}", savepoint.name),
                by,
                at_ms: now_ms(),
                changes,
                finished_at_ms: None,
                residue: Vec::new(),
                outcome: None,
                notes,
            };
            Ok(shared.ledger().decide_workspace(&run, decision)?)
        })
        .await?
    };
    if fresh {
        pause_point("after_decision");
    }
    let finished_earlier = !fresh;
    let report = apply(shared, run, decision, finished_earlier).await?;
    drop(serial);
    if finished_earlier && report.decision.savepoint.as_deref() != Some(name) {
        // An unfinished decision was found and finished; the one asked for is next.
        return Box::pin(rollback_to(shared, run, name, by)).await;
    }
    Ok(report)
}

/// Finishes a decision written earlier, if one is unfinished. With `decide_if_missing`, a
/// run whose command never reached a decision is rolled back. Returns `None` when the run
/// has no workspace.
pub async fn resume(
    shared: &Arc<Control>,
    run: &RunId,
    decide_if_missing: bool,
) -> Result<Option<DecisionReport>> {
    let lock = run_lock(run);
    let serial = lock.lock().await;
    // Read under the lock, so a decision another task just finished is not applied again.
    let record = {
        let (shared, run) = (shared.clone(), run.clone());
        blocking(move || Ok(shared.ledger().workspace(&run)?)).await?
    };
    let Some(record) = record else {
        return Ok(None);
    };
    if let Some(pending) = record.unfinished().cloned() {
        return apply(shared, run, pending, true).await.map(Some);
    }
    if let Some(done) = record.final_decision().cloned() {
        return report(shared, run, done, true, None).await.map(Some);
    }
    drop(serial);
    if !decide_if_missing {
        return Ok(None);
    }
    decide(
        shared,
        run,
        DecideRequest {
            keep: false,
            commit: false,
            approve_all: false,
            reason: "airlock run was interrupted before it decided; nothing was verified".into(),
            by: "resume".into(),
        },
    )
    .await
    .map(Some)
}

/// At start: finishes every workspace decision left unfinished by a crash.
pub fn resume_all(shared: &Arc<Control>) {
    let runs = match shared.ledger().runs() {
        Ok(runs) => runs,
        Err(error) => {
            warn!(error = %error, "cannot list runs to resume workspace decisions");
            return;
        }
    };
    for run in runs {
        let pending =
            matches!(shared.ledger().workspace(&run.id), Ok(Some(r)) if r.unfinished().is_some());
        if pending {
            let shared = shared.clone();
            info!(run.id = %run.id, "finishing a workspace decision written before the restart");
            tokio::spawn(async move {
                if let Err(error) = resume(&shared, &run.id, false).await {
                    warn!(run.id = %run.id, error = %error, "finishing the workspace decision failed");
                }
            });
        }
    }
}
