//! `airlock compensate RUN`: the CLI side of compensations.

/// `airlock compensate RUN`: asks the admin API for compensations and prints them (data
/// to stdout; `--json` for the API's answer).
pub(crate) async fn compensate(run: &str, admin: &super::AdminArgs) -> anyhow::Result<()> {
    let client = super::connect(admin)?;
    let report = client
        .post(&format!("/v1/runs/{run}/compensate"), None)
        .await?;
    let mut out = String::new();
    if admin.json {
        out = crate::render::json_pretty(&report);
        out.push('\n');
    } else {
        match report["compensation_run"].as_str() {
            Some(target) => out.push_str(&format!(
                "compensations for run {run} staged in run {target} (sealed; approve them, then `airlock commit {target}`):\n"
            )),
            None => out.push_str(&format!("run {run}: nothing to compensate\n")),
        }
        for effect in report["effects"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  {}  {} {}  undoes {}\n      {}\n",
                effect["id"].as_str().unwrap_or(""),
                effect["method"].as_str().unwrap_or(""),
                effect["url"].as_str().unwrap_or(""),
                effect["compensates"].as_str().unwrap_or(""),
                effect["summary"].as_str().unwrap_or(""),
            ));
        }
        for left in report["not_compensable"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  not compensable: {} ({}): {}\n",
                left["effect"].as_str().unwrap_or(""),
                left["summary"].as_str().unwrap_or(""),
                left["reason"].as_str().unwrap_or(""),
            ));
        }
        out.push_str(&format!("note: {}\n", airlock_control::compensate::NOTE));
    }
    out!("{out}");
    Ok(())
}
