//! `airlock retry EFFECT|RUN` and `airlock settle EFFECT`: the CLI side of the ways out of
//! a doubtful or failed release (docs/design.md, "Outcomes of a release").

use serde_json::{json, Value};

use super::admin_client::{print_effects, print_json};
use super::AdminArgs;

/// `airlock retry EFFECT|RUN`: `POST /v1/effects/{id}/retry` or `/v1/runs/{id}/retry`,
/// then the run's report (data to stdout; `--json` for the API's answer).
pub(crate) async fn retry(target: &str, admin: &AdminArgs) -> anyhow::Result<()> {
    let client = super::connect(admin)?;
    let path = if target.starts_with("run_") {
        format!("/v1/runs/{target}/retry")
    } else {
        format!("/v1/effects/{target}/retry")
    };
    let report = client.post(&path, None).await?;
    if admin.json {
        return print_json(&report);
    }
    let retried: Vec<&str> = report["retried"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    outln!("retried {}", retried.join(", "));
    print_run(&report);
    Ok(())
}

/// `airlock settle EFFECT --delivered | --not-delivered [--note TEXT] [--value NAME=VALUE]`:
/// `POST /v1/effects/{id}/settle`, then the run's report.
pub(crate) async fn settle(
    effect: &str,
    delivered: bool,
    note: Option<String>,
    values: Vec<(String, String)>,
    admin: &AdminArgs,
) -> anyhow::Result<()> {
    let client = super::connect(admin)?;
    let values: serde_json::Map<String, Value> = values
        .into_iter()
        .map(|(name, value)| (name, Value::String(value)))
        .collect();
    let body = json!({ "delivered": delivered, "note": note, "values": values });
    let report = client
        .post(&format!("/v1/effects/{effect}/settle"), Some(body))
        .await?;
    if admin.json {
        return print_json(&report);
    }
    outln!(
        "settled {effect} {}",
        if delivered {
            "delivered"
        } else {
            "not delivered"
        }
    );
    print_run(&report);
    Ok(())
}

fn print_run(report: &Value) {
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
