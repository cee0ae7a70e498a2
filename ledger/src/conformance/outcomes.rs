//! Contract tests of the ways out of a doubtful or failed release: `retry` and `settle`
//! (docs/design.md, "Outcomes of a release"). Every backend gives the same answers, writes
//! effects and run together, keeps them across a reopen, and refuses without change.

use super::contracts::new_effect;
use super::Backend;
use crate::outcome::kinds;
use crate::{
    Delivery, Dependency, EffectNotes, EffectState, Header, HeaderText, IdempotencySpec,
    LedgerError, PlaceholderSpec, Refused, ReleaseOutcome, RunState, Settlement, ValueKind,
};

/// Runs every outcome contract against `backend`.
pub fn all(backend: &mut dyn Backend) {
    retry_only_what_provably_was_not_sent(backend);
    settle_records_who_and_requeues_dependents(backend);
    idempotency_keys_are_fixed_at_staging(backend);
}

fn failed_release(delivery: Delivery) -> ReleaseOutcome<'static> {
    ReleaseOutcome {
        error: Some("no answer".into()),
        delivery,
        ..ReleaseOutcome::default()
    }
}

fn refused_code(result: Result<impl std::fmt::Debug, LedgerError>) -> &'static str {
    match result {
        Err(LedgerError::Refused(refused)) => refused.code(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A release that provably sent nothing is `failed` and retriable; one the origin
/// answered with an error is `failed` and not retriable; one that may have reached the
/// origin is `unknown`. A retry requeues the skipped dependents, resumes the commit, is
/// refused a second time during the attempt, and survives a reopen.
pub fn retry_only_what_provably_was_not_sent(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let run = store.create_run(None).expect("run").id;
    let number = PlaceholderSpec {
        pointer: "/number".into(),
        kind: ValueKind::Number,
    };
    let parent = store
        .stage(new_effect(&run, b"parent", vec![number]))
        .expect("stage");
    let mut child = new_effect(&run, b"child", Vec::new());
    child.depends_on.push(Dependency {
        effect: parent.id.clone(),
        value: parent.placeholders[0].value.clone(),
        found_in: "body".into(),
    });
    let child = store.stage(child).expect("stage");
    let refused = store
        .stage(new_effect(&run, b"refused", Vec::new()))
        .expect("stage");
    store.begin_commit(&run, true, "admin").expect("commit");
    store.mark_releasing(&parent.id).expect("releasing");
    let failed = store
        .record_release(&parent.id, failed_release(Delivery::NotSent))
        .expect("record");
    assert_eq!(
        (failed.state, failed.retriable),
        (EffectState::Failed, true)
    );
    store
        .settle_unsent(&child.id, EffectState::Skipped, "parent failed")
        .expect("skip");
    store.mark_releasing(&refused.id).expect("releasing");
    let answered = store
        .record_release(
            &refused.id,
            ReleaseOutcome {
                status: Some(500),
                ..failed_release(Delivery::Answered)
            },
        )
        .expect("record");
    assert_eq!(
        (answered.state, answered.retriable),
        (EffectState::Failed, false)
    );
    assert_eq!(
        store.finish_commit(&run).expect("finish").state,
        RunState::PartiallyCommitted
    );
    let before = (
        store.run(&run).expect("run"),
        store.effects(&run).expect("effects"),
    );
    assert_eq!(
        refused_code(store.retry(&refused.id, "alice")),
        "not_retriable"
    );
    assert_eq!(
        refused_code(store.retry(&child.id, "alice")),
        "invalid_effect_transition"
    );
    assert_eq!(
        (
            store.run(&run).expect("run"),
            store.effects(&run).expect("effects")
        ),
        before,
        "refused retries change nothing"
    );
    let changed = store.retry(&parent.id, "alice").expect("retry");
    let ids: Vec<_> = changed.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids, [parent.id.clone(), child.id.clone()]);
    assert!(changed.iter().all(|e| e.state == EffectState::Approved));
    let retried = &changed[0];
    assert!(!retried.retriable);
    assert_eq!(retried.earlier_releases.len(), 1);
    assert!(retried.release.is_none());
    let last = retried.decisions.last().expect("decision");
    assert_eq!(
        (last.kind.as_str(), last.by.as_str()),
        (kinds::RETRY, "alice")
    );
    assert_eq!(
        changed[1].decisions.last().map(|d| d.kind.as_str()),
        Some(kinds::REQUEUE)
    );
    // At most once per attempt.
    assert_eq!(
        refused_code(store.retry(&parent.id, "bob")),
        "invalid_effect_transition"
    );
    let resumed = store.run(&run).expect("run").expect("exists");
    assert_eq!(resumed.state, RunState::Committing);
    assert_eq!(
        resumed.decisions.last().map(|d| d.kind.as_str()),
        Some(kinds::RESUME)
    );
    store.mark_releasing(&parent.id).expect("releasing again");
    let unknown = store
        .record_release(&parent.id, failed_release(Delivery::Unanswered))
        .expect("record");
    assert_eq!(unknown.state, EffectState::Unknown);
    assert_eq!(
        refused_code(store.retry(&parent.id, "alice")),
        "not_retriable",
        "an unknown effect without an idempotency key is never re-sent"
    );
    let effects = store.effects(&run).expect("effects");
    let run_record = store.run(&run).expect("run");
    drop(store);
    let store = backend.reopen();
    assert_eq!(store.effects(&run).expect("effects"), effects);
    assert_eq!(store.run(&run).expect("run"), run_record);
}

/// Settling records who decided and the note; delivered supplies real values and
/// requeues skipped dependents; not delivered makes the effect retriable; bad values are
/// refused without change.
pub fn settle_records_who_and_requeues_dependents(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let run = store.create_run(None).expect("run").id;
    let number = PlaceholderSpec {
        pointer: "/number".into(),
        kind: ValueKind::Number,
    };
    let parent = store
        .stage(new_effect(&run, b"parent", vec![number]))
        .expect("stage");
    let mut child = new_effect(&run, b"child", Vec::new());
    child.depends_on.push(Dependency {
        effect: parent.id.clone(),
        value: parent.placeholders[0].value.clone(),
        found_in: "body".into(),
    });
    let child = store.stage(child).expect("stage");
    let other = store
        .stage(new_effect(&run, b"other", Vec::new()))
        .expect("stage");
    assert_eq!(
        refused_code(store.settle(&parent.id, &Settlement::default(), "alice")),
        "invalid_effect_transition",
        "only an unknown effect is settled"
    );
    store.begin_commit(&run, true, "admin").expect("commit");
    for id in [&parent.id, &other.id] {
        store.mark_releasing(id).expect("releasing");
        store
            .record_release(id, failed_release(Delivery::Unanswered))
            .expect("record");
    }
    store
        .settle_unsent(&child.id, EffectState::Skipped, "parent unknown")
        .expect("skip");
    store.finish_commit(&run).expect("finish");
    let before = store.effects(&run).expect("effects");
    let bad = [
        Settlement {
            delivered: false,
            values: vec![("/number".into(), "7".into())],
            ..Settlement::default()
        },
        Settlement {
            delivered: true,
            values: vec![("/number".into(), "seven".into())],
            ..Settlement::default()
        },
        Settlement {
            delivered: true,
            values: vec![("/id".into(), "7".into())],
            ..Settlement::default()
        },
    ];
    for settlement in &bad {
        assert_eq!(
            refused_code(store.settle(&parent.id, settlement, "alice")),
            "bad_settlement"
        );
    }
    assert_eq!(store.effects(&run).expect("effects"), before);
    let changed = store
        .settle(
            &parent.id,
            &Settlement {
                delivered: true,
                note: Some("PR 7 is on the origin".into()),
                values: vec![("/number".into(), "7".into())],
            },
            "alice",
        )
        .expect("settle");
    assert_eq!(changed.len(), 2);
    let settled = &changed[0];
    assert_eq!(settled.state, EffectState::Released);
    assert_eq!(settled.placeholders[0].real.as_deref(), Some("7"));
    let kinds_by: Vec<(&str, &str, Option<&str>)> = settled
        .decisions
        .iter()
        .rev()
        .take(2)
        .map(|d| (d.kind.as_str(), d.by.as_str(), d.note.as_deref()))
        .collect();
    assert_eq!(
        kinds_by,
        [
            (kinds::SUPPLY_VALUES, "alice", Some("/number=7")),
            (
                kinds::SETTLE_DELIVERED,
                "alice",
                Some("PR 7 is on the origin")
            ),
        ]
    );
    assert_eq!(changed[1].id, child.id);
    assert_eq!(changed[1].state, EffectState::Approved);
    assert_eq!(
        store.run(&run).expect("run").map(|r| r.state),
        Some(RunState::Committing)
    );
    let not_delivered = store
        .settle(
            &other.id,
            &Settlement {
                delivered: false,
                note: Some("no such hook delivery".into()),
                values: Vec::new(),
            },
            "bob",
        )
        .expect("settle");
    assert_eq!(
        (not_delivered[0].state, not_delivered[0].retriable),
        (EffectState::Failed, true)
    );
    let last = not_delivered[0].decisions.last().expect("decision");
    assert_eq!(
        (last.kind.as_str(), last.by.as_str()),
        (kinds::SETTLE_NOT_DELIVERED, "bob")
    );
    store
        .retry(&other.id, "bob")
        .expect("a not-delivered effect is retried");
    let effects = store.effects(&run).expect("effects");
    drop(store);
    let store = backend.reopen();
    assert_eq!(store.effects(&run).expect("effects"), effects);
}

/// The idempotency key is fixed when the effect is staged: the client's own header value,
/// else `airlock-` and the effect id; `retry_unknown` lets an `unknown` effect be retried.
pub fn idempotency_keys_are_fixed_at_staging(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let run = store.create_run(None).expect("run").id;
    let spec = |retry_unknown| EffectNotes {
        idempotency: Some(IdempotencySpec {
            header: "Idempotency-Key".into(),
            retry_unknown,
        }),
        ..EffectNotes::default()
    };
    let ours = store
        .stage_with(new_effect(&run, b"a", Vec::new()), spec(true))
        .expect("stage");
    let key = ours.idempotency.as_ref().expect("key");
    assert_eq!(key.header, "idempotency-key");
    assert_eq!(key.key, format!("airlock-{}", ours.id));
    let mut with_header = new_effect(&run, b"b", Vec::new());
    with_header.headers.push(Header {
        name: "idempotency-key".into(),
        value: HeaderText::Text("client-key-1".into()),
    });
    let theirs = store.stage_with(with_header, spec(false)).expect("stage");
    assert_eq!(
        theirs.idempotency.as_ref().map(|k| k.key.as_str()),
        Some("client-key-1")
    );
    store.begin_commit(&run, true, "admin").expect("commit");
    for id in [&ours.id, &theirs.id] {
        store.mark_releasing(id).expect("releasing");
        store
            .record_release(id, failed_release(Delivery::Unanswered))
            .expect("record");
    }
    assert!(matches!(
        store.retry(&theirs.id, "alice"),
        Err(LedgerError::Refused(Refused::NotRetriable { .. }))
    ));
    let retried = store.retry(&ours.id, "alice").expect("retry");
    assert_eq!(retried[0].state, EffectState::Approved);
    assert_eq!(
        retried[0].idempotency, ours.idempotency,
        "the same key again"
    );
}
