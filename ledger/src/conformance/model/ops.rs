//! The model test's operations, and the proptest strategy that draws sequences of them.

use proptest::prelude::*;

/// One operation; `run` and `effect` index the runs and effects created so far (modulo
/// their count; an operation on a run before any exists names an unknown run).
#[derive(Debug, Clone)]
#[expect(missing_docs, reason = "the fields are the store methods' arguments")]
pub enum Op {
    CreateRun,
    Stage {
        run: usize,
        body: u8,
        numbers: u8,
        strings: u8,
        depends_on: Option<usize>,
    },
    Decide {
        effect: usize,
        approve: bool,
    },
    Seal {
        run: usize,
    },
    BeginCommit {
        run: usize,
        approve_pending: bool,
    },
    FinishCommit {
        run: usize,
    },
    Abort {
        run: usize,
    },
    MarkReleasing {
        effect: usize,
    },
    RecordRelease {
        effect: usize,
        ok: bool,
        delivery: u8,
    },
    Retry {
        effect: usize,
    },
    Settle {
        effect: usize,
        delivered: bool,
        value: Option<u8>,
    },
    SettleUnsent {
        effect: usize,
        skipped: bool,
    },
    Recover,
    FlagRun {
        run: usize,
    },
    Authenticate {
        run: usize,
        right: bool,
    },
    JournalRead {
        run: usize,
    },
    JournalReads {
        runs: Vec<usize>,
    },
    JournalDenial {
        run: usize,
    },
    StoreReadContent {
        run: usize,
        seq: u64,
        fingerprints: Vec<u64>,
    },
    StoreEffectLineage {
        effect: usize,
    },
    AttachWorkspace {
        run: usize,
    },
    RecordStep {
        run: usize,
    },
    AddSavepoint {
        run: usize,
        name: u8,
    },
    DecideWorkspace {
        run: usize,
        kind: u8,
        after_seq: u64,
    },
    FinishWorkspaceDecision {
        run: usize,
        unverified: bool,
    },
    DiscardEffectsAfter {
        run: usize,
        after_seq: u64,
    },
    /// Acquires a run's release lease (holder `h0`, `h1` or `h2`, a TTL no test outlives).
    AcquireLease {
        run: usize,
        holder: u8,
    },
    /// Gives up a lease granted earlier (`back` grants before the run's newest).
    GiveUpLease {
        run: usize,
        back: u8,
    },
    /// `mark_releasing_fenced` under the effect's run's newest lease, or one granted
    /// `back` grants before it (stale), or a made-up one when none was granted.
    MarkReleasingFenced {
        effect: usize,
        back: u8,
    },
    /// `record_release_fenced`, with the lease chosen as for `MarkReleasingFenced`.
    RecordReleaseFenced {
        effect: usize,
        ok: bool,
        back: u8,
    },
    /// `settle_unsent_fenced` (`skipped`), with the lease chosen as above.
    SettleUnsentFenced {
        effect: usize,
        back: u8,
    },
    /// `finish_commit_fenced`, with the run's lease chosen as above.
    FinishCommitFenced {
        run: usize,
        back: u8,
    },
    /// Reads back everything about one run.
    Query {
        run: usize,
    },
    /// Lists every run.
    Runs,
    /// Prunes a run ([`crate::RunStore::prune_run`]).
    Prune {
        run: usize,
    },
    /// Follows every page of [`crate::RunStore::runs_page`] of `limit` runs (either way).
    RunsPaged {
        limit: usize,
        newest_first: bool,
    },
}

/// Sequences of 1 to `max_len` operations, biased towards creating runs and staging.
pub fn operations(max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    let run = 0usize..4;
    let effect = 0usize..8;
    let op = prop_oneof![
        3 => Just(Op::CreateRun),
        4 => (run.clone(), 0u8..3, 0u8..2, 0u8..2, proptest::option::of(effect.clone()))
            .prop_map(|(run, body, numbers, strings, depends_on)| Op::Stage { run, body, numbers, strings, depends_on }),
        3 => (effect.clone(), any::<bool>()).prop_map(|(effect, approve)| Op::Decide { effect, approve }),
        1 => run.clone().prop_map(|run| Op::Seal { run }),
        2 => (run.clone(), any::<bool>()).prop_map(|(run, approve_pending)| Op::BeginCommit { run, approve_pending }),
        1 => run.clone().prop_map(|run| Op::FinishCommit { run }),
        1 => run.clone().prop_map(|run| Op::Abort { run }),
        2 => effect.clone().prop_map(|effect| Op::MarkReleasing { effect }),
        2 => (effect.clone(), any::<bool>(), 0u8..3).prop_map(|(effect, ok, delivery)| Op::RecordRelease { effect, ok, delivery }),
        1 => effect.clone().prop_map(|effect| Op::Retry { effect }),
        1 => (effect.clone(), any::<bool>(), proptest::option::of(0u8..3))
            .prop_map(|(effect, delivered, value)| Op::Settle { effect, delivered, value }),
        1 => (effect.clone(), any::<bool>()).prop_map(|(effect, skipped)| Op::SettleUnsent { effect, skipped }),
        1 => Just(Op::Recover),
        1 => run.clone().prop_map(|run| Op::FlagRun { run }),
        1 => (run.clone(), any::<bool>()).prop_map(|(run, right)| Op::Authenticate { run, right }),
        2 => run.clone().prop_map(|run| Op::JournalRead { run }),
        1 => proptest::collection::vec(run.clone(), 0..4).prop_map(|runs| Op::JournalReads { runs }),
        1 => run.clone().prop_map(|run| Op::JournalDenial { run }),
        1 => (run.clone(), 1u64..4, proptest::collection::vec(any::<u64>(), 0..3))
            .prop_map(|(run, seq, fingerprints)| Op::StoreReadContent { run, seq, fingerprints }),
        1 => effect.clone().prop_map(|effect| Op::StoreEffectLineage { effect }),
        1 => run.clone().prop_map(|run| Op::AttachWorkspace { run }),
        1 => run.clone().prop_map(|run| Op::RecordStep { run }),
        1 => (run.clone(), 0u8..3).prop_map(|(run, name)| Op::AddSavepoint { run, name }),
        1 => (run.clone(), 0u8..3, 0u64..4).prop_map(|(run, kind, after_seq)| Op::DecideWorkspace { run, kind, after_seq }),
        1 => (run.clone(), any::<bool>()).prop_map(|(run, unverified)| Op::FinishWorkspaceDecision { run, unverified }),
        1 => (run.clone(), 0u64..4).prop_map(|(run, after_seq)| Op::DiscardEffectsAfter { run, after_seq }),
        2 => (run.clone(), 0u8..3).prop_map(|(run, holder)| Op::AcquireLease { run, holder }),
        1 => (run.clone(), 0u8..2).prop_map(|(run, back)| Op::GiveUpLease { run, back }),
        2 => (effect.clone(), 0u8..2).prop_map(|(effect, back)| Op::MarkReleasingFenced { effect, back }),
        2 => (effect.clone(), any::<bool>(), 0u8..2).prop_map(|(effect, ok, back)| Op::RecordReleaseFenced { effect, ok, back }),
        1 => (effect.clone(), 0u8..2).prop_map(|(effect, back)| Op::SettleUnsentFenced { effect, back }),
        1 => (run.clone(), 0u8..2).prop_map(|(run, back)| Op::FinishCommitFenced { run, back }),
        2 => run.clone().prop_map(|run| Op::Query { run }),
        1 => Just(Op::Runs),
        1 => run.prop_map(|run| Op::Prune { run }),
        1 => (1usize..4, any::<bool>()).prop_map(|(limit, newest_first)| Op::RunsPaged { limit, newest_first }),
    ];
    proptest::collection::vec(op, 1..=max_len)
}
