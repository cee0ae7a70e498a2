//! Unit tests of the review UI: arguments, redirects, the commit plan, the lineage graph.

use airlock_ledger::{Dependency, Digest, Effect, EffectId, EffectState, RunId};

use super::graph::svg;
use super::pages::plan;
use super::*;
use crate::access::{
    load_principals, parse_token_arg, principal_for_token, Role, TokenError, TokenFile,
};

fn effect(seq: u64, state: EffectState, parents: &[u64]) -> Effect {
    Effect {
        id: EffectId(format!("eff_{seq:026}")),
        run_id: RunId("run_0".into()),
        seq,
        method: "POST".into(),
        url: format!("https://api.example.com/items/{seq}"),
        headers: Vec::new(),
        body_digest: Digest::sha256_of(b""),
        body_len: 0,
        rule: Some("items".into()),
        policy_revision: String::new(),
        created_at_ms: 0,
        state,
        state_reason: None,
        decisions: Vec::new(),
        release: None,
        placeholders: Vec::new(),
        depends_on: parents
            .iter()
            .map(|p| Dependency {
                effect: EffectId(format!("eff_{p:026}")),
                value: p.to_string(),
                found_in: "url".into(),
            })
            .collect(),
        approval: None,
        inject: None,
        summary: None,
        adapter: None,
        compensates: None,
        retriable: false,
        earlier_releases: Vec::new(),
        idempotency: None,
        context: None,
    }
}

#[test]
fn reviewer_args_and_next_paths() {
    let parse = |text: &str| parse_token_arg(Role::Reviewer, text);
    assert_eq!(parse("alice=/tmp/a").expect("ok").name, "alice");
    assert!(parse("al ice=/tmp/a").is_err());
    assert!(parse("alice").is_err());
    assert_eq!(safe_next(Some("//evil.example")), "/");
    assert_eq!(safe_next(Some("https://evil.example")), "/");
    assert_eq!(safe_next(Some("/\\evil.example")), "/");
    assert_eq!(safe_next(Some("/\t/evil.example")), "/");
    assert_eq!(safe_next(Some("/\n/evil.example")), "/");
    assert_eq!(safe_next(Some("/runs/x")), "/runs/x");
    assert_eq!(time_utc(0), "1970-01-01 00:00:00");
}

#[test]
fn reviewers_need_long_distinct_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let short = dir.path().join("short");
    std::fs::write(&short, "abc\n").expect("write");
    let same = dir.path().join("same");
    std::fs::write(&same, "admin-token-0123456789\n").expect("write");
    let alice = dir.path().join("alice");
    std::fs::write(&alice, "alice-token-0123456789\n").expect("write");
    let admin = "admin-token-0123456789";
    let file = |name: &str, path: std::path::PathBuf| TokenFile {
        role: Role::Reviewer,
        name: name.into(),
        path,
    };
    assert!(matches!(
        load_principals(admin, &[file("bob", short)]),
        Err(TokenError::Short { .. })
    ));
    assert!(matches!(
        load_principals(admin, &[file("bob", same)]),
        Err(TokenError::Duplicate { .. })
    ));
    let missing = load_principals(admin, &[file("carol", dir.path().join("absent"))])
        .expect_err("a missing file fails the start");
    assert!(
        missing.to_string().contains("--reviewer-token carol="),
        "{missing}"
    );
    let reviewers = load_principals(admin, &[file("alice", alice)]).expect("admin and alice");
    assert_eq!(
        principal_for_token(&reviewers, "alice-token-0123456789")
            .map(|r| (r.name.as_str(), r.role)),
        Some(("alice", Role::Reviewer))
    );
    assert_eq!(
        principal_for_token(&reviewers, admin).map(|r| (r.name.as_str(), r.role)),
        Some(("admin", Role::Admin))
    );
    assert!(principal_for_token(&reviewers, "nobody").is_none());
    assert!(
        !format!("{:?}", reviewers[1]).contains("0123456789"),
        "tokens never show in Debug"
    );
}

#[test]
fn commit_plan_releases_parents_first_and_skips_dependents_of_rejected() {
    let effects = vec![
        effect(1, EffectState::Approved, &[]),
        effect(2, EffectState::Rejected, &[]),
        effect(3, EffectState::Approved, &[2]),
        effect(4, EffectState::Approved, &[3]),
        effect(5, EffectState::Approved, &[1]),
        effect(6, EffectState::Staged, &[]),
    ];
    let strict = plan(&effects, false);
    let seqs = |list: &[&Effect]| list.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(seqs(&strict.release), vec![1, 5]);
    assert_eq!(
        strict.skip.iter().map(|(e, _)| e.seq).collect::<Vec<_>>(),
        vec![3, 4]
    );
    assert!(strict.skip[0].1.contains("#2"), "{}", strict.skip[0].1);
    assert_eq!(seqs(&strict.not_sent), vec![2, 6]);
    assert_eq!(seqs(&strict.undecided), vec![6]);
    let lenient = plan(&effects, true);
    assert_eq!(seqs(&lenient.release), vec![1, 5, 6]);
}

#[test]
fn lineage_graph_lays_out_many_nodes_without_overlap() {
    // 60 effects: chains of three (depths 1, 2, 3), so three effect columns.
    let effects: Vec<Effect> = (1..=60)
        .map(|seq| match seq % 3 {
            1 => effect(seq, EffectState::Staged, &[]),
            _ => effect(seq, EffectState::Staged, &[seq - 1]),
        })
        .collect();
    let edges: Vec<airlock_ledger::Edge> = effects
        .iter()
        .flat_map(airlock_ledger::placeholder_edges)
        .collect();
    let out = svg(&[], &effects, &edges, &|e| e.url.clone()).into_string();
    assert_eq!(out.matches("<rect").count(), 60, "one box per effect");
    assert_eq!(out.matches("class=\"edge placeholder\"").count(), 40);
    // Every box has its own place.
    let mut places: Vec<(String, String)> = out
        .split("<rect x=\"")
        .skip(1)
        .map(|rest| {
            let x = rest.split('"').next().unwrap_or_default().to_owned();
            let y = rest
                .split("y=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or_default()
                .to_owned();
            (x, y)
        })
        .collect();
    places.sort();
    places.dedup();
    assert_eq!(places.len(), 60);
    let columns: std::collections::BTreeSet<&String> = places.iter().map(|(x, _)| x).collect();
    assert_eq!(columns.len(), 3, "one column per dependency depth");
}

fn session() -> Session {
    Session {
        principal: crate::access::Principal::new("alice", Role::Reviewer, "alice-token-0123456789"),
        csrf: "csrf-token".into(),
    }
}

fn violation(action: airlock_policy::FlowAction) -> airlock_dataplane::flows::Violation {
    airlock_dataplane::flows::Violation {
        flow: "no-secrets-out".into(),
        action,
        reason: "secrets <never> leave".into(),
        labels: vec!["secret".into()],
        edge: Some(airlock_ledger::Edge {
            from: airlock_ledger::EdgeSource::Read { seq: 3 },
            to: EffectId(format!("eff_{:026}", 1)),
            kind: airlock_ledger::EdgeKind::Content,
            overlap_bytes: 42,
            overlap_permille: 500,
            excerpt: Some("<script>sk-live-1234</script>".into()),
            detail: None,
        }),
        source: Some("read 3: GET https://vault.example/secret".into()),
    }
}

fn check(actions: &[airlock_policy::FlowAction]) -> airlock_dataplane::flows::FlowCheck {
    airlock_dataplane::flows::FlowCheck {
        analysed: true,
        incomplete: None,
        violations: actions.iter().map(|a| violation(*a)).collect(),
    }
}

#[test]
fn the_flow_rules_block_shows_every_violation_escaped() {
    use airlock_policy::FlowAction;
    let staged = effect(1, EffectState::Staged, &[]);
    let out = flows::flow_section(&staged, &check(&[FlowAction::Review])).into_string();
    assert!(out.contains("Flow rules"), "{out}");
    assert!(out.contains("no-secrets-out"), "{out}");
    assert!(out.contains("review"), "{out}");
    assert!(
        out.contains("secrets &lt;never&gt; leave"),
        "escaped reason: {out}"
    );
    assert!(out.contains("secret"), "labels: {out}");
    assert!(out.contains("42 bytes"), "{out}");
    assert!(
        out.contains("read 3: GET https://vault.example/secret"),
        "{out}"
    );
    assert!(
        out.contains("&lt;script&gt;sk-live-1234&lt;/script&gt;"),
        "escaped excerpt: {out}"
    );
    assert!(!out.contains("<script>"), "{out}");
    assert!(out.contains("Held for your own approval"), "{out}");
    assert!(!out.contains("Analysis incomplete"), "{out}");

    let mut incomplete = check(&[]);
    incomplete.incomplete = Some("not analysed yet".into());
    let out = flows::flow_section(&staged, &incomplete).into_string();
    assert!(out.contains("Analysis incomplete"), "{out}");
    assert!(out.contains("not analysed yet"), "{out}");
}

#[test]
fn a_blocked_effect_has_no_approve_button_and_a_held_one_says_whose_approval() {
    use airlock_policy::FlowAction;
    let session = session();
    let staged = effect(1, EffectState::Staged, &[]);
    let blocked = check(&[FlowAction::Block, FlowAction::Review]);
    let out = flows::verdict_buttons(&session, &staged, Some(&blocked), &[]).into_string();
    assert!(!out.contains("/approve"), "no approve form: {out}");
    assert!(out.contains("cannot be approved"), "{out}");
    assert!(out.contains("/reject"), "reject stays: {out}");
    let section = flows::flow_section(&staged, &blocked).into_string();
    assert!(section.contains("Blocked."), "{section}");

    let held = check(&[FlowAction::Review]);
    let out = flows::verdict_buttons(&session, &staged, Some(&held), &[]).into_string();
    assert!(out.contains("/approve"), "{out}");
    assert!(
        out.contains("your own approval of a flagged effect"),
        "{out}"
    );
    assert!(out.contains("data-confirm"), "{out}");

    let plain = flows::verdict_buttons(&session, &staged, Some(&check(&[])), &[]).into_string();
    assert!(plain.contains(">Approve<"), "{plain}");
    assert!(!plain.contains("flagged"), "{plain}");

    // A bulk approval of a held effect leaves it held: it may be approved again, by itself.
    let mut approved = effect(2, EffectState::Approved, &[]);
    approved.approval = Some(airlock_ledger::Approval::new(
        "admin",
        Digest::sha256_of(b""),
        0,
    ));
    let out = flows::verdict_buttons(&session, &approved, Some(&held), &[]).into_string();
    assert!(out.contains("Approve again"), "{out}");
    let mut explicit = approved.clone();
    if let Some(a) = explicit.approval.as_mut() {
        a.explicit = true;
        a.flows = vec!["no-secrets-out".into()];
    }
    let out = flows::verdict_buttons(&session, &explicit, Some(&held), &[]).into_string();
    assert!(
        !out.contains("/approve"),
        "released by its own approval: {out}"
    );
    assert_eq!(flows::hold(&explicit, Some(&held)), None);
    assert_eq!(flows::hold(&approved, Some(&held)), Some("held"));
    assert_eq!(flows::hold(&staged, Some(&blocked)), Some("blocked"));
}

#[test]
fn a_degraded_or_full_ledger_is_a_503_or_507_page_that_says_when_to_retry() {
    let degraded = UiError::from(LedgerError::Degraded {
        reason: "No space left on device".into(),
    });
    assert_eq!(degraded.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(degraded.code, "ledger_degraded");
    assert!(degraded.hint().contains("/healthz"), "{}", degraded.hint());
    let low = UiError::from(LedgerError::LowSpace {
        free_bytes: 1,
        floor_bytes: 64 << 20,
    });
    assert_eq!(low.status, StatusCode::INSUFFICIENT_STORAGE);
    assert_eq!(low.code, "ledger_low_space");
    assert!(
        low.hint().contains("--ledger-min-free-mib"),
        "{}",
        low.hint()
    );
    let other = UiError::from(LedgerError::storage(std::io::Error::other("boom")));
    assert_eq!(other.status, StatusCode::INTERNAL_SERVER_ERROR);
}

/// The `released` view on the pages: real values in place of the placeholders, every
/// value escaped, and the origin's link a link only when it is `http(s)`.
#[test]
fn released_views_show_real_values_escaped_and_only_http_links() {
    use airlock_ledger::{Header, HeaderText, Placeholder, ReleaseRecord, ValueKind};
    let mut pr = effect(1, EffectState::Released, &[]);
    pr.summary = Some("open PR o/r#? 'Fix'".into());
    pr.placeholders = vec![Placeholder {
        value: "6850552904231873".into(),
        kind: ValueKind::Number,
        pointer: "/number".into(),
        real: Some("42".into()),
    }];
    pr.release = Some(ReleaseRecord {
        started_at_ms: 0,
        finished_at_ms: Some(1),
        status: Some(201),
        headers: vec![Header {
            name: "location".into(),
            value: HeaderText::from_bytes(b"javascript:alert(1)"),
        }],
        body_digest: None,
        body_len: 40,
        error: None,
    });
    let mut comment = effect(2, EffectState::Approved, &[]);
    comment.url = "https://api.example.com/repos/o/r/issues/6850552904231873/comments".into();
    comment.summary = Some("comment on o/r#6850552904231873: 'ok'".into());
    comment.depends_on = vec![Dependency {
        effect: pr.id.clone(),
        value: "6850552904231873".into(),
        found_in: "url".into(),
    }];
    let run = vec![pr.clone(), comment.clone()];
    let answer = b"<script>alert(1)</script> \"quoted\"";
    let view = crate::released::released(&pr, &run, Some(answer)).expect("released");
    let section = released::section(&pr, Some(&view)).into_string();
    assert!(section.contains("open PR o/r#42"), "{section}");
    assert!(section.contains("staged as"), "{section}");
    assert!(
        section.contains("&lt;script&gt;alert(1)&lt;/script&gt; &quot;quoted&quot;"),
        "{section}"
    );
    assert!(!section.contains("<script>"), "{section}");
    assert!(!section.contains("href=\"javascript:"), "{section}");
    assert!(
        section.contains("<code>javascript:alert(1)</code>"),
        "{section}"
    );
    // A dependent not released yet reads with its parent's real value, in the summary
    // and the URL as it will be sent.
    let view = crate::released::released(&comment, &run, None).expect("known values");
    assert_eq!(
        released::summary_now(&comment, Some(&view)),
        "comment on o/r#42: 'ok'"
    );
    let brief = released::brief(&comment, Some(&view)).into_string();
    assert!(brief.contains("/repos/o/r/issues/42/comments"), "{brief}");
    let section = released::section(&comment, Some(&view)).into_string();
    assert!(
        section.contains("With the real values known so far"),
        "{section}"
    );
    // Nothing known: the staged summary, no block.
    let staged = effect(3, EffectState::Staged, &[]);
    assert_eq!(crate::released::released(&staged, &run, None), None);
    assert_eq!(released::brief(&staged, None).into_string(), "");
    assert_eq!(
        released::summary_now(&staged, None),
        "POST api.example.com /items/3"
    );
}
