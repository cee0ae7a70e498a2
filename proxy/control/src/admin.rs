//! The admin listener: JSON API under `/v1` for runs, effects, decisions and commit, behind
//! a bearer token. The proxy never forwards to it (see `dial`). Reference: docs/admin-api.md.

use std::sync::Arc;

use airlock_ledger::{Effect, EffectId, LedgerError, Run, RunId};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use crate::access::{self, routes, Principal};
use crate::env::{proxy_env, proxy_url, shell_exports};
use crate::runs::{self, Actor};
use crate::Control;

mod audit;
mod body;
mod commit;
mod compensate;
mod effects;
mod error;
mod fence;
mod flow_replay;
pub(crate) mod health;
pub mod openapi;
mod ops;
mod outcomes;
mod policy;
pub mod render;
mod retention;
mod run_list;
pub mod views;
mod workspace;

pub use ops::{ops_router, NOT_SERVED_BY_ROLE};
pub(crate) use policy::metrics as policy_metrics;
use render::edge_view;

use error::not_found;
pub use error::ApiError;

type ApiResult<T> = Result<T, ApiError>;

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LedgerError> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "task_failed",
                e.to_string(),
            )
        })?
        .map_err(ApiError::from)
}

/// The admin router over `shared`.
pub fn router(shared: Arc<Control>) -> Router {
    let api = Router::new()
        .route("/v1/runs", post(create_run).get(run_list::list_runs))
        .route("/v1/runs/{id}", get(show_run))
        .route("/v1/runs/{id}/effects", get(run_effects))
        .route("/v1/runs/{id}/reads", get(run_reads))
        .route("/v1/runs/{id}/env", get(run_env))
        .route("/v1/runs/{id}/denials", get(run_denials))
        .route("/v1/runs/{id}/lineage", get(run_lineage))
        .route("/v1/runs/{id}/seal", post(seal_run))
        .route("/v1/runs/{id}/abort", post(abort_run))
        .route("/v1/ca", get(ca_pem))
        .route("/v1/policy", get(policy::show).post(policy::replace))
        .route("/v1/ui/sign-in-links", post(crate::ui::login::create_link))
        .route("/v1/audit", get(audit::list))
        .route("/metrics", get(crate::metrics::serve))
        .merge(commit::routes())
        .merge(effects::routes())
        .merge(flow_replay::routes())
        .merge(workspace::routes())
        .merge(compensate::routes())
        .merge(fence::routes())
        .merge(outcomes::routes())
        .merge(retention::routes())
        .route_layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            require_token,
        ))
        .fallback(
            |method: axum::http::Method, uri: axum::http::Uri| async move {
                ApiError::not_found(
                    "endpoint",
                    format!("no admin endpoint answers {method} {}", uri.path()),
                )
            },
        );
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/v1/openapi.json", get(openapi::openapi_json))
        .merge(crate::ui::router(shared.clone()))
        .merge(api)
        .layer(axum::extract::DefaultBodyLimit::max(body::BODY_LIMIT))
        .with_state(shared)
}

/// The role check of every admin route: the bearer token names a [`Principal`]; the
/// matched route's entry in [`routes::ROUTES`] says which action it takes; a role that may
/// not take it gets 403 `forbidden_for_role`, and a route the table does not declare is
/// refused to everyone (403 `route_without_role`). Audited routes are recorded after the
/// handler answered ([`crate::access::audit`]).
pub(crate) async fn require_token(
    State(shared): State<Arc<Control>>,
    matched: Option<axum::extract::MatchedPath>,
    headers: HeaderMap,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(principal) = presented
        .and_then(|token| access::principal_for_token(&shared.review.principals, token))
        .cloned()
    else {
        let mut response = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            match presented {
                None => "no bearer token was sent",
                Some(_) => "the bearer token is not one of this server's tokens (admin, runner, reviewer or viewer)",
            },
        )
        .into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"airlock-admin\""),
        );
        return response;
    };
    let path = request.uri().path().to_owned();
    let route = matched
        .as_ref()
        .and_then(|m| routes::lookup(request.method(), m.as_str()));
    let Some(route) = route.filter(|r| matches!(r.access, routes::Access::Token(_))) else {
        let template = matched.as_ref().map(|m| m.as_str());
        return unrouted(request.method(), template, &path);
    };
    let action = route.access.action().unwrap_or(access::Action::Read);
    if let Err(forbidden) = principal.require(action) {
        let response = ApiError::from(forbidden).into_response();
        if route.audited() {
            let answered = access::audit::Answered::Forbidden;
            access::audit::record_call(&shared, &principal, route, &path, answered).await;
        }
        return response;
    }
    request.extensions_mut().insert(principal.clone());
    if !route.audited() {
        return next.run(request).await;
    }
    access::audit::run_audited(shared, principal, route, path, request, next)
        .await
        .unwrap_or_else(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "task_failed",
                e.to_string(),
            )
            .into_response()
        })
}

/// The answer to a call the route table does not declare: 405 `method_not_allowed` (with
/// `Allow`) when its path template is declared for other methods, else 403
/// `route_without_role` (a route added without a declaration: refused to everyone, and
/// logged as the bug it is).
fn unrouted(method: &axum::http::Method, template: Option<&str>, path: &str) -> Response {
    let allowed = template.map(routes::methods_of).unwrap_or_default();
    if !allowed.is_empty() {
        let mut response = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!(
                "{method} {path}: this endpoint answers {}",
                allowed.join(", ")
            ),
        )
        .into_response();
        if let Ok(value) = header::HeaderValue::from_str(&allowed.join(", ")) {
            response.headers_mut().insert(header::ALLOW, value);
        }
        return response;
    }
    tracing::error!(method = %method, path = %path, "admin route missing from the route table: refused");
    ApiError::new(
        StatusCode::FORBIDDEN,
        "route_without_role",
        format!("{method} {path} declares no role that may call it"),
    )
    .into_response()
}

/// A JSON request body, or the type's default when the body is empty or blank.
pub(crate) fn parse_body<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_json",
            format!("the body is not a valid request: {e}"),
        )
    })
}

fn parse_run(id: &str) -> ApiResult<RunId> {
    RunId::parse(id).ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_run_id",
            format!("{id:?} is not a run id (run_<ulid>)"),
        )
    })
}

fn parse_effect(id: &str) -> ApiResult<EffectId> {
    EffectId::parse(id).ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_effect_id",
            format!("{id:?} is not an effect id (eff_<ulid>)"),
        )
    })
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateRun {
    #[serde(default)]
    profile: Option<String>,
    /// An address or CIDR whose connections belong to the run with no credentials, on
    /// `airlock serve --transparent` and `--dns` (docs/containment.md).
    #[serde(default)]
    source: Option<String>,
    /// Must be `true` for a `source` that holds every address (`0.0.0.0/0`, `::/0`): every
    /// connection and DNS query reaching `--transparent` and `--dns` from anywhere would
    /// then belong to this run, so it is asked for by name (else `400 source_too_broad`).
    /// Ignored for any narrower source.
    #[serde(default)]
    source_all: bool,
}

/// One run created with a `source` at a time: the overlap check and the binding are one
/// step.
static CREATE_WITH_SOURCE: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[utoipa::path(post, path = "/v1/runs", tag = "runs", request_body(content = CreateRun, description = "Optional: a profile name and a `source` address or CIDR (`0.0.0.0/0` and `::/0` only with `source_all: true`)", content_type = "application/json"), responses((status = 201, description = "The run: its id, token, proxy URL, CA file, environment (`env`), fence socket and truststore", body = views::CreatedRun), (status = 400, description = "A `source` that is not an address or CIDR (`bad_source`), or one that holds every address (`0.0.0.0/0`, `::/0`) without `source_all: true` (`source_too_broad`)", body = openapi::ApiErrorBody), (status = 409, description = "The `source` overlaps an open or sealed run's (`source_in_use`)", body = openapi::ApiErrorBody)))]
async fn create_run(
    State(shared): State<Arc<Control>>,
    body: body::ApiBody,
) -> ApiResult<Response> {
    let request: CreateRun = parse_body(&body)?;
    let ledger = shared.ledger().clone();
    let run = match &request.source {
        None => blocking(move || ledger.create_run(request.profile)).await?,
        Some(raw) => {
            let source = airlock_dataplane::fence::parse_source(raw)
                .map_err(|reason| ApiError::new(StatusCode::BAD_REQUEST, "bad_source", reason))?;
            if source.prefix_len() == 0 && !request.source_all {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "source_too_broad",
                    format!(
                        "{source} holds every address: every connection and DNS query reaching \
                         --transparent and --dns, from anywhere, would belong to this run; \
                         name a narrower source, or ask for all of them with \"source_all\": true"
                    ),
                ));
            }
            let control = shared.clone();
            let profile = request.profile.clone();
            let text = source.to_string();
            // Checked before creating, so a refused source leaves no run behind; one such
            // creation at a time, so no other can bind an overlapping source in between.
            let created = blocking(move || {
                let _one = CREATE_WITH_SOURCE.lock().unwrap_or_else(|e| e.into_inner());
                let data = control.data.clone();
                let open = |run: &RunId| !data.is_closed(run);
                if let Some(holder) = control.fence.source_holder(source, open) {
                    return Ok(Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "source_in_use",
                        format!("{text} overlaps the source of open run {holder}"),
                    )));
                }
                let run = control.ledger().create_run_from(profile, Some(text))?;
                let _ = control.fence.bind_source(source, run.id.clone(), open);
                Ok(Ok(run))
            })
            .await?;
            created?
        }
    };
    let java_port = crate::bound_ports::java_port(&shared, &run.id).await;
    let token = shared.data.run_tokens().token_for(&run.id);
    let mut env = proxy_env(&shared.advertised, run.id.as_str(), &token, java_port);
    let policy = shared.policy().current();
    env.extend(policy.credentials.placeholder_env(&policy, &run.id));
    let body = views::CreatedRun {
        run: render::run_view(&shared, &run, &[]),
        proxy_url: proxy_url(&shared.advertised, run.id.as_str(), &token),
        token,
        ca_file: shared.advertised.ca_file.display().to_string(),
        env,
        fence_socket: shared.fence_socket().display().to_string(),
        truststore: shared.advertised.truststore.clone(),
    };
    let audit = access::audit::AuditDetail(serde_json::json!({ "run": body.run.id }));
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    // The run's audit entry names the run the call created.
    response.extensions_mut().insert(audit);
    Ok(response)
}

pub(super) async fn load_run(shared: &Arc<Control>, id: &str) -> ApiResult<(Run, Vec<Effect>)> {
    let run_id = parse_run(id)?;
    let ledger = shared.ledger().clone();
    let found = blocking(move || match ledger.run(&run_id)? {
        Some(run) => {
            let effects = ledger.effects(&run.id)?;
            Ok(Some((run, effects)))
        }
        None => Ok(None),
    })
    .await?;
    found.ok_or_else(|| not_found("run", id))
}

#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 200, description = "The run with its effect counts, decisions, flags and flows", body = views::RunDetail)))]
async fn show_run(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
) -> ApiResult<Json<views::RunDetail>> {
    let (run, effects) = load_run(&shared, &id).await?;
    let checks = run_checks(&shared, &run.id).await?;
    Ok(Json(views::RunDetail {
        run: render::run_view(&shared, &run, &effects),
        flows: render::run_flows(&effects, &checks),
    }))
}

/// The flow decisions on every effect of `run` (empty when the policy has no flows).
async fn run_checks(
    shared: &Arc<Control>,
    run: &RunId,
) -> ApiResult<std::collections::HashMap<EffectId, airlock_dataplane::flows::FlowCheck>> {
    let (control, run) = (shared.clone(), run.clone());
    blocking(move || crate::flows::check_run_blocking(&control, &run)).await
}

#[utoipa::path(get, path = "/v1/runs/{id}/effects", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 200, description = "`{run, effects: [summary…], expect}`", body = render::EffectList)))]
async fn run_effects(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
) -> ApiResult<Json<render::EffectList>> {
    let (run, effects) = load_run(&shared, &id).await?;
    let checks = run_checks(&shared, &run.id).await?;
    // The origin's kept answers, for each released effect's `released` view.
    let (ledger, released) = (shared.ledger().clone(), effects.clone());
    let answers = blocking(move || {
        released
            .iter()
            .map(
                |e| match e.release.as_ref().and_then(|r| r.body_digest.as_ref()) {
                    Some(digest) => ledger.body(digest),
                    None => Ok(None),
                },
            )
            .collect::<Result<Vec<_>, _>>()
    })
    .await?;
    let listed: Vec<views::ListedEffect> = effects
        .iter()
        .zip(&answers)
        .map(|(effect, answer)| {
            let (flows, flow_hold) = render::flows_brief(effect, checks.get(&effect.id));
            views::ListedEffect {
                summary: render::summary_of(effect),
                flows,
                flow_hold,
                released: crate::released::released_json(effect, &effects, answer.as_deref()),
            }
        })
        .collect();
    // What a commit of exactly these effects carries (docs/admin-api.md#expectations).
    let expect = crate::runs::expect::Expectation::of(&effects, crate::runs::expect::Scope::Commit);
    Ok(Json(render::EffectList {
        run: run.id,
        effects: listed,
        expect,
    }))
}

#[utoipa::path(get, path = "/v1/runs/{id}/reads", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 200, description = "`{run, reads: [read…]}`", body = views::RunReads)))]
async fn run_reads(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
) -> ApiResult<Json<views::RunReads>> {
    let (run, _) = load_run(&shared, &id).await?;
    let ledger = shared.ledger().clone();
    let run_id = run.id.clone();
    let reads = blocking(move || ledger.reads(&run_id)).await?;
    Ok(Json(views::RunReads { run: run.id, reads }))
}

#[utoipa::path(get, path = "/v1/runs/{id}/denials", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 200, description = "`{run, denials: [denial…]}`", body = views::RunDenials)))]
async fn run_denials(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
) -> ApiResult<Json<views::RunDenials>> {
    let (run, _) = load_run(&shared, &id).await?;
    let ledger = shared.ledger().clone();
    let run_id = run.id.clone();
    let denials = blocking(move || ledger.denials(&run_id)).await?;
    Ok(Json(views::RunDenials {
        run: run.id,
        denials,
    }))
}

#[utoipa::path(get, path = "/v1/runs/{id}/env", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 200, description = "`{run, env: {NAME: VALUE}, shell}`", body = views::RunEnv), (status = 409, description = "The run was created before run tokens were derived and keeps only its token's keyed hash (`token_not_recoverable`)", body = openapi::ApiErrorBody)))]
async fn run_env(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
) -> ApiResult<Json<views::RunEnv>> {
    let (run, _) = load_run(&shared, &id).await?;
    // A run recorded before tokens were derived keeps only its token's keyed hash: the
    // token cannot be given back (its creator had it from POST /v1/runs).
    let token = shared.data.run_tokens().recover(&run).ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "token_not_recoverable",
            format!(
                "run {} was created before run tokens were derived from the run token key; \
                 its token is kept only as a keyed hash, so it cannot be given back: use the \
                 token POST /v1/runs answered, or create a new run",
                run.id
            ),
        )
    })?;
    let java_port = crate::bound_ports::java_port(&shared, &run.id).await;
    let mut env = proxy_env(&shared.advertised, run.id.as_str(), &token, java_port);
    // Credential placeholders: opaque stand-ins, never the values.
    let policy = shared.policy().current();
    env.extend(policy.credentials.placeholder_env(&policy, &run.id));
    let shell = shell_exports(&env);
    Ok(Json(views::RunEnv {
        run: run.id,
        env,
        shell,
    }))
}

#[utoipa::path(post, path = "/v1/runs/{id}/seal", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 200, description = "The run, `sealed` (idempotent)", body = render::RunView)))]
async fn seal_run(
    State(shared): State<Arc<Control>>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<render::RunView>> {
    let run_id = parse_run(&id)?;
    let (run, effects) = runs::seal(&shared, &run_id, &Actor::Person(principal.name)).await?;
    Ok(Json(render::run_view(&shared, &run, &effects)))
}

#[utoipa::path(post, path = "/v1/runs/{id}/abort", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 200, description = "The run, `aborted`, with `effects_detail`", body = views::AbortedRun)))]
async fn abort_run(
    State(shared): State<Arc<Control>>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<views::AbortedRun>> {
    let run_id = parse_run(&id)?;
    let (run, effects) = runs::abort(&shared, &run_id, &Actor::Person(principal.name)).await?;
    Ok(Json(views::AbortedRun {
        run: render::run_view(&shared, &run, &effects),
        effects_detail: effects.iter().map(render::summary_of).collect(),
    }))
}

#[utoipa::path(get, path = "/v1/runs/{id}/lineage", tag = "runs", params(("id" = String, Path, description = "The run id (`run_…`)")), responses((status = 200, description = "`{run, nodes, edges}`: the run's lineage graph", body = views::Lineage)))]
async fn run_lineage(
    State(shared): State<Arc<Control>>,
    Path(id): Path<String>,
) -> ApiResult<Json<views::Lineage>> {
    let (run, effects) = load_run(&shared, &id).await?;
    let ledger = shared.ledger().clone();
    let run_id = run.id.clone();
    let ids: Vec<airlock_ledger::EffectId> = effects.iter().map(|e| e.id.clone()).collect();
    let (reads, edges, analyzed) = blocking(move || {
        let mut analyzed = Vec::new();
        for id in &ids {
            analyzed.push(ledger.effect_lineage(id)?.is_some());
        }
        Ok((ledger.reads(&run_id)?, ledger.edges(&run_id)?, analyzed))
    })
    .await?;
    let mut nodes: Vec<views::LineageNode> = reads
        .iter()
        .map(|r| {
            views::LineageNode::Read(views::ReadNode {
                id: format!("read:{}", r.seq),
                kind: "read",
                seq: r.seq,
                method: r.method.clone(),
                url: r.url.clone(),
                status: r.status,
                response_bytes: r.response_bytes,
            })
        })
        .collect();
    nodes.extend(effects.iter().zip(&analyzed).map(|(e, analyzed)| {
        views::LineageNode::Effect(views::EffectNode {
            id: e.id.clone(),
            kind: "effect",
            seq: e.seq,
            method: e.method.clone(),
            url: e.url.clone(),
            state: e.state,
            analyzed: *analyzed,
        })
    }));
    let edges = edges.iter().map(|e| edge_view(e, &reads)).collect();
    Ok(Json(views::Lineage {
        run: run.id,
        nodes,
        edges,
    }))
}

#[utoipa::path(get, path = "/v1/ca", tag = "other", responses((status = 200, description = "The CA certificate (PEM)", body = String, content_type = "application/x-pem-file")))]
async fn ca_pem(State(shared): State<Arc<Control>>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/x-pem-file")],
        shared.data.ca().cert_pem().to_owned(),
    )
        .into_response()
}
