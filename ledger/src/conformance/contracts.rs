//! Contract tests per concern: durable on return, `mark_releasing` at most once, gap-free
//! per-run sequence numbers, refused transitions change nothing, change notifications.

use std::sync::mpsc::Receiver;
use std::sync::Arc;

use super::Backend;
use crate::{
    Change, Denial, EffectState, LedgerError, NewEffect, PlaceholderSpec, Read, ReleaseOutcome,
    RunId, Store, ValueKind, Verdict, WorkspaceRecord,
};

/// Runs every contract test against `backend`.
pub fn all(backend: &mut dyn Backend) {
    durable_on_return(backend);
    mark_releasing_at_most_once(backend);
    sequence_numbers_are_gap_free_per_run(backend);
    refusals_change_nothing(backend);
    changes_are_announced(backend);
    callable_through_dyn_store(backend);
    placeholder_count_is_the_list_length_on_a_shared_store(backend);
    super::outcomes::all(backend);
    super::retention::all(backend);
    super::leases::all(backend);
    super::audit::all(backend);
}

/// A new effect of `run` with `body` and the given placeholders.
pub fn new_effect<'a>(
    run: &'a RunId,
    body: &'a [u8],
    placeholders: Vec<PlaceholderSpec>,
) -> NewEffect<'a> {
    NewEffect {
        run_id: run,
        method: "POST",
        url: "https://example.com:443/hook",
        headers: Vec::new(),
        body,
        rule: Some("hooks"),
        policy_revision: "r1",
        placeholders,
        depends_on: Vec::new(),
        inject: None,
    }
}

/// A read of `run` (sequence number assigned by the store).
pub fn new_read(run: &RunId, url: &str) -> Read {
    Read {
        run_id: run.clone(),
        seq: 0,
        method: "GET".into(),
        url: url.into(),
        status: Some(200),
        request_bytes: 0,
        response_bytes: 3,
        response_digest: None,
        rule: None,
        created_at_ms: 1,
        error: None,
        audit: Vec::new(),
        labels: Vec::new(),
    }
}

/// A denial of `run` (sequence number assigned by the store).
pub fn new_denial(run: &RunId) -> Denial {
    Denial {
        run_id: run.clone(),
        seq: 0,
        method: "GET".into(),
        url: "https://denied.example/".into(),
        has_body: false,
        rule: None,
        reason_code: "default_deny".into(),
        policy_revision: "r1".into(),
        created_at_ms: 1,
    }
}

/// A workspace record in directory `/ws` with snapshot `snap_0`.
pub fn new_workspace() -> WorkspaceRecord {
    WorkspaceRecord {
        path: "/ws".into(),
        driver: "dir".into(),
        snapshot: "snap_0".into(),
        created_at_ms: 1,
        steps: Vec::new(),
        savepoints: Vec::new(),
        decisions: Vec::new(),
        rollback_unverified: false,
        snapshot_notes: Vec::new(),
    }
}

/// What every durable method wrote is there after the store is dropped and reopened.
pub fn durable_on_return(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let run = store.create_run(Some("p".into())).expect("create run");
    let staged = store
        .stage(new_effect(&run.id, b"{\"a\":1}", Vec::new()))
        .expect("stage");
    let other = store
        .stage(new_effect(&run.id, b"{\"b\":2}", Vec::new()))
        .expect("stage");
    let approved = store
        .approve_explicitly(&staged.id, "alice", &["no-secrets-out".to_owned()])
        .expect("approve");
    let approval = approved.approval.as_ref().expect("approval");
    assert!(approval.explicit);
    assert_eq!(approval.flows, ["no-secrets-out"]);
    store
        .decide_effect(&other.id, Verdict::Reject, "alice")
        .expect("reject");
    store
        .attach_workspace(&run.id, new_workspace())
        .expect("attach");
    let (_, committing) = store.begin_commit(&run.id, false, "admin").expect("commit");
    assert!(committing);
    store.mark_releasing(&staged.id).expect("releasing");
    let before_effects = store.effects(&run.id).expect("effects");
    let before_run = store.run(&run.id).expect("run");
    let before_workspace = store.workspace(&run.id).expect("workspace");
    drop(store);
    let store = backend.reopen();
    assert_eq!(store.run(&run.id).expect("run"), before_run);
    assert_eq!(store.effects(&run.id).expect("effects"), before_effects);
    assert_eq!(
        store.workspace(&run.id).expect("workspace"),
        before_workspace
    );
    assert_eq!(
        store.body(&staged.body_digest).expect("body").as_deref(),
        Some(&b"{\"a\":1}"[..])
    );
    let recovered = store.recover().expect("recover");
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].state, EffectState::Unknown);
}

/// Only the first `mark_releasing` of an effect succeeds, even from several threads.
pub fn mark_releasing_at_most_once(backend: &mut dyn Backend) {
    let store: Arc<dyn Store> = Arc::from(backend.fresh());
    let run = store.create_run(None).expect("run");
    let effect = store
        .stage(new_effect(&run.id, b"x", Vec::new()))
        .expect("stage");
    store
        .decide_effect(&effect.id, Verdict::Approve, "t")
        .expect("approve");
    store.begin_commit(&run.id, false, "t").expect("commit");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let store = Arc::clone(&store);
            let id = effect.id.clone();
            std::thread::spawn(move || store.mark_releasing(&id).is_ok())
        })
        .collect();
    let wins = threads
        .into_iter()
        .map(|t| t.join().expect("no panic"))
        .filter(|won| *won)
        .count();
    assert_eq!(wins, 1, "mark_releasing succeeds exactly once");
    let err = store.mark_releasing(&effect.id).expect_err("again");
    assert!(matches!(err, LedgerError::Refused(_)), "{err}");
    store
        .record_release(
            &effect.id,
            ReleaseOutcome {
                status: Some(201),
                ..ReleaseOutcome::default()
            },
        )
        .expect("released");
    assert!(store.mark_releasing(&effect.id).is_err());
}

/// Effects, reads and denials are numbered 1, 2, 3 … per run, with no gaps, also when
/// journaled from several threads and in batches.
pub fn sequence_numbers_are_gap_free_per_run(backend: &mut dyn Backend) {
    let store: Arc<dyn Store> = Arc::from(backend.fresh());
    let a = store.create_run(None).expect("run").id;
    let b = store.create_run(None).expect("run").id;
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let store = Arc::clone(&store);
            let (a, b) = (a.clone(), b.clone());
            std::thread::spawn(move || {
                for j in 0..5 {
                    let run = if (i + j) % 2 == 0 { &a } else { &b };
                    store
                        .stage(new_effect(run, format!("{i}-{j}").as_bytes(), Vec::new()))
                        .expect("stage");
                    store
                        .journal_read(new_read(run, "https://r/"))
                        .expect("read");
                    store
                        .journal_reads(vec![new_read(&a, "https://x/"), new_read(&b, "https://y/")])
                        .expect("reads");
                    store.journal_denial(new_denial(run)).expect("denial");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("no panic");
    }
    for run in [&a, &b] {
        let seqs: Vec<u64> = store
            .effects(run)
            .expect("effects")
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
        assert_eq!(store.last_effect_seq(run).expect("last"), seqs.len() as u64);
        let reads: Vec<u64> = store
            .reads(run)
            .expect("reads")
            .iter()
            .map(|r| r.seq)
            .collect();
        assert_eq!(reads, (1..=reads.len() as u64).collect::<Vec<_>>());
        let denials: Vec<u64> = store
            .denials(run)
            .expect("denials")
            .iter()
            .map(|d| d.seq)
            .collect();
        assert_eq!(denials, (1..=denials.len() as u64).collect::<Vec<_>>());
    }
    assert_eq!(
        store.effects(&a).expect("a").len() + store.effects(&b).expect("b").len(),
        20
    );
}

/// A refused request leaves every record as it was.
pub fn refusals_change_nothing(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let run = store.create_run(None).expect("run").id;
    let staged = store
        .stage(new_effect(&run, b"x", Vec::new()))
        .expect("stage");
    let snapshot = |store: &dyn Store| {
        (
            store.run(&run).expect("run"),
            store.effects(&run).expect("effects"),
        )
    };
    let before = snapshot(&*store);
    let refusals = [
        store.begin_commit(&run, false, "t").map(|_| ()),
        store.mark_releasing(&staged.id).map(|_| ()),
        store
            .settle_unsent(&staged.id, EffectState::Released, "no")
            .map(|_| ()),
    ];
    for (i, result) in refusals.into_iter().enumerate() {
        assert!(
            matches!(result, Err(LedgerError::Refused(_))),
            "request {i} must be refused"
        );
    }
    // Not a refusal: finishing the commit of an open run leaves it alone.
    store.finish_commit(&run).expect("finish_commit");
    assert_eq!(snapshot(&*store), before);
    store.abort(&run, "t").expect("abort");
    let aborted = snapshot(&*store);
    assert!(matches!(
        store.decide_effect(&staged.id, Verdict::Approve, "t"),
        Err(LedgerError::Refused(_))
    ));
    assert!(matches!(
        store.seal(&run, "t"),
        Err(LedgerError::Refused(_))
    ));
    assert!(matches!(
        store.stage(new_effect(&run, b"y", Vec::new())),
        Err(LedgerError::Refused(_))
    ));
    assert_eq!(snapshot(&*store), aborted);
    assert_eq!(store.last_effect_seq(&run).expect("last"), 1);
}

fn drain(changes: &Receiver<Change>) -> Vec<Change> {
    changes.try_iter().collect()
}

/// Durable writes announce their changes to subscribers, in order.
pub fn changes_are_announced(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let changes = store.subscribe();
    let run = store.create_run(None).expect("run").id;
    assert_eq!(drain(&changes), [Change::RunChanged(run.clone())]);
    let effect = store
        .stage(new_effect(
            &run,
            b"x",
            vec![PlaceholderSpec {
                pointer: "/id".into(),
                kind: ValueKind::Number,
            }],
        ))
        .expect("stage");
    let effect_changed = Change::EffectChanged {
        run: run.clone(),
        effect: effect.id.clone(),
    };
    assert_eq!(
        drain(&changes),
        [
            effect_changed.clone(),
            Change::PlaceholdersIssued(run.clone())
        ]
    );
    store
        .attach_workspace(&run, new_workspace())
        .expect("attach");
    assert_eq!(drain(&changes), [Change::WorkspaceChanged(run.clone())]);
    store.begin_commit(&run, true, "t").expect("commit");
    assert_eq!(
        drain(&changes),
        [
            effect_changed,
            Change::RunChanged(run.clone()),
            Change::RunClosed(run.clone())
        ]
    );
    // A refusal announces nothing; a second subscriber sees only what follows.
    let later = store.subscribe();
    assert!(store.abort(&run, "t").is_err());
    let other = store.create_run(None).expect("run").id;
    store.abort(&other, "t").expect("abort");
    let expected = [
        Change::RunChanged(other.clone()),
        Change::RunChanged(other.clone()),
        Change::RunClosed(other.clone()),
    ];
    assert_eq!(drain(&changes), expected);
    assert_eq!(drain(&later), expected);
}

/// Every method is callable on `Arc<dyn Store>` without importing the concern traits.
pub fn callable_through_dyn_store(backend: &mut dyn Backend) {
    let store: Arc<dyn Store> = Arc::from(backend.fresh());
    let run = store.create_run(None).expect("run");
    let tokens = crate::RunTokens::from_key([1; 32]);
    assert!(store
        .authenticate(&tokens, run.id.as_str(), &tokens.token_for(&run.id))
        .expect("authenticate")
        .is_some());
    assert!(store
        .authenticate(&tokens, run.id.as_str(), "wrong")
        .expect("authenticate")
        .is_none());
    assert_eq!(store.hash_plaintext_tokens(&tokens).expect("hash"), 0);
    assert!(store.edges(&run.id).expect("edges").is_empty());
    assert!(store
        .placeholders(&run.id)
        .expect("placeholders")
        .is_empty());
    store.flush().expect("flush");
    store.size_on_disk().expect("size");
}

/// A shared store counts a run's placeholders as its list holds them (0 for an unknown
/// run); a store with one writer answers `None` and reads nothing.
pub fn placeholder_count_is_the_list_length_on_a_shared_store(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let run = store.create_run(None).expect("run").id;
    let check = |run: &RunId| {
        let count = store.placeholder_count(run).expect("count");
        if store.placeholders_shared() {
            let listed = store.placeholders(run).expect("placeholders").len() as u64;
            assert_eq!(count, Some(listed));
        } else {
            assert_eq!(count, None);
        }
    };
    check(&run);
    check(&RunId("run_unknown".into()));
    for kind in [ValueKind::Number, ValueKind::String, ValueKind::Sha1] {
        let spec = PlaceholderSpec {
            pointer: "/id".into(),
            kind,
        };
        store
            .stage(new_effect(&run, b"x", vec![spec.clone(), spec]))
            .expect("stage");
        check(&run);
    }
}
