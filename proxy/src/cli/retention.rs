//! `airlock runs export` and `airlock runs prune`: a run's whole record as NDJSON from
//! `GET /v1/runs/{id}/export`, and removing finished runs through `POST /v1/runs/prune`
//! (or, with `--export-to`, each run exported, then `POST /v1/runs/{id}/prune`).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _};
use serde_json::{json, Value};

use super::admin_client::{connect, print_json};
use super::args::AdminArgs;
use crate::client::AdminClient;

/// Checks that the export in `bytes`' last line is `{kind: "end"}`: an export without it
/// was cut (the server hit a fault, or the connection broke).
fn check_complete(run: &str, last_line: &[u8]) -> anyhow::Result<()> {
    let last: Value = serde_json::from_slice(last_line).unwrap_or(Value::Null);
    if last["kind"] == "end" {
        return Ok(());
    }
    bail!(
        "the export of {run} is incomplete (its last line is not kind \"end\"{}); nothing was removed",
        last["reason"]
            .as_str()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    )
}

/// A writer that remembers the last line it saw (for [`check_complete`]).
struct Tail<'a> {
    inner: &'a mut dyn std::io::Write,
    current: Vec<u8>,
    last: Vec<u8>,
}

impl std::io::Write for Tail<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        for &byte in &buf[..n] {
            if byte == b'\n' {
                if !self.current.is_empty() {
                    self.last = std::mem::take(&mut self.current);
                }
            } else {
                self.current.push(byte);
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Streams the export of `run` into `out`, checking it is complete.
async fn export_into(
    client: &AdminClient,
    run: &str,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    let mut tail = Tail {
        inner: out,
        current: Vec::new(),
        last: Vec::new(),
    };
    client
        .get_into(&format!("/v1/runs/{run}/export"), &mut tail)
        .await?;
    tail.flush().context("flushing the export")?;
    let last = if tail.current.is_empty() {
        tail.last
    } else {
        tail.current
    };
    check_complete(run, &last)
}

/// Writes the export of `run` to `path` through `PATH.partial`, synced and renamed into
/// place only once complete, so a file at `path` is always a whole export.
async fn export_to_file(client: &AdminClient, run: &str, path: &Path) -> anyhow::Result<()> {
    let partial = path.with_extension("ndjson.partial");
    // An export holds effect bodies and the origins' answers: readable by its owner only,
    // as the data directory is.
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&partial)
        .with_context(|| format!("cannot create {}", partial.display()))?;
    let written = export_into(client, run, &mut file).await;
    let synced = written.and_then(|()| {
        file.sync_all()
            .with_context(|| format!("cannot sync {}", partial.display()))
    });
    if let Err(error) = synced {
        let _ = std::fs::remove_file(&partial);
        return Err(error);
    }
    std::fs::rename(&partial, path)
        .with_context(|| format!("cannot rename {} into place", partial.display()))?;
    Ok(())
}

/// `airlock runs export RUN [--output FILE]`.
pub(super) async fn export(
    run: &str,
    output: Option<&Path>,
    admin: &AdminArgs,
) -> anyhow::Result<()> {
    let client = connect(admin)?;
    match output {
        Some(path) => export_to_file(&client, run, path).await,
        None => {
            let stdout = std::io::stdout();
            let mut lock = stdout.lock();
            match export_into(&client, run, &mut lock).await {
                // The reader stopped early (`| head`): what it read was written.
                Err(error) if is_broken_pipe(&error) => Ok(()),
                other => other,
            }
        }
    }
}

/// Whether `error` is the reader of stdout having gone away (EPIPE).
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            || cause.to_string().contains("Broken pipe")
    })
}

/// `airlock runs prune --finished-before DURATION [--export-to DIR] [--dry-run]`.
pub(super) async fn prune(
    finished_before: std::time::Duration,
    export_to: Option<PathBuf>,
    dry_run: bool,
    admin: &AdminArgs,
) -> anyhow::Result<()> {
    let client = connect(admin)?;
    let seconds = finished_before.as_secs();
    // Without exports, one request prunes them all; with them, each run is listed,
    // exported and then pruned by itself, so that none goes before its file is written.
    let listing = export_to.is_some() || dry_run;
    let report = client
        .post(
            "/v1/runs/prune",
            Some(json!({ "finished_before_s": seconds, "dry_run": listing })),
        )
        .await?;
    let mut pruned = Vec::new();
    if let (Some(dir), false) = (&export_to, dry_run) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for candidate in report["pruned"].as_array().into_iter().flatten() {
            let run = candidate["run"]
                .as_str()
                .ok_or_else(|| anyhow!("the server listed a run without an id: {candidate}"))?;
            let file = dir.join(format!("{run}.ndjson"));
            export_to_file(&client, run, &file).await?;
            // The audit entry of the prune names where the export is.
            let exported_to = std::path::absolute(&file).unwrap_or_else(|_| file.clone());
            let body = json!({ "exported_to": exported_to.display().to_string() });
            let removed = client
                .post(&format!("/v1/runs/{run}/prune"), Some(body))
                .await?;
            let mut line = candidate.clone();
            line["removed"] = removed["removed"].clone();
            line["export"] = json!(file.display().to_string());
            pruned.push(line);
        }
    } else {
        pruned = report["pruned"].as_array().cloned().unwrap_or_default();
    }
    let kept = report["kept"].as_array().cloned().unwrap_or_default();
    if admin.json {
        return print_json(&json!({
            "cutoff_ms": report["cutoff_ms"],
            "dry_run": dry_run,
            "pruned": pruned,
            "kept": kept,
        }));
    }
    if dry_run {
        // Nothing was removed, so there are no counts to show.
        for run in &pruned {
            outln!(
                "would prune {} ({}, finished at {} ms)",
                run["run"].as_str().unwrap_or(""),
                run["state"].as_str().unwrap_or(""),
                run["finished_at_ms"].as_u64().unwrap_or(0),
            );
        }
    }
    let verb = "pruned";
    for run in pruned.iter().filter(|_| !dry_run) {
        outln!(
            "{verb} {} ({}, {} effect(s), {} read(s){})",
            run["run"].as_str().unwrap_or(""),
            run["state"].as_str().unwrap_or(""),
            run["removed"]["effects"].as_u64().unwrap_or(0),
            run["removed"]["reads"].as_u64().unwrap_or(0),
            run["export"]
                .as_str()
                .map(|f| format!(", exported to {f}"))
                .unwrap_or_default()
        );
    }
    for run in &kept {
        outln!(
            "kept   {} ({}): {}",
            run["run"].as_str().unwrap_or(""),
            run["state"].as_str().unwrap_or(""),
            run["reason"].as_str().unwrap_or("")
        );
    }
    outln!("{} run(s) {verb}, {} kept", pruned.len(), kept.len());
    Ok(())
}
