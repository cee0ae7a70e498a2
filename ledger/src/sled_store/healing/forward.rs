//! [`Store`] for [`HealingLedger`]: every method of every concern forwards to the current
//! [`super::Ledger`] through [`HealingLedger::with`] (staging, and the journal's reads,
//! denials and lineage, through [`HealingLedger::with_space`], which checks the
//! free-space floor first: issue 38 item 2).

use std::sync::mpsc::Receiver;

use super::HealingLedger;
use crate::audit::{AuditEntry, AuditPage, NewAuditEntry};
use crate::change::Change;
use crate::denials::Denial;
use crate::lease::Lease;
use crate::lineage::{EffectLineage, ReadContent};
use crate::model::{
    Digest, Effect, EffectId, EffectNotes, EffectState, IssuedPlaceholder, NewEffect, Read, Run,
    RunFlag, RunId,
};
use crate::store::{
    AuditStore, EffectStore, Health, JournalStore, LeaseStore, LineageStore, Pruned, RunPage,
    RunStore, Store, WorkspaceStore,
};
use crate::workspace::{Savepoint, StepRecord, WorkspaceDecision, WorkspaceRecord};
use crate::{ReleaseOutcome, Result, Settlement, Verdict};

impl Store for HealingLedger {
    fn flush(&self) -> Result<()> {
        self.with(|l| l.flush())
    }

    fn size_on_disk(&self) -> Result<u64> {
        self.with(|l| l.size_on_disk())
    }

    fn cache_capacity(&self) -> u64 {
        self.cache_bytes
    }

    fn subscribe(&self) -> Receiver<Change> {
        self.notifier.subscribe()
    }

    fn health(&self) -> Health {
        HealingLedger::health(self)
    }

    fn journal_room(&self) -> Result<()> {
        HealingLedger::journal_room(self)
    }
}

impl RunStore for HealingLedger {
    fn create_run_from(&self, profile: Option<String>, source: Option<String>) -> Result<Run> {
        self.with(|l| l.create_run_from(profile, source))
    }

    fn run(&self, id: &RunId) -> Result<Option<Run>> {
        self.with(|l| l.run(id))
    }

    fn hash_plaintext_tokens(&self, tokens: &crate::RunTokens) -> Result<usize> {
        self.with(|l| l.hash_plaintext_tokens(tokens))
    }

    fn runs(&self) -> Result<Vec<Run>> {
        self.with(|l| l.runs())
    }

    fn runs_page(&self, page: &RunPage) -> Result<Vec<Run>> {
        self.with(|l| l.runs_page(page))
    }

    fn prune_run(&self, id: &RunId) -> Result<Pruned> {
        self.with(|l| l.prune_run(id))
    }

    fn flag_run(&self, id: &RunId, flag: RunFlag) -> Result<bool> {
        self.with(|l| l.flag_run(id, flag))
    }

    fn seal(&self, id: &RunId, by: &str) -> Result<Run> {
        self.with(|l| l.seal(id, by))
    }

    fn begin_commit(&self, id: &RunId, approve_pending: bool, by: &str) -> Result<(Run, bool)> {
        self.with(|l| l.begin_commit(id, approve_pending, by))
    }

    fn finish_commit(&self, id: &RunId) -> Result<Run> {
        self.with(|l| l.finish_commit(id))
    }

    fn abort(&self, id: &RunId, by: &str) -> Result<Run> {
        self.with(|l| l.abort(id, by))
    }
}

impl EffectStore for HealingLedger {
    fn stage_with(&self, new: NewEffect<'_>, notes: EffectNotes) -> Result<Effect> {
        self.with_space(|l| l.stage_with(new, notes))
    }

    fn effect(&self, id: &EffectId) -> Result<Option<Effect>> {
        self.with(|l| l.effect(id))
    }

    fn effects(&self, run: &RunId) -> Result<Vec<Effect>> {
        self.with(|l| l.effects(run))
    }

    fn body(&self, digest: &Digest) -> Result<Option<Vec<u8>>> {
        self.with(|l| l.body(digest))
    }

    fn decide_effect(&self, id: &EffectId, verdict: Verdict, by: &str) -> Result<Effect> {
        self.with(|l| l.decide_effect(id, verdict, by))
    }

    fn approve_explicitly(&self, id: &EffectId, by: &str, flows: &[String]) -> Result<Effect> {
        self.with(|l| l.approve_explicitly(id, by, flows))
    }

    fn mark_releasing(&self, id: &EffectId) -> Result<Effect> {
        self.with(|l| l.mark_releasing(id))
    }

    fn record_release(&self, id: &EffectId, outcome: ReleaseOutcome<'_>) -> Result<Effect> {
        self.with(|l| l.record_release(id, outcome))
    }

    fn settle_unsent(&self, id: &EffectId, to: EffectState, reason: &str) -> Result<Effect> {
        self.with(|l| l.settle_unsent(id, to, reason))
    }

    fn recover(&self) -> Result<Vec<Effect>> {
        self.with(|l| l.recover())
    }

    fn retry(&self, id: &EffectId, by: &str) -> Result<Vec<Effect>> {
        self.with(|l| l.retry(id, by))
    }

    fn settle(&self, id: &EffectId, settlement: &Settlement, by: &str) -> Result<Vec<Effect>> {
        self.with(|l| l.settle(id, settlement, by))
    }
}

impl JournalStore for HealingLedger {
    fn journal_read(&self, read: Read) -> Result<Read> {
        self.with_space(|l| l.journal_read(read))
    }

    fn journal_reads(&self, reads: Vec<Read>) -> Result<Vec<Read>> {
        self.with_space(|l| l.journal_reads(reads))
    }

    fn reads(&self, run: &RunId) -> Result<Vec<Read>> {
        self.with(|l| l.reads(run))
    }

    fn journal_denial(&self, denial: Denial) -> Result<u64> {
        self.with_space(|l| l.journal_denial(denial))
    }

    fn denials(&self, run: &RunId) -> Result<Vec<Denial>> {
        self.with(|l| l.denials(run))
    }
}

impl LineageStore for HealingLedger {
    fn placeholders(&self, run: &RunId) -> Result<Vec<IssuedPlaceholder>> {
        self.with(|l| l.placeholders(run))
    }

    fn store_read_content(
        &self,
        run: &RunId,
        content: &ReadContent,
        fingerprints: &[u64],
    ) -> Result<()> {
        self.with_space(|l| l.store_read_content(run, content, fingerprints))
    }

    fn read_contents(&self, run: &RunId) -> Result<Vec<(ReadContent, Vec<u64>)>> {
        self.with(|l| l.read_contents(run))
    }

    fn store_effect_lineage(&self, effect: &EffectId, lineage: &EffectLineage) -> Result<()> {
        self.with_space(|l| l.store_effect_lineage(effect, lineage))
    }

    fn effect_lineage(&self, effect: &EffectId) -> Result<Option<EffectLineage>> {
        self.with(|l| l.effect_lineage(effect))
    }
}

impl WorkspaceStore for HealingLedger {
    fn workspace(&self, run: &RunId) -> Result<Option<WorkspaceRecord>> {
        self.with(|l| l.workspace(run))
    }

    fn attach_workspace(&self, run: &RunId, record: WorkspaceRecord) -> Result<WorkspaceRecord> {
        self.with(|l| l.attach_workspace(run, record))
    }

    fn record_step(&self, run: &RunId, step: StepRecord) -> Result<WorkspaceRecord> {
        self.with(|l| l.record_step(run, step))
    }

    fn last_effect_seq(&self, run: &RunId) -> Result<u64> {
        self.with(|l| l.last_effect_seq(run))
    }

    fn add_savepoint(&self, run: &RunId, name: &str, snapshot: &str) -> Result<Savepoint> {
        self.with(|l| l.add_savepoint(run, name, snapshot))
    }

    fn decide_workspace(
        &self,
        run: &RunId,
        decision: WorkspaceDecision,
    ) -> Result<(WorkspaceDecision, bool)> {
        self.with(|l| l.decide_workspace(run, decision))
    }

    fn finish_workspace_decision(
        &self,
        run: &RunId,
        residue: Vec<String>,
        unverified: bool,
        outcome: &str,
    ) -> Result<WorkspaceRecord> {
        self.with(|l| l.finish_workspace_decision(run, residue, unverified, outcome))
    }

    fn discard_effects_after(
        &self,
        run: &RunId,
        after_seq: u64,
        reason: &str,
    ) -> Result<Vec<Effect>> {
        self.with(|l| l.discard_effects_after(run, after_seq, reason))
    }
}

impl LeaseStore for HealingLedger {
    fn acquire_lease(
        &self,
        run: &RunId,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<(Lease, Vec<Effect>)> {
        self.with(|l| l.acquire_lease(run, holder, ttl_ms))
    }

    fn renew_lease(&self, lease: &Lease, ttl_ms: u64) -> Result<Lease> {
        self.with(|l| l.renew_lease(lease, ttl_ms))
    }

    fn give_up_lease(&self, lease: &Lease) -> Result<bool> {
        self.with(|l| l.give_up_lease(lease))
    }

    fn lease(&self, run: &RunId) -> Result<Option<Lease>> {
        self.with(|l| l.lease(run))
    }

    fn mark_releasing_fenced(&self, id: &EffectId, fence: &Lease) -> Result<Effect> {
        self.with(|l| l.mark_releasing_fenced(id, fence))
    }

    fn record_release_fenced(
        &self,
        id: &EffectId,
        outcome: ReleaseOutcome<'_>,
        fence: &Lease,
    ) -> Result<Effect> {
        self.with(|l| l.record_release_fenced(id, outcome, fence))
    }

    fn settle_unsent_fenced(
        &self,
        id: &EffectId,
        to: EffectState,
        reason: &str,
        fence: &Lease,
    ) -> Result<Effect> {
        self.with(|l| l.settle_unsent_fenced(id, to, reason, fence))
    }

    fn finish_commit_fenced(&self, run: &RunId, fence: &Lease) -> Result<Run> {
        self.with(|l| l.finish_commit_fenced(run, fence))
    }
}

impl AuditStore for HealingLedger {
    fn append_audit(&self, entry: NewAuditEntry) -> Result<AuditEntry> {
        self.with(|l| l.append_audit(entry))
    }

    fn audit_page(&self, page: &AuditPage) -> Result<Vec<AuditEntry>> {
        self.with(|l| l.audit_page(page))
    }
}
