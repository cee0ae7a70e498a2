//! Retention contracts ([`crate::RunStore::prune_run`], [`crate::RunStore::runs_page`],
//! the recovery index behind [`crate::EffectStore::recover`]): pruning removes every
//! record of a finished run and nothing of any other, keeps bodies another run
//! references, refuses runs that are not finished; paging visits every run once in order;
//! recovery finds exactly the effects a full scan finds `releasing`.

use super::contracts::{new_denial, new_effect, new_read, new_workspace};
use super::Backend;
use crate::{
    Denial, Digest, Edge, Effect, EffectLineage, EffectState, IssuedPlaceholder, LedgerError,
    PlaceholderSpec, Read, ReadContent, Refused, ReleaseOutcome, Run, RunId, RunPage, Store,
    ValueKind, Verdict, WorkspaceRecord,
};

/// Runs every retention contract against `backend`.
pub fn all(backend: &mut dyn Backend) {
    prune_removes_the_run_and_nothing_of_other_runs(backend);
    prune_keeps_bodies_another_run_references(backend);
    prune_refuses_runs_that_are_not_finished(backend);
    paging_returns_every_run_exactly_once_in_order(backend);
    recovery_index_matches_a_full_scan(backend);
}

/// Everything the store holds of one run, read through the trait.
#[derive(Debug, PartialEq)]
struct RunRecords {
    run: Option<Run>,
    effects: Vec<Effect>,
    reads: Vec<Read>,
    denials: Vec<Denial>,
    placeholders: Vec<IssuedPlaceholder>,
    read_contents: Vec<(ReadContent, Vec<u64>)>,
    lineage: Vec<Option<EffectLineage>>,
    workspace: Option<WorkspaceRecord>,
    edges: Vec<Edge>,
    bodies: Vec<Option<Vec<u8>>>,
}

fn records(store: &dyn Store, run: &RunId) -> RunRecords {
    let effects = store.effects(run).unwrap_or_default();
    let digests: Vec<Digest> = effects
        .iter()
        .flat_map(|e| crate::rules::retention::body_digests(e).cloned())
        .collect();
    RunRecords {
        run: store.run(run).expect("run"),
        lineage: effects
            .iter()
            .map(|e| store.effect_lineage(&e.id).expect("lineage"))
            .collect(),
        bodies: digests
            .iter()
            .map(|d| store.body(d).expect("body"))
            .collect(),
        effects,
        reads: store.reads(run).expect("reads"),
        denials: store.denials(run).expect("denials"),
        placeholders: store.placeholders(run).expect("placeholders"),
        read_contents: store.read_contents(run).expect("read contents"),
        workspace: store.workspace(run).expect("workspace"),
        edges: store.edges(run).unwrap_or_default(),
    }
}

/// A run with one of every record: two effects (one with a number placeholder, one
/// depending on nothing), both approved and released with a response body, reads with
/// an analysis, lineage, denials and a workspace; committed. `tag` makes its bodies
/// unique; `shared` is staged as one more effect's body, rejected.
fn full_run(store: &dyn Store, tag: &str, shared: &[u8]) -> RunId {
    let run = store.create_run(Some("p".into())).expect("run").id;
    store
        .attach_workspace(&run, new_workspace())
        .expect("attach");
    let reads = store
        .journal_reads(vec![
            new_read(&run, "https://r/1"),
            new_read(&run, "https://r/2"),
        ])
        .expect("reads");
    store
        .journal_read(new_read(&run, "https://r/3"))
        .expect("read");
    store
        .store_read_content(
            &run,
            &ReadContent::not_analysed(reads[0].seq, "test".into()),
            &[1, 2, 3],
        )
        .expect("read content");
    store.journal_denial(new_denial(&run)).expect("denial");
    let first = store
        .stage(new_effect(
            &run,
            format!("{{\"tag\":\"{tag}\"}}").as_bytes(),
            vec![PlaceholderSpec {
                pointer: "/id".into(),
                kind: ValueKind::Number,
            }],
        ))
        .expect("stage");
    let second = store
        .stage(new_effect(&run, format!("{tag}-2").as_bytes(), Vec::new()))
        .expect("stage");
    let third = store
        .stage(new_effect(&run, shared, Vec::new()))
        .expect("stage");
    store
        .store_effect_lineage(
            &first.id,
            &EffectLineage {
                analyzed_at_ms: 1,
                fingerprints: 3,
                truncated: false,
                skipped: None,
                edges: Vec::new(),
                incomplete_reads: Vec::new(),
            },
        )
        .expect("lineage");
    store
        .decide_effect(&third.id, Verdict::Reject, "t")
        .expect("reject");
    store.begin_commit(&run, true, "t").expect("commit");
    for effect in [&first, &second] {
        store.mark_releasing(&effect.id).expect("releasing");
        let body = format!("answer of {tag} {}", effect.seq);
        store
            .record_release(
                &effect.id,
                ReleaseOutcome {
                    status: Some(201),
                    body: body.as_bytes(),
                    body_len: body.len() as u64,
                    ..ReleaseOutcome::default()
                },
            )
            .expect("released");
    }
    store.finish_commit(&run).expect("finish");
    run
}

/// Pruning a committed run removes every record of it (run, effects, reads, analyses,
/// lineage, placeholders, denials, workspace, bodies, counters) and leaves every record
/// of another run as it was; a new run reuses nothing of it.
pub fn prune_removes_the_run_and_nothing_of_other_runs(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let gone = full_run(&*store, "a", b"only-a");
    let kept = full_run(&*store, "b", b"only-b");
    let open = store.create_run(None).expect("run").id;
    store
        .stage(new_effect(&open, b"open", Vec::new()))
        .expect("stage");
    // Each finished run holds a release lease record (as after a fleet's release).
    for run in [&gone, &kept] {
        store
            .acquire_lease(run, "control-a", 60_000)
            .expect("lease");
    }
    let before = records(&*store, &gone);
    let kept_before = records(&*store, &kept);
    let open_before = records(&*store, &open);
    assert_eq!(before.effects.len(), 3);
    assert!(before.bodies.iter().all(Option::is_some));
    let pruned = store.prune_run(&gone).expect("prune a committed run");
    assert_eq!(pruned.effects, 3);
    assert_eq!(pruned.reads, 3);
    assert_eq!(pruned.denials, 1);
    assert_eq!(pruned.placeholders, 1);
    assert_eq!(pruned.bodies_removed, 5, "3 requests and 2 responses");
    assert_eq!(pruned.bodies_kept, 0);
    assert!(store.run(&gone).expect("run").is_none());
    assert!(matches!(
        store.effects(&gone),
        Err(LedgerError::NotFound { .. })
    ));
    for effect in &before.effects {
        assert!(store.effect(&effect.id).expect("effect").is_none());
        assert!(store.effect_lineage(&effect.id).expect("lineage").is_none());
        for digest in crate::rules::retention::body_digests(effect) {
            assert!(store.body(digest).expect("body").is_none(), "{digest:?}");
        }
    }
    assert!(store.reads(&gone).expect("reads").is_empty());
    assert!(store.denials(&gone).expect("denials").is_empty());
    assert!(store.placeholders(&gone).expect("placeholders").is_empty());
    assert!(store
        .read_contents(&gone)
        .expect("read contents")
        .is_empty());
    assert!(store.workspace(&gone).expect("workspace").is_none());
    assert_eq!(store.last_effect_seq(&gone).expect("last"), 0);
    assert_eq!(records(&*store, &kept), kept_before);
    assert_eq!(records(&*store, &open), open_before);
    assert!(
        store.lease(&gone).expect("lease").is_none(),
        "its lease is gone"
    );
    assert!(
        store.lease(&kept).expect("lease").is_some(),
        "another run's lease stays"
    );
    assert!(store.runs().expect("runs").iter().all(|run| run.id != gone));
    // Pruning it again finds no run; durable across a reopen.
    assert!(matches!(
        store.prune_run(&gone),
        Err(LedgerError::NotFound { .. })
    ));
    drop(store);
    let store = backend.reopen();
    assert!(store.run(&gone).expect("run").is_none());
    assert_eq!(records(&*store, &kept), kept_before);
    assert!(store.recover().expect("recover").is_empty());
}

/// A body that an effect of another run also carries (same digest) stays when one of
/// the runs is pruned, and goes with the last of them.
pub fn prune_keeps_bodies_another_run_references(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let shared = b"{\"same\":\"body\"}";
    let a = full_run(&*store, "a", shared);
    let b = full_run(&*store, "b", shared);
    let digest = Digest::sha256_of(shared);
    let pruned = store.prune_run(&a).expect("prune a");
    assert_eq!(pruned.bodies_kept, 1);
    assert_eq!(pruned.bodies_removed, 4);
    assert_eq!(
        store.body(&digest).expect("body").as_deref(),
        Some(&shared[..]),
        "run b still references it"
    );
    let pruned = store.prune_run(&b).expect("prune b");
    assert_eq!(pruned.bodies_kept, 0);
    assert_eq!(pruned.bodies_removed, 5);
    assert!(store.body(&digest).expect("body").is_none());
}

/// Open, sealed and committing runs, and a partially committed run with an `unknown`
/// effect, are refused with `NotFinished`, and nothing of them is removed; an aborted
/// run is pruned.
pub fn prune_refuses_runs_that_are_not_finished(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let staged = |run: &RunId| {
        store
            .stage(new_effect(run, b"x", Vec::new()))
            .expect("stage")
    };
    let open = store.create_run(None).expect("run").id;
    staged(&open);
    let sealed = store.create_run(None).expect("run").id;
    staged(&sealed);
    store.seal(&sealed, "t").expect("seal");
    let committing = store.create_run(None).expect("run").id;
    staged(&committing);
    store.begin_commit(&committing, true, "t").expect("commit");
    let partial = store.create_run(None).expect("run").id;
    let doubtful = staged(&partial);
    store.begin_commit(&partial, true, "t").expect("commit");
    store.mark_releasing(&doubtful.id).expect("releasing");
    store.recover().expect("recover");
    let partial_run = store.finish_commit(&partial).expect("finish");
    assert_eq!(partial_run.state, crate::RunState::PartiallyCommitted);
    for run in [&open, &sealed, &committing, &partial] {
        let before = records(&*store, run);
        let refused = store.prune_run(run).expect_err("not finished");
        assert!(
            matches!(
                refused,
                LedgerError::Refused(Refused::NotFinished { run: ref r, .. }) if r == run
            ),
            "{refused}"
        );
        assert_eq!(records(&*store, run), before, "a refusal removes nothing");
    }
    let aborted = store.create_run(None).expect("run").id;
    let discarded = staged(&aborted);
    store.abort(&aborted, "t").expect("abort");
    store
        .prune_run(&aborted)
        .expect("an aborted run is finished");
    assert!(store.body(&discarded.body_digest).expect("body").is_some());
    assert!(store.run(&aborted).expect("run").is_none());
}

/// Following pages of any size, either way, visits every run exactly once in identifier
/// order, also when the cursor names a run pruned in between.
pub fn paging_returns_every_run_exactly_once_in_order(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let mut ids: Vec<RunId> = (0..7)
        .map(|_| store.create_run(None).expect("run").id)
        .collect();
    ids.sort();
    let all: Vec<RunId> = store
        .runs()
        .expect("runs")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(all, ids);
    for newest_first in [false, true] {
        for limit in [1, 2, 3, 7, 100] {
            let mut seen = Vec::new();
            let mut after = None;
            loop {
                let page = store
                    .runs_page(&RunPage {
                        after: after.clone(),
                        limit,
                        newest_first,
                    })
                    .expect("page");
                assert!(page.len() <= limit);
                let full = page.len() == limit;
                after = page.last().map(|r| r.id.clone());
                seen.extend(page.into_iter().map(|r| r.id));
                if !full {
                    break;
                }
            }
            let mut expected = ids.clone();
            if newest_first {
                expected.reverse();
            }
            assert_eq!(seen, expected, "limit {limit}, newest first {newest_first}");
        }
    }
    assert!(store
        .runs_page(&RunPage {
            after: None,
            limit: 0,
            newest_first: false
        })
        .expect("page")
        .is_empty());
    // A cursor on a run that is gone still continues after it.
    store.abort(&ids[2], "t").expect("abort");
    store.prune_run(&ids[2]).expect("prune");
    let page = store
        .runs_page(&RunPage {
            after: Some(ids[2].clone()),
            limit: 2,
            newest_first: false,
        })
        .expect("page");
    assert_eq!(
        page.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
        ids[3..5]
    );
    let page = store
        .runs_page(&RunPage {
            after: Some(ids[2].clone()),
            limit: 5,
            newest_first: true,
        })
        .expect("page");
    assert_eq!(
        page.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
        [ids[1].clone(), ids[0].clone()]
    );
}

/// Recovery returns exactly the effects that a scan of every run's effects finds
/// `releasing` (by id order), after effects went through every state; a second recovery
/// finds none; so after a reopen.
pub fn recovery_index_matches_a_full_scan(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let mut runs = Vec::new();
    for i in 0..3u8 {
        let run = store.create_run(None).expect("run").id;
        let effects: Vec<Effect> = (0..5u8)
            .map(|j| {
                store
                    .stage(new_effect(&run, &[i, j], Vec::new()))
                    .expect("stage")
            })
            .collect();
        store
            .decide_effect(&effects[4].id, Verdict::Reject, "t")
            .expect("reject");
        store.begin_commit(&run, true, "t").expect("commit");
        // 0: released, 1: failed, 2 and 3: left releasing, 4: rejected.
        for effect in &effects[..4] {
            store.mark_releasing(&effect.id).expect("releasing");
        }
        store
            .record_release(
                &effects[0].id,
                ReleaseOutcome {
                    status: Some(200),
                    ..ReleaseOutcome::default()
                },
            )
            .expect("released");
        store
            .record_release(
                &effects[1].id,
                ReleaseOutcome {
                    status: Some(500),
                    error: Some("origin said 500".into()),
                    ..ReleaseOutcome::default()
                },
            )
            .expect("failed");
        runs.push(run);
    }
    let scan = |store: &dyn Store| {
        let mut ids: Vec<_> = runs
            .iter()
            .flat_map(|run| store.effects(run).expect("effects"))
            .filter(|e| e.state == EffectState::Releasing)
            .map(|e| e.id)
            .collect();
        ids.sort();
        ids
    };
    let expected = scan(&*store);
    assert_eq!(expected.len(), 6);
    drop(store);
    let store = backend.reopen();
    let recovered: Vec<_> = store
        .recover()
        .expect("recover")
        .into_iter()
        .map(|e| {
            assert_eq!(e.state, EffectState::Unknown);
            e.id
        })
        .collect();
    assert_eq!(recovered, expected);
    assert!(scan(&*store).is_empty());
    assert!(store.recover().expect("again").is_empty());
}
