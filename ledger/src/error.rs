//! Typed errors of the ledger: storage faults versus refused transitions.

use crate::model::{EffectId, EffectState, RunId, RunState};

/// Anything the ledger cannot do.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// sled failed; the ledger stops rather than guess (fail-stop).
    #[error("ledger storage failed")]
    Storage(#[from] sled::Error),
    /// A stored record does not parse: the data directory is damaged or from a newer version.
    #[error("ledger record {key} is corrupt")]
    Corrupt {
        /// The key of the record.
        key: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// No run or effect with that identifier.
    #[error("no {kind} with id {id}")]
    NotFound {
        /// `run` or `effect`.
        kind: &'static str,
        /// The identifier asked for.
        id: String,
    },
    /// The state machine refuses the request; nothing was changed.
    #[error(transparent)]
    Refused(#[from] Refused),
}

/// An expected refusal: the request is well formed but the state does not allow it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The run no longer accepts effects.
    #[error("run {run} is {state}: it accepts no new effects")]
    RunNotOpen {
        /// The run.
        run: RunId,
        /// Its state.
        state: RunState,
    },
    /// An effect cannot move from its state to the one asked for.
    #[error("effect {effect} is {from}: it cannot become {to}")]
    EffectTransition {
        /// The effect.
        effect: EffectId,
        /// Its state.
        from: EffectState,
        /// The state asked for.
        to: EffectState,
    },
    /// A run cannot take the decision asked for in its state.
    #[error("run {run} is {state}: it cannot be {action}")]
    RunTransition {
        /// The run.
        run: RunId,
        /// Its state.
        state: RunState,
        /// `sealed`, `committed`, `aborted`, `approved` …
        action: &'static str,
    },
    /// Commit was asked while effects still wait for a reviewer.
    #[error("run {run} has {} undecided effect(s); approve or reject them, or commit with --approve-pending (API: approve_pending)", effects.len())]
    Undecided {
        /// The run.
        run: RunId,
        /// The effects still `staged`.
        effects: Vec<EffectId>,
    },
}

impl Refused {
    /// A stable machine-readable code for API bodies.
    pub fn code(&self) -> &'static str {
        match self {
            Self::RunNotOpen { .. } => "run_not_open",
            Self::EffectTransition { .. } => "invalid_effect_transition",
            Self::RunTransition { .. } => "invalid_run_transition",
            Self::Undecided { .. } => "undecided_effects",
        }
    }
}
