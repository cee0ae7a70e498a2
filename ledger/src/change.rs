//! Change notifications: what a store's writes changed, for the in-process caches that
//! assume one writer. The data plane follows them for its closed runs and its placeholder
//! cache; commit locks across processes need leases in the store itself (a later
//! backend's concern), which notifications alone cannot give.
//!
//! A store sends a [`Change`] to every subscriber after the write it describes is durable.
//! The embedded stores (sled, memory) announce their own writes; a backend several
//! processes share (PostgreSQL) also announces the other processes' writes, so a cache
//! invalidated on these stays right with many writers.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;

use crate::model::{Effect, EffectId, RunId};

/// One durable change, named by the records it touched.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Change {
    /// A run was created or its record changed (seal, flag, decision, commit finished,
    /// workspace decision): re-read it.
    RunChanged(RunId),
    /// The run accepts no more requests: a commit decision was written or it was aborted.
    /// Sent once, with [`Change::RunChanged`], by the write that closes the run.
    RunClosed(RunId),
    /// New placeholders were issued in the run: a cache of its placeholders is stale.
    PlaceholdersIssued(RunId),
    /// An effect was staged or its record changed (verdict, release, discard, recovery).
    EffectChanged {
        /// The effect's run.
        run: RunId,
        /// The effect.
        effect: EffectId,
    },
    /// The run's workspace record changed (attached, step, savepoint, decision).
    WorkspaceChanged(RunId),
}

impl Change {
    /// What staging `effect` announces: [`Change::EffectChanged`], and
    /// [`Change::PlaceholdersIssued`] when it issued placeholders.
    pub fn of_staged(effect: &Effect) -> Vec<Change> {
        let mut changes = vec![Change::EffectChanged {
            run: effect.run_id.clone(),
            effect: effect.id.clone(),
        }];
        if !effect.placeholders.is_empty() {
            changes.push(Change::PlaceholdersIssued(effect.run_id.clone()));
        }
        changes
    }

    /// [`Change::EffectChanged`] for `effect`.
    pub fn of_effect(effect: &Effect) -> Change {
        Change::EffectChanged {
            run: effect.run_id.clone(),
            effect: effect.id.clone(),
        }
    }
}

/// The subscribers of one store; a store holds one and calls [`Notifier::send`] after each
/// durable write. Journal writes (reads, denials, lineage analyses) are not announced.
#[derive(Debug, Default)]
pub struct Notifier {
    subscribers: Mutex<Vec<Sender<Change>>>,
}

impl Notifier {
    /// A notifier with no subscribers.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new subscriber: the receiver gets every change sent from now on, in order.
    /// Dropping it unsubscribes; a receiver never drained holds every change sent.
    pub fn subscribe(&self) -> Receiver<Change> {
        let (sender, receiver) = channel();
        self.lock().push(sender);
        receiver
    }

    /// Sends `changes` to every subscriber, forgetting those that hung up.
    pub fn send(&self, changes: impl IntoIterator<Item = Change>) {
        let mut subscribers = self.lock();
        if subscribers.is_empty() {
            return;
        }
        for change in changes {
            subscribers.retain(|s| s.send(change.clone()).is_ok());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Sender<Change>>> {
        // A panic while sending leaves the list of senders whole, so a poisoned lock is usable.
        self.subscribers.lock().unwrap_or_else(|e| e.into_inner())
    }
}
