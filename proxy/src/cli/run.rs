//! `airlock run`: one transaction for files and effects. Creates a run (on a running server,
//! or an embedded one for the duration), snapshots the workspace, runs the command with the
//! run's proxy environment, seals, verifies, and has the server write one decision and
//! apply it to both sides. Also `airlock savepoint` and `airlock rollback-to`. See
//! docs/run.md.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, Context as _};
use serde_json::{json, Value};

use super::{connect, AdminArgs};

mod fence;
mod outside;
mod summary;

pub use fence::NetworkArg;

pub use summary::summary;

/// Most paths `--check-residue-outside` watches.
const OUTSIDE_LIMIT: usize = 200_000;
use crate::client::AdminClient;

/// What to do with the effects when the command and verify passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnPass {
    /// Hold the effects for a reviewer (default).
    Hold,
    /// Commit: release approved effects (all of them with --approve-all).
    Commit,
}

/// Arguments of `airlock run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The workspace the command changes
    #[arg(long, default_value = ".", value_name = "DIR")]
    workspace: PathBuf,
    /// Snapshot driver: dir (a copy of the tree), git (a private ref), or cmd (your commands)
    #[arg(long, default_value = "dir", value_name = "DRIVER")]
    snapshot: String,
    /// cmd driver: takes a snapshot named $AIRLOCK_SNAPSHOT (sh -c, in the workspace)
    #[arg(long, value_name = "CMD", requires = "rollback_cmd")]
    snapshot_cmd: Option<String>,
    /// cmd driver: restores the workspace to snapshot $AIRLOCK_SNAPSHOT
    #[arg(long, value_name = "CMD", requires = "snapshot_cmd")]
    rollback_cmd: Option<String>,
    /// Command run with `sh -c` in the workspace after the run is sealed; failing rolls back
    #[arg(long, value_name = "CMD")]
    verify: Option<String>,
    /// When the command and verify pass: hold the effects for review, or commit them
    #[arg(long, value_enum, default_value = "hold")]
    on_pass: OnPass,
    /// With --on-pass commit: approve every undecided effect first
    #[arg(long)]
    approve_all: bool,
    /// Policy profile of the run
    #[arg(long)]
    profile: Option<String>,
    /// Start an embedded server with this policy for the duration (else use a running one)
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Embedded server: extra CA certificates (PEM) trusted for origins
    #[arg(long, value_name = "FILE")]
    upstream_ca: Option<PathBuf>,
    /// Embedded server: answer DNS for HOST with these addresses instead of the system
    /// resolver (HOST=IP[,IP…], repeatable; like curl's --resolve, and `airlock serve
    /// --resolve`). The answers go through the same checks as any other: private and
    /// special-purpose addresses still need allow_private. Needs --policy: a running
    /// server answers with its own --resolve
    #[arg(long, value_name = "HOST=IP[,IP]", value_parser = airlock_net::dial::parse_resolve)]
    resolve: Vec<(String, Vec<std::net::IpAddr>)>,
    /// Also report what the command changed under these paths outside the workspace
    /// (comma-separated; watched, never restored)
    #[arg(long, value_delimiter = ',', value_name = "PATHS")]
    check_residue_outside: Vec<PathBuf>,
    /// How the command reaches the network: isolated (a fence whose only route out is
    /// airlock; the default where namespaces can be made), env (proxy variables only;
    /// chosen with a warning where no fence can be made), offline (no route at all).
    /// See docs/containment.md
    #[arg(long, value_enum, value_name = "MODE")]
    network: Option<NetworkArg>,
    /// Finish the decision of an interrupted run (rolls back when none was written)
    #[arg(long, value_name = "RUN", conflicts_with = "command")]
    resume: Option<String>,
    #[command(flatten)]
    admin: AdminArgs,
    /// The command and its arguments (after `--`)
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// `airlock run` ended without success: the process exits with `code`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct RunFailed {
    /// The exit code.
    pub code: u8,
    /// What failed.
    pub message: String,
}

/// A command's outcome.
struct Step {
    exit_code: Option<i32>,
    success: bool,
    duration_ms: u64,
    note: Option<String>,
    output: String,
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
) -> Step {
    let started = Instant::now();
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

async fn record(
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
struct StepContext<'a> {
    chosen: &'a fence::Chosen,
    created: &'a Value,
    run: &'a str,
    workspace: &'a std::path::Path,
    env: &'a serde_json::Map<String, Value>,
    client: &'a AdminClient,
    json_output: bool,
}

/// Runs one step of the run (`command` or `verify`) in the chosen mode: in a fence for
/// `isolated` and `offline`, with the run's proxy environment for `env`. Returns the
/// step and the containment to record with it.
async fn contained_step(cx: &StepContext<'_>, program: &str, args: &[String]) -> (Step, Value) {
    let StepContext {
        chosen,
        created,
        run,
        workspace,
        env,
        client,
        json_output,
    } = *cx;
    let before = fence::counts(client, run, chosen).await;
    if chosen.network == airlock_fence::Network::Env {
        let step = run_step(program, args, workspace, env, run, json_output).await;
        let containment = fence::containment(client, run, chosen, None, &before).await;
        return (step, containment);
    }
    let plan = fence::FenceRun {
        created,
        run,
        network: chosen.network,
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
    let mut step = run_step(
        &unshare,
        &unshare_args,
        workspace,
        &spec_env,
        run,
        json_output,
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

/// Runs `airlock run`.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let (client, server) = match &args.policy {
        Some(policy) => {
            let mut config = crate::ServeConfig::new(args.admin.data.clone(), policy.clone());
            config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            config.admin = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            config.upstream_ca = args.upstream_ca.clone();
            config.resolve = args.resolve.clone();
            // The commands of the cmd driver come from this command line's own user.
            config.danger_allow_snapshot_commands = true;
            let server = crate::Server::build(config).await?;
            let client = AdminClient::new(
                &format!("http://{}", server.admin_addr()),
                server.admin_token(),
            );
            (client, Some(tokio::spawn(server.run())))
        }
        None if !args.resolve.is_empty() => {
            return Err(anyhow!(
                "--resolve applies to the embedded server of `airlock run --policy FILE`; \
                 a running server answers names with its own `airlock serve --resolve`"
            ));
        }
        None => (connect(&args.admin)?, None),
    };
    let result = orchestrate(&args, &client).await;
    if let Some(server) = server {
        server.abort();
    }
    result
}

async fn orchestrate(args: &RunArgs, client: &AdminClient) -> anyhow::Result<()> {
    if let Some(run) = &args.resume {
        let report = client
            .post(
                &format!("/v1/runs/{run}/workspace/resume"),
                Some(json!({ "decide_if_missing": true })),
            )
            .await?;
        return conclude(args.admin.json, &report);
    }
    let Some((program, rest)) = args.command.split_first() else {
        return Err(anyhow!(
            "no command given: airlock run [OPTIONS] -- CMD [ARGS…]"
        ));
    };
    let workspace = std::path::absolute(&args.workspace)
        .with_context(|| format!("cannot resolve {}", args.workspace.display()))?;
    let chosen = fence::choose(args.network)?;
    let created = client
        .post("/v1/runs", Some(json!({ "profile": args.profile })))
        .await?;
    let run = created["id"].as_str().unwrap_or_default().to_owned();
    let env = created["env"].as_object().cloned().unwrap_or_default();
    let attached = client
        .post(
            &format!("/v1/runs/{run}/workspace"),
            Some(json!({
                "path": workspace.display().to_string(),
                "driver": args.snapshot,
                "snapshot_cmd": args.snapshot_cmd,
                "rollback_cmd": args.rollback_cmd,
            })),
        )
        .await;
    let attached = match attached {
        Ok(attached) => attached,
        Err(error) => {
            let _ = client.post(&format!("/v1/runs/{run}/abort"), None).await;
            return Err(error).context("cannot snapshot the workspace; the run was aborted");
        }
    };
    eprintln!(
        "airlock: run {run}; snapshot {} ({}, {}) of {}",
        attached["snapshot"].as_str().unwrap_or(""),
        args.snapshot,
        attached["snapshot_contents"].as_str().unwrap_or(""),
        workspace.display()
    );
    let outside_roots = outside::absolute(&args.check_residue_outside);
    let outside_exclude = vec![
        workspace.clone(),
        std::path::absolute(&args.admin.data).unwrap_or_else(|_| args.admin.data.clone()),
    ];
    let outside_before = outside::scan(&outside_roots, &outside_exclude, OUTSIDE_LIMIT);
    let schedules = outside::schedule_roots();
    let schedules_before = outside::scan(&schedules, &[], OUTSIDE_LIMIT);
    let line = shell_line(&args.command);
    let cx = StepContext {
        chosen: &chosen,
        created: &created,
        run: &run,
        workspace: &workspace,
        env: &env,
        client,
        json_output: args.admin.json,
    };
    let (step, containment) = contained_step(&cx, program, rest).await;
    record(client, &run, "command", &line, &step, &containment).await?;
    client.post(&format!("/v1/runs/{run}/seal"), None).await?;
    let mut passed = step.success;
    let mut reason = if step.success {
        "the command succeeded".to_owned()
    } else {
        format!(
            "the command failed ({})",
            describe_exit(step.exit_code, step.note.as_deref())
        )
    };
    if let (true, Some(verify)) = (step.success, &args.verify) {
        let (checked, verify_containment) =
            contained_step(&cx, "sh", &["-c".to_owned(), verify.clone()]).await;
        record(
            client,
            &run,
            "verify",
            verify,
            &checked,
            &verify_containment,
        )
        .await?;
        passed = checked.success;
        reason = if checked.success {
            "the command and verify succeeded".to_owned()
        } else {
            format!(
                "verify failed ({})",
                describe_exit(checked.exit_code, checked.note.as_deref())
            )
        };
    }
    let report = client
        .post(
            &format!("/v1/runs/{run}/workspace/decide"),
            Some(json!({
                "outcome": if passed { "keep" } else { "rollback" },
                "commit": args.on_pass == OnPass::Commit,
                "approve_all": args.approve_all,
                "reason": reason,
            })),
        )
        .await?;
    let mut report = report;
    if chosen.network == airlock_fence::Network::Env {
        report["left_running"] = json!(outside::leftover_processes(&run));
    } else {
        // The fence listed them and killed them when its PID 1 exited.
        report["left_running"] = containment["left_running"].clone();
        report["left_running_killed"] = json!(true);
    }
    report["containment"] = containment;
    let scheduled = outside::diff(
        &schedules_before,
        &outside::scan(&schedules, &[], OUTSIDE_LIMIT),
    );
    let listening: Vec<Value> = report["left_running"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["listening"].as_array().cloned().unwrap_or_default())
        .collect();
    report["residue"] = json!({
        "scheduled": scheduled.added.iter().chain(&scheduled.modified).chain(&scheduled.deleted).collect::<Vec<_>>(),
        "listening": listening,
    });
    if !outside_roots.is_empty() {
        let after = outside::scan(&outside_roots, &outside_exclude, OUTSIDE_LIMIT);
        report["outside"] = json!(outside::diff(&outside_before, &after));
    }
    conclude(args.admin.json, &report)
}

fn describe_exit(code: Option<i32>, note: Option<&str>) -> String {
    match (code, note) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(note)) => note.to_owned(),
        (None, None) => "no exit code".to_owned(),
    }
}

/// Prints the summary and turns the outcome into the process's exit status.
fn conclude(json_output: bool, report: &Value) -> anyhow::Result<()> {
    if json_output {
        println!(
            "{}",
            serde_json::to_string_pretty(report).unwrap_or_default()
        );
    } else {
        print!("{}", summary(report));
    }
    let steps = report["workspace"]["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for kind in ["command", "verify"] {
        if let Some(step) = steps.iter().rev().find(|s| s["kind"] == kind) {
            if step["success"] != true {
                let code = step["exit_code"]
                    .as_i64()
                    .filter(|c| (1..=255).contains(c))
                    .unwrap_or(1);
                return Err(RunFailed {
                    code: code as u8,
                    message: format!(
                        "the {kind} failed; {}",
                        report["decision"]["outcome"].as_str().unwrap_or("")
                    ),
                }
                .into());
            }
        }
    }
    if report["rollback_unverified"] == true {
        return Err(RunFailed {
            code: 1,
            message: "the rollback could not be verified".into(),
        }
        .into());
    }
    if report["decision"]["kind"] == "rollback" {
        return Err(RunFailed {
            code: 1,
            message: "the run was rolled back".into(),
        }
        .into());
    }
    if report["commit"]["state"] == "partially_committed" {
        return Err(RunFailed {
            code: 1,
            message: "the commit finished, but some approved effects were not released".into(),
        }
        .into());
    }
    Ok(())
}

/// `airlock savepoint RUN [NAME]`.
pub(crate) async fn savepoint(
    admin: &AdminArgs,
    run: &str,
    name: Option<String>,
) -> anyhow::Result<()> {
    let client = connect(admin)?;
    let savepoint = client
        .post(
            &format!("/v1/runs/{run}/savepoints"),
            Some(json!({ "name": name })),
        )
        .await?;
    if admin.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&savepoint).unwrap_or_default()
        );
    } else {
        println!(
            "savepoint {} of run {run}: snapshot {}, after effect #{}",
            savepoint["name"].as_str().unwrap_or(""),
            savepoint["snapshot"].as_str().unwrap_or(""),
            savepoint["effect_seq"]
        );
    }
    Ok(())
}

/// `airlock rollback-to RUN SAVEPOINT`.
pub(crate) async fn rollback_to(
    admin: &AdminArgs,
    run: &str,
    savepoint: &str,
) -> anyhow::Result<()> {
    let client = connect(admin)?;
    let report = client
        .post(
            &format!("/v1/runs/{run}/rollback-to"),
            Some(json!({ "savepoint": savepoint })),
        )
        .await?;
    if admin.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print!("{}", summary(&report));
    }
    if report["rollback_unverified"] == true {
        return Err(RunFailed {
            code: 1,
            message: "the rollback could not be verified".into(),
        }
        .into());
    }
    Ok(())
}

/// The command as a shell would need it typed: arguments with spaces or shell characters
/// single-quoted.
fn shell_line(command: &[String]) -> String {
    command
        .iter()
        .map(|arg| {
            let plain = !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                arg.clone()
            } else {
                format!("'{}'", arg.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
