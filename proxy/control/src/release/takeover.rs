//! The takeover sweeper: finishes commits whose releasing instance went away. Every
//! [`super::lease::LeaseSettings::renew_every`] (a third of the lease TTL) it lists the
//! runs left `committing` and, for each one this instance is not working on and whose
//! lease is not live (or is held under this instance's own holder id: its previous
//! process died), claims the lease, which turns the dead holder's `releasing` effects
//! into `unknown`, releases the rest and ends the commit. Its first pass runs at start,
//! which is how a restart finishes the commits it had begun.
//!
//! A run of a dead instance is thus taken over at most TTL + TTL/3 after that instance's
//! last renewal (13.3 s with the default 10 s TTL), or as soon as a commit of that run
//! asked on this instance sees the lease expire ([`super::lease::POLL_EVERY`]).

use std::sync::{Arc, Weak};

use airlock_ledger::{RunId, RunState};
use tracing::{info, warn};

use super::{blocking, release_leased, report};
use crate::Control;

/// Starts the sweeper: a first pass now, then one every third of the lease TTL, until the
/// control plane is dropped.
pub fn spawn(control: &Arc<Control>) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(control);
    let every = control.lease.renew_every();
    tokio::spawn(async move {
        loop {
            if !sweep(&weak).await {
                return;
            }
            tokio::time::sleep(every).await;
        }
    })
}

/// One pass; `false` once the control plane is gone.
async fn sweep(weak: &Weak<Control>) -> bool {
    let Some(control) = weak.upgrade() else {
        return false;
    };
    let ledger = control.ledger().clone();
    let runs = blocking(move || {
        let mut out = Vec::new();
        for run in ledger.runs()? {
            if run.state != RunState::Committing {
                continue;
            }
            let lease = ledger.lease(&run.id)?;
            out.push((run.id, lease));
        }
        Ok(out)
    })
    .await;
    let runs = match runs {
        Ok(runs) => runs,
        Err(error) => {
            warn!(error = %error, "the takeover sweep cannot list committing runs");
            return true;
        }
    };
    for (run, lease) in runs {
        // Another live instance is releasing it.
        if lease
            .as_ref()
            .is_some_and(|l| l.holder != control.lease.holder)
        {
            continue;
        }
        // This instance is on it already (a commit, retry or settlement in progress).
        let Ok(serial) = control.commit_lock(&run).try_lock_owned() else {
            continue;
        };
        let control = control.clone();
        tokio::spawn(async move {
            let _serial = serial;
            take_over(&control, &run).await;
        });
    }
    true
}

/// Finishes the commit of `run` under a fresh lease (the caller holds its commit lock).
async fn take_over(control: &Arc<Control>, run: &RunId) {
    info!(run.id = %run, "finishing a commit no live instance is releasing");
    match release_leased(control, run, None).await {
        Ok(()) => {
            let _ = report(control, run).await;
        }
        Err(error) => warn!(run.id = %run, error = %error, "finishing the commit failed"),
    }
}
