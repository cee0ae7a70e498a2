//! The model test: random operation sequences run against two stores (a backend and the
//! in-memory model) must give the same answers. Identifiers, tokens, placeholder values
//! and timestamps are random or clock-bound, so answers are compared after
//! [`Normalizer`] renames each by order of first appearance and zeroes the times.

use std::collections::HashMap;

use serde_json::Value;

use super::contracts::{new_denial, new_effect, new_read, new_workspace};
use crate::{
    Changes, DecisionKind, Delivery, Dependency, EdgeKind, EffectId, EffectLineage, EffectState,
    Lease, LedgerError, PlaceholderSpec, ReadContent, ReleaseOutcome, RunFlag, RunId, Settlement,
    StepRecord, Store, ValueKind, Verdict, WorkspaceDecision,
};

mod normalize;
mod ops;

pub use normalize::Normalizer;
use normalize::{answer, sorted};
pub use ops::{operations, Op};

/// The TTL of the model test's leases: none expires during a test.
const LEASE_TTL_MS: u64 = 3_600_000;

/// The run token key of every model run (tokens are derived from it).
fn tokens() -> crate::RunTokens {
    crate::RunTokens::from_key([3; 32])
}

/// Runs `ops` against both stores (each fresh) and compares every answer after
/// normalisation. Returns the first difference, described.
pub fn same_answers(a: &dyn Store, b: &dyn Store, ops: &[Op]) -> Result<(), String> {
    let mut left = Driver::new(a);
    let mut right = Driver::new(b);
    for (i, op) in ops.iter().enumerate() {
        let (x, y) = (left.apply(op), right.apply(op));
        if x != y {
            return Err(format!(
                "operation {i} {op:?} answered differently:\n  {x}\n  {y}"
            ));
        }
    }
    Ok(())
}

/// One store, the ids it handed out, and the renaming of its answers.
struct Driver<'a> {
    store: &'a dyn Store,
    runs: Vec<(RunId, String)>,
    effects: Vec<(EffectId, Option<String>)>,
    /// Every lease granted, per run, oldest first.
    leases: HashMap<RunId, Vec<Lease>>,
    names: Normalizer,
}

impl<'a> Driver<'a> {
    fn new(store: &'a dyn Store) -> Self {
        Self {
            store,
            runs: Vec::new(),
            effects: Vec::new(),
            leases: HashMap::new(),
            names: Normalizer::default(),
        }
    }

    fn run(&self, index: usize) -> RunId {
        match self.runs.len() {
            0 => RunId("run_00000000000000000000000000".into()),
            n => self.runs[index % n].0.clone(),
        }
    }

    fn effect(&self, index: usize) -> EffectId {
        match self.effects.len() {
            0 => EffectId("eff_00000000000000000000000000".into()),
            n => self.effects[index % n].0.clone(),
        }
    }

    /// The lease of `run` granted `back` grants before its newest, or a made-up one
    /// (token 0) when there is none.
    fn lease_of(&self, run: &RunId, back: u8) -> Lease {
        self.leases
            .get(run)
            .and_then(|all| all.iter().rev().nth(usize::from(back)))
            .cloned()
            .unwrap_or_else(|| Lease {
                run: run.clone(),
                holder: "nobody".into(),
                token: 0,
                expires_at_ms: 0,
            })
    }

    /// The run of `effect` (a made-up one for an unknown effect).
    fn run_of(&self, effect: &EffectId) -> RunId {
        self.store
            .effect(effect)
            .ok()
            .flatten()
            .map_or_else(|| self.run(0), |e| e.run_id)
    }

    fn apply(&mut self, op: &Op) -> Value {
        let store = self.store;
        let answer = match op {
            Op::CreateRun => {
                let run = store.create_run(Some("p".into()));
                if let Ok(run) = &run {
                    self.runs
                        .push((run.id.clone(), tokens().token_for(&run.id)));
                }
                answer(run)
            }
            Op::Stage {
                run,
                body,
                numbers,
                strings,
                depends_on,
            } => {
                let run = self.run(*run);
                let body = vec![b'a' + body; 3];
                let mut specs = Vec::new();
                for i in 0..*numbers {
                    specs.push(PlaceholderSpec {
                        pointer: format!("/n{i}"),
                        kind: ValueKind::Number,
                    });
                }
                for i in 0..*strings {
                    specs.push(PlaceholderSpec {
                        pointer: format!("/s{i}"),
                        kind: ValueKind::String,
                    });
                }
                let mut new = new_effect(&run, &body, specs);
                if let (Some(parent), false) = (depends_on, self.effects.is_empty()) {
                    let (effect, value) = &self.effects[parent % self.effects.len()];
                    new.depends_on.push(Dependency {
                        effect: effect.clone(),
                        value: value.clone().unwrap_or_else(|| "none".into()),
                        found_in: "body".into(),
                    });
                }
                let effect = store.stage(new);
                if let Ok(effect) = &effect {
                    let first = effect.placeholders.first().map(|p| p.value.clone());
                    self.effects.push((effect.id.clone(), first));
                }
                answer(effect)
            }
            Op::Decide { effect, approve } => {
                let verdict = if *approve {
                    Verdict::Approve
                } else {
                    Verdict::Reject
                };
                answer(store.decide_effect(&self.effect(*effect), verdict, "alice"))
            }
            Op::Seal { run } => answer(store.seal(&self.run(*run), "t")),
            Op::BeginCommit {
                run,
                approve_pending,
            } => answer(store.begin_commit(&self.run(*run), *approve_pending, "t")),
            Op::FinishCommit { run } => answer(store.finish_commit(&self.run(*run))),
            Op::Abort { run } => answer(store.abort(&self.run(*run), "t")),
            Op::MarkReleasing { effect } => answer(store.mark_releasing(&self.effect(*effect))),
            Op::RecordRelease {
                effect,
                ok,
                delivery,
            } => answer(store.record_release(
                &self.effect(*effect),
                ReleaseOutcome {
                    status: Some(if *ok { 201 } else { 500 }),
                    body: b"done",
                    body_len: 4,
                    error: (!ok).then(|| "origin said 500".into()),
                    delivery: match delivery {
                        0 => Delivery::Answered,
                        1 => Delivery::NotSent,
                        _ => Delivery::Unanswered,
                    },
                    ..ReleaseOutcome::default()
                },
            )),
            Op::Retry { effect } => answer(store.retry(&self.effect(*effect), "alice")),
            Op::Settle {
                effect,
                delivered,
                value,
            } => {
                // Values name the first number placeholder (`/n0`), an unknown one, or
                // are not a number.
                let values = match value {
                    None => Vec::new(),
                    Some(0) => vec![("/n0".to_owned(), "42".to_owned())],
                    Some(1) => vec![("/nope".to_owned(), "42".to_owned())],
                    Some(_) => vec![("/n0".to_owned(), "x".to_owned())],
                };
                answer(store.settle(
                    &self.effect(*effect),
                    &Settlement {
                        delivered: *delivered,
                        note: Some("checked".into()),
                        values,
                    },
                    "alice",
                ))
            }
            Op::SettleUnsent { effect, skipped } => {
                let to = if *skipped {
                    EffectState::Skipped
                } else {
                    EffectState::Failed
                };
                answer(store.settle_unsent(&self.effect(*effect), to, "unsent"))
            }
            Op::Recover => sorted(self.names.normalize(answer(store.recover()))),
            Op::FlagRun { run } => answer(store.flag_run(
                &self.run(*run),
                RunFlag {
                    code: "c".into(),
                    detail: "d".into(),
                    at_ms: 1,
                },
            )),
            Op::Authenticate { run, right } => {
                let id = self.run(*run);
                let token = match (right, self.runs.iter().find(|(r, _)| *r == id)) {
                    (true, Some((_, token))) => token.clone(),
                    _ => "wrong".into(),
                };
                answer(store.authenticate(&tokens(), id.as_str(), &token))
            }
            Op::JournalRead { run } => {
                answer(store.journal_read(new_read(&self.run(*run), "https://r/")))
            }
            Op::JournalReads { runs } => {
                let reads = runs
                    .iter()
                    .map(|r| new_read(&self.run(*r), "https://b/"))
                    .collect();
                answer(store.journal_reads(reads))
            }
            Op::JournalDenial { run } => answer(store.journal_denial(new_denial(&self.run(*run)))),
            Op::StoreReadContent {
                run,
                seq,
                fingerprints,
            } => {
                let mut fingerprints = fingerprints.clone();
                fingerprints.sort_unstable();
                let content = ReadContent::not_analysed(*seq, "test".into());
                answer(store.store_read_content(&self.run(*run), &content, &fingerprints))
            }
            Op::StoreEffectLineage { effect } => {
                let lineage = EffectLineage {
                    analyzed_at_ms: 1,
                    fingerprints: 2,
                    truncated: false,
                    skipped: None,
                    edges: vec![crate::Edge {
                        from: crate::EdgeSource::Read { seq: 1 },
                        to: self.effect(*effect),
                        kind: EdgeKind::Content,
                        overlap_bytes: 3,
                        overlap_permille: 500,
                        excerpt: None,
                        detail: None,
                    }],
                    incomplete_reads: Vec::new(),
                };
                answer(store.store_effect_lineage(&self.effect(*effect), &lineage))
            }
            Op::AttachWorkspace { run } => {
                answer(store.attach_workspace(&self.run(*run), new_workspace()))
            }
            Op::RecordStep { run } => answer(store.record_step(
                &self.run(*run),
                StepRecord {
                    kind: "command".into(),
                    command: "true".into(),
                    exit_code: Some(0),
                    success: true,
                    duration_ms: 1,
                    note: None,
                    output: None,
                    containment: None,
                    at_ms: 1,
                },
            )),
            Op::AddSavepoint { run, name } => {
                answer(store.add_savepoint(&self.run(*run), &format!("s{name}"), "snap_1"))
            }
            Op::DecideWorkspace {
                run,
                kind,
                after_seq,
            } => {
                let kind = [
                    DecisionKind::Keep,
                    DecisionKind::Rollback,
                    DecisionKind::RollbackTo,
                ][usize::from(*kind) % 3];
                answer(store.decide_workspace(
                    &self.run(*run),
                    WorkspaceDecision {
                        kind,
                        snapshot: "snap_0".into(),
                        savepoint: None,
                        after_seq: (kind == DecisionKind::RollbackTo).then_some(*after_seq),
                        commit: false,
                        approve_all: false,
                        reason: "test".into(),
                        by: "t".into(),
                        at_ms: 1,
                        changes: Changes::default(),
                        finished_at_ms: None,
                        residue: Vec::new(),
                        outcome: None,
                        notes: Vec::new(),
                    },
                ))
            }
            Op::FinishWorkspaceDecision { run, unverified } => {
                answer(store.finish_workspace_decision(
                    &self.run(*run),
                    vec!["x".into()],
                    *unverified,
                    "done",
                ))
            }
            Op::DiscardEffectsAfter { run, after_seq } => {
                answer(store.discard_effects_after(&self.run(*run), *after_seq, "rolled back"))
            }
            Op::AcquireLease { run, holder } => {
                let run = self.run(*run);
                let granted = store.acquire_lease(&run, &format!("h{holder}"), LEASE_TTL_MS);
                if let Ok((lease, _)) = &granted {
                    self.leases.entry(run).or_default().push(lease.clone());
                }
                answer(granted.map(|(lease, recovered)| {
                    serde_json::json!({
                        "holder": lease.holder,
                        "number": lease.token,
                        "recovered": recovered,
                    })
                }))
            }
            Op::GiveUpLease { run, back } => {
                answer(store.give_up_lease(&self.lease_of(&self.run(*run), *back)))
            }
            Op::MarkReleasingFenced { effect, back } => {
                let id = self.effect(*effect);
                let lease = self.lease_of(&self.run_of(&id), *back);
                answer(store.mark_releasing_fenced(&id, &lease))
            }
            Op::RecordReleaseFenced { effect, ok, back } => {
                let id = self.effect(*effect);
                let lease = self.lease_of(&self.run_of(&id), *back);
                answer(store.record_release_fenced(
                    &id,
                    ReleaseOutcome {
                        status: Some(if *ok { 201 } else { 500 }),
                        body: b"fenced",
                        body_len: 6,
                        error: (!ok).then(|| "origin said 500".into()),
                        ..ReleaseOutcome::default()
                    },
                    &lease,
                ))
            }
            Op::SettleUnsentFenced { effect, back } => {
                let id = self.effect(*effect);
                let lease = self.lease_of(&self.run_of(&id), *back);
                answer(store.settle_unsent_fenced(&id, EffectState::Skipped, "unsent", &lease))
            }
            Op::FinishCommitFenced { run, back } => {
                let run = self.run(*run);
                let lease = self.lease_of(&run, *back);
                answer(store.finish_commit_fenced(&run, &lease))
            }
            Op::Query { run } => {
                let run = self.run(*run);
                let effects = store.effects(&run);
                let bodies: Vec<Value> = effects
                    .iter()
                    .flatten()
                    .map(|e| answer(store.body(&e.body_digest)))
                    .collect();
                let lineage: Vec<Value> = effects
                    .iter()
                    .flatten()
                    .map(|e| answer(store.effect_lineage(&e.id)))
                    .collect();
                Value::Array(vec![
                    answer(store.run(&run)),
                    answer(effects),
                    Value::Array(bodies),
                    Value::Array(lineage),
                    answer(store.reads(&run)),
                    answer(store.denials(&run)),
                    answer(store.read_contents(&run)),
                    answer(store.edges(&run)),
                    answer(store.workspace(&run)),
                    answer(store.last_effect_seq(&run)),
                    answer(store.lease(&run).map(|l| l.map(|l| (l.holder, l.token)))),
                    sorted(self.names.normalize(answer(store.placeholders(&run)))),
                ])
            }
            Op::Runs => sorted(self.names.normalize(answer(store.runs()))),
            Op::Prune { run } => answer(store.prune_run(&self.run(*run))),
            Op::RunsPaged {
                limit,
                newest_first,
            } => {
                // Runs created in one millisecond sort in random order, so the pages of
                // two stores hold different runs: compare what all pages hold together.
                let mut seen = Vec::new();
                let mut after = None;
                loop {
                    let page = store.runs_page(&crate::RunPage {
                        after: after.clone(),
                        limit: *limit,
                        newest_first: *newest_first,
                    });
                    let Ok(page) = page else {
                        break;
                    };
                    let full = page.len() == *limit;
                    after = page.last().map(|r| r.id.clone());
                    seen.extend(page);
                    if !full {
                        break;
                    }
                }
                sorted(self.names.normalize(answer(Ok::<_, LedgerError>(seen))))
            }
        };
        self.names.normalize(answer)
    }
}
