//! Unit tests of expectations: what changes the digest, what each scope covers, the
//! CLI's text form.

use airlock_ledger::{EffectStore, MemoryStore, NewEffect, RunStore, Verdict};

use super::*;

fn stage(store: &MemoryStore, run: &RunId, rule: &str) -> Effect {
    store
        .stage(NewEffect {
            run_id: run,
            method: "POST",
            url: "https://api.example.com/hooks",
            headers: Vec::new(),
            body: b"{}",
            rule: Some(rule),
            policy_revision: "r",
            placeholders: Vec::new(),
            depends_on: Vec::new(),
            inject: None,
        })
        .expect("stage")
}

#[test]
fn a_commit_expectation_changes_with_every_effect_staged_or_decided_and_names_the_new_ones() {
    let store = MemoryStore::new();
    let run = store.create_run(None).expect("run").id;
    let first = stage(&store, &run, "hooks");
    stage(&store, &run, "hooks");
    let shown = Expectation::of(&store.effects(&run).expect("effects"), Scope::Commit);
    assert_eq!(shown.through_seq, 2);
    assert!(check(
        &run,
        &store.effects(&run).expect("effects"),
        Scope::Commit,
        &shown
    )
    .is_ok());

    let third = stage(&store, &run, "hooks");
    let changed = check(
        &run,
        &store.effects(&run).expect("effects"),
        Scope::Commit,
        &shown,
    )
    .expect_err("a third effect");
    assert_eq!(
        changed.added.iter().map(|e| &e.id).collect::<Vec<_>>(),
        vec![&third.id]
    );
    assert_eq!(changed.covered.len(), 3);
    assert_eq!(changed.now.through_seq, 3);
    assert!(
        changed
            .to_string()
            .contains("1 effect(s) staged since (#3)"),
        "{changed}"
    );

    // A decision on a shown effect changes it too, with nothing added.
    let shown = changed.now.clone();
    store
        .decide_effect(&first.id, Verdict::Approve, "bob")
        .expect("approve");
    let changed = check(
        &run,
        &store.effects(&run).expect("effects"),
        Scope::Commit,
        &shown,
    )
    .expect_err("the first is approved now");
    assert!(changed.added.is_empty());
    assert!(changed.to_string().contains("decided since"), "{changed}");
}

#[test]
fn a_rule_expectation_covers_only_the_staged_effects_of_its_rule() {
    let store = MemoryStore::new();
    let run = store.create_run(None).expect("run").id;
    stage(&store, &run, "hooks");
    let shown = Expectation::of(
        &store.effects(&run).expect("effects"),
        Scope::Rule(Some("hooks")),
    );
    // Another rule's effect is not covered…
    stage(&store, &run, "items");
    let effects = store.effects(&run).expect("effects");
    assert!(check(&run, &effects, Scope::Rule(Some("hooks")), &shown).is_ok());
    // …and it is the only one of its rule (the default rule covers none).
    let items = Expectation::of(&effects, Scope::Rule(Some("items")));
    assert_ne!(items.digest, shown.digest);
    assert_eq!(
        Expectation::of(&effects, Scope::Rule(None)).digest,
        Digest::sha256_of(b"").to_string()
    );
    stage(&store, &run, "hooks");
    let changed = check(
        &run,
        &store.effects(&run).expect("effects"),
        Scope::Rule(Some("hooks")),
        &shown,
    )
    .expect_err("a second hooks effect");
    assert_eq!(changed.added.len(), 1);
    assert_eq!(changed.added[0].seq, 3);
}

#[test]
fn the_text_form_round_trips_and_refuses_anything_else() {
    let store = MemoryStore::new();
    let run = store.create_run(None).expect("run").id;
    stage(&store, &run, "hooks");
    let shown = Expectation::of(&store.effects(&run).expect("effects"), Scope::Commit);
    let text = shown.to_string();
    assert!(text.starts_with("1:sha256:"), "{text}");
    assert_eq!(Expectation::parse(&text), Some(shown));
    for bad in ["", "1", "x:sha256:00", "1:md5:00", "1:sha256:abc"] {
        assert_eq!(Expectation::parse(bad), None, "{bad:?}");
    }
}
