//! The healing ledger: the free-space floor, degrading, reopening, and hiding effects
//! whose staging failed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::HealingLedger;
use crate::{
    EffectStore as _, Header, HeaderText, LedgerError, NewEffect, RunId, RunStore as _, Store,
};

fn new_effect<'a>(run: &'a RunId, body: &'a [u8]) -> NewEffect<'a> {
    NewEffect {
        run_id: run,
        method: "POST",
        url: "https://example.com:443/hook",
        headers: vec![Header {
            name: "content-type".into(),
            value: HeaderText::Text("application/json".into()),
        }],
        body,
        rule: Some("hooks"),
        policy_revision: "abc",
        placeholders: Vec::new(),
        depends_on: Vec::new(),
        inject: None,
    }
}

fn wait_writable(ledger: &Arc<HealingLedger>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ledger.health().writable {
        assert!(
            Instant::now() < deadline,
            "never healed: {:?}",
            ledger.health()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn below_the_free_space_floor_staging_is_refused_before_writing() {
    let dir = tempfile::tempdir().expect("in a temporary directory");
    let ledger =
        HealingLedger::open(dir.path(), 1 << 20, u64::MAX / 2).expect("in a temporary directory");
    let run = ledger.create_run(None).expect("in a temporary directory");
    let refused = ledger
        .stage(new_effect(&run.id, b"{}"))
        .expect_err("refused");
    assert!(
        matches!(refused, LedgerError::LowSpace { floor_bytes, .. } if floor_bytes == u64::MAX / 2),
        "{refused:?}"
    );
    assert!(ledger
        .effects(&run.id)
        .expect("in a temporary directory")
        .is_empty());
    let health = ledger.health();
    assert!(!health.writable);
    assert_eq!(health.reason, Some("ledger_low_space"));
}

#[test]
fn a_storage_fault_degrades_the_ledger_until_a_reopen_proves_it_writable() {
    let dir = tempfile::tempdir().expect("in a temporary directory");
    let ledger = HealingLedger::open(dir.path(), 1 << 20, 0).expect("in a temporary directory");
    let changes = ledger.subscribe();
    let run = ledger.create_run(None).expect("in a temporary directory");
    let kept = ledger
        .stage(new_effect(&run.id, b"kept"))
        .expect("in a temporary directory");
    ledger.degrade("test fault".into());
    let health = ledger.health();
    assert_eq!(health.reason, Some("ledger_degraded"));
    assert_eq!(health.storage_faults, 1);
    assert!(matches!(
        ledger.stage(new_effect(&run.id, b"refused")),
        Err(LedgerError::Degraded { .. })
    ));
    wait_writable(&ledger);
    assert_eq!(ledger.health().recoveries, 1);
    let after = ledger
        .stage(new_effect(&run.id, b"after"))
        .expect("in a temporary directory");
    let listed: Vec<_> = ledger
        .effects(&run.id)
        .expect("in a temporary directory")
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(listed, vec![kept.id, after.id.clone()]);
    // Subscribers of the first store still hear the reopened one.
    let heard: Vec<_> = changes.try_iter().collect();
    assert!(
        heard.contains(&crate::Change::EffectChanged {
            run: run.id.clone(),
            effect: after.id,
        }),
        "{heard:?}"
    );
}

#[test]
fn effects_whose_staging_failed_are_removed_by_the_reopened_store() {
    let dir = tempfile::tempdir().expect("in a temporary directory");
    let ledger = crate::Ledger::open(dir.path()).expect("in a temporary directory");
    let run = ledger.create_run(None).expect("in a temporary directory");
    let gone = ledger
        .stage(new_effect(&run.id, b"gone"))
        .expect("in a temporary directory");
    let kept = ledger
        .stage(new_effect(&run.id, b"kept"))
        .expect("in a temporary directory");
    let found = ledger
        .remove_unacknowledged(&[(gone.id.clone(), run.id.clone(), gone.seq)])
        .expect("in a temporary directory");
    assert_eq!(found, 1);
    drop(ledger);
    let reopened = HealingLedger::open(dir.path(), 1 << 20, 0);
    let reopened = match reopened {
        Ok(ledger) => ledger,
        Err(_) => {
            std::thread::sleep(Duration::from_millis(500));
            HealingLedger::open(dir.path(), 1 << 20, 0).expect("in a temporary directory")
        }
    };
    let listed: Vec<_> = reopened
        .effects(&run.id)
        .expect("in a temporary directory")
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(listed, vec![kept.id]);
    assert!(reopened
        .effect(&gone.id)
        .expect("in a temporary directory")
        .is_none());
}

/// A blob write that fails inside sled (here `blobs/` turned into a file: `ENOTDIR`, as
/// `ENOSPC` or `EIO` would) wedges sled 0.34's log, whose flush and drop then never
/// return. The staging still answers within the flush deadline, and once the fault is
/// gone the ledger heals without a restart: the wedged store is left to the graveyard and
/// its lock on `db` released (`healing/graveyard.rs`).
#[test]
fn a_failed_blob_write_that_wedges_sled_is_answered_and_healed_without_a_restart() {
    let dir = tempfile::tempdir().expect("in a temporary directory");
    let ledger = HealingLedger::open(dir.path(), 1 << 20, 0).expect("opens");
    let run = ledger.create_run(None).expect("a run");
    ledger
        .stage(new_effect(&run.id, b"before"))
        .expect("stages");
    let blobs = dir.path().join("blobs");
    std::fs::remove_dir_all(&blobs).expect("no blobs yet");
    std::fs::write(&blobs, b"not a directory").expect("a file in its place");

    let large = vec![b'z'; 300 << 10];
    let started = Instant::now();
    let failed = ledger
        .stage(new_effect(&run.id, &large))
        .expect_err("the blob cannot be written");
    assert!(
        started.elapsed() < super::super::bounded::FLUSH_WITHIN + Duration::from_secs(2),
        "answered after {:?}: {failed:?}",
        started.elapsed()
    );
    assert!(!ledger.health().writable, "{:?}", ledger.health());

    std::fs::remove_file(&blobs).expect("the fault goes");
    std::fs::create_dir(&blobs).expect("blobs/ again");
    let returned = Instant::now();
    wait_writable(&ledger);
    eprintln!("heal_ms {}", returned.elapsed().as_millis());
    assert!(
        returned.elapsed() < Duration::from_secs(10),
        "healed after {:?}",
        returned.elapsed()
    );
    ledger
        .stage(new_effect(&run.id, b"after"))
        .expect("stages again");
    ledger
        .stage(new_effect(&run.id, &large))
        .expect("and a blob again");
    assert_eq!(ledger.effects(&run.id).expect("listed").len(), 3);
}
