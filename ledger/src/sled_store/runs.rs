//! Runs on sled: creation, flags, seal, commit and abort.

use super::{decode, encode, Ledger, OrStorage as _};
use crate::change::Change;
use crate::model::{now_ms, Run, RunFlag, RunId};
use crate::rules::{self, CommitStart};
use crate::{LedgerError, Result};

impl Ledger {
    /// [`crate::RunStore::create_run`] on sled: the run under its id in tree `runs`.
    pub fn create_run(&self, profile: Option<String>) -> Result<Run> {
        self.create_run_from(profile, None)
    }

    /// [`crate::RunStore::create_run_from`] on sled.
    pub fn create_run_from(&self, profile: Option<String>, source: Option<String>) -> Result<Run> {
        let run = rules::new_run(RunId::generate(), profile, source, now_ms());
        self.runs
            .insert(run.id.0.as_bytes(), encode(&run))
            .or_storage()?;
        self.flush_and_send([Change::RunChanged(run.id.clone())])?;
        Ok(run)
    }

    /// [`crate::RunStore::run`] on sled.
    pub fn run(&self, id: &RunId) -> Result<Option<Run>> {
        match self.runs.get(id.0.as_bytes()).or_storage()? {
            Some(bytes) => Ok(Some(decode(id.0.as_bytes(), &bytes)?)),
            None => Ok(None),
        }
    }

    pub(super) fn must_run(&self, id: &RunId) -> Result<Run> {
        self.run(id)?.ok_or_else(|| LedgerError::NotFound {
            kind: "run",
            id: id.0.clone(),
        })
    }

    /// [`crate::RunStore::runs`] on sled: every run, oldest first.
    pub fn runs(&self) -> Result<Vec<Run>> {
        self.runs
            .iter()
            .map(|item| {
                let (key, value) = item.or_storage()?;
                decode(&key, &value)
            })
            .collect()
    }

    /// [`crate::RunStore::authenticate`] on sled: the run whose id and token match,
    /// compared in constant time; `None` otherwise.
    pub fn authenticate(
        &self,
        tokens: &crate::RunTokens,
        run_id: &str,
        token: &str,
    ) -> Result<Option<Run>> {
        crate::RunStore::authenticate(self, tokens, run_id, token)
    }

    /// [`crate::RunStore::hash_plaintext_tokens`] on sled: each run record holding a
    /// plaintext token is written again with its keyed hash, then the tree is flushed.
    pub fn hash_plaintext_tokens(&self, tokens: &crate::RunTokens) -> Result<usize> {
        let _guard = self.lock();
        let mut rewritten = 0;
        for item in self.runs.iter() {
            let (key, value) = item.or_storage()?;
            let mut run: Run = decode(&key, &value)?;
            if tokens.seal(&mut run) {
                self.runs.insert(key, encode(&run)).or_storage()?;
                rewritten += 1;
            }
        }
        if rewritten > 0 {
            self.flush()?;
        }
        Ok(rewritten)
    }

    /// Writes `token` into run `id`'s record as a plaintext token, as ledgers written
    /// before tokens were derived held it ([`crate::conformance::write_plaintext_token`]).
    #[cfg(any(test, feature = "conformance"))]
    pub(crate) fn write_plaintext_token(&self, id: &RunId, token: &str) -> Result<()> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        run.token_hash = None;
        run.plaintext_token = Some(token.to_owned());
        self.runs
            .insert(id.0.as_bytes(), encode(&run))
            .or_storage()?;
        self.flush()
    }

    /// [`crate::RunStore::flag_run`] on sled. Durable.
    ///
    /// Errors: [`LedgerError::NotFound`] for an unknown run, and storage faults.
    pub fn flag_run(&self, id: &RunId, flag: RunFlag) -> Result<bool> {
        let stored = {
            let _guard = self.lock();
            let mut run = self.must_run(id)?;
            let stored = rules::flag_run(&mut run, flag);
            if stored {
                self.put_run(&run)?;
            }
            stored
        };
        let changes = stored.then(|| Change::RunChanged(id.clone()));
        self.flush_and_send(changes)?;
        Ok(stored)
    }

    pub(super) fn put_run(&self, run: &Run) -> Result<()> {
        self.runs
            .insert(run.id.0.as_bytes(), encode(run))
            .or_storage()?;
        Ok(())
    }

    /// [`crate::RunStore::seal`] on sled. Durable.
    ///
    /// Errors: [`crate::Refused::RunTransition`] when the run is committing, committed or
    /// aborted.
    pub fn seal(&self, id: &RunId, by: &str) -> Result<Run> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        if !rules::seal(&mut run, by, now_ms())? {
            return Ok(run);
        }
        self.put_run(&run)?;
        self.flush_and_send([Change::RunChanged(id.clone())])?;
        Ok(run)
    }

    /// [`crate::RunStore::begin_commit`] on sled: the approved effects and the run are
    /// written under the write lock, then flushed. Durable.
    ///
    /// Errors: [`crate::Refused::Undecided`], [`crate::Refused::RunTransition`].
    pub fn begin_commit(&self, id: &RunId, approve_pending: bool, by: &str) -> Result<(Run, bool)> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        let effects = self.effects_unlocked(id)?;
        let approved = match rules::begin_commit(&mut run, &effects, approve_pending, by, now_ms())?
        {
            CommitStart::Begun(approved) => approved,
            start => return Ok((run, start.proceeds())),
        };
        let mut changes = Vec::with_capacity(approved.len() + 2);
        for effect in &approved {
            self.put_effect(effect)?;
            changes.push(Change::EffectChanged {
                run: id.clone(),
                effect: effect.id.clone(),
            });
        }
        self.put_run(&run)?;
        changes.push(Change::RunChanged(id.clone()));
        changes.push(Change::RunClosed(id.clone()));
        self.flush_and_send(changes)?;
        Ok((run, true))
    }

    /// [`crate::RunStore::finish_commit`] on sled. Durable.
    pub fn finish_commit(&self, id: &RunId) -> Result<Run> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        let effects = self.effects_unlocked(id)?;
        if !rules::finish_commit(&mut run, &effects) {
            return Ok(run);
        }
        self.put_run(&run)?;
        self.flush_and_send([Change::RunChanged(id.clone())])?;
        Ok(run)
    }

    /// [`crate::RunStore::abort`] on sled. Durable.
    ///
    /// Errors: [`crate::Refused::RunTransition`] when a commit decision was already written.
    pub fn abort(&self, id: &RunId, by: &str) -> Result<Run> {
        let _guard = self.lock();
        let mut run = self.must_run(id)?;
        let effects = self.effects_unlocked(id)?;
        let Some(discarded) = rules::abort(&mut run, &effects, by, now_ms())? else {
            return Ok(run);
        };
        let mut changes = Vec::with_capacity(discarded.len() + 2);
        for effect in &discarded {
            self.put_effect(effect)?;
            changes.push(Change::EffectChanged {
                run: id.clone(),
                effect: effect.id.clone(),
            });
        }
        self.put_run(&run)?;
        changes.push(Change::RunChanged(id.clone()));
        changes.push(Change::RunClosed(id.clone()));
        self.flush_and_send(changes)?;
        Ok(run)
    }
}
