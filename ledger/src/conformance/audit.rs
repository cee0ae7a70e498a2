//! Audit-log contracts ([`crate::AuditStore`]): entries are numbered 1, 2, 3 … in append
//! order and durable on return; pages either way visit every entry once, in order, and a
//! run filter keeps only that run's; a prune of a run leaves its entries.

use super::Backend;
use crate::{AuditEntry, AuditOutcome, AuditPage, NewAuditEntry, RunId, Store};

/// Runs every audit contract against `backend`.
pub fn all(backend: &mut dyn Backend) {
    entries_are_numbered_in_order_and_durable(backend);
    pages_visit_every_entry_once_either_way(backend);
    a_prune_leaves_the_runs_entries(backend);
}

fn entry(who: &str, action: &str, run: Option<&RunId>) -> NewAuditEntry {
    let mut new = NewAuditEntry::new(who, "reviewer", action)
        .detail(serde_json::json!({"note": format!("{who} {action}")}));
    if let Some(run) = run {
        new = new.run(run);
    }
    new
}

fn all_pages(store: &dyn Store, size: usize, newest_first: bool, run: Option<&RunId>) -> Vec<u64> {
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .audit_page(&AuditPage {
                after,
                limit: size,
                newest_first,
                run: run.cloned(),
            })
            .expect("audit page");
        seen.extend(page.iter().map(|e| e.seq));
        if page.len() < size {
            return seen;
        }
        after = page.last().map(|e| e.seq);
    }
}

/// Appends return entries numbered 1, 2, 3 … with the fields given; after a reopen the
/// log reads the same.
pub fn entries_are_numbered_in_order_and_durable(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let run = store.create_run(None).expect("run").id;
    let mut appended: Vec<AuditEntry> = Vec::new();
    for (i, who) in ["alice", "bob", "admin"].iter().enumerate() {
        let new = entry(who, "approve", Some(&run)).outcome(if i == 1 {
            AuditOutcome::Forbidden
        } else {
            AuditOutcome::Done
        });
        let stored = store.append_audit(new.clone()).expect("append");
        assert_eq!(stored.seq, i as u64 + 1, "gap-free numbering");
        assert_eq!(
            (
                &stored.who,
                &stored.role,
                &stored.action,
                &stored.run,
                stored.outcome
            ),
            (&new.who, &new.role, &new.action, &new.run, new.outcome)
        );
        assert_eq!(stored.detail, new.detail);
        assert!(stored.at_ms > 0);
        appended.push(stored);
    }
    let huge = "x".repeat(crate::audit::MAX_DETAIL_BYTES + 10);
    let cut = store
        .append_audit(
            entry("admin", "policy_reload", None).detail(serde_json::json!({"text": huge})),
        )
        .expect("append a huge detail");
    assert_eq!(
        cut.detail["truncated"], true,
        "a detail past the cap is cut"
    );
    appended.push(cut);
    drop(store);
    let store = backend.reopen();
    let read = store
        .audit_page(&AuditPage {
            limit: 100,
            ..AuditPage::default()
        })
        .expect("page");
    assert_eq!(read, appended, "the log survives a reopen as appended");
    let next = store
        .append_audit(entry("carol", "commit", None))
        .expect("append");
    assert_eq!(next.seq, 5, "numbering goes on after a reopen");
}

/// Pages of any size, oldest or newest first, visit every entry exactly once in order;
/// a run filter keeps exactly that run's entries.
pub fn pages_visit_every_entry_once_either_way(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let a = store.create_run(None).expect("run").id;
    let b = store.create_run(None).expect("run").id;
    let mut of_a = Vec::new();
    for i in 0..9u64 {
        let run = if i % 3 == 0 { &a } else { &b };
        let stored = store
            .append_audit(entry("alice", "seal", Some(run)))
            .expect("append");
        if i % 3 == 0 {
            of_a.push(stored.seq);
        }
    }
    let every: Vec<u64> = (1..=9).collect();
    for size in [1, 2, 4, 9, 10] {
        assert_eq!(
            all_pages(&*store, size, false, None),
            every,
            "page size {size}"
        );
        let mut reversed = every.clone();
        reversed.reverse();
        assert_eq!(
            all_pages(&*store, size, true, None),
            reversed,
            "newest first, size {size}"
        );
        assert_eq!(
            all_pages(&*store, size, false, Some(&a)),
            of_a,
            "run filter, size {size}"
        );
    }
    let none = store
        .audit_page(&AuditPage {
            limit: 0,
            ..AuditPage::default()
        })
        .expect("page");
    assert!(none.is_empty(), "a limit of 0 returns nothing");
}

/// Pruning a run removes none of the audit entries about it.
pub fn a_prune_leaves_the_runs_entries(backend: &mut dyn Backend) {
    let store = backend.fresh();
    let run = store.create_run(None).expect("run").id;
    store
        .append_audit(entry("alice", "abort", Some(&run)))
        .expect("append");
    store.abort(&run, "alice").expect("abort");
    store.prune_run(&run).expect("prune an aborted run");
    store
        .append_audit(entry("admin", "prune", Some(&run)))
        .expect("append the prune");
    let kept: Vec<String> = store
        .audit_page(&AuditPage {
            limit: 10,
            run: Some(run.clone()),
            ..AuditPage::default()
        })
        .expect("page")
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(
        kept,
        ["abort", "prune"],
        "the prune leaves the run's entries"
    );
}
