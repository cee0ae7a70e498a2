//! The workspace side of a run (`airlock run`): its snapshot, the commands run, savepoints,
//! and the one decision that keeps or rolls back files and effects together.
//!
//! A decision is written (flushed) before anything acts on it; whoever finds it unfinished
//! (a restart, `airlock run --resume`, `airlock runs show`) finishes it the same way. A run
//! has at most one final decision (`keep` or `rollback`); `rollback_to` a savepoint may
//! happen any number of times before it.

use serde::{Deserialize, Serialize};

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
    /// What the starting snapshot recorded without capturing it whole, one `PATH: why`
    /// each: a socket or device node (never recreated by a rollback), a file that could
    /// not be read or changed while being read, a directory that could not be listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshot_notes: Vec<String>,
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
    /// How the command reached the network (`airlock run --network`), when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<Containment>,
    /// When it ended, ms since the Unix epoch.
    pub at_ms: u64,
}

/// How a step's command was contained (docs/containment.md), as `airlock run` recorded it.
/// Counts come from airlock's side of the fence socket, except the relay's failures.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Containment {
    /// `isolated`, `env` or `offline`.
    pub network: String,
    /// Why this mode, when it was not asked for (`env` where no fence can be made).
    pub note: Option<String>,
    /// Time to set the fence up before the command started, in microseconds.
    pub setup_us: Option<u64>,
    /// Connections of the proxy variables carried over the fence.
    pub proxy_connections: u64,
    /// Captured connections airlock took.
    pub connections_captured: u64,
    /// Captured connections refused (an address airlock's DNS never gave; a denied host).
    pub connections_refused: u64,
    /// DNS queries answered.
    pub dns_answered: u64,
    /// DNS queries refused (NXDOMAIN or REFUSED), each journaled as a denial.
    pub dns_refused: u64,
    /// Connections and queries the relay dropped because airlock could not be reached.
    pub relay_failures: u64,
    /// Connections and queries the relay inside the fence dropped at its own limits (out
    /// of descriptors, or past the connections it carries at once).
    pub relay_limited: u64,
    /// Connections (proxy, captured, DNS) airlock closed because the run held
    /// `--max-connections-per-run` connections.
    pub connections_limited: u64,
    /// DNS connections airlock closed after going idle without a query.
    pub dns_idle_closed: u64,
    /// DNS queries airlock left unanswered: past `--dns-queries-per-second`.
    pub dns_rate_limited: u64,
    /// Processes still running in the fence when the command ended; all were killed.
    pub left_running: Vec<LeftRunning>,
    /// As an ordinary user: why the overlays over the host's filesystems could not be
    /// made for this step (the kernel's error), so what it wrote outside the workspace
    /// reached the host as the user (docs/containment.md, "A user's fence"). Absent when
    /// they were made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside_unavailable: Option<String>,
}

/// A process a fenced command left running (and the fence killed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LeftRunning {
    /// Its PID inside the fence.
    pub pid: u32,
    /// Its command line.
    pub command: String,
    /// `IP:PORT` of the TCP sockets it listened on.
    pub listening: Vec<String>,
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
    /// What the decision could not see or will not restore whole, one line each: the
    /// notes of the snapshot it restores or compares with (`PATH: why`), what the diff
    /// could not read now, and a diff step that failed or timed out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{now_ms, Effect, EffectState, RunId};
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
                    snapshot_notes: Vec::new(),
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
            notes: Vec::new(),
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
