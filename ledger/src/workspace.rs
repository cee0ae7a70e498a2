//! The workspace side of a run (`airlock run`): its snapshot, the commands run, savepoints,
//! and the one decision that keeps or rolls back files and effects together.
//!
//! A decision is written (flushed) before anything acts on it; whoever finds it unfinished
//! (a restart, `airlock run --resume`, `airlock runs show`) finishes it the same way. A run
//! has at most one final decision (`keep` or `rollback`); `rollback_to` a savepoint may
//! happen any number of times before it.

use serde::{Deserialize, Serialize};

use crate::model::{now_ms, DecisionRecord, Effect, EffectId, EffectState, RunId, RunState};
use crate::{decode, encode, LedgerError, Refused, Result};

/// The workspace attached to a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRecord {
    /// Absolute path of the workspace directory.
    pub path: String,
    /// Snapshot driver: `dir` or `git`.
    pub driver: String,
    /// The snapshot taken when the run started.
    pub snapshot: String,
    /// When it was attached, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// Commands run in the workspace (the agent's command, then verify).
    #[serde(default)]
    pub steps: Vec<StepRecord>,
    /// Savepoints, oldest first.
    #[serde(default)]
    pub savepoints: Vec<Savepoint>,
    /// Decisions, oldest first; only the last may be unfinished.
    #[serde(default)]
    pub decisions: Vec<WorkspaceDecision>,
    /// A rollback could not be verified: the restored tree differs from the snapshot.
    #[serde(default)]
    pub rollback_unverified: bool,
}

impl WorkspaceRecord {
    /// The final decision (`keep` or `rollback`), if one was written.
    pub fn final_decision(&self) -> Option<&WorkspaceDecision> {
        self.decisions
            .iter()
            .find(|d| d.kind != DecisionKind::RollbackTo)
    }

    /// The decision written but not yet finished, if any.
    pub fn unfinished(&self) -> Option<&WorkspaceDecision> {
        self.decisions.iter().find(|d| d.finished_at_ms.is_none())
    }
}

/// A command run in the workspace and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// `command` (the agent) or `verify`.
    pub kind: String,
    /// The command line.
    pub command: String,
    /// Exit code; `None` when killed by a signal or it could not start.
    pub exit_code: Option<i32>,
    /// Whether it succeeded.
    pub success: bool,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
    /// Why it could not start or how it ended, when that needs saying.
    #[serde(default)]
    pub note: Option<String>,
    /// The last 16 KiB of its output (stdout and stderr interleaved), lossily UTF-8.
    #[serde(default)]
    pub output: Option<String>,
    /// When it ended, ms since the Unix epoch.
    pub at_ms: u64,
}

/// A named point of a run: a filesystem snapshot and the ledger position (last effect seq).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Savepoint {
    /// The name (unique within the run).
    pub name: String,
    /// The snapshot of the workspace.
    pub snapshot: String,
    /// Effects with a sequence number above this were staged after the savepoint.
    pub effect_seq: u64,
    /// When it was taken, ms since the Unix epoch.
    pub at_ms: u64,
}

/// What a workspace decision does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Keep the files; effects are held for review, or committed.
    Keep,
    /// Restore the run's starting snapshot and abort the run.
    Rollback,
    /// Restore a savepoint's snapshot and discard the effects staged after it.
    RollbackTo,
}

impl DecisionKind {
    /// The kind's name as in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::Rollback => "rollback",
            Self::RollbackTo => "rollback_to",
        }
    }
}

/// Paths changed in the workspace, relative to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// Paths that did not exist in the snapshot.
    pub added: Vec<String>,
    /// Paths whose content, mode, kind or link target changed.
    pub modified: Vec<String>,
    /// Paths of the snapshot that are gone.
    pub deleted: Vec<String>,
}

/// One durable decision over both sides of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceDecision {
    /// What it does.
    pub kind: DecisionKind,
    /// The snapshot restored (rollbacks) or the run's starting snapshot (keep).
    pub snapshot: String,
    /// The savepoint rolled back to.
    #[serde(default)]
    pub savepoint: Option<String>,
    /// For `rollback_to`: effects staged after this sequence number are discarded.
    #[serde(default)]
    pub after_seq: Option<u64>,
    /// For `keep`: commit the run (else hold the effects for review).
    #[serde(default)]
    pub commit: bool,
    /// For `keep` with `commit`: approve every undecided effect first.
    #[serde(default)]
    pub approve_all: bool,
    /// Why it was made.
    pub reason: String,
    /// Who made it.
    pub by: String,
    /// When it was written, ms since the Unix epoch.
    pub at_ms: u64,
    /// The workspace's changes against the snapshot when the decision was made.
    #[serde(default)]
    pub changes: Changes,
    /// When both sides were finished (`None` while it is being applied).
    #[serde(default)]
    pub finished_at_ms: Option<u64>,
    /// Paths that still differ from the snapshot after a rollback.
    #[serde(default)]
    pub residue: Vec<String>,
    /// How applying it ended, in words.
    #[serde(default)]
    pub outcome: Option<String>,
}

impl crate::Ledger {
    fn put_workspace(&self, run: &RunId, record: &WorkspaceRecord) -> Result<()> {
        self.workspaces.insert(run.0.as_bytes(), encode(record))?;
        Ok(())
    }

    /// The workspace of a run, if one was attached.
    pub fn workspace(&self, run: &RunId) -> Result<Option<WorkspaceRecord>> {
        match self.workspaces.get(run.0.as_bytes())? {
            Some(bytes) => Ok(Some(decode(run.0.as_bytes(), &bytes)?)),
            None => Ok(None),
        }
    }

    fn must_workspace(&self, run: &RunId) -> Result<WorkspaceRecord> {
        self.workspace(run)?.ok_or_else(|| LedgerError::NotFound {
            kind: "workspace of run",
            id: run.0.clone(),
        })
    }

    /// Attaches a workspace and its starting snapshot to a run. Attaching again returns the
    /// first record unchanged. Flushed.
    pub fn attach_workspace(
        &self,
        run: &RunId,
        record: WorkspaceRecord,
    ) -> Result<WorkspaceRecord> {
        let _guard = self.lock();
        self.must_run(run)?;
        if let Some(existing) = self.workspace(run)? {
            return Ok(existing);
        }
        self.put_workspace(run, &record)?;
        self.flush()?;
        Ok(record)
    }

    /// Records a command run in the workspace. Flushed.
    pub fn record_step(&self, run: &RunId, step: StepRecord) -> Result<WorkspaceRecord> {
        let _guard = self.lock();
        let mut record = self.must_workspace(run)?;
        record.steps.push(step);
        self.put_workspace(run, &record)?;
        self.flush()?;
        Ok(record)
    }

    /// The sequence number of the run's last staged effect (0 when none).
    pub fn last_effect_seq(&self, run: &RunId) -> Result<u64> {
        let key = format!("effects/{run}");
        Ok(self
            .counters
            .get(key.as_bytes())?
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0))
    }

    /// Adds a savepoint at the run's current ledger position. Flushed.
    ///
    /// Errors: [`Refused::RunTransition`] unless the run is open or sealed, or when the
    /// name is taken or a final decision was written.
    pub fn add_savepoint(&self, run: &RunId, name: &str, snapshot: &str) -> Result<Savepoint> {
        let _guard = self.lock();
        let state = self.must_run(run)?.state;
        let mut record = self.must_workspace(run)?;
        if !matches!(state, RunState::Open | RunState::Sealed)
            || record.final_decision().is_some()
            || record.savepoints.iter().any(|s| s.name == name)
        {
            return Err(Refused::RunTransition {
                run: run.clone(),
                state,
                action: "given this savepoint (the name is taken, or the run is decided)",
            }
            .into());
        }
        let savepoint = Savepoint {
            name: name.to_owned(),
            snapshot: snapshot.to_owned(),
            effect_seq: self.last_effect_seq(run)?,
            at_ms: now_ms(),
        };
        record.savepoints.push(savepoint.clone());
        self.put_workspace(run, &record)?;
        self.flush()?;
        Ok(savepoint)
    }

    /// Writes a workspace decision, flushed, before anything acts on it.
    ///
    /// Returns `(decision, true)` when written now. When a decision is still unfinished,
    /// or a final decision exists and `decision` is final too, returns that one and
    /// `false`: a decision is never re-made differently.
    ///
    /// Errors: [`Refused::RunTransition`] for a `rollback_to` after the final decision or
    /// when the run is not open or sealed.
    pub fn decide_workspace(
        &self,
        run: &RunId,
        decision: WorkspaceDecision,
    ) -> Result<(WorkspaceDecision, bool)> {
        let _guard = self.lock();
        let mut run_record = self.must_run(run)?;
        let mut record = self.must_workspace(run)?;
        if let Some(pending) = record.unfinished() {
            return Ok((pending.clone(), false));
        }
        if let Some(existing) = record.final_decision() {
            if decision.kind != DecisionKind::RollbackTo {
                return Ok((existing.clone(), false));
            }
        }
        let open = matches!(run_record.state, RunState::Open | RunState::Sealed);
        if decision.kind == DecisionKind::RollbackTo && (!open || record.final_decision().is_some())
        {
            return Err(Refused::RunTransition {
                run: run.clone(),
                state: run_record.state,
                action: "rolled back to a savepoint",
            }
            .into());
        }
        if decision.kind == DecisionKind::Rollback
            && !matches!(
                run_record.state,
                RunState::Open | RunState::Sealed | RunState::Aborted
            )
        {
            return Err(Refused::RunTransition {
                run: run.clone(),
                state: run_record.state,
                action: "rolled back (a commit decision was written)",
            }
            .into());
        }
        record.decisions.push(decision.clone());
        run_record.decisions.push(DecisionRecord {
            kind: format!("workspace_{}", decision.kind.as_str()),
            by: decision.by.clone(),
            at_ms: decision.at_ms,
        });
        self.put_workspace(run, &record)?;
        self.put_run(&run_record)?;
        self.flush()?;
        Ok((decision, true))
    }

    /// Marks the unfinished decision finished, with the residue found after a rollback
    /// (a non-empty residue marks the run `rollback_unverified`). Flushed.
    pub fn finish_workspace_decision(
        &self,
        run: &RunId,
        residue: Vec<String>,
        unverified: bool,
        outcome: &str,
    ) -> Result<WorkspaceRecord> {
        let _guard = self.lock();
        let mut record = self.must_workspace(run)?;
        let Some(decision) = record
            .decisions
            .iter_mut()
            .find(|d| d.finished_at_ms.is_none())
        else {
            return Ok(record);
        };
        decision.finished_at_ms = Some(now_ms());
        decision.residue = residue;
        decision.outcome = Some(outcome.to_owned());
        if unverified {
            record.rollback_unverified = true;
        }
        self.put_workspace(run, &record)?;
        self.flush()?;
        Ok(record)
    }

    /// Discards every pending (`staged` or `approved`) effect of the run staged after
    /// `after_seq`, and every effect that depends on a discarded one, whatever its seq.
    /// Earlier effects stay as they are. Idempotent. Flushed.
    ///
    /// Errors: [`Refused::RunTransition`] unless the run is open or sealed.
    pub fn discard_effects_after(
        &self,
        run: &RunId,
        after_seq: u64,
        reason: &str,
    ) -> Result<Vec<Effect>> {
        let _guard = self.lock();
        let state = self.must_run(run)?.state;
        if !matches!(state, RunState::Open | RunState::Sealed) {
            return Err(Refused::RunTransition {
                run: run.clone(),
                state,
                action: "rolled back to a savepoint",
            }
            .into());
        }
        let effects = self.effects_unlocked(run)?;
        let mut gone: std::collections::HashSet<EffectId> = effects
            .iter()
            .filter(|e| e.seq > after_seq)
            .map(|e| e.id.clone())
            .collect();
        // Dependents of anything gone are gone too (closure over effect -> effect lineage).
        loop {
            let before = gone.len();
            for effect in &effects {
                if effect.depends_on.iter().any(|d| gone.contains(&d.effect)) {
                    gone.insert(effect.id.clone());
                }
            }
            if gone.len() == before {
                break;
            }
        }
        let mut discarded = Vec::new();
        for mut effect in effects {
            if gone.contains(&effect.id) && effect.state.can_become(EffectState::Discarded) {
                effect.state = EffectState::Discarded;
                effect.state_reason = Some(reason.to_owned());
                effect.decisions.push(DecisionRecord {
                    kind: "discard".into(),
                    by: "rollback_to".into(),
                    at_ms: now_ms(),
                });
                self.put_effect(&effect)?;
                discarded.push(effect);
            }
        }
        self.flush()?;
        Ok(discarded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ledger, NewEffect, Verdict};

    fn stage(ledger: &Ledger, run: &RunId, url: &str) -> Effect {
        ledger
            .stage(NewEffect {
                run_id: run,
                method: "POST",
                url,
                headers: Vec::new(),
                body: b"x",
                rule: None,
                policy_revision: "r",
                placeholders: Vec::new(),
                depends_on: Vec::new(),
                inject: None,
            })
            .expect("stage")
    }

    fn attach(ledger: &Ledger, run: &RunId) {
        ledger
            .attach_workspace(
                run,
                WorkspaceRecord {
                    path: "/ws".into(),
                    driver: "dir".into(),
                    snapshot: "snap_0".into(),
                    created_at_ms: 0,
                    steps: Vec::new(),
                    savepoints: Vec::new(),
                    decisions: Vec::new(),
                    rollback_unverified: false,
                },
            )
            .expect("attach");
    }

    fn decision(kind: DecisionKind) -> WorkspaceDecision {
        WorkspaceDecision {
            kind,
            snapshot: "snap_0".into(),
            savepoint: None,
            after_seq: None,
            commit: false,
            approve_all: false,
            reason: "test".into(),
            by: "test".into(),
            at_ms: now_ms(),
            changes: Changes::default(),
            finished_at_ms: None,
            residue: Vec::new(),
            outcome: None,
        }
    }

    #[test]
    fn savepoint_marks_the_position_and_discard_after_keeps_earlier_effects() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(dir.path()).expect("open");
        let run = ledger.create_run(None).expect("run").id;
        attach(&ledger, &run);
        let first = stage(&ledger, &run, "https://a/1");
        let savepoint = ledger
            .add_savepoint(&run, "s1", "snap_1")
            .expect("savepoint");
        assert_eq!(savepoint.effect_seq, 1);
        assert!(
            ledger.add_savepoint(&run, "s1", "snap_2").is_err(),
            "names are unique"
        );
        let second = stage(&ledger, &run, "https://a/2");
        let third = stage(&ledger, &run, "https://a/3");
        ledger
            .decide_effect(&third.id, Verdict::Reject, "t")
            .expect("reject");
        let discarded = ledger
            .discard_effects_after(&run, savepoint.effect_seq, "rolled back")
            .expect("discard");
        assert_eq!(discarded.len(), 1, "the rejected one stays rejected");
        let states: Vec<EffectState> = ledger
            .effects(&run)
            .expect("effects")
            .iter()
            .map(|e| e.state)
            .collect();
        assert_eq!(
            states,
            [
                EffectState::Staged,
                EffectState::Discarded,
                EffectState::Rejected
            ]
        );
        assert_eq!(discarded[0].id, second.id);
        assert_ne!(first.id, second.id);
    }

    #[test]
    fn a_written_decision_is_never_remade_differently() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(dir.path()).expect("open");
        let run = ledger.create_run(None).expect("run").id;
        attach(&ledger, &run);
        let (first, fresh) = ledger
            .decide_workspace(&run, decision(DecisionKind::Rollback))
            .expect("decide");
        assert!(fresh);
        // Unfinished: asking for keep returns the rollback.
        let (again, fresh) = ledger
            .decide_workspace(&run, decision(DecisionKind::Keep))
            .expect("decide again");
        assert!(!fresh);
        assert_eq!(again, first);
        let record = ledger
            .finish_workspace_decision(&run, vec!["left behind: x".into()], true, "done")
            .expect("finish");
        assert!(record.rollback_unverified);
        // Finished: still the same decision, and no rollback to a savepoint after it.
        let (later, fresh) = ledger
            .decide_workspace(&run, decision(DecisionKind::Keep))
            .expect("decide later");
        assert!(!fresh);
        assert_eq!(later.kind, DecisionKind::Rollback);
        assert!(ledger
            .decide_workspace(&run, decision(DecisionKind::RollbackTo))
            .is_err());
        assert_eq!(
            ledger
                .workspace(&run)
                .expect("read")
                .expect("some")
                .decisions
                .len(),
            1
        );
    }
}
