//! The admin API's OpenAPI 3.1 document (<https://spec.openapis.org/oas/v3.1.0>), built by
//! utoipa from each handler's `#[utoipa::path]` annotation, the request bodies' own types
//! and the error body [`ApiErrorBody`] every error is rendered from. Served at
//! `GET /v1/openapi.json` (no token: it holds no state) and kept in `docs/openapi.json`
//! (`airlock openapi` prints it; the drift test `openapi::…` compares the three).
//!
//! Every operation gets the error answers it can give, added by `ErrorResponses`: 401
//! (bearer token) and 500 on all, 400 and 404 where the path names a run or effect, 400,
//! 409 and 413 on every `POST`.

use serde::Serialize;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Content, HttpMethod, OpenApi as Document, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi, ToSchema};

/// The JSON body of every admin API error (docs/admin-api.md, "Errors").
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiErrorBody {
    /// The status's short name in lower case (`not found`, `conflict`, …).
    pub error: String,
    /// The stable code (`not_found`, `set_changed`, …; docs/admin-api.md lists them).
    pub reason_code: String,
    /// What happened.
    pub reason: String,
    /// What to do about it.
    pub hint: String,
    /// Details some codes carry (`undecided`, `held`, `flows`, `limit`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<serde_json::Value>,
}

/// The admin API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "airlock admin API",
        description = "Runs, effects, decisions and commit, behind a bearer token of one of four roles (admin, runner, reviewer, viewer; each operation's `x-airlock-roles` says which may call it). Reference: docs/admin-api.md.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        super::create_run,
        super::run_list::list_runs,
        super::show_run,
        super::run_effects,
        super::run_reads,
        super::run_env,
        super::run_denials,
        super::run_lineage,
        super::seal_run,
        super::abort_run,
        super::retention::export_run,
        super::retention::prune_run,
        super::retention::prune_runs,
        super::ca_pem,
        super::commit::commit_run,
        super::compensate::create,
        super::outcomes::retry_run,
        super::outcomes::retry_effect,
        super::outcomes::settle_effect,
        super::effects::show_effect,
        super::effects::approve_effect,
        super::effects::reject_effect,
        super::fence::show,
        super::workspace::attach,
        super::workspace::show,
        super::workspace::step,
        super::workspace::decide,
        super::workspace::resume,
        super::workspace::savepoint,
        super::workspace::rollback_to,
        super::policy::show,
        super::policy::replace,
        super::flow_replay::replay,
        crate::ui::login::create_link,
        super::audit::list,
        crate::metrics::serve,
        super::health::healthz,
        openapi_json,
    ),
    components(schemas(ApiErrorBody)),
    modifiers(&ErrorResponses),
    security(("bearer" = [])),
)]
pub struct AdminApi;

/// The document as served and as written to `docs/openapi.json`: pretty JSON with a final
/// newline.
pub fn document_json() -> String {
    let mut text = AdminApi::openapi()
        .to_pretty_json()
        .unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}"));
    text.push('\n');
    text
}

/// `GET /v1/openapi.json` (no token) → this document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "other", security(()),
    responses((status = 200, description = "The admin API's OpenAPI 3.1 document", body = Object)))]
pub(super) async fn openapi_json() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        document_json(),
    )
        .into_response()
}

/// Adds the bearer scheme and each operation's error answers (module docs).
struct ErrorResponses;

impl Modify for ErrorResponses {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        for (path, item) in openapi.paths.paths.iter_mut() {
            let names_record = path.contains("{id}");
            let public = path == "/healthz" || path == "/v1/openapi.json";
            for (method, operation) in [
                (HttpMethod::Get, item.get.as_mut()),
                (HttpMethod::Post, item.post.as_mut()),
            ] {
                let Some(operation) = operation else { continue };
                let mut statuses: Vec<(&str, &str)> = Vec::new();
                if !public {
                    statuses.push(("401", "Missing or wrong bearer token (`unauthorized`)"));
                    statuses.push(("500", "Storage or a task failed (`ledger_error`, `task_failed`, `snapshot_failed`)"));
                }
                if names_record {
                    statuses.push(("400", "Malformed id or body (`bad_run_id`, `bad_effect_id`, `bad_json`, `bad_body`, …)"));
                    statuses.push(("404", "No such run or effect (`not_found`)"));
                }
                if method == HttpMethod::Post {
                    statuses.push(("400", "Malformed id or body (`bad_run_id`, `bad_effect_id`, `bad_json`, `bad_body`, …)"));
                    statuses.push(("409", "The state machine or a check refuses (`invalid_run_transition`, `set_changed`, `flow_blocked`, …)"));
                    statuses.push((
                        "413",
                        "The body is over 2 MiB (`body_too_large`, `details.limit`)",
                    ));
                }
                if !public {
                    statuses.push(("403", "The token's role may not call this (`forbidden_for_role`, `details: {role, needed, action}`)"));
                    add_roles(operation, method.clone(), path);
                }
                add_errors(operation, &statuses);
            }
        }
    }
}

/// Adds `x-airlock-roles`, the roles the route table lets call the operation
/// ([`crate::access::routes::ROUTES`]), and names them in its description.
fn add_roles(operation: &mut Operation, method: HttpMethod, path: &str) {
    let method = match method {
        HttpMethod::Get => axum::http::Method::GET,
        _ => axum::http::Method::POST,
    };
    let Some(action) = crate::access::routes::lookup(&method, path).and_then(|r| r.access.action())
    else {
        return;
    };
    let roles: Vec<&str> = crate::access::Role::allowed(action)
        .iter()
        .map(|r| r.as_str())
        .collect();
    let mut extensions = operation.extensions.take().unwrap_or_default();
    extensions.merge(
        utoipa::openapi::extensions::ExtensionsBuilder::new()
            .add("x-airlock-roles", serde_json::json!(roles))
            .build(),
    );
    operation.extensions = Some(extensions);
    let text = format!("Roles: {}.", roles.join(", "));
    operation.description = Some(match operation.description.take() {
        Some(description) if !description.is_empty() => format!("{description}\n\n{text}"),
        _ => text,
    });
}

/// Adds each `(status, description)` not yet documented, with the [`ApiErrorBody`] schema.
fn add_errors(operation: &mut Operation, statuses: &[(&str, &str)]) {
    for (status, description) in statuses {
        if operation.responses.responses.contains_key(*status) {
            continue;
        }
        let response = ResponseBuilder::new()
            .description(*description)
            .content(
                "application/json",
                Content::new(Some(Ref::from_schema_name("ApiErrorBody"))),
            )
            .build();
        operation
            .responses
            .responses
            .insert((*status).to_owned(), response.into());
    }
}
