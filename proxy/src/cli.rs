//! The `airlock` command line: `serve`, the admin commands (over the admin API), `demo`.
//! Data goes to stdout, logs to stderr; errors are one line plus a `hint:` line.

use std::process::ExitCode;

use airlock_control::visible::{escape, escape_line};
use clap::{CommandFactory, FromArgMatches};

use crate::client::ClientError;

mod args;
mod policy_test;
use crate::config::ENV_LOG;
pub use crate::render::{counts, effects_table, render_effect};
pub(crate) use args::AdminArgs;
use args::{CaCommand, Cli, Command};

/// Writes to stdout, with every bidi, invisible or control character shown as `<U+XXXX>`
/// (`airlock_control::visible`: what agents sent cannot reorder, hide or drive the
/// terminal); a closed pipe (`airlock … | head`) ends the program quietly instead of
/// panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($arg)*);
        let shown = airlock_control::visible::escape(&text);
        let mut stdout = std::io::stdout().lock();
        if let Err(error) = stdout.write_all(shown.as_bytes()).and_then(|()| stdout.flush()) {
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

// After the macros, so they can use them.
mod admin_client;
mod audit;
mod compensate;
mod node_version;
mod outcomes;
mod policy;
mod policy_tools;
mod retention;
pub mod run;
mod serve;

pub(crate) use admin_client::connect;
use admin_client::{decide_all, PartialCommit};

/// Runs the CLI; returns the process exit code.
pub fn main() -> ExitCode {
    // The fence's own steps, before clap: they take a command line to run as it is.
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match argv.first().map(String::as_str) {
        Some("fence-root") => {
            let rest = argv.get(1..).unwrap_or_default();
            let rest = rest.strip_prefix(&["--".to_owned()]).unwrap_or(rest);
            let Some((unshare, args)) = rest.split_first() else {
                eprintln!("airlock fence: fence-root needs the fence's command line");
                return ExitCode::from(125);
            };
            let code = airlock_fence::root::run(std::path::Path::new(unshare), args);
            return ExitCode::from(u8::try_from(code).unwrap_or(1));
        }
        Some("fence-exec") => {
            let code = airlock_fence::init::exec(argv.get(1..).unwrap_or_default());
            return ExitCode::from(u8::try_from(code).unwrap_or(1));
        }
        _ => {}
    }
    let matches = Cli::command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    if let (Command::Serve(args), Some(serve)) =
        (&mut cli.command, matches.subcommand_matches("serve"))
    {
        args.given = given_flags(&Cli::command(), "serve", serve);
    }
    match &cli.command {
        Command::Serve(args) => init_logging(true, args.log_format),
        _ => init_logging(false, args::LogFormat::Text),
    }
    if let Command::FenceInit = &cli.command {
        return fence_init();
    }
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
    // The command whose flags a start-up error is about (`airlock run` embeds a server).
    let starts = match &cli.command {
        Command::Run(_) => "airlock run",
        _ => "airlock serve",
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            if let Some(failed) = error.downcast_ref::<run::RunFailed>() {
                eprintln!("error: {}", escape_line(&failed.to_string()));
                return ExitCode::from(failed.code);
            }
            // Line breaks stay (a TOML parse error points at its column on the next
            // lines); bidi, invisible and other control characters are shown escaped.
            eprintln!("error: {}", escape(&one_line(&error)));
            if let Some(hint) = hint(&error, starts) {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

/// The `--…` names of `subcommand`'s flags that `matches` got from the command line or
/// the environment (not from defaults), for `airlock serve --role`'s checks.
fn given_flags(cli: &clap::Command, subcommand: &str, matches: &clap::ArgMatches) -> Vec<String> {
    let Some(command) = cli.find_subcommand(subcommand) else {
        return Vec::new();
    };
    command
        .get_arguments()
        .filter(|arg| {
            matches!(
                matches.value_source(arg.get_id().as_str()),
                Some(
                    clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable
                )
            )
        })
        .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
        .collect()
}

/// `airlock fence-init`: the fence's PID 1, on a one-thread runtime (it only relays); the
/// spec comes in `AIRLOCK_FENCE_SPEC`.
fn fence_init() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("airlock fence: cannot start the async runtime: {error}");
            return ExitCode::from(125);
        }
    };
    let code = runtime.block_on(airlock_fence::init::run());
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Logs to stderr at `info` when serving (`warn` otherwise) unless `AIRLOCK_LOG` says
/// otherwise, as text or as one JSON object per line.
fn init_logging(serving: bool, format: args::LogFormat) {
    let default = if serving { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env(ENV_LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        args::LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_target(false)
            .try_init(),
        // The event's fields at the top level beside `timestamp`, `level`, `message` and
        // `target` (`airlock::request` for the request lines), as log shippers expect.
        args::LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_ansi(false)
            .try_init(),
    };
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

/// The `hint:` line for `error`; `starts` is the command whose flags a start-up error is
/// about (`airlock serve` or `airlock run`).
fn hint(error: &anyhow::Error, starts: &str) -> Option<String> {
    for cause in error.chain() {
        if cause.downcast_ref::<PartialCommit>().is_some() {
            return Some("`airlock show EFFECT` tells why; `airlock retry` re-sends an effect that provably never reached its origin, `airlock settle` records what you found at the origin for an unknown one".into());
        }
        if let Some(client) = cause.downcast_ref::<ClientError>() {
            return Some(match client {
                ClientError::Connect { .. } if starts == "airlock run" => {
                    "start `airlock serve`, or point --admin/AIRLOCK_ADMIN at its admin listener; or give `airlock run --policy FILE …` to start an embedded server for this run only".into()
                }
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
                ClientError::Api { code, details, .. } if code == "flow_review_required" => {
                    admin_client::held_hint(details.as_ref())
                }
                ClientError::Api { code, .. } if code == "not_retriable" => {
                    "check the origin, then `airlock settle EFFECT --delivered` or `--not-delivered` (an unknown effect), or stage the request anew".into()
                }
                ClientError::Api { code, .. } if code == "flow_blocked" => {
                    admin_client::BLOCKED_HINT.into()
                }
                ClientError::Api { code, details, .. } if code == "set_changed" => {
                    admin_client::changed_hint(details.as_ref())
                }
                ClientError::Api { code, .. } if code == "expectation_required" => {
                    "list the effects first (`airlock effects RUN` prints the expectation), then `airlock commit RUN --approve-pending --expect SEQ:DIGEST`".into()
                }
                _ => return None,
            });
        }
        let policy_error = cause.downcast_ref::<airlock_policy::PolicyError>().or(
            match cause.downcast_ref::<crate::StartError>() {
                Some(crate::StartError::Policy(error)) => Some(error),
                _ => None,
            },
        );
        if let Some(error) = policy_error {
            return Some(policy_hint(error));
        }
        if let Some(crate::StartError::Store {
            source: airlock_ledger::PgOpenError::Tls { parameter, .. },
        }) = cause.downcast_ref::<crate::StartError>()
        {
            if !matches!(*parameter, "sslmode" | "sslrootcert") {
                return Some("remove the client-certificate parameters from the URL and give the password in it (docs/fleet.md, \"PostgreSQL store\")".into());
            }
            return Some("fix the URL's sslmode or sslrootcert: verified TLS is sslmode=verify-full&sslrootcert=FILE (the server's CA, PEM) or sslrootcert=system (docs/fleet.md, \"PostgreSQL store\", has every mode)".into());
        }
        if let Some(crate::StartError::Store { .. } | crate::StartError::StoreRead { .. }) =
            cause.downcast_ref::<crate::StartError>()
        {
            return Some("check that PostgreSQL runs and accepts connections there (`pg_isready -h HOST -p PORT`), that the user, password and database exist, and the URL's form, postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE, given by --store or AIRLOCK_STORE (docs/fleet.md, \"PostgreSQL store\")".into());
        }
        if cause.downcast_ref::<crate::StartError>().is_some() {
            return Some(format!("check the paths and addresses given to `{starts}`"));
        }
    }
    None
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::serve(*args).await,
        Command::Demo => crate::demo::run().await,
        Command::Ui {
            url_only,
            for_name,
            admin,
        } => admin_client::ui(url_only, for_name, &admin).await,
        Command::Audit {
            run,
            limit,
            oldest_first,
            admin,
        } => audit::audit(run, limit, oldest_first, &admin).await,
        Command::Policy { command } => policy::policy_command(command).await,
        Command::Run(args) => run::run(*args).await,
        Command::FenceInit => Ok(()),
        Command::Openapi => {
            print!("{}", airlock_control::admin::openapi::document_json());
            Ok(())
        }
        Command::Savepoint { run, name, admin } => run::savepoint(&admin, &run, name).await,
        Command::RollbackTo {
            run,
            savepoint,
            admin,
        } => run::rollback_to(&admin, &run, &savepoint).await,
        Command::Runs { command } => admin_client::runs(command).await,
        Command::Effects { run, admin } => admin_client::effects(&run, &admin).await,
        Command::Show { effect, admin } if effect.starts_with("run_") => {
            admin_client::runs(args::RunsCommand::Show { run: effect, admin }).await
        }
        Command::Show { effect, admin } => admin_client::show(&effect, &admin).await,
        Command::Approve { effects, admin } => decide_all(&admin, &effects, "approve").await,
        Command::Reject { effects, admin } => decide_all(&admin, &effects, "reject").await,
        Command::Seal { run, admin } => admin_client::seal(&run, &admin).await,
        Command::Commit {
            run,
            approve_pending,
            expect,
            admin,
        } => admin_client::commit(&run, approve_pending, expect.as_deref(), &admin).await,
        Command::Compensate { run, admin } => compensate::compensate(&run, &admin).await,
        Command::Retry { target, admin } => outcomes::retry(&target, &admin).await,
        Command::Settle {
            effect,
            delivered,
            not_delivered: _,
            note,
            values,
            admin,
        } => outcomes::settle(&effect, delivered, note, values, &admin).await,
        Command::Abort { run, admin } => admin_client::abort(&run, &admin).await,
        Command::Env { run, admin } => admin_client::env(&run, &admin).await,
        Command::Ca {
            command: CaCommand::Export { admin },
        } => admin_client::ca_export(&admin).await,
    }
}

/// The hint for a policy that did not load: a file that cannot be read is a path to
/// check (or a policy to write), anything else is the file's content to fix.
fn policy_hint(error: &airlock_policy::PolicyError) -> String {
    match error {
        airlock_policy::PolicyError::Read { origin, source } => {
            let cwd = std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|_| "the current directory".to_owned());
            let what = if source.kind() == std::io::ErrorKind::NotFound {
                format!("there is no file {origin} (a relative path is read from {cwd})")
            } else {
                format!("{origin} cannot be read ({source})")
            };
            format!(
                "{what}: give --policy the path of a policy file (TOML, docs/policy.md); examples/policies/ in the repository has policies to start from"
            )
        }
        _ => "fix the policy file; `docs/policy.md` lists every key".into(),
    }
}
