//! Unit tests of the ledger's state machines and durability.

use super::*;

fn ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(dir.path()).expect("open");
    (dir, ledger)
}

fn stage(ledger: &Ledger, run: &RunId, body: &[u8]) -> Result<Effect> {
    ledger.stage(NewEffect {
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
    })
}

#[test]
fn staging_assigns_sequence_and_stores_body_once() {
    let (_dir, ledger) = ledger();
    let run = ledger.create_run(None).expect("run");
    let a = stage(&ledger, &run.id, b"same").expect("a");
    let b = stage(&ledger, &run.id, b"same").expect("b");
    assert_eq!((a.seq, b.seq), (1, 2));
    assert_eq!(a.body_digest, b.body_digest);
    assert_eq!(
        ledger.body(&a.body_digest).expect("body").as_deref(),
        Some(&b"same"[..])
    );
    let listed = ledger.effects(&run.id).expect("effects");
    assert_eq!(listed.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
}

#[test]
fn sealed_run_refuses_new_effects() {
    let (_dir, ledger) = ledger();
    let run = ledger.create_run(None).expect("run");
    ledger.seal(&run.id, "t").expect("seal");
    let err = stage(&ledger, &run.id, b"x").expect_err("refused");
    assert!(
        matches!(err, LedgerError::Refused(Refused::RunNotOpen { .. })),
        "{err}"
    );
}

#[test]
fn commit_refuses_undecided_unless_approve_pending() {
    let (_dir, ledger) = ledger();
    let run = ledger.create_run(None).expect("run");
    let e = stage(&ledger, &run.id, b"x").expect("stage");
    let err = ledger
        .begin_commit(&run.id, false, "t")
        .expect_err("undecided");
    assert!(
        matches!(err, LedgerError::Refused(Refused::Undecided { ref effects, .. }) if effects == std::slice::from_ref(&e.id))
    );
    let (run2, go) = ledger.begin_commit(&run.id, true, "t").expect("commit");
    assert!(go);
    assert_eq!(run2.state, RunState::Committing);
    assert_eq!(
        ledger.effect(&e.id).expect("get").expect("some").state,
        EffectState::Approved
    );
}

#[test]
fn release_lifecycle_and_second_commit_is_noop() {
    let (_dir, ledger) = ledger();
    let run = ledger.create_run(None).expect("run");
    let e = stage(&ledger, &run.id, b"x").expect("stage");
    let r = stage(&ledger, &run.id, b"y").expect("stage");
    ledger
        .decide_effect(&e.id, Verdict::Approve, "rev")
        .expect("approve");
    ledger
        .decide_effect(&r.id, Verdict::Reject, "rev")
        .expect("reject");
    ledger.begin_commit(&run.id, false, "t").expect("commit");
    ledger.mark_releasing(&e.id).expect("releasing");
    assert!(
        ledger.mark_releasing(&r.id).is_err(),
        "rejected is never released"
    );
    ledger
        .record_release(
            &e.id,
            ReleaseOutcome {
                status: Some(200),
                body: b"ok",
                body_len: 2,
                ..ReleaseOutcome::default()
            },
        )
        .expect("record");
    let done = ledger.finish_commit(&run.id).expect("finish");
    assert_eq!(done.state, RunState::Committed);
    let (again, go) = ledger.begin_commit(&run.id, false, "t").expect("again");
    assert!(!go);
    assert_eq!(again.state, RunState::Committed);
    assert!(ledger
        .decide_effect(&r.id, Verdict::Approve, "rev")
        .is_err());
}

#[test]
fn abort_discards_pending_and_refuses_after_commit() {
    let (_dir, ledger) = ledger();
    let run = ledger.create_run(None).expect("run");
    let e = stage(&ledger, &run.id, b"x").expect("stage");
    ledger.abort(&run.id, "t").expect("abort");
    assert_eq!(
        ledger.effect(&e.id).expect("get").expect("some").state,
        EffectState::Discarded
    );
    assert!(ledger.begin_commit(&run.id, true, "t").is_err());
}

#[test]
fn recovery_marks_releasing_unknown_across_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let id;
    {
        let ledger = Ledger::open(dir.path()).expect("open");
        let run = ledger.create_run(None).expect("run");
        let e = stage(&ledger, &run.id, b"x").expect("stage");
        ledger.begin_commit(&run.id, true, "t").expect("commit");
        ledger.mark_releasing(&e.id).expect("releasing");
        id = e.id;
    }
    // sled's flusher thread may hold the directory lock for a moment after the drop.
    let mut reopened = Ledger::open(dir.path());
    for _ in 0..100 {
        if reopened.is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        reopened = Ledger::open(dir.path());
    }
    let ledger = reopened.expect("reopen");
    let changed = ledger.recover().expect("recover");
    assert_eq!(changed.len(), 1);
    assert_eq!(
        ledger.effect(&id).expect("get").expect("some").state,
        EffectState::Unknown
    );
    assert!(
        ledger.mark_releasing(&id).is_err(),
        "unknown is never re-sent"
    );
}

#[test]
fn a_plaintext_token_is_rewritten_as_its_keyed_hash_on_open_and_still_works() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = crate::RunTokens::from_key([1; 32]);
    let id = {
        let ledger = Ledger::open(dir.path()).expect("open");
        ledger.create_run(None).expect("run").id
    };
    let old = "0123456789abcdef0123456789abcdef0123456789abcdef";
    crate::conformance::write_plaintext_token(dir.path(), &id, old).expect("legacy record");
    let ledger = Ledger::open(dir.path()).expect("reopen");
    let before = ledger.run(&id).expect("read").expect("run");
    assert_eq!(before.plaintext_token.as_deref(), Some(old));
    assert_eq!(ledger.hash_plaintext_tokens(&tokens).expect("rewrite"), 1);
    assert_eq!(ledger.hash_plaintext_tokens(&tokens).expect("again"), 0);
    let after = ledger.run(&id).expect("read").expect("run");
    assert_eq!(after.plaintext_token, None);
    assert_eq!(after.token_hash, Some(tokens.hash_legacy(old)));
    drop(ledger);
    let ledger = Ledger::open(dir.path()).expect("reopen");
    // The live record holds none of it (sled's log keeps the old record's bytes until it
    // reuses the segment: docs/fleet.md, "The run token key").
    let record = serde_json::to_string(&ledger.run(&id).expect("read")).expect("json");
    assert!(!record.contains(old), "{record}");
    assert!(ledger
        .authenticate(&tokens, &id.0, old)
        .expect("auth")
        .is_some());
    assert!(ledger
        .authenticate(&tokens, &id.0, &tokens.token_for(&id))
        .expect("auth")
        .is_none());
}

#[test]
fn authenticate_checks_token() {
    let (_dir, ledger) = ledger();
    let tokens = crate::RunTokens::from_key([1; 32]);
    let run = ledger.create_run(None).expect("run");
    let token = tokens.token_for(&run.id);
    assert!(ledger
        .authenticate(&tokens, &run.id.0, &token)
        .expect("auth")
        .is_some());
    assert!(ledger
        .authenticate(&tokens, &run.id.0, "wrong")
        .expect("auth")
        .is_none());
    assert!(ledger
        .authenticate(&crate::RunTokens::from_key([2; 32]), &run.id.0, &token)
        .expect("auth")
        .is_none());
    assert!(ledger
        .authenticate(&tokens, "run_nonsense", &token)
        .expect("auth")
        .is_none());
}

#[test]
fn reads_are_journaled_in_order() {
    let (_dir, ledger) = ledger();
    let run = ledger.create_run(None).expect("run");
    for _ in 0..3 {
        ledger
            .journal_read(Read {
                run_id: run.id.clone(),
                seq: 0,
                method: "GET".into(),
                url: "https://example.com:443/".into(),
                status: Some(200),
                request_bytes: 0,
                response_bytes: 2,
                response_digest: Some(Digest::sha256_of(b"ok")),
                rule: None,
                created_at_ms: now_ms(),
                error: None,
                audit: Vec::new(),
                labels: Vec::new(),
            })
            .expect("read");
    }
    let reads = ledger.reads(&run.id).expect("reads");
    assert_eq!(
        reads.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
}

#[test]
fn batched_reads_get_consecutive_numbers_and_read_back_in_order() {
    let (_dir, ledger) = ledger();
    let one = ledger.create_run(None).expect("run");
    let two = ledger.create_run(None).expect("run");
    let read = |run: &Run, url: &str| Read {
        run_id: run.id.clone(),
        seq: 0,
        method: "GET".into(),
        url: url.into(),
        status: Some(200),
        request_bytes: 0,
        response_bytes: 2,
        response_digest: Some(Digest::sha256_of(b"ok")),
        rule: None,
        created_at_ms: now_ms(),
        error: None,
        audit: Vec::new(),
        labels: Vec::new(),
    };
    ledger
        .journal_read(read(&one, "https://a/1"))
        .expect("read");
    let journaled = ledger
        .journal_reads(vec![
            read(&one, "https://a/2"),
            read(&two, "https://b/1"),
            read(&one, "https://a/3"),
            read(&one, "https://a/4"),
        ])
        .expect("batch");
    assert_eq!(
        journaled
            .iter()
            .map(|r| (r.seq, r.url.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (2, "https://a/2"),
            (1, "https://b/1"),
            (3, "https://a/3"),
            (4, "https://a/4")
        ],
        "returned in the order given"
    );
    ledger
        .journal_read(read(&one, "https://a/5"))
        .expect("read");
    let reads = ledger.reads(&one.id).expect("reads");
    assert_eq!(
        reads
            .iter()
            .map(|r| (r.seq, r.url.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (1, "https://a/1"),
            (2, "https://a/2"),
            (3, "https://a/3"),
            (4, "https://a/4"),
            (5, "https://a/5")
        ]
    );
    let reads = ledger.reads(&two.id).expect("reads");
    assert_eq!(
        reads
            .iter()
            .map(|r| (r.seq, r.url.as_str()))
            .collect::<Vec<_>>(),
        vec![(1, "https://b/1")]
    );
}

#[test]
fn flags_are_kept_on_the_run_up_to_the_cap() {
    let (_dir, ledger) = ledger();
    let run = ledger.create_run(None).expect("run");
    let flag = |n: usize| RunFlag {
        code: "credential_placeholder_off_host".into(),
        detail: format!("attempt {n}"),
        at_ms: 1,
    };
    assert!(ledger.flag_run(&run.id, flag(0)).expect("flag"));
    let stored = ledger.run(&run.id).expect("read").expect("run");
    assert_eq!(stored.flags, vec![flag(0)]);
    for n in 1..MAX_RUN_FLAGS {
        assert!(ledger.flag_run(&run.id, flag(n)).expect("flag"));
    }
    assert!(!ledger.flag_run(&run.id, flag(999)).expect("flag"));
    let stored = ledger.run(&run.id).expect("read").expect("run");
    assert_eq!(stored.flags.len(), MAX_RUN_FLAGS);
}

#[test]
fn approval_is_bound_to_the_body_digest_and_a_changed_request_is_refused() {
    let (_dir, ledger) = ledger();
    let run = ledger.create_run(None).expect("run");
    let staged = stage(&ledger, &run.id, b"{\"n\":1}").expect("stage");
    let approved = ledger
        .decide_effect(&staged.id, Verdict::Approve, "alice")
        .expect("approve");
    let approval = approved.approval.clone().expect("approval recorded");
    assert_eq!(approval.by, "alice");
    assert_eq!(approval.body_digest, staged.body_digest);
    assert!(approval.at_ms > 0);
    approved
        .check_approval(b"{\"n\":1}")
        .expect("the approved body passes");

    // The stored body no longer matches the effect's digest.
    let err = approved.check_approval(b"{\"n\":2}").expect_err("body");
    assert!(matches!(err, ApprovalMismatch::Body { .. }), "{err}");

    // The effect's request is changed after approval (no API does this; written directly).
    let mut changed = approved.clone();
    let new_body = b"{\"n\":2}";
    changed.body_digest = Digest::sha256_of(new_body);
    ledger.put_effect(&changed).expect("put");
    let reloaded = ledger.effect(&changed.id).expect("load").expect("some");
    let err = reloaded.check_approval(new_body).expect_err("changed");
    assert!(matches!(err, ApprovalMismatch::Changed { .. }), "{err}");
    assert!(
        err.to_string().contains("approved by") || err.to_string().contains("alice approved"),
        "{err}"
    );

    // Approving again binds the new request; rejecting clears the approval.
    let again = ledger
        .decide_effect(&changed.id, Verdict::Approve, "bob")
        .expect("approve again");
    again
        .check_approval(new_body)
        .expect("bound to the new body");
    let rejected = ledger
        .decide_effect(&changed.id, Verdict::Reject, "bob")
        .expect("reject");
    assert_eq!(rejected.approval, None);
}

#[test]
fn approve_pending_records_the_approval_too() {
    let (_dir, ledger) = ledger();
    let run = ledger.create_run(None).expect("run");
    let staged = stage(&ledger, &run.id, b"x").expect("stage");
    ledger.begin_commit(&run.id, true, "carol").expect("commit");
    let effect = ledger.effect(&staged.id).expect("load").expect("some");
    let approval = effect.approval.expect("approval");
    assert_eq!(approval.by, "carol (approve_pending)");
    assert_eq!(approval.body_digest, staged.body_digest);
}

#[test]
fn an_adapters_notes_are_kept_and_old_records_read_without_them() {
    let (dir, ledger) = ledger();
    let run = ledger.create_run(None).expect("run");
    let original = stage(&ledger, &run.id, b"x").expect("staged");
    let noted = ledger
        .stage_with(
            NewEffect {
                run_id: &run.id,
                method: "POST",
                url: "https://api.example/repos/o/r/pulls",
                headers: Vec::new(),
                body: b"{}",
                rule: None,
                policy_revision: "abc",
                placeholders: Vec::new(),
                depends_on: Vec::new(),
                inject: None,
            },
            EffectNotes {
                summary: Some("open PR o/r#? 'x'".into()),
                adapter: Some("github".into()),
                compensates: Some(original.id.clone()),
                idempotency: None,
                context: None,
            },
        )
        .expect("staged with notes");
    drop(ledger);
    // sled's flusher thread lets go of the directory lock a moment after the drop.
    let mut reopened = Ledger::open(dir.path());
    for _ in 0..100 {
        if reopened.is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        reopened = Ledger::open(dir.path());
    }
    let ledger = reopened.expect("reopen");
    let read = ledger.effect(&noted.id).expect("read").expect("present");
    assert_eq!(read.summary.as_deref(), Some("open PR o/r#? 'x'"));
    assert_eq!(read.adapter.as_deref(), Some("github"));
    assert_eq!(read.compensates, Some(original.id));
    // A record written before adapters existed has no notes.
    let mut old = serde_json::to_value(&read).expect("json");
    for key in ["summary", "adapter", "compensates"] {
        old.as_object_mut().expect("object").remove(key);
    }
    let old: Effect = serde_json::from_value(old).expect("old records still read");
    assert_eq!(
        (old.summary, old.adapter, old.compensates),
        (None, None, None)
    );
}

#[test]
fn digests_are_lowercase_hex_sha256() {
    assert_eq!(
        Digest::sha256_of(b"").to_string(),
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

#[test]
fn a_ledger_larger_than_its_cache_keeps_and_returns_every_effect_after_reopen() {
    // 1 MiB of cache, ~6 MiB of bodies: most pages must leave memory and come back from disk.
    let dir = tempfile::tempdir().expect("tempdir");
    let bodies: Vec<Vec<u8>> = (0..1500u32)
        .map(|i| format!("{i:05}").repeat(800).into_bytes())
        .collect();
    let run = {
        let ledger = Ledger::open_with_cache(dir.path(), 1 << 20).expect("open");
        let run = ledger.create_run(None).expect("run");
        for body in &bodies {
            stage(&ledger, &run.id, body).expect("stage");
        }
        ledger.flush().expect("flush");
        run.id
    };
    let ledger = Ledger::open_with_cache(dir.path(), 1 << 20).expect("reopen");
    let effects = ledger.effects(&run).expect("effects");
    assert_eq!(effects.len(), bodies.len());
    for (effect, body) in effects.iter().zip(&bodies) {
        let stored = ledger.body(&effect.body_digest).expect("body");
        assert_eq!(
            stored.as_deref(),
            Some(body.as_slice()),
            "effect {}",
            effect.seq
        );
    }
}

#[test]
fn records_written_before_release_outcomes_still_read() {
    // A failed effect and a decision as airlock wrote them before retry and settle existed:
    // no `retriable`, `earlier_releases`, `idempotency` or decision `note`.
    let (_dir, ledger) = ledger();
    let run = ledger.create_run(None).expect("run");
    let staged = stage(&ledger, &run.id, b"x").expect("staged");
    let mut old = serde_json::to_value(&staged).expect("json");
    let object = old.as_object_mut().expect("object");
    object.insert("state".into(), serde_json::json!("failed"));
    object.insert(
        "decisions".into(),
        serde_json::json!([{"kind": "approve", "by": "admin", "at_ms": 1}]),
    );
    for key in ["retriable", "earlier_releases", "idempotency"] {
        object.remove(key);
    }
    let old: Effect = serde_json::from_value(old).expect("old records still read");
    assert_eq!(old.state, EffectState::Failed);
    assert!(!old.retriable, "an old failure is not provably unsent");
    assert!(old.earlier_releases.is_empty() && old.idempotency.is_none());
    assert_eq!(old.decisions[0].note, None);
    assert!(!crate::rules::outcome::is_retriable(&old));
}
