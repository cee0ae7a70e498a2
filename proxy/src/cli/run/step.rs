//! One step of `airlock run` (the command, or verify): running it in the chosen mode, in a
//! fence or with the run's proxy environment, keeping the tail of its output, and
//! recording it on the run.

use std::time::Instant;

use serde_json::{json, Value};

use super::fence;
use crate::client::AdminClient;

/// A command's outcome.
pub(super) struct Step {
    pub(super) exit_code: Option<i32>,
    pub(super) success: bool,
    pub(super) duration_ms: u64,
    pub(super) note: Option<String>,
    pub(super) output: String,
}

/// The `overlay` driver's mount of each step: the run's state directory (the attach
/// answer's `overlay_state`) and the workspace it covers (docs/run.md).
pub(super) struct OverlayRun {
    pub(super) state: std::path::PathBuf,
    pub(super) target: std::path::PathBuf,
}

/// How much of a command's output (stdout and stderr interleaved) is kept on the run.
const OUTPUT_TAIL_BYTES: usize = 16 * 1024;

/// Copies a child's stream to `sink` as it comes, keeping the last bytes in `tail`.
async fn tee(
    mut from: impl tokio::io::AsyncRead + Unpin,
    mut sink: impl std::io::Write,
    tail: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
) {
    use tokio::io::AsyncReadExt as _;
    let mut buffer = vec![0u8; 8192];
    while let Ok(n) = from.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        let _ = sink.write_all(&buffer[..n]).and_then(|()| sink.flush());
        let mut kept = tail.lock().unwrap_or_else(|e| e.into_inner());
        kept.extend_from_slice(&buffer[..n]);
        let excess = kept.len().saturating_sub(OUTPUT_TAIL_BYTES);
        kept.drain(..excess);
    }
}

async fn run_step(
    program: &str,
    args: &[String],
    workspace: &std::path::Path,
    env: &serde_json::Map<String, Value>,
    run: &str,
    json_output: bool,
    (overlay, pass): (Option<&OverlayRun>, &[&std::path::Path]),
) -> Step {
    let started = Instant::now();
    // On the overlay driver the step runs on the run's overlay, in a mount namespace of
    // its own; the mount holds the run's lock until the step ends. Under `--scope root`
    // the fence's own files (`pass`) are shown as they are.
    let mounted = match overlay.map(|o| {
        let mut mount =
            airlock_control::snapshot::overlay::StepMount::prepare(&o.state, &o.target)?;
        for path in pass {
            mount.pass_through(path);
        }
        let line = mount.command_line(program, args)?;
        Ok::<_, airlock_control::snapshot::SnapshotError>((mount, line))
    }) {
        Some(Ok((mount, line))) => Some((mount, line)),
        Some(Err(error)) => {
            return Step {
                exit_code: None,
                success: false,
                duration_ms: 0,
                note: Some(format!("the step's overlay could not be prepared: {error}")),
                output: String::new(),
            }
        }
        None => None,
    };
    let (program, args) = match &mounted {
        Some((_, (program, args))) => (program.as_str(), args.as_slice()),
        None => (program, args),
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .current_dir(workspace)
        .env("AIRLOCK_RUN", run)
        .stdin(std::process::Stdio::inherit())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // airlock's own credentials, if the user exported them, never reach the command.
    for name in airlock_fence::launch::SCRUBBED_VARS {
        command.env_remove(name);
    }
    for (key, value) in env {
        command.env(key, value.as_str().unwrap_or_default());
    }
    let tail = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let status = match command.spawn() {
        Ok(mut child) => {
            let out = child.stdout.take();
            let err = child.stderr.take();
            let (tail_out, tail_err) = (tail.clone(), tail.clone());
            let copy_out = tokio::spawn(async move {
                if let Some(out) = out {
                    // With --json, stdout carries the report alone: the command's goes to stderr.
                    if json_output {
                        tee(out, std::io::stderr(), tail_out).await
                    } else {
                        tee(out, std::io::stdout(), tail_out).await
                    }
                }
            });
            let copy_err = tokio::spawn(async move {
                if let Some(err) = err {
                    tee(err, std::io::stderr(), tail_err).await
                }
            });
            let status = child.wait().await;
            // A process the command left running may hold the pipes open: stop copying
            // shortly after the command itself ended instead of waiting for it.
            let (abort_out, abort_err) = (copy_out.abort_handle(), copy_err.abort_handle());
            let grace = tokio::time::timeout(std::time::Duration::from_millis(500), async {
                let _ = copy_out.await;
                let _ = copy_err.await;
            });
            if grace.await.is_err() {
                abort_out.abort();
                abort_err.abort();
            }
            status
        }
        Err(error) => Err(error),
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    let output =
        String::from_utf8_lossy(&tail.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
    match status {
        Ok(status) => Step {
            exit_code: status.code(),
            success: status.success(),
            duration_ms,
            note: status
                .code()
                .is_none()
                .then(|| format!("ended by a signal ({status})")),
            output,
        },
        Err(error) => Step {
            exit_code: None,
            success: false,
            duration_ms,
            note: Some(format!("cannot start {program}: {error}")),
            output,
        },
    }
}

pub(super) async fn record(
    client: &AdminClient,
    run: &str,
    kind: &str,
    line: &str,
    step: &Step,
    containment: &Value,
) -> anyhow::Result<()> {
    client
        .post(
            &format!("/v1/runs/{run}/workspace/steps"),
            Some(json!({
                "kind": kind, "command": line, "exit_code": step.exit_code,
                "success": step.success, "duration_ms": step.duration_ms, "note": step.note,
                "output": step.output, "containment": containment,
            })),
        )
        .await?;
    Ok(())
}

/// What every step of a run shares.
#[derive(Clone, Copy)]
pub(super) struct StepContext<'a> {
    pub(super) chosen: &'a fence::Chosen,
    pub(super) created: &'a Value,
    pub(super) run: &'a str,
    pub(super) workspace: &'a std::path::Path,
    pub(super) env: &'a serde_json::Map<String, Value>,
    pub(super) client: &'a AdminClient,
    pub(super) json_output: bool,
    pub(super) overlay: Option<&'a OverlayRun>,
    /// Under root: the run's layer, shared by its steps ([`airlock_fence::root`]).
    pub(super) layer: Option<&'a std::path::Path>,
}

/// Runs one step of the run (`command` or `verify`) in the chosen mode: in a fence for
/// `isolated` and `offline`, with the run's proxy environment for `env`. Returns the
/// step and the containment to record with it.
pub(super) async fn contained_step(
    cx: &StepContext<'_>,
    program: &str,
    args: &[String],
) -> (Step, Value) {
    let StepContext {
        chosen,
        created,
        run,
        workspace,
        env,
        client,
        json_output,
        overlay,
        layer,
    } = *cx;
    let before = fence::counts(client, run, chosen).await;
    if chosen.network == airlock_fence::Network::Env {
        let step = run_step(
            program,
            args,
            workspace,
            env,
            run,
            json_output,
            (overlay, &[]),
        )
        .await;
        let containment = fence::containment(client, run, chosen, None, &before).await;
        return (step, containment);
    }
    let plan = fence::FenceRun {
        created,
        run,
        network: chosen.network,
        layer,
    };
    let prepared = fence::prepare(&plan, client, program, args, workspace, env).await;
    let (prepared, unshare, unshare_args, spec_env) = match prepared {
        Ok(prepared) => prepared,
        Err(error) => {
            // Nothing ran: the step failed, and the run is decided as any failed step.
            let step = Step {
                exit_code: None,
                success: false,
                duration_ms: 0,
                note: Some(format!("the fence could not be set up: {error:#}")),
                output: String::new(),
            };
            return (
                step,
                fence::containment(client, run, chosen, None, &before).await,
            );
        }
    };
    let spec_env: serde_json::Map<String, Value> = spec_env
        .into_iter()
        .map(|(name, value)| (name, Value::String(value)))
        .collect();
    // Under `--scope root` the fence's directory (its report, written from inside) and
    // airlock's fence socket (which overlayfs cannot pass a connection to) are the host's.
    let socket = created["fence_socket"].as_str().map(std::path::Path::new);
    let pass: Vec<&std::path::Path> = std::iter::once(prepared.dir())
        .chain(socket.filter(|s| s.exists()))
        .collect();
    let mut step = run_step(
        &unshare,
        &unshare_args,
        workspace,
        &spec_env,
        run,
        json_output,
        (overlay, &pass),
    )
    .await;
    let report = prepared.report();
    match &report {
        Some(report) => {
            if let Some(error) = &report.error {
                step.note = Some(error.clone());
            } else if let Some(signal) = report.signal {
                step.exit_code = None;
                step.note = Some(format!("ended by signal {signal}"));
            }
        }
        None if step.note.is_none() => {
            step.note =
                Some("the fence ended without a report (it was killed, or could not start)".into());
        }
        None => {}
    }
    let containment = fence::containment(client, run, chosen, report.as_ref(), &before).await;
    (step, containment)
}
