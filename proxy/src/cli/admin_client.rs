//! Commands that talk to a running airlock over its admin API: runs, effects, review
//! decisions, commit, abort, the sandbox environment and the CA.

use std::path::Path;

use anyhow::{anyhow, Context as _};
use serde_json::Value;

use airlock_control::runs::expect::Expectation;

use super::args::{AdminArgs, RunsCommand};
use super::{counts, effects_table, render_effect};
use crate::client::{AdminClient, ClientError};
use crate::config::{ADDRESSES_FILE, ADMIN_TOKEN_FILE, ENV_DATA, ENV_TOKEN};

/// `airlock ui`: asks the server for a one-time sign-in link to the review UI
/// (`POST /v1/ui/sign-in-links`) and prints it, on the admin URL this CLI reaches.
pub(super) async fn ui(
    url_only: bool,
    for_name: Option<String>,
    admin: &AdminArgs,
) -> anyhow::Result<()> {
    let client = connect(admin)?;
    let body = for_name.map(|name| serde_json::json!({ "for": name }));
    let link = client.post("/v1/ui/sign-in-links", body).await?;
    let path = link["path"]
        .as_str()
        .ok_or_else(|| anyhow!("the server's answer has no sign-in path: {link}"))?;
    let url = format!("{}{path}", client.base());
    if url_only {
        outln!("{url}");
    } else {
        outln!(
            "Open the review UI (this link signs one browser in as {}, once, within 5 minutes):",
            link["reviewer"].as_str().unwrap_or("admin")
        );
        outln!("  {url}");
    }
    Ok(())
}

/// `airlock runs create|list|show`.
pub(super) async fn runs(command: RunsCommand) -> anyhow::Result<()> {
    match command {
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
            // Every page of GET /v1/runs, newest first.
            let mut runs = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let path = match &after {
                    Some(cursor) => format!("/v1/runs?limit=1000&after={cursor}"),
                    None => "/v1/runs?limit=1000".to_owned(),
                };
                let page = client.get(&path).await?;
                runs.extend(page["runs"].as_array().cloned().unwrap_or_default());
                match page["next"].as_str() {
                    Some(next) if after.as_deref() != Some(next) => after = Some(next.to_owned()),
                    _ => break,
                }
            }
            if admin.json {
                return print_json(&serde_json::json!({ "runs": runs, "next": null }));
            }
            outln!("{:<32} {:<20} {:<8} EFFECTS", "RUN", "STATE", "PROFILE");
            for run in &runs {
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
        RunsCommand::Export { run, output, admin } => {
            super::retention::export(&run, output.as_deref(), &admin).await
        }
        RunsCommand::Prune {
            finished_before,
            export_to,
            dry_run,
            admin,
        } => super::retention::prune(finished_before.into(), export_to, dry_run, &admin).await,
        RunsCommand::Show { run, admin } => {
            let client = connect(&admin)?;
            // A workspace decision written before a crash is finished first (the same
            // decision, never a new one); a run without a workspace has none.
            let workspace = match client
                .post(&format!("/v1/runs/{run}/workspace/resume"), None)
                .await
            {
                Ok(report) => Some(report),
                // No workspace; or a reviewer's or viewer's token, which may not drive one.
                Err(ClientError::Api {
                    status: 404 | 403, ..
                }) => None,
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
                    // After release, the summary with the real values (item 9 of #21).
                    effect["released"]["summary"]
                        .as_str()
                        .or_else(|| effect["summary"].as_str())
                        .unwrap_or("")
                );
                if let Some(line) = crate::render::flows_line(effect) {
                    outln!("        {line}");
                }
            }
            let held = run["flows"]["held"].as_array().map_or(0, Vec::len);
            let blocked = run["flows"]["blocked"].as_array().map_or(0, Vec::len);
            if held + blocked > 0 {
                outln!(
                    "flows    {held} effect(s) held for a reviewer's own approval, {blocked} blocked: `airlock show EFFECT` shows each violation"
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
                outln!("\n{}", crate::cli::run::summary(report).trim_end());
            }
            Ok(())
        }
    }
}

/// `airlock effects RUN`: the run's effects as a table, then, while any is staged or
/// approved, the expectation that binds a commit to exactly these (`--expect`).
pub(super) async fn effects(run: &str, admin: &AdminArgs) -> anyhow::Result<()> {
    let client = connect(admin)?;
    let effects = client.get(&format!("/v1/runs/{run}/effects")).await?;
    if admin.json {
        return print_json(&effects);
    }
    let listed = effects["effects"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    print_effects(listed);
    let pending = listed
        .iter()
        .any(|e| matches!(e["state"].as_str(), Some("staged" | "approved")));
    if let (true, Some(expect)) = (pending, expectation(&effects)) {
        outln!("\nexpect {expect}");
        outln!("  commit exactly these: airlock commit {run} --approve-pending --expect {expect}");
    }
    Ok(())
}

/// The `expect` of a `GET /v1/runs/{id}/effects` answer.
fn expectation(listed: &Value) -> Option<Expectation> {
    serde_json::from_value(listed["expect"].clone()).ok()
}

/// `airlock show EFFECT`: one effect with its lineage.
pub(super) async fn show(effect: &str, admin: &AdminArgs) -> anyhow::Result<()> {
    let client = connect(admin)?;
    let effect = client.get(&format!("/v1/effects/{effect}")).await?;
    if admin.json {
        return print_json(&effect);
    }
    out!("{}", render_effect(&effect));
    Ok(())
}

/// `airlock seal RUN`.
pub(super) async fn seal(run: &str, admin: &AdminArgs) -> anyhow::Result<()> {
    let client = connect(admin)?;
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

/// `airlock commit RUN [--approve-pending] [--expect SEQ:DIGEST]`: commits, bound to
/// `--expect` when given. With `--approve-pending` it first lists the run's effects,
/// prints the undecided ones it approves, and binds the commit to that list (or to
/// `--expect`): the server refuses (409 `set_changed`) rather than approve anything else.
/// Fails with [`PartialCommit`] when approved effects were not released.
pub(super) async fn commit(
    run: &str,
    approve_pending: bool,
    expect: Option<&str>,
    admin: &AdminArgs,
) -> anyhow::Result<()> {
    let client = connect(admin)?;
    let given = expect
        .map(|text| {
            Expectation::parse(text).ok_or_else(|| {
                anyhow!(
                    "--expect {text:?} is not SEQ:sha256:HEX (as `airlock effects RUN` prints it)"
                )
            })
        })
        .transpose()?;
    let expect = if approve_pending {
        let listed = client.get(&format!("/v1/runs/{run}/effects")).await?;
        let current = expectation(&listed)
            .ok_or_else(|| anyhow!("the admin API listed the effects of {run} without an expectation to bind the commit to"))?;
        let undecided: Vec<Value> = listed["effects"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["state"] == "staged")
            .cloned()
            .collect();
        match &given {
            Some(given) if *given != current => eprintln!(
                "the effects of {run} are no longer the ones --expect {given} names (now {current}); asking the server anyway"
            ),
            _ => {
                let text = format!(
                    "approving {} undecided effect(s) of {run}, and nothing else (expect {current}):\n{}",
                    undecided.len(),
                    effects_table(&undecided)
                );
                // Data on stdout, unless stdout carries the JSON report.
                if admin.json {
                    eprint!("{text}");
                } else {
                    out!("{text}");
                }
            }
        }
        Some(given.unwrap_or(current))
    } else {
        given
    };
    let mut body = serde_json::json!({ "approve_pending": approve_pending });
    if let Some(expect) = &expect {
        body["expect"] = serde_json::to_value(expect)?;
    }
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
            .filter(|e| matches!(e["state"].as_str(), Some("failed" | "unknown" | "skipped")))
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

/// `airlock abort RUN`.
pub(super) async fn abort(run: &str, admin: &AdminArgs) -> anyhow::Result<()> {
    let client = connect(admin)?;
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

/// `airlock env RUN`: the shell lines (or, with `--json`, the variables) that route a
/// sandbox through the run.
pub(super) async fn env(run: &str, admin: &AdminArgs) -> anyhow::Result<()> {
    let client = connect(admin)?;
    let env = client.get(&format!("/v1/runs/{run}/env")).await?;
    if let Some(warning) = super::node_version::old_node_warning() {
        eprintln!("airlock: WARNING: {warning}");
    }
    if admin.json {
        return print_json(&env["env"]);
    }
    out!("{}", env["shell"].as_str().unwrap_or(""));
    Ok(())
}

/// `airlock ca export`: the CA certificate, from the data directory when it is local.
pub(super) async fn ca_export(admin: &AdminArgs) -> anyhow::Result<()> {
    let file = admin.data.join(airlock_net::ca::CA_CERT_FILE);
    if admin.admin.is_none() && file.exists() {
        out!(
            "{}",
            std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?
        );
        return Ok(());
    }
    let client = connect(admin)?;
    out!("{}", client.get_text("/v1/ca").await?);
    Ok(())
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
pub(super) struct PartialCommit {
    count: usize,
    list: String,
}

/// Decides every effect named, each on its own: one that fails does not stop the others.
/// Fails when any failed, naming them.
pub(super) async fn decide_all(
    admin: &AdminArgs,
    effects: &[String],
    verb: &str,
) -> anyhow::Result<()> {
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
                    let flows: Vec<String> = result["approval"]["flows"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(|f| format!("\"{f}\""))
                        .collect();
                    let note = if flows.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (your own approval; it acknowledges review flow(s) {})",
                            flows.join(", ")
                        )
                    };
                    outln!(
                        "{} {}{note}",
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
                if let ClientError::Api { code, .. } = &error {
                    if code == "flow_blocked" {
                        eprintln!("  hint: {BLOCKED_HINT}");
                    }
                }
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

pub(super) fn print_json(value: &Value) -> anyhow::Result<()> {
    outln!("{}", crate::render::json_pretty(value));
    Ok(())
}

/// Prints effects as a table: seq, id, state, method, URL, status.
pub(super) fn print_effects(effects: &[Value]) {
    out!("{}", effects_table(effects));
}

/// What to do about an approval a `block` flow refused (`flow_blocked`).
pub(super) const BLOCKED_HINT: &str = "a block flow forbids releasing this effect: `airlock show EFFECT` shows the flow and the data it carries; reject it (`airlock reject EFFECT`) or change the policy";

/// What to do about a commit refused because review flows hold effects
/// (`flow_review_required`): the held effects from `details.held`, one command each.
pub(super) fn held_hint(details: Option<&Value>) -> String {
    let held: Vec<&str> = details
        .and_then(|d| d["held"].as_array())
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut out = format!(
        "{} effect(s) are held by review flows; --approve-pending does not release them. \
         Look at each (`airlock show EFFECT`), then approve it by itself (`airlock approve EFFECT`) \
         or reject it, and commit again",
        held.len()
    );
    for effect in held.iter().take(20) {
        out.push_str(&format!(
            "\n  airlock show {effect} && airlock approve {effect}"
        ));
    }
    if held.len() > 20 {
        out.push_str(&format!("\n  … {} more", held.len() - 20));
    }
    out
}

/// What to do about a commit refused because the run's effects changed since they were
/// listed (`set_changed`): the effects staged since, from `details.added`.
pub(super) fn changed_hint(details: Option<&Value>) -> String {
    let added: Vec<&Value> = details
        .and_then(|d| d["added"].as_array())
        .into_iter()
        .flatten()
        .collect();
    let run = details.and_then(|d| d["run"].as_str()).unwrap_or("RUN");
    let mut out = format!(
        "nothing was approved or released; {} effect(s) were staged since the list was read. \
         Look at the run again (`airlock effects {run}`), then commit again",
        added.len()
    );
    for effect in added.iter().take(20) {
        out.push_str(&format!(
            "\n  #{} {} {} {} ({})",
            effect["seq"].as_u64().unwrap_or(0),
            effect["id"].as_str().unwrap_or(""),
            effect["method"].as_str().unwrap_or(""),
            effect["url"].as_str().unwrap_or(""),
            effect["state"].as_str().unwrap_or("")
        ));
    }
    if added.len() > 20 {
        out.push_str(&format!("\n  … {} more", added.len() - 20));
    }
    out
}
