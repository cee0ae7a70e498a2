//! The policy manifest an agent can read through the proxy at
//! `http://airlock.invalid/.well-known/airlock/policy` (or https): what its run may do,
//! as the policy author wrote it. `airlock.invalid` can never be a real host (RFC 6761
//! §6.4), so airlock answers it itself and never dials it.

use http::StatusCode;
use serde_json::{json, Value};

use crate::policy_store::Snapshot;
use airlock_net::body::ProxyBody;
use airlock_net::respond::json_response;

/// The reserved host airlock answers itself.
pub const MANIFEST_HOST: &str = "airlock.invalid";
/// The manifest's path on that host.
pub const MANIFEST_PATH: &str = "/.well-known/airlock/policy";

/// The manifest JSON: `{run, policy_revision, default, rules: [as written], mode,
/// baseline: [{id, action, reason}], credentials, about}`. The baseline's denies come first
/// and cannot be overridden; `credentials` lists each `[credential.NAME]` as `{name, hosts,
/// placed_in, placeholder_env}` (where airlock adds it, and the variable holding the run's
/// placeholder, if any) — never a value.
/// Policy files hold no secret values (credentials are named, never inlined), so the rules
/// are shown as written. `policy` is the snapshot of the request that asked.
pub fn manifest(policy: &Snapshot, run: &str) -> Value {
    let written: Value = toml::from_str::<toml::Value>(&policy.text)
        .ok()
        .and_then(|v| serde_json::to_value(v).ok())
        .unwrap_or(Value::Null);
    json!({
        "run": run,
        "policy_revision": policy.revision(),
        "policy_generation": policy.generation,
        "default": written.get("default").cloned().unwrap_or(json!("deny")),
        "rules": written.get("rule").cloned().unwrap_or(json!([])),
        "mode": written.get("mode").cloned().unwrap_or(json!("enforce")),
        "baseline": policy.baseline().iter().map(|rule| json!({
            "id": rule.id(),
            "action": "deny",
            "reason": rule.reason(),
        })).collect::<Vec<_>>(),
        "credentials": policy.credentials().map(|credential| {
            let placed_in = match credential.place() {
                airlock_policy::Placement::Header { name, .. } => format!("header {name}"),
                airlock_policy::Placement::Basic { .. } => "header authorization (basic)".to_owned(),
                airlock_policy::Placement::Query { param } => format!("query parameter {param}"),
            };
            json!({
                "name": credential.name(),
                "hosts": credential.bind_hosts(),
                "placed_in": placed_in,
                "placeholder_env": credential
                    .placeholder()
                    .then(|| crate::credentials::placeholder_var(credential.name())),
            })
        }).collect::<Vec<_>>(),
        "about": "Requests pass, are staged (held until a reviewer approves and the run is committed; you get 202 at once) or are denied (403 with the rule and reason). Rules are tried top-down; the first match wins. Credentials are added by airlock on their hosts (a rule's inject): send no token of your own; where a tool needs one, use the placeholder in placeholder_env, which works only on the credential's hosts.",
    })
}

/// Answers a request for the reserved host under the request's `policy` snapshot: the
/// manifest, or 404.
pub fn answer(policy: &Snapshot, run: &str, path: &str) -> http::Response<ProxyBody> {
    if path == MANIFEST_PATH {
        json_response(StatusCode::OK, &manifest(policy, run))
    } else {
        json_response(
            StatusCode::NOT_FOUND,
            &json!({
                "error": "not found",
                "reason_code": "not_found",
                "reason": format!("{MANIFEST_HOST} serves only {MANIFEST_PATH}"),
                "manifest": airlock_net::respond::MANIFEST_URL,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_refusals_link_is_the_one_answered_here() {
        assert_eq!(
            airlock_net::respond::MANIFEST_URL,
            format!("http://{MANIFEST_HOST}{MANIFEST_PATH}")
        );
    }
}
