//! `airlock run`: one transaction for files and effects. Creates a run (on a running server,
//! or an embedded one for the duration), snapshots the workspace, runs the command in the
//! chosen network mode (a fence whose only route out is airlock by default; see
//! docs/containment.md), seals, verifies, and has the server write one decision and apply
//! it to both sides. Also `airlock savepoint` and `airlock rollback-to`. See
//! docs/run.md.

use std::path::PathBuf;

use anyhow::{anyhow, Context as _};
use serde_json::{json, Value};

use super::{connect, AdminArgs};

mod fence;
mod outside;
mod step;
mod summary;

use step::{contained_step, record, StepContext};

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

/// `--scope`: what the `overlay` driver covers (docs/run.md, "The overlay driver").
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scope {
    /// The workspace alone (default).
    Workspace,
    /// Every writable filesystem: what the steps write anywhere is captured.
    Root,
}

/// Arguments of `airlock run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The workspace the command changes
    #[arg(long, default_value = ".", value_name = "DIR")]
    workspace: PathBuf,
    /// Snapshot driver: dir (a copy of the tree), overlay (each step on an overlayfs upper
    /// directory; needs root), git (a private ref), or cmd (your commands)
    #[arg(long, default_value = "dir", value_name = "DRIVER")]
    snapshot: String,
    /// overlay driver: what each step sees through overlays: the workspace alone, or
    /// root, every writable filesystem of the machine (a rollback then drops what the
    /// steps wrote anywhere; a keep merges the workspace and reports the rest)
    #[arg(long, value_enum, default_value = "workspace")]
    scope: Scope,
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
    /// Embedded server: seconds each workspace step (snapshot, diff, rollback, keep,
    /// residue check) may take before it ends with an error naming the step and the path
    /// it was processing [default: 600]. Needs --policy: a running server has its own
    /// `airlock serve --workspace-step-timeout`
    #[arg(long, value_name = "SECONDS", value_parser = super::args::seconds())]
    workspace_step_timeout: Option<u64>,
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
    /// DANGER: when airlock run is root, let the fenced command run as host root (uid 0 on
    /// the host, writing the host's files as root and the host kernel's settings that
    /// root may write) where the fence cannot give it a subordinate uid, an overlay over
    /// the filesystem and an idmapped workspace (no idmapped mounts, or --snapshot
    /// overlay). Without it, such a run is refused. See docs/containment.md
    #[arg(long)]
    allow_host_root: bool,
    /// In a fence with a layer: copy this path (outside the workspace) from the run's layer to
    /// the host when the run is kept (repeatable); everything else written outside the
    /// workspace is discarded
    #[arg(long, value_name = "PATH")]
    keep_outside: Vec<PathBuf>,
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

/// Runs `airlock run`.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let (client, server) = match &args.policy {
        Some(policy) => {
            let mut config = crate::ServeConfig::new(args.admin.data.clone(), policy.clone());
            config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            config.admin = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            config.upstream_ca = args.upstream_ca.clone();
            config.resolve = args.resolve.clone();
            if let Some(secs) = args.workspace_step_timeout {
                config.workspace_step_timeout = std::time::Duration::from_secs(secs.max(1));
            }
            // The commands of the cmd driver come from this command line's own user.
            config.danger_allow_snapshot_commands = true;
            let fresh = super::serve::FreshDataDir::before(&config.data_dir);
            let server = fresh.build(config).await?;
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
        None if args.workspace_step_timeout.is_some() => {
            return Err(anyhow!(
                "--workspace-step-timeout applies to the embedded server of `airlock run \
                 --policy FILE`; a running server has its own `airlock serve \
                 --workspace-step-timeout`"
            ));
        }
        None => (
            connect(&args.admin).map_err(|error| {
                anyhow!(
                    "{error}; or start an embedded server for this run only: \
                     airlock run --policy FILE … -- CMD"
                )
            })?,
            None,
        ),
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
    let data_dir =
        std::path::absolute(&args.admin.data).unwrap_or_else(|_| args.admin.data.clone());
    let checks = airlock_fence::launch::Checks {
        host_root: args.allow_host_root,
        state_dir: Some(&data_dir),
        workspace: Some(&workspace),
    };
    let chosen = fence::choose(args.network, &checks)?;
    let layer = fence::root_layer(
        &chosen,
        args.allow_host_root,
        &args.snapshot,
        !args.keep_outside.is_empty(),
    )?;
    if chosen.network == airlock_fence::Network::Env
        && super::node_version::runs_node(&args.command)
    {
        // The command inherits this PATH, so this is the node it runs; a command that
        // never starts Node is not told about it.
        if let Some(warning) = super::node_version::old_node_warning() {
            eprintln!("airlock: WARNING: {warning}");
        }
    }
    let driver = match (args.scope, args.snapshot.as_str()) {
        (Scope::Workspace, driver) => driver.to_owned(),
        (Scope::Root, "overlay") => "overlay-root".to_owned(),
        (Scope::Root, other) => {
            return Err(anyhow!(
                "--scope root needs --snapshot overlay (the {other} driver snapshots the \
                 workspace only)"
            ))
        }
    };
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
                "driver": driver,
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
    for note in attached["snapshot_notes"].as_array().into_iter().flatten() {
        eprintln!("airlock: snapshot note: {}", note.as_str().unwrap_or(""));
    }
    let overlay = match attached["overlay_state"].as_str() {
        Some(state) => Some(step::OverlayRun {
            state: PathBuf::from(state),
            target: attached["path"]
                .as_str()
                .map_or_else(|| workspace.clone(), PathBuf::from),
        }),
        None if args.snapshot == "overlay" => {
            let _ = client.post(&format!("/v1/runs/{run}/abort"), None).await;
            return Err(anyhow!(
                "the server did not name the run's overlay state directory (is it older than \
                 this airlock?); the run was aborted. Use --snapshot dir"
            ));
        }
        None => None,
    };
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
        overlay: overlay.as_ref(),
        layer: layer.as_ref().map(|l| l.path()),
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
    let decide = |commit: bool| {
        json!({
            "outcome": if passed { "keep" } else { "rollback" },
            "commit": commit,
            "approve_all": args.approve_all,
            "reason": reason,
        })
    };
    let path = format!("/v1/runs/{run}/workspace/decide");
    let commit = passed && args.on_pass == OnPass::Commit;
    let mut report = match client.post(&path, Some(decide(commit))).await {
        // A runner's token may keep the files but not release the effects: they are held
        // for a reviewer instead (docs/admin-api.md#roles), and the summary says so.
        Err(crate::client::ClientError::Api {
            status: 403,
            code,
            message,
            ..
        }) if commit && code == "forbidden_for_role" => {
            eprintln!(
                "airlock run: --on-pass commit refused ({message}); the effects are held for a reviewer instead"
            );
            client.post(&path, Some(decide(false))).await?
        }
        other => other?,
    };
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
    if let Some(layer) = &layer {
        report["written_outside"] =
            outside::layer_report(layer.path(), &workspace, &args.keep_outside, &report);
        // As an ordinary user a step whose overlay could not be built wrote to the host.
        let unavailable: Vec<Value> = report["workspace"]["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["containment"]["outside_unavailable"].as_str())
            .map(|why| json!(why))
            .collect();
        if !unavailable.is_empty() {
            report["written_outside"]["not_captured"] = json!(unavailable);
        }
    }
    if !outside_roots.is_empty() {
        let after = outside::scan(&outside_roots, &outside_exclude, OUTSIDE_LIMIT);
        report["outside"] = json!(outside::diff(&outside_before, &after));
    }
    if let Some(policy) = &args.policy {
        // The embedded server stops with this command: say exactly how to bring up the
        // review UI and admin API again on the same data directory.
        report["review"] = review_commands(
            &args.admin.data,
            policy,
            args.upstream_ca.as_deref(),
            &args.resolve,
        );
    }
    conclude(args.admin.json, &report)
}

/// For a run of the embedded server (`--policy`): `{serve, data, policy}`, the exact
/// `airlock serve` command that serves the run's held effects for review again (its
/// admin API and review UI) on `data`, with absolute, shell-quoted paths and the same
/// `--upstream-ca` and `--resolve` the embedded server had (without them a commit would
/// verify and dial origins otherwise than the run did).
fn review_commands(
    data: &std::path::Path,
    policy: &std::path::Path,
    upstream_ca: Option<&std::path::Path>,
    resolve: &[(String, Vec<std::net::IpAddr>)],
) -> Value {
    let absolute = |p: &std::path::Path| {
        std::path::absolute(p)
            .unwrap_or_else(|_| p.to_owned())
            .display()
            .to_string()
    };
    let (data, policy) = (absolute(data), absolute(policy));
    let mut serve = format!(
        "airlock serve --data {} --policy {}",
        sh_quote(&data),
        sh_quote(&policy)
    );
    if let Some(ca) = upstream_ca {
        serve.push_str(&format!(" --upstream-ca {}", sh_quote(&absolute(ca))));
    }
    for (host, ips) in resolve {
        let ips: Vec<String> = ips.iter().map(ToString::to_string).collect();
        serve.push_str(&format!(
            " --resolve {}",
            sh_quote(&format!("{host}={}", ips.join(",")))
        ));
    }
    json!({
        "serve": serve,
        "data": data,
        "policy": policy,
    })
}

/// `text` as one shell word: unchanged when it holds only safe characters, otherwise
/// single-quoted (POSIX sh, `'` written as `'\''`).
fn sh_quote(text: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+=:@,%".contains(c);
    if !text.is_empty() && text.chars().all(safe) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
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
        outln!("{}", crate::render::json_pretty(report));
    } else {
        out!("{}", summary(report));
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
    // `not applied: …` lines (`--scope root`: writes outside the workspace, dropped by
    // design) are reported, but do not make a keep fail.
    let keep_residue = report["decision"]["residue"].as_array().is_some_and(|r| {
        r.iter()
            .any(|line| !line.as_str().unwrap_or("").starts_with("not applied: "))
    });
    if report["decision"]["kind"] == "keep" && keep_residue {
        return Err(RunFailed {
            code: 1,
            message: "the overlay's changes could not all be merged into the workspace".into(),
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
