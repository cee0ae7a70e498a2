//! The `airlock` command line: `serve`, the admin commands (over the admin API), `demo`.
//! Data goes to stdout, logs to stderr; errors are one line plus a `hint:` line.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, Context as _};
use clap::Parser;
use serde_json::Value;

use crate::client::{AdminClient, ClientError};

mod args;
mod policy_test;
mod render;
use crate::config::{ServeConfig, ADDRESSES_FILE, ADMIN_TOKEN_FILE, ENV_DATA, ENV_LOG, ENV_TOKEN};
pub(crate) use args::AdminArgs;
use args::{CaCommand, Cli, Command, PolicyCommand, RunsCommand, ServeArgs};
pub use render::{counts, effects_table, render_effect};

/// Writes to stdout; a closed pipe (`airlock … | head`) ends the program quietly instead
/// of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        if let Err(error) = write!(stdout, $($arg)*).and_then(|()| stdout.flush()) {
            if error.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}

macro_rules! outln {
    () => { out!("\n") };
    ($($arg:tt)*) => {{ out!($($arg)*); out!("\n"); }};
}

// After the macros, so it can use them.
mod policy_tools;

/// Runs the CLI; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(matches!(cli.command, Command::Serve(_)));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            if let Some(failed) = error.downcast_ref::<crate::run::RunFailed>() {
                eprintln!("error: {failed}");
                return ExitCode::from(failed.code);
            }
            eprintln!("error: {}", one_line(&error));
            if let Some(hint) = hint(&error) {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

fn init_logging(serving: bool) {
    let default = if serving { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env(ENV_LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn one_line(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

fn hint(error: &anyhow::Error) -> Option<String> {
    for cause in error.chain() {
        if cause.downcast_ref::<PartialCommit>().is_some() {
            return Some("`airlock show EFFECT` tells why; a failed or unknown effect is never re-sent by airlock".into());
        }
        if let Some(client) = cause.downcast_ref::<ClientError>() {
            return Some(match client {
                ClientError::Connect { .. } => {
                    "start `airlock serve`, or point --admin/AIRLOCK_ADMIN at its admin listener"
                        .into()
                }
                ClientError::Api { status: 401, .. } => {
                    "pass the token in DATA/admin.token with --token or AIRLOCK_TOKEN".into()
                }
                ClientError::Api { code, .. } if code == "undecided_effects" => {
                    "approve or reject each effect first, or commit with --approve-pending".into()
                }
                _ => return None,
            });
        }
        if cause
            .downcast_ref::<airlock_policy::PolicyError>()
            .is_some()
            || matches!(
                cause.downcast_ref::<crate::StartError>(),
                Some(crate::StartError::Policy(_))
            )
        {
            return Some("fix the policy file; `docs/policy.md` lists every key".into());
        }
        if cause.downcast_ref::<crate::StartError>().is_some() {
            return Some("check the paths and addresses given to `airlock serve`".into());
        }
    }
    None
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve(*args).await,
        Command::Demo => crate::demo::run().await,
        Command::Ui { url_only, admin } => {
            let client = connect(&admin)?;
            let url = client.login_url();
            if url_only {
                outln!("{url}");
            } else {
                outln!("Open the review UI (this link signs you in; it carries the token, keep it private):");
                outln!("  {url}");
            }
            Ok(())
        }
        Command::Policy { command } => policy_command(command).await,
        Command::Run(args) => crate::run::run(*args).await,
        Command::Savepoint { run, name, admin } => crate::run::savepoint(&admin, &run, name).await,
        Command::RollbackTo {
            run,
            savepoint,
            admin,
        } => crate::run::rollback_to(&admin, &run, &savepoint).await,
        Command::Runs { command } => match command {
            RunsCommand::Create { profile, admin } => {
                let client = connect(&admin)?;
                let body = serde_json::json!({ "profile": profile });
                let run = client.post("/v1/runs", Some(body)).await?;
                if admin.json {
                    return print_json(&run);
                }
                outln!("run        {}", run["id"].as_str().unwrap_or(""));
                outln!("token      {}", run["token"].as_str().unwrap_or(""));
                outln!("proxy_url  {}", run["proxy_url"].as_str().unwrap_or(""));
                outln!("ca_file    {}", run["ca_file"].as_str().unwrap_or(""));
                outln!(
                    "\nroute a sandbox through it: airlock env {} > run.env (on the host), then . ./run.env in the sandbox",
                    run["id"].as_str().unwrap_or("")
                );
                Ok(())
            }
            RunsCommand::List { admin } => {
                let client = connect(&admin)?;
                let runs = client.get("/v1/runs").await?;
                if admin.json {
                    return print_json(&runs);
                }
                outln!("{:<32} {:<20} {:<8} EFFECTS", "RUN", "STATE", "PROFILE");
                for run in runs["runs"].as_array().into_iter().flatten() {
                    outln!(
                        "{:<32} {:<20} {:<8} {}",
                        run["id"].as_str().unwrap_or(""),
                        run["state"].as_str().unwrap_or(""),
                        run["profile"].as_str().unwrap_or("-"),
                        counts(&run["effects"])
                    );
                }
                Ok(())
            }
            RunsCommand::Show { run, admin } => {
                let client = connect(&admin)?;
                // A workspace decision written before a crash is finished first (the same
                // decision, never a new one); a run without a workspace has none.
                let workspace = match client
                    .post(&format!("/v1/runs/{run}/workspace/resume"), None)
                    .await
                {
                    Ok(report) => Some(report),
                    Err(ClientError::Api { status: 404, .. }) => None,
                    Err(error) => return Err(error.into()),
                };
                let mut run = client.get(&format!("/v1/runs/{run}")).await?;
                if let Some(report) = &workspace {
                    run["workspace"] = report["workspace"].clone();
                }
                if admin.json {
                    return print_json(&run);
                }
                outln!("run      {}", run["id"].as_str().unwrap_or(""));
                outln!("state    {}", run["state"].as_str().unwrap_or(""));
                outln!("effects  {}", counts(&run["effects"]));
                for decision in run["decisions"].as_array().into_iter().flatten() {
                    outln!(
                        "decision {} by {}",
                        decision["kind"].as_str().unwrap_or(""),
                        decision["by"].as_str().unwrap_or("")
                    );
                }
                for flag in run["flags"].as_array().into_iter().flatten() {
                    outln!(
                        "flag     {}: {}",
                        flag["code"].as_str().unwrap_or(""),
                        flag["detail"].as_str().unwrap_or("")
                    );
                }
                let listed = client
                    .get(&format!(
                        "/v1/runs/{}/effects",
                        run["id"].as_str().unwrap_or("")
                    ))
                    .await?;
                for effect in listed["effects"].as_array().into_iter().flatten() {
                    outln!(
                        "  #{:<3} {:<10} {}",
                        effect["seq"].as_u64().unwrap_or(0),
                        effect["state"].as_str().unwrap_or(""),
                        effect["summary"].as_str().unwrap_or("")
                    );
                }
                let denials = client
                    .get(&format!(
                        "/v1/runs/{}/denials",
                        run["id"].as_str().unwrap_or("")
                    ))
                    .await?;
                let denials = denials["denials"].as_array().cloned().unwrap_or_default();
                if !denials.is_empty() {
                    outln!("denied   {} request(s)", denials.len());
                    for denial in denials.iter().take(10) {
                        outln!(
                            "  {} {} ({}, {})",
                            denial["method"].as_str().unwrap_or(""),
                            denial["url"].as_str().unwrap_or(""),
                            denial["rule"].as_str().unwrap_or("default"),
                            denial["reason_code"].as_str().unwrap_or("")
                        );
                    }
                    if denials.len() > 10 {
                        outln!("  … {} more: GET /v1/runs/RUN/denials", denials.len() - 10);
                    }
                }
                if let Some(report) = &workspace {
                    outln!("\n{}", crate::run::summary(report).trim_end());
                }
                Ok(())
            }
        },
        Command::Effects { run, admin } => {
            let client = connect(&admin)?;
            let effects = client.get(&format!("/v1/runs/{run}/effects")).await?;
            if admin.json {
                return print_json(&effects);
            }
            print_effects(
                effects["effects"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or(&[]),
            );
            Ok(())
        }
        Command::Show { effect, admin } => {
            let client = connect(&admin)?;
            let effect = client.get(&format!("/v1/effects/{effect}")).await?;
            if admin.json {
                return print_json(&effect);
            }
            out!("{}", render_effect(&effect));
            Ok(())
        }
        Command::Approve { effects, admin } => decide_all(&admin, &effects, "approve").await,
        Command::Reject { effects, admin } => decide_all(&admin, &effects, "reject").await,
        Command::Seal { run, admin } => {
            let client = connect(&admin)?;
            let run = client.post(&format!("/v1/runs/{run}/seal"), None).await?;
            if admin.json {
                return print_json(&run);
            }
            outln!(
                "{} {}",
                run["id"].as_str().unwrap_or(""),
                run["state"].as_str().unwrap_or("")
            );
            Ok(())
        }
        Command::Commit {
            run,
            approve_pending,
            admin,
        } => {
            let client = connect(&admin)?;
            let body = serde_json::json!({ "approve_pending": approve_pending });
            let report = client
                .post(&format!("/v1/runs/{run}/commit"), Some(body))
                .await?;
            if admin.json {
                print_json(&report)?;
            } else {
                outln!(
                    "run {} {}",
                    report["run"].as_str().unwrap_or(""),
                    report["state"].as_str().unwrap_or("")
                );
                print_effects(
                    report["effects"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or(&[]),
                );
            }
            if report["state"] == "partially_committed" {
                let not_released: Vec<String> = report["effects"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|e| {
                        matches!(e["state"].as_str(), Some("failed" | "unknown" | "skipped"))
                    })
                    .map(|e| {
                        format!(
                            "{} {}",
                            e["id"].as_str().unwrap_or(""),
                            e["state"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                return Err(PartialCommit {
                    count: not_released.len(),
                    list: not_released.join(", "),
                }
                .into());
            }
            Ok(())
        }
        Command::Compensate { run, admin } => crate::compensate::cli(&run, &admin).await,
        Command::Abort { run, admin } => {
            let client = connect(&admin)?;
            let run = client.post(&format!("/v1/runs/{run}/abort"), None).await?;
            if admin.json {
                return print_json(&run);
            }
            outln!(
                "run {} {}; effects: {}",
                run["id"].as_str().unwrap_or(""),
                run["state"].as_str().unwrap_or(""),
                counts(&run["effects"])
            );
            Ok(())
        }
        Command::Env { run, admin } => {
            let client = connect(&admin)?;
            let env = client.get(&format!("/v1/runs/{run}/env")).await?;
            if admin.json {
                return print_json(&env["env"]);
            }
            out!("{}", env["shell"].as_str().unwrap_or(""));
            Ok(())
        }
        Command::Ca {
            command: CaCommand::Export { admin },
        } => {
            let file = admin.data.join(crate::ca::CA_CERT_FILE);
            if admin.admin.is_none() && file.exists() {
                out!(
                    "{}",
                    std::fs::read_to_string(&file)
                        .with_context(|| format!("cannot read {}", file.display()))?
                );
                return Ok(());
            }
            let client = connect(&admin)?;
            out!("{}", client.get_text("/v1/ca").await?);
            Ok(())
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = ServeConfig::new(args.data, args.policy);
    config.listen = args.listen;
    config.admin = args.admin;
    config.upstream_ca = args.upstream_ca;
    config.stage_body_limit = args.stage_body_limit;
    config.header_read_timeout = std::time::Duration::from_secs(args.header_read_timeout.max(1));
    config.danger_allow_snapshot_commands = args.danger_allow_snapshot_commands;
    config.resolve = args.resolve;
    config.advertise_proxy = args.advertise_proxy;
    config.advertise_ca = args.advertise_ca;
    config.baseline_path = args.baseline;
    config.reviewer_tokens = args.reviewer_tokens;
    config.notify_webhook = args.notify_webhook;
    config.ui_base_url = args.ui_base_url;
    config.idle_timeout = std::time::Duration::from_secs(args.idle_timeout.max(1));
    config.max_connections_per_run = args.max_connections_per_run;
    config.max_connections = args.max_connections;
    config.keep_alive_timeout = std::time::Duration::from_secs(args.keep_alive_timeout.max(1));
    config.max_unauthenticated_connections = args.max_unauthenticated_connections;
    config.auth_timeout = std::time::Duration::from_secs(args.auth_timeout.max(1));
    config.ledger_cache_bytes = args.ledger_cache_mib << 20;
    crate::limits::raise_fd_limit(config.max_connections);
    let server = crate::Server::build(config).await?;
    server.run_until(shutdown_signal()).await;
    Ok(())
}

/// Completes on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(error) => {
                    tracing::warn!(error = %error, "cannot listen for SIGTERM");
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Resolves the admin URL and token: flags and environment first, then the data directory.
pub(crate) fn connect(args: &AdminArgs) -> anyhow::Result<AdminClient> {
    let base = match &args.admin {
        Some(url) => url.clone(),
        None => admin_url_from(&args.data).unwrap_or_else(|| "http://127.0.0.1:8081".to_owned()),
    };
    let token = match &args.token {
        Some(token) => token.clone(),
        None => {
            let path = args.data.join(ADMIN_TOKEN_FILE);
            std::fs::read_to_string(&path)
                .map(|t| t.trim().to_owned())
                .map_err(|e| {
                    let shown = std::path::absolute(&path).unwrap_or(path.clone());
                    anyhow!(
                        "no admin token: --token and {ENV_TOKEN} are unset and {} cannot be read ({e}); \
                         point --data (or {ENV_DATA}) at the server's data directory",
                        shown.display()
                    )
                })?
        }
    };
    Ok(AdminClient::new(&base, &token))
}

fn admin_url_from(data: &Path) -> Option<String> {
    let text = std::fs::read_to_string(data.join(ADDRESSES_FILE)).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    value["admin"].as_str().map(str::to_owned)
}

/// A commit that ended `partially_committed`: the CLI exits non-zero so scripts notice.
#[derive(Debug, thiserror::Error)]
#[error("the commit finished, but {count} approved effect(s) were not released: {list}")]
struct PartialCommit {
    count: usize,
    list: String,
}

/// Decides every effect named, each on its own: one that fails does not stop the others.
/// Fails when any failed, naming them.
async fn decide_all(admin: &AdminArgs, effects: &[String], verb: &str) -> anyhow::Result<()> {
    let client = connect(admin)?;
    let mut results = Vec::new();
    let mut failed = Vec::new();
    for effect in effects {
        match client
            .post(&format!("/v1/effects/{effect}/{verb}"), None)
            .await
        {
            Ok(result) => {
                if !admin.json {
                    outln!(
                        "{} {}",
                        result["id"].as_str().unwrap_or(""),
                        result["state"].as_str().unwrap_or("")
                    );
                }
                results.push(result);
            }
            Err(ClientError::Connect { url, reason }) => {
                return Err(ClientError::Connect { url, reason }.into())
            }
            Err(error) => {
                eprintln!("{effect}: {error}");
                failed.push(effect.clone());
            }
        }
    }
    if admin.json {
        print_json(&Value::Array(results))?;
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(
            "{} of {} effect(s) could not be {verb}d: {}",
            failed.len(),
            effects.len(),
            failed.join(", ")
        ))
    }
}

fn print_json(value: &Value) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints effects as a table: seq, id, state, method, URL, status.
pub fn print_effects(effects: &[Value]) {
    out!("{}", effects_table(effects));
}

/// `airlock policy …`: check, test, explain and diff are offline; replay and reload talk to
/// the running server's admin API.
async fn policy_command(command: PolicyCommand) -> anyhow::Result<()> {
    match command {
        PolicyCommand::Diff {
            old,
            new,
            json,
            fail_on_widen,
        } => policy_tools::diff(&old, &new, json, fail_on_widen),
        PolicyCommand::Replay { file, run, admin } => {
            policy_tools::replay(&file, &run, &admin).await
        }
        PolicyCommand::Schema => print_json(&airlock_policy::json_schema()),
        PolicyCommand::Reload { file, admin } => policy_tools::reload(&file, &admin).await,
        PolicyCommand::Check { file, json, strict } => {
            let policy = airlock_policy::Policy::load(&file)?;
            let lints = policy.lints();
            let warnings = policy.warnings();
            if json {
                print_json(&serde_json::json!({
                    "file": file.display().to_string(),
                    "revision": policy.revision(),
                    "rules": policy.rules().len(),
                    "lints": lints,
                    "warnings": warnings,
                }))?;
            } else {
                for warning in &warnings {
                    if warning.index == 0 {
                        // About the top level or a `[credential.NAME]` table, not a rule.
                        outln!(
                            "{}: warning: {}: {}",
                            file.display(),
                            warning.rule,
                            warning.message
                        );
                        continue;
                    }
                    outln!(
                        "{}: warning: {} (#{}): {}",
                        file.display(),
                        warning.rule,
                        warning.index,
                        warning.message
                    );
                }
                for lint in &lints {
                    if lint.index == 0 {
                        // A lint about a `[credential.NAME]` table, not a rule.
                        outln!("{}: {}: {}", file.display(), lint.rule, lint.message);
                        continue;
                    }
                    outln!(
                        "{}: rule \"{}\" (#{}): {}",
                        file.display(),
                        lint.rule,
                        lint.index,
                        lint.message
                    );
                }
                outln!(
                    "{}: {} rule(s), revision {}, {} lint(s), {} warning(s)",
                    file.display(),
                    policy.rules().len(),
                    policy.revision(),
                    lints.len(),
                    warnings.len()
                );
            }
            if strict && !warnings.is_empty() && lints.is_empty() {
                return Err(anyhow!("{} warning(s) (--strict)", warnings.len()));
            }
            if lints.is_empty() {
                Ok(())
            } else {
                Err(anyhow!(
                    "{} rule(s) can never decide a request",
                    lints.len()
                ))
            }
        }
        PolicyCommand::Test {
            file,
            cases,
            require_coverage,
        } => {
            let policy = airlock_policy::Policy::load(&file)?;
            let outcome = policy_test::run(&policy, &cases)?;
            for failure in &outcome.failures {
                outln!("FAIL {failure}");
            }
            for rule in &outcome.uncovered {
                outln!("uncovered: no case reaches rule \"{rule}\"");
            }
            outln!(
                "{}: {} case(s), {} failed; {} of {} rule(s) covered",
                cases.display(),
                outcome.cases,
                outcome.failures.len(),
                policy.rules().len() - outcome.uncovered.len(),
                policy.rules().len()
            );
            if !outcome.failures.is_empty() {
                return Err(anyhow!("{} case(s) failed", outcome.failures.len()));
            }
            if require_coverage && !outcome.uncovered.is_empty() {
                return Err(anyhow!(
                    "{} rule(s) are reached by no case (--require-coverage)",
                    outcome.uncovered.len()
                ));
            }
            Ok(())
        }
        PolicyCommand::Explain {
            file,
            body,
            json,
            headers,
            data,
            profile,
            method,
            url,
        } => {
            let policy = airlock_policy::Policy::load(&file)?;
            let uri: http::Uri = url
                .parse()
                .map_err(|e| anyhow!("{url:?} is not an absolute URL ({e})"))?;
            let scheme = match uri.scheme_str() {
                Some("https") => airlock_policy::Scheme::Https,
                Some("http") => airlock_policy::Scheme::Http,
                _ => return Err(anyhow!("{url:?} needs an http:// or https:// scheme")),
            };
            let authority = uri
                .authority()
                .ok_or_else(|| anyhow!("{url:?} names no host"))?;
            let default_port = if scheme == airlock_policy::Scheme::Https {
                443
            } else {
                80
            };
            let target = crate::handle::Target::parse(scheme, authority.as_str(), default_port)
                .ok_or_else(|| anyhow!("{url:?} names no valid host"))?;
            let header_pairs: Vec<(&str, &str)> = headers
                .iter()
                .map(|line| {
                    line.split_once(':')
                        .map(|(name, value)| (name.trim(), value.trim()))
                        .ok_or_else(|| anyhow!("--header {line:?} is not NAME:VALUE"))
                })
                .collect::<anyhow::Result<_>>()?;
            let data = data
                .map(|path| {
                    std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))
                })
                .transpose()?;
            let body = body || data.is_some();
            let upper = method.to_ascii_uppercase();
            let explanation = policy.explain(&airlock_policy::RequestFacts {
                query: uri.query().unwrap_or(""),
                headers: &header_pairs,
                body: data
                    .as_deref()
                    .map_or(airlock_policy::RequestBody::NotRead, |bytes| {
                        airlock_policy::RequestBody::Read(bytes)
                    }),
                profile: profile.as_deref(),
                ..airlock_policy::RequestFacts::new(
                    scheme,
                    &target.host,
                    target.port,
                    &upper,
                    uri.path(),
                    body,
                )
            });
            if json {
                return print_json(&serde_json::to_value(&explanation)?);
            }
            outln!(
                "{} {} (body: {})",
                method.to_ascii_uppercase(),
                target.url(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")),
                if body { "yes" } else { "no" }
            );
            for (i, rule) in explanation.rules.iter().enumerate() {
                let verdict = match &rule.outcome {
                    airlock_policy::RuleOutcome::Matched => "MATCHED".to_owned(),
                    airlock_policy::RuleOutcome::Mismatch { field } => format!("no match: {field}"),
                    airlock_policy::RuleOutcome::NotReached => "not reached".to_owned(),
                    airlock_policy::RuleOutcome::Failed { reason_code } => {
                        format!("FAILED CLOSED: {reason_code}")
                    }
                    airlock_policy::RuleOutcome::Audited => {
                        "matched in audit mode (logged; evaluation went on)".to_owned()
                    }
                };
                let detail = rule
                    .detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default();
                let label = if rule.baseline {
                    format!("B{}", i + 1)
                } else {
                    format!("#{}", i + 1)
                };
                outln!(
                    "  {label:<4} {:<24} {:<6} {verdict}{detail}",
                    rule.id,
                    rule.action.as_str()
                );
            }
            for matched in &explanation.decision.audit {
                outln!(
                    "audit:    rule {} would have decided {} ({})",
                    matched.rule.as_deref().unwrap_or("<default>"),
                    matched.action.as_str(),
                    matched.reason_code
                );
            }
            let decision = &explanation.decision;
            outln!(
                "decision: {} ({}){}",
                decision.action.as_str(),
                decision.reason_code,
                decision
                    .rule
                    .as_deref()
                    .map(|r| format!(" by rule \"{r}\""))
                    .unwrap_or_default()
            );
            outln!("reason:   {}", decision.reason);
            if let Some(rule) = decision.rule.as_deref().and_then(|id| policy.rule(id)) {
                let mut obligations = Vec::new();
                if !rule.strip().is_empty() {
                    obligations.push(format!("strip {}", rule.strip().join(", ")));
                }
                let limits = rule.limits();
                for (name, value) in [
                    ("body_bytes", limits.body_bytes),
                    (
                        "requests_per_minute",
                        limits.requests_per_minute.map(u64::from),
                    ),
                    ("upload_bytes_per_run", limits.upload_bytes_per_run),
                    ("query_bytes", limits.query_bytes),
                ] {
                    if let Some(value) = value {
                        obligations.push(format!("limit {name} = {value}"));
                    }
                }
                for redaction in rule.redact() {
                    obligations.push(match redaction {
                        airlock_policy::Redaction::JsonPointer(p) => format!("redact {p}"),
                        airlock_policy::Redaction::Header(h) => format!("redact header:{h}"),
                    });
                }
                if decision.action == airlock_policy::Action::Stage {
                    obligations.push(format!(
                        "review {}",
                        match rule.review() {
                            airlock_policy::Review::Auto => "auto",
                            airlock_policy::Review::Required => "required",
                        }
                    ));
                }
                if !obligations.is_empty() {
                    outln!("obligations: {}", obligations.join("; "));
                }
            }
            let injected = decision
                .rule
                .as_deref()
                .and_then(|id| policy.rule(id))
                .and_then(|rule| rule.inject())
                .and_then(|name| policy.credential(name));
            if let Some(credential) = injected {
                let placed = match credential.place() {
                    airlock_policy::Placement::Header { name, .. } => format!("header {name}"),
                    airlock_policy::Placement::Basic { .. } => "basic authorization".to_owned(),
                    airlock_policy::Placement::Query { param } => {
                        format!("query parameter {param}")
                    }
                };
                let when = if decision.action == airlock_policy::Action::Stage {
                    "at release"
                } else {
                    "when forwarding"
                };
                outln!(
                    "inject:   credential \"{}\" in {placed}, {when}",
                    credential.name()
                );
            }
            Ok(())
        }
    }
}
