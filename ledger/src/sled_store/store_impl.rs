//! [`Store`] for [`Ledger`]: each method is the inherent method of the same name (kept so
//! that code holding a `Ledger` calls it without importing the traits).

use std::sync::mpsc::Receiver;

use super::Ledger;
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
    AuditStore, EffectStore, JournalStore, LeaseStore, LineageStore, Pruned, RunPage, RunStore,
    Store, WorkspaceStore,
};
use crate::workspace::{Savepoint, StepRecord, WorkspaceDecision, WorkspaceRecord};
use crate::{ReleaseOutcome, Result, Settlement, Verdict};

impl Store for Ledger {
    fn flush(&self) -> Result<()> {
        Ledger::flush(self)
    }

    fn size_on_disk(&self) -> Result<u64> {
        Ledger::size_on_disk(self)
    }

    fn cache_capacity(&self) -> u64 {
        Ledger::cache_capacity(self)
    }

    fn subscribe(&self) -> Receiver<Change> {
        Ledger::subscribe(self)
    }
}

impl RunStore for Ledger {
    fn create_run_from(&self, profile: Option<String>, source: Option<String>) -> Result<Run> {
        Ledger::create_run_from(self, profile, source)
    }

    fn run(&self, id: &RunId) -> Result<Option<Run>> {
        Ledger::run(self, id)
    }

    fn hash_plaintext_tokens(&self, tokens: &crate::RunTokens) -> Result<usize> {
        Ledger::hash_plaintext_tokens(self, tokens)
    }

    fn runs(&self) -> Result<Vec<Run>> {
        Ledger::runs(self)
    }

    fn runs_page(&self, page: &RunPage) -> Result<Vec<Run>> {
        Ledger::runs_page(self, page)
    }

    fn prune_run(&self, id: &RunId) -> Result<Pruned> {
        Ledger::prune_run(self, id)
    }

    fn flag_run(&self, id: &RunId, flag: RunFlag) -> Result<bool> {
        Ledger::flag_run(self, id, flag)
    }

    fn seal(&self, id: &RunId, by: &str) -> Result<Run> {
        Ledger::seal(self, id, by)
    }

    fn begin_commit(&self, id: &RunId, approve_pending: bool, by: &str) -> Result<(Run, bool)> {
        Ledger::begin_commit(self, id, approve_pending, by)
    }

    fn finish_commit(&self, id: &RunId) -> Result<Run> {
        Ledger::finish_commit(self, id)
    }

    fn abort(&self, id: &RunId, by: &str) -> Result<Run> {
        Ledger::abort(self, id, by)
    }
}

impl EffectStore for Ledger {
    fn stage_with(&self, new: NewEffect<'_>, notes: EffectNotes) -> Result<Effect> {
        Ledger::stage_with(self, new, notes)
    }

    fn effect(&self, id: &EffectId) -> Result<Option<Effect>> {
        Ledger::effect(self, id)
    }

    fn effects(&self, run: &RunId) -> Result<Vec<Effect>> {
        Ledger::effects(self, run)
    }

    fn body(&self, digest: &Digest) -> Result<Option<Vec<u8>>> {
        Ledger::body(self, digest)
    }

    fn decide_effect(&self, id: &EffectId, verdict: Verdict, by: &str) -> Result<Effect> {
        Ledger::decide_effect(self, id, verdict, by)
    }

    fn approve_explicitly(&self, id: &EffectId, by: &str, flows: &[String]) -> Result<Effect> {
        Ledger::approve_explicitly(self, id, by, flows)
    }

    fn mark_releasing(&self, id: &EffectId) -> Result<Effect> {
        Ledger::mark_releasing(self, id)
    }

    fn record_release(&self, id: &EffectId, outcome: ReleaseOutcome<'_>) -> Result<Effect> {
        Ledger::record_release(self, id, outcome)
    }

    fn settle_unsent(&self, id: &EffectId, to: EffectState, reason: &str) -> Result<Effect> {
        Ledger::settle_unsent(self, id, to, reason)
    }

    fn recover(&self) -> Result<Vec<Effect>> {
        Ledger::recover(self)
    }

    fn retry(&self, id: &EffectId, by: &str) -> Result<Vec<Effect>> {
        Ledger::retry(self, id, by)
    }

    fn settle(&self, id: &EffectId, settlement: &Settlement, by: &str) -> Result<Vec<Effect>> {
        Ledger::settle(self, id, settlement, by)
    }
}

impl JournalStore for Ledger {
    fn journal_read(&self, read: Read) -> Result<Read> {
        Ledger::journal_read(self, read)
    }

    fn journal_reads(&self, reads: Vec<Read>) -> Result<Vec<Read>> {
        Ledger::journal_reads(self, reads)
    }

    fn reads(&self, run: &RunId) -> Result<Vec<Read>> {
        Ledger::reads(self, run)
    }

    fn journal_denial(&self, denial: Denial) -> Result<u64> {
        Ledger::journal_denial(self, denial)
    }

    fn denials(&self, run: &RunId) -> Result<Vec<Denial>> {
        Ledger::denials(self, run)
    }
}

impl LineageStore for Ledger {
    fn placeholders(&self, run: &RunId) -> Result<Vec<IssuedPlaceholder>> {
        Ledger::placeholders(self, run)
    }

    fn store_read_content(
        &self,
        run: &RunId,
        content: &ReadContent,
        fingerprints: &[u64],
    ) -> Result<()> {
        Ledger::store_read_content(self, run, content, fingerprints)
    }

    fn read_contents(&self, run: &RunId) -> Result<Vec<(ReadContent, Vec<u64>)>> {
        Ledger::read_contents(self, run)
    }

    fn store_effect_lineage(&self, effect: &EffectId, lineage: &EffectLineage) -> Result<()> {
        Ledger::store_effect_lineage(self, effect, lineage)
    }

    fn effect_lineage(&self, effect: &EffectId) -> Result<Option<EffectLineage>> {
        Ledger::effect_lineage(self, effect)
    }
}

impl WorkspaceStore for Ledger {
    fn workspace(&self, run: &RunId) -> Result<Option<WorkspaceRecord>> {
        Ledger::workspace(self, run)
    }

    fn attach_workspace(&self, run: &RunId, record: WorkspaceRecord) -> Result<WorkspaceRecord> {
        Ledger::attach_workspace(self, run, record)
    }

    fn record_step(&self, run: &RunId, step: StepRecord) -> Result<WorkspaceRecord> {
        Ledger::record_step(self, run, step)
    }

    fn last_effect_seq(&self, run: &RunId) -> Result<u64> {
        Ledger::last_effect_seq(self, run)
    }

    fn add_savepoint(&self, run: &RunId, name: &str, snapshot: &str) -> Result<Savepoint> {
        Ledger::add_savepoint(self, run, name, snapshot)
    }

    fn decide_workspace(
        &self,
        run: &RunId,
        decision: WorkspaceDecision,
    ) -> Result<(WorkspaceDecision, bool)> {
        Ledger::decide_workspace(self, run, decision)
    }

    fn finish_workspace_decision(
        &self,
        run: &RunId,
        residue: Vec<String>,
        unverified: bool,
        outcome: &str,
    ) -> Result<WorkspaceRecord> {
        Ledger::finish_workspace_decision(self, run, residue, unverified, outcome)
    }

    fn discard_effects_after(
        &self,
        run: &RunId,
        after_seq: u64,
        reason: &str,
    ) -> Result<Vec<Effect>> {
        Ledger::discard_effects_after(self, run, after_seq, reason)
    }
}

impl LeaseStore for Ledger {
    fn acquire_lease(
        &self,
        run: &RunId,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<(Lease, Vec<Effect>)> {
        Ledger::acquire_lease(self, run, holder, ttl_ms)
    }

    fn renew_lease(&self, lease: &Lease, ttl_ms: u64) -> Result<Lease> {
        Ledger::renew_lease(self, lease, ttl_ms)
    }

    fn give_up_lease(&self, lease: &Lease) -> Result<bool> {
        Ledger::give_up_lease(self, lease)
    }

    fn lease(&self, run: &RunId) -> Result<Option<Lease>> {
        Ledger::lease(self, run)
    }

    fn mark_releasing_fenced(&self, id: &EffectId, fence: &Lease) -> Result<Effect> {
        Ledger::mark_releasing_fenced(self, id, fence)
    }

    fn record_release_fenced(
        &self,
        id: &EffectId,
        outcome: ReleaseOutcome<'_>,
        fence: &Lease,
    ) -> Result<Effect> {
        Ledger::record_release_fenced(self, id, outcome, fence)
    }

    fn settle_unsent_fenced(
        &self,
        id: &EffectId,
        to: EffectState,
        reason: &str,
        fence: &Lease,
    ) -> Result<Effect> {
        Ledger::settle_unsent_fenced(self, id, to, reason, fence)
    }

    fn finish_commit_fenced(&self, run: &RunId, fence: &Lease) -> Result<Run> {
        Ledger::finish_commit_fenced(self, run, fence)
    }
}

impl AuditStore for Ledger {
    fn append_audit(&self, entry: NewAuditEntry) -> Result<AuditEntry> {
        Ledger::append_audit(self, entry)
    }

    fn audit_page(&self, page: &AuditPage) -> Result<Vec<AuditEntry>> {
        Ledger::audit_page(self, page)
    }
}
