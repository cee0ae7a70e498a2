//! `airlock policy …`: dispatches the policy subcommands and runs the offline ones
//! (`check`, `test`, `explain`, `schema`) itself.

use anyhow::{anyhow, Context as _};

use super::admin_client::print_json;
use super::args::PolicyCommand;
use super::{policy_test, policy_tools};

/// `airlock policy …`: check, test, explain and diff are offline; replay and reload talk to
/// the running server's admin API.
pub(super) async fn policy_command(command: PolicyCommand) -> anyhow::Result<()> {
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
        PolicyCommand::Check { file, json, strict } => check(&file, json, strict),
        PolicyCommand::Test {
            file,
            cases,
            require_coverage,
        } => test(&file, &cases, require_coverage).await,
        PolicyCommand::Explain {
            file,
            body,
            json,
            headers,
            data,
            profile,
            method,
            url,
        } => explain(&file, body, json, &headers, data, profile, &method, &url),
    }
}

/// `policy check FILE`: strict parse and lints; warnings fail only with `--strict`.
fn check(file: &std::path::Path, json: bool, strict: bool) -> anyhow::Result<()> {
    let policy = airlock_policy::Policy::load(file)?;
    let lints = policy.lints();
    let warnings = policy.warnings();
    if json {
        print_json(&serde_json::json!({
            "file": file.display().to_string(),
            "revision": policy.revision(),
            "rules": policy.rules().len(),
            "flows": policy
                .flows()
                .iter()
                .map(|f| serde_json::json!({ "id": f.id(), "action": f.action() }))
                .collect::<Vec<_>>(),
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
        for (index, flow) in policy.flows().iter().enumerate() {
            outln!(
                "{}: flow \"{}\" (#{}): {}",
                file.display(),
                flow.id(),
                index + 1,
                flow.action().as_str()
            );
        }
        outln!(
            "{}: {} rule(s), {} flow(s), revision {}, {} lint(s), {} warning(s)",
            file.display(),
            policy.rules().len(),
            policy.flows().len(),
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

/// `policy test FILE CASES`: runs the cases; fails on a failed case, and with
/// `--require-coverage` on a rule no case reaches.
async fn test(
    file: &std::path::Path,
    cases: &std::path::Path,
    require_coverage: bool,
) -> anyhow::Result<()> {
    let policy = airlock_policy::Policy::load(file)?;
    let outcome = policy_test::run(&policy, cases).await?;
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

/// `policy explain FILE METHOD URL`: each rule's outcome for the request, the decision,
/// its obligations, the credential it injects and the flows that guard or decide it.
#[allow(clippy::too_many_arguments)]
fn explain(
    file: &std::path::Path,
    body: bool,
    json: bool,
    headers: &[String],
    data: Option<std::path::PathBuf>,
    profile: Option<String>,
    method: &str,
    url: &str,
) -> anyhow::Result<()> {
    let policy = airlock_policy::Policy::load(file)?;
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
    let target = airlock_net::authority::Target::parse(scheme, authority.as_str(), default_port)
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
        .map(|path| std::fs::read(&path).with_context(|| format!("cannot read {}", path.display())))
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
    print_rules(&explanation.rules);
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
    print_obligations(&policy, decision);
    print_injected(&policy, decision);
    print_flows(&policy, &explanation.flows, decision.action);
    Ok(())
}

/// `policy explain`'s line per rule: its outcome for the request.
fn print_rules(rules: &[airlock_policy::RuleTrace]) {
    for (i, rule) in rules.iter().enumerate() {
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
}

/// `policy explain`'s obligations of the deciding rule: strip, limits, redact, review.
fn print_obligations(policy: &airlock_policy::Policy, decision: &airlock_policy::Decision) {
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
}

/// `policy explain`'s credential line: what the deciding rule injects, where and when.
fn print_injected(policy: &airlock_policy::Policy, decision: &airlock_policy::Decision) {
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
}

/// `policy explain`'s flow lines: the labels a passed read carries and the flows that
/// guard it, or the flows that could decide a staged request (docs/policy.md#flow-rules).
fn print_flows(
    policy: &airlock_policy::Policy,
    flows: &airlock_policy::FlowExplanation,
    action: airlock_policy::Action,
) {
    if policy.flows().is_empty() {
        return;
    }
    match action {
        airlock_policy::Action::Pass => {
            outln!(
                "labels:   {}",
                if flows.labels.is_empty() {
                    "none (its rule has no `labels`)".to_owned()
                } else {
                    flows.labels.join(", ")
                }
            );
        }
        airlock_policy::Action::Stage => {}
        _ => return,
    }
    for (title, group) in [
        ("guarded:", &flows.sources),
        ("flows:", &flows.destinations),
    ] {
        for m in group {
            outln!(
                "{title:<9} flow \"{}\" ({}): {}",
                m.flow,
                m.action.as_str(),
                m.why
            );
        }
    }
    if action == airlock_policy::Action::Stage && flows.destinations.is_empty() {
        outln!("flows:    none can decide it: no flow's `to` covers this host");
    }
    if action == airlock_policy::Action::Pass {
        outln!("          (flows judge every later request of the run that carries this read's data: a staged effect is held or rejected, a passed request refused; the read itself is not held)");
    }
}
