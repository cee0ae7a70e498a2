//! Retention in the control plane (docs/architecture.md, "Retention"): a run's whole
//! record as NDJSON lines ([`export`], served by `GET /v1/runs/{id}/export`), pruning the
//! finished runs that ended before a cutoff ([`prune_finished_before`], `POST
//! /v1/runs/prune`), and the periodic prune of `airlock serve --retain` ([`spawn_retain`]).

use std::sync::Arc;
use std::time::Duration;

use airlock_ledger::rules::retention::{check_finished, finished_at_ms};
use airlock_ledger::{now_ms, LedgerError, Pruned, Refused, RunId, RunPage, Store};
use serde::Serialize;
use serde_json::{json, Value};
use tracing::{info, warn};

use crate::Control;

/// The export's format, named on its first line (`kind: "export"`); a reader refuses a
/// format it does not know. Version 1: the line kinds in docs/admin-api.md, "Export".
pub const EXPORT_FORMAT: &str = "airlock-run-export/1";

/// Runs read per step while looking for runs to prune.
const SCAN_PAGE: usize = 256;

/// A body as an export carries it: `{encoding: "utf8", text}` when it is UTF-8, else
/// `{encoding: "base64", base64}`; `null` when the ledger has none under the digest.
fn body_line(bytes: Option<&[u8]>) -> Value {
    use base64::Engine as _;
    match bytes {
        None => Value::Null,
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => json!({ "encoding": "utf8", "text": text }),
            Err(_) => json!({
                "encoding": "base64",
                "base64": base64::engine::general_purpose::STANDARD.encode(bytes),
            }),
        },
    }
}

/// `value` with `kind` set first among its fields (objects only). A record's own `kind`
/// field (a decision's, an edge's, a placeholder's) moves to `KIND_kind`
/// (`decision_kind`, `edge_kind`, `placeholder_kind`).
fn with_kind(kind: &str, value: impl Serialize) -> Value {
    let mut line = serde_json::Map::new();
    line.insert("kind".into(), json!(kind));
    match serde_json::to_value(value) {
        Ok(Value::Object(mut fields)) => {
            if let Some(own) = fields.remove("kind") {
                line.insert(format!("{kind}_kind"), own);
            }
            line.extend(fields);
        }
        Ok(other) => {
            line.insert("value".into(), other);
        }
        Err(error) => {
            line.insert("error".into(), json!(error.to_string()));
        }
    }
    Value::Object(line)
}

/// Writes the whole record of `run` as lines to `emit`, in this order (docs/admin-api.md,
/// "Export"): `export` (format, run id), `run` (the run record without its token),
/// `decision` (each run decision, then each effect's, oldest first), `read` (each read
/// with its analysis and fingerprints), `effect` (each effect with its request body and
/// lineage), `release` (each release attempt with its response body), `placeholder`,
/// `edge`, `denial`, `workspace`, and last `end` with the count of lines of each kind. A
/// reader that sees no `end` line holds a cut export. Stops early when `emit` returns
/// `false` (the client went away). Reads one concern of the run at a time.
///
/// Errors: [`LedgerError::NotFound`] for an unknown run, storage faults (`emit` has then
/// seen a cut export).
pub fn export(
    ledger: &dyn Store,
    run_id: &RunId,
    emit: &mut dyn FnMut(Value) -> bool,
) -> Result<(), LedgerError> {
    let run = ledger.run(run_id)?.ok_or_else(|| LedgerError::NotFound {
        kind: "run",
        id: run_id.to_string(),
    })?;
    let mut counts = std::collections::BTreeMap::<&'static str, u64>::new();
    let mut send = |kind: &'static str, line: Value| -> bool {
        *counts.entry(kind).or_insert(0) += 1;
        emit(line)
    };
    macro_rules! send {
        ($kind:expr, $line:expr) => {
            if !send($kind, $line) {
                return Ok(());
            }
        };
    }
    send!(
        "export",
        json!({ "kind": "export", "format": EXPORT_FORMAT, "run": run.id })
    );
    let mut record = with_kind("run", &run);
    if let Value::Object(fields) = &mut record {
        // The token lets its holder act as the run: an export is for reading. (A run's
        // token is no longer stored; an old record's plaintext or keyed hash is left out.)
        fields.remove("token");
        fields.remove("token_hash");
    }
    send!("run", record);
    let effects = ledger.effects(run_id)?;
    for decision in &run.decisions {
        let mut line = with_kind("decision", decision);
        line["scope"] = json!("run");
        line["run"] = json!(run.id);
        send!("decision", line);
    }
    for effect in &effects {
        for decision in &effect.decisions {
            let mut line = with_kind("decision", decision);
            line["scope"] = json!("effect");
            line["run"] = json!(run.id);
            line["effect"] = json!(effect.id);
            send!("decision", line);
        }
    }
    let contents: std::collections::HashMap<u64, _> = ledger
        .read_contents(run_id)?
        .into_iter()
        .map(|(content, fingerprints)| (content.seq, (content, fingerprints)))
        .collect();
    for read in ledger.reads(run_id)? {
        let (analysis, fingerprints) = match contents.get(&read.seq) {
            Some((content, hashes)) => (json!(content), json!(hashes)),
            None => (Value::Null, Value::Null),
        };
        let mut line = with_kind("read", &read);
        line["analysis"] = analysis;
        line["fingerprints"] = fingerprints;
        send!("read", line);
    }
    for effect in &effects {
        let body = ledger.body(&effect.body_digest)?;
        let mut line = with_kind("effect", effect);
        line["body"] = body_line(body.as_deref());
        line["lineage"] = json!(ledger.effect_lineage(&effect.id)?);
        send!("effect", line);
    }
    for effect in &effects {
        let attempts = effect.earlier_releases.iter().chain(&effect.release);
        for (attempt, release) in attempts.enumerate() {
            let body = match &release.body_digest {
                Some(digest) => ledger.body(digest)?,
                None => None,
            };
            let mut line = with_kind("release", release);
            line["run"] = json!(run.id);
            line["effect"] = json!(effect.id);
            line["attempt"] = json!(attempt + 1);
            line["effect_state"] = json!(effect.state);
            line["body"] = body_line(body.as_deref());
            send!("release", line);
        }
    }
    for placeholder in ledger.placeholders(run_id)? {
        send!("placeholder", with_kind("placeholder", &placeholder));
    }
    for edge in ledger.edges(run_id)? {
        send!("edge", with_kind("edge", &edge));
    }
    for denial in ledger.denials(run_id)? {
        send!("denial", with_kind("denial", &denial));
    }
    if let Some(workspace) = ledger.workspace(run_id)? {
        send!("workspace", with_kind("workspace", &workspace));
    }
    // Who did what to the run, in the audit log's order (kept by a prune, so an export
    // taken before one holds the same lines as the log after it).
    let mut after = None;
    loop {
        let page = ledger.audit_page(&airlock_ledger::AuditPage {
            after,
            limit: airlock_ledger::audit::MAX_AUDIT_PAGE,
            newest_first: false,
            run: Some(run_id.clone()),
        })?;
        for entry in &page {
            send!("audit", with_kind("audit", entry));
        }
        if page.len() < airlock_ledger::audit::MAX_AUDIT_PAGE {
            break;
        }
        after = page.last().map(|e| e.seq);
    }
    emit(json!({ "kind": "end", "run": run.id, "counts": counts }));
    Ok(())
}

/// One run removed by a prune.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PrunedRun {
    /// The run.
    #[schema(value_type = String)]
    pub run: RunId,
    /// Its state when removed.
    pub state: String,
    /// When it finished, ms since the Unix epoch ([`finished_at_ms`]).
    pub finished_at_ms: u64,
    /// What was removed (`bodies_kept`: bodies another run still references).
    #[schema(value_type = PrunedCounts)]
    pub removed: Pruned,
}

/// The OpenAPI shape of [`Pruned`] (the ledger crate has no schema derive): counts of
/// the records a prune removed.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PrunedCounts {
    /// Effects removed.
    pub effects: u64,
    /// Reads removed.
    pub reads: u64,
    /// Denials removed.
    pub denials: u64,
    /// Placeholders removed.
    pub placeholders: u64,
    /// Bodies removed (no other run referenced them).
    pub bodies_removed: u64,
    /// Bodies kept because another run's effect or release references them.
    pub bodies_kept: u64,
}

/// The answer of `POST /v1/runs/{id}/prune`: the run and what was removed of it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PrunedOne {
    /// The run, now gone.
    #[schema(value_type = String)]
    pub run: RunId,
    /// What was removed.
    #[schema(value_type = PrunedCounts)]
    pub removed: Pruned,
}

/// A run old enough that was kept: not finished ([`check_finished`]).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct KeptRun {
    /// The run.
    #[schema(value_type = String)]
    pub run: RunId,
    /// Its state.
    pub state: String,
    /// Why it is kept (the refusal's words).
    pub reason: String,
}

/// What a prune did (or, dry, would do).
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct PruneReport {
    /// The cutoff: runs that finished at or before it were pruned, ms since the epoch.
    pub cutoff_ms: u64,
    /// Whether nothing was removed (`dry_run`): `pruned` lists what would be.
    pub dry_run: bool,
    /// Runs removed (or to remove), oldest first.
    pub pruned: Vec<PrunedRun>,
    /// Runs in a final state but not finished (an effect left in flight or unsettled),
    /// or that changed while the prune ran; kept.
    pub kept: Vec<KeptRun>,
}

/// Prunes every finished run of `ledger` that finished at or before `cutoff_ms` (ms since
/// the Unix epoch), oldest first, logging each; with `dry_run` removes nothing and lists
/// what it would remove. Reads runs a page at a time ([`RunStore::runs_page`]) and loads
/// the effects only of runs in a final state whose last decision is old enough.
///
/// Errors: storage faults (runs pruned before the fault stay pruned).
///
/// [`RunStore::runs_page`]: airlock_ledger::RunStore::runs_page
pub fn prune_finished_before(
    ledger: &dyn Store,
    cutoff_ms: u64,
    dry_run: bool,
) -> Result<PruneReport, LedgerError> {
    let mut report = PruneReport {
        cutoff_ms,
        dry_run,
        ..PruneReport::default()
    };
    let mut after = None;
    loop {
        let page = ledger.runs_page(&RunPage {
            after: after.clone(),
            limit: SCAN_PAGE,
            newest_first: false,
        })?;
        let full = page.len() == SCAN_PAGE;
        after = page.last().map(|run| run.id.clone());
        for run in page {
            // The run's last decision is no later than its end: a cheap first filter.
            let decided = run.decisions.iter().map(|d| d.at_ms).max().unwrap_or(0);
            if !run.state.is_final() || decided > cutoff_ms {
                continue;
            }
            let effects = match ledger.effects(&run.id) {
                Ok(effects) => effects,
                Err(LedgerError::NotFound { .. }) => continue,
                Err(error) => return Err(error),
            };
            let finished = finished_at_ms(&run, &effects);
            if finished > cutoff_ms {
                continue;
            }
            let kept = |reason: String| KeptRun {
                run: run.id.clone(),
                state: run.state.to_string(),
                reason,
            };
            if let Err(refused) =
                check_finished(&run, &effects, ledger.workspace(&run.id)?.as_ref())
            {
                report.kept.push(kept(refused.to_string()));
                continue;
            }
            let removed = if dry_run {
                Pruned::default()
            } else {
                match ledger.prune_run(&run.id) {
                    Ok(removed) => removed,
                    Err(LedgerError::Refused(refused @ Refused::NotFinished { .. })) => {
                        report.kept.push(kept(refused.to_string()));
                        continue;
                    }
                    Err(LedgerError::NotFound { .. }) => continue,
                    Err(error) => return Err(error),
                }
            };
            if !dry_run {
                info!(run.id = %run.id, run.state = %run.state, finished_at_ms = finished,
                      effects = removed.effects, reads = removed.reads, denials = removed.denials,
                      bodies_removed = removed.bodies_removed, bodies_kept = removed.bodies_kept,
                      "pruned a finished run");
            }
            report.pruned.push(PrunedRun {
                run: run.id.clone(),
                state: run.state.to_string(),
                finished_at_ms: finished,
                removed,
            });
        }
        if !full {
            return Ok(report);
        }
    }
}

/// How often `--retain` prunes: a tenth of the retention, between 1 s and 10 minutes.
pub fn retain_every(retain: Duration) -> Duration {
    (retain / 10).clamp(Duration::from_secs(1), Duration::from_secs(600))
}

/// `airlock serve --retain DURATION`: prunes, now and then every [`retain_every`], the
/// finished runs that ended more than `retain` ago, logging each run pruned and each
/// failure. Runs until the control plane is dropped.
pub fn spawn_retain(control: &Arc<Control>, retain: Duration) {
    let weak = Arc::downgrade(control);
    let every = retain_every(retain);
    info!(
        retain_s = retain.as_secs(),
        every_s = every.as_secs(),
        "pruning finished runs periodically"
    );
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(control) = weak.upgrade() else {
                return;
            };
            let ledger = control.ledger().clone();
            drop(control);
            let retain_ms = u64::try_from(retain.as_millis()).unwrap_or(u64::MAX);
            let cutoff = now_ms().saturating_sub(retain_ms);
            let done =
                tokio::task::spawn_blocking(move || prune_finished_before(&*ledger, cutoff, false))
                    .await;
            match done {
                Ok(Ok(report)) if !report.pruned.is_empty() => {
                    info!(
                        runs = report.pruned.len(),
                        kept = report.kept.len(),
                        "retention prune finished"
                    );
                }
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    warn!(error = %error, "retention prune failed; trying again later")
                }
                Err(error) => warn!(error = %error, "retention prune task failed"),
            }
        }
    });
}
