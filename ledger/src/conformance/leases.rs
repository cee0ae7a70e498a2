//! Contract tests of release leases and fenced writes ([`crate::LeaseStore`]): grant,
//! renewal, expiry and takeover by the store's clock; tokens that only go up; a takeover
//! that turns `releasing` into `unknown`; every fenced write refused under a stale token
//! without change; recovery that leaves a live lease's effects alone.

use std::time::Duration;

use super::contracts::new_effect;
use super::Backend;
use crate::{
    EffectId, EffectState, Lease, LedgerError, Refused, ReleaseOutcome, RunId, RunState, Store,
    Verdict,
};

/// A TTL no test outlives.
const LONG_MS: u64 = 600_000;
/// A TTL tests wait out, and how long they wait.
const SHORT_MS: u64 = 150;
const PAST_SHORT: Duration = Duration::from_millis(400);

/// Runs every lease contract against `backend`.
pub fn all(backend: &mut dyn Backend) {
    leases_are_granted_renewed_expire_and_are_taken_over(backend);
    a_takeover_turns_releasing_into_unknown(backend);
    a_stale_token_is_refused_for_each_fenced_write(backend);
    recover_leaves_a_live_leases_releasing_effects_alone(backend);
}

fn refusal(result: Result<impl std::fmt::Debug, LedgerError>) -> Refused {
    match result {
        Err(LedgerError::Refused(refused)) => refused,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A committing run with `n` approved effects.
fn committing_run(store: &dyn Store, n: usize) -> (RunId, Vec<EffectId>) {
    let run = store.create_run(None).expect("run").id;
    let ids = (0..n)
        .map(|i| {
            let body = format!("effect {i}");
            let effect = store
                .stage(new_effect(&run, body.as_bytes(), Vec::new()))
                .expect("stage");
            store
                .decide_effect(&effect.id, Verdict::Approve, "t")
                .expect("approve");
            effect.id
        })
        .collect();
    store.begin_commit(&run, false, "t").expect("commit");
    (run, ids)
}

fn state(store: &dyn Store, id: &EffectId) -> EffectState {
    store.effect(id).expect("effect").expect("exists").state
}

/// A lease is refused to others while live (naming holder and expiry), renewed only by
/// its holder while live, given up, taken over once expired; tokens rise by one per grant
/// and survive a reopen.
pub fn leases_are_granted_renewed_expire_and_are_taken_over(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let (run, _) = committing_run(&*store, 1);
    let other = store.create_run(None).expect("run").id;
    assert_eq!(store.lease(&run).expect("lease"), None);

    let (first, recovered) = store.acquire_lease(&run, "a", LONG_MS).expect("acquire");
    assert!(recovered.is_empty());
    assert_eq!((first.token, first.holder.as_str()), (1, "a"));
    assert_eq!(first.run, run);
    assert_eq!(store.lease(&run).expect("lease"), Some(first.clone()));
    // Tokens are per run.
    let (elsewhere, _) = store.acquire_lease(&other, "b", LONG_MS).expect("acquire");
    assert_eq!(elsewhere.token, 1);

    match refusal(store.acquire_lease(&run, "b", LONG_MS)) {
        Refused::LeaseHeld {
            run: held,
            holder,
            expires_at_ms,
        } => {
            assert_eq!(held, run);
            assert_eq!(holder, "a");
            assert_eq!(expires_at_ms, first.expires_at_ms);
        }
        other => panic!("expected lease_held, got {other:?}"),
    }
    assert_eq!(store.lease(&run).expect("lease"), Some(first.clone()));

    // The holder renews; a stranger carrying a made-up token cannot.
    let renewed = store.renew_lease(&first, LONG_MS).expect("renew");
    assert_eq!(renewed.token, 1);
    assert!(renewed.expires_at_ms >= first.expires_at_ms);
    let forged = Lease {
        token: 7,
        ..first.clone()
    };
    assert_eq!(
        refusal(store.renew_lease(&forged, LONG_MS)).code(),
        "stale_lease"
    );

    // The same holder acquiring again (its earlier process died) gets a new token.
    let (second, _) = store.acquire_lease(&run, "a", SHORT_MS).expect("again");
    assert_eq!(second.token, 2);
    assert_eq!(
        refusal(store.renew_lease(&first, LONG_MS)).code(),
        "stale_lease"
    );

    // Expired: not live, not renewable, and another holder takes over with token 3.
    std::thread::sleep(PAST_SHORT);
    assert_eq!(store.lease(&run).expect("lease"), None);
    assert_eq!(
        refusal(store.renew_lease(&second, LONG_MS)).code(),
        "stale_lease"
    );
    let (third, _) = store.acquire_lease(&run, "b", LONG_MS).expect("takeover");
    assert_eq!((third.token, third.holder.as_str()), (3, "b"));

    // Given up: free at once for anyone, the token kept; a stale give-up does nothing.
    assert!(!store.give_up_lease(&second).expect("stale give up"));
    assert_eq!(store.lease(&run).expect("lease"), Some(third.clone()));
    assert!(store.give_up_lease(&third).expect("give up"));
    assert_eq!(store.lease(&run).expect("lease"), None);
    let (fourth, _) = store
        .acquire_lease(&run, "c", LONG_MS)
        .expect("after give up");
    assert_eq!(fourth.token, 4);

    // Durable: the live lease and the token survive a reopen.
    drop(store);
    let store = backend.reopen();
    assert_eq!(store.lease(&run).expect("lease"), Some(fourth.clone()));
    assert_eq!(
        refusal(store.acquire_lease(&run, "d", LONG_MS)).code(),
        "lease_held"
    );
    assert!(store.give_up_lease(&fourth).expect("give up"));
    let (fifth, _) = store.acquire_lease(&run, "d", LONG_MS).expect("acquire");
    assert_eq!(fifth.token, 5);
    assert!(matches!(
        store.acquire_lease(&RunId::generate(), "a", LONG_MS),
        Err(LedgerError::NotFound { .. })
    ));
}

/// Taking over a run whose holder died mid-release turns its `releasing` effect into
/// `unknown` in the same write (announced), never back to `approved`; effects released
/// or still approved stay as they are.
pub fn a_takeover_turns_releasing_into_unknown(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let (run, ids) = committing_run(&*store, 3);
    let (dead, _) = store
        .acquire_lease(&run, "dead", SHORT_MS)
        .expect("acquire");
    store
        .mark_releasing_fenced(&ids[0], &dead)
        .expect("releasing");
    store
        .record_release_fenced(
            &ids[0],
            ReleaseOutcome {
                status: Some(200),
                ..ReleaseOutcome::default()
            },
            &dead,
        )
        .expect("released");
    store
        .mark_releasing_fenced(&ids[1], &dead)
        .expect("releasing");
    // While the dead holder's lease is live, nobody takes over and nothing changes.
    assert_eq!(
        refusal(store.acquire_lease(&run, "next", LONG_MS)).code(),
        "lease_held"
    );
    assert_eq!(state(&*store, &ids[1]), EffectState::Releasing);

    std::thread::sleep(PAST_SHORT);
    let changes = store.subscribe();
    let (next, recovered) = store
        .acquire_lease(&run, "next", LONG_MS)
        .expect("takeover");
    assert_eq!(next.token, dead.token + 1);
    assert_eq!(
        recovered.iter().map(|e| &e.id).collect::<Vec<_>>(),
        vec![&ids[1]]
    );
    assert_eq!(recovered[0].state, EffectState::Unknown);
    assert_eq!(state(&*store, &ids[0]), EffectState::Released);
    assert_eq!(state(&*store, &ids[1]), EffectState::Unknown);
    assert_eq!(state(&*store, &ids[2]), EffectState::Approved);
    let announced: Vec<_> = changes.try_iter().collect();
    assert!(
        announced.contains(&crate::Change::EffectChanged {
            run: run.clone(),
            effect: ids[1].clone(),
        }),
        "{announced:?}"
    );
    // The next holder goes on with the rest.
    store
        .mark_releasing_fenced(&ids[2], &next)
        .expect("releasing");
    drop(store);
    let store = backend.reopen();
    assert_eq!(state(&*store, &ids[1]), EffectState::Unknown);
    assert_eq!(state(&*store, &ids[2]), EffectState::Releasing);
}

/// Once a newer lease exists, each fenced write under the old token is refused with
/// `stale_lease` and changes nothing; a send cannot start on an expired lease, but an
/// outcome learnt before anyone took over is recorded.
pub fn a_stale_token_is_refused_for_each_fenced_write(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let (run, ids) = committing_run(&*store, 4);
    let (old, _) = store.acquire_lease(&run, "old", SHORT_MS).expect("acquire");
    store
        .mark_releasing_fenced(&ids[0], &old)
        .expect("releasing");
    store
        .mark_releasing_fenced(&ids[1], &old)
        .expect("releasing");

    // Expired, not yet taken over: no new send; the outcome of one in flight is kept.
    std::thread::sleep(PAST_SHORT);
    match refusal(store.mark_releasing_fenced(&ids[2], &old)) {
        Refused::StaleLease {
            token,
            newest,
            expired,
            ..
        } => assert_eq!((token, newest, expired), (old.token, old.token, true)),
        other => panic!("expected stale_lease, got {other:?}"),
    }
    assert_eq!(state(&*store, &ids[2]), EffectState::Approved);
    store
        .record_release_fenced(
            &ids[0],
            ReleaseOutcome {
                status: Some(200),
                ..ReleaseOutcome::default()
            },
            &old,
        )
        .expect("an outcome under the newest, expired token");

    let (new, recovered) = store.acquire_lease(&run, "new", LONG_MS).expect("takeover");
    assert_eq!(recovered.len(), 1, "the effect still in flight");
    let before = store.effects(&run).expect("effects");
    let before_run = store.run(&run).expect("run");
    let stale = |result: Result<_, LedgerError>| match refusal(result) {
        Refused::StaleLease {
            token,
            newest,
            expired,
            ..
        } => assert_eq!((token, newest, expired), (old.token, new.token, false)),
        other => panic!("expected stale_lease, got {other:?}"),
    };
    stale(store.mark_releasing_fenced(&ids[2], &old).map(drop));
    stale(
        store
            .record_release_fenced(
                &ids[1],
                ReleaseOutcome {
                    status: Some(200),
                    ..ReleaseOutcome::default()
                },
                &old,
            )
            .map(drop),
    );
    stale(
        store
            .settle_unsent_fenced(&ids[3], EffectState::Skipped, "stale", &old)
            .map(drop),
    );
    stale(store.finish_commit_fenced(&run, &old).map(drop));
    // A lease of another run fences nothing here.
    let other = store.create_run(None).expect("run").id;
    let (foreign, _) = store
        .acquire_lease(&other, "new", LONG_MS)
        .expect("acquire");
    assert_eq!(
        refusal(store.settle_unsent_fenced(&ids[3], EffectState::Skipped, "x", &foreign)).code(),
        "stale_lease"
    );
    assert_eq!(store.effects(&run).expect("effects"), before);
    assert_eq!(store.run(&run).expect("run"), before_run);

    // The newest token writes.
    store
        .settle_unsent_fenced(&ids[3], EffectState::Skipped, "not needed", &new)
        .expect("settle");
    store
        .mark_releasing_fenced(&ids[2], &new)
        .expect("releasing");
    store
        .record_release_fenced(
            &ids[2],
            ReleaseOutcome {
                status: Some(201),
                ..ReleaseOutcome::default()
            },
            &new,
        )
        .expect("released");
    let finished = store.finish_commit_fenced(&run, &new).expect("finish");
    assert_eq!(finished.state, RunState::PartiallyCommitted);
}

/// `recover` leaves the `releasing` effects of a run with a live lease alone (its holder
/// is releasing them) and turns those of runs with no live lease into `unknown`.
pub fn recover_leaves_a_live_leases_releasing_effects_alone(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let (live_run, live) = committing_run(&*store, 1);
    let (expired_run, expired) = committing_run(&*store, 1);
    let (_, unleased) = committing_run(&*store, 1);
    let (held, _) = store
        .acquire_lease(&live_run, "peer", LONG_MS)
        .expect("acquire");
    store
        .mark_releasing_fenced(&live[0], &held)
        .expect("releasing");
    let (gone, _) = store
        .acquire_lease(&expired_run, "dead", SHORT_MS)
        .expect("acquire");
    store
        .mark_releasing_fenced(&expired[0], &gone)
        .expect("releasing");
    store.mark_releasing(&unleased[0]).expect("releasing");
    std::thread::sleep(PAST_SHORT);

    drop(store);
    let store = backend.reopen();
    let mut recovered: Vec<_> = store
        .recover()
        .expect("recover")
        .into_iter()
        .map(|e| e.id)
        .collect();
    recovered.sort();
    let mut expected = vec![expired[0].clone(), unleased[0].clone()];
    expected.sort();
    assert_eq!(recovered, expected);
    assert_eq!(state(&*store, &live[0]), EffectState::Releasing);
    assert_eq!(state(&*store, &expired[0]), EffectState::Unknown);
    assert_eq!(state(&*store, &unleased[0]), EffectState::Unknown);
    // The live holder records its outcome as usual.
    store
        .record_release_fenced(
            &live[0],
            ReleaseOutcome {
                status: Some(200),
                ..ReleaseOutcome::default()
            },
            &held,
        )
        .expect("released");
}
