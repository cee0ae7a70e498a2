//! The review UI: server-rendered HTML on the admin listener at `/`, for reviewers to read
//! a run's effects and their lineage, approve or reject them, and commit or abort.
//!
//! Access: the same tokens as the admin API. A browser presents a token once (the `/login`
//! form, or a one-time link from `airlock ui`: see [`login`]) and gets a session cookie
//! bound to it (see [`session`]); every page needs that session, every form that changes
//! state carries the session's CSRF token. Every page shows bidi, invisible and control
//! characters escaped (`hidden`, [`crate::visible`]). The proxy listener never serves any
//! of this. Assets are embedded in the binary; no third-party CDN, no build step.
//! Reference: docs/review-ui.md.

use std::sync::Arc;

use airlock_ledger::{EffectId, LedgerError, RunId};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::{html, Markup, DOCTYPE};

use crate::access::Principal;
use crate::Control;

mod actions;
mod body;
mod effect_page;
mod flows;
mod graph;
mod hidden;
pub mod login;
mod pages;
mod push;
mod released;
pub mod session;
mod tool_call;

use pages::time_utc;

/// Review settings of a running server: the named tokens, notifications, the UI's public
/// URL.
#[derive(Debug)]
pub struct Review {
    /// Everyone with a token, each with a role (the first is `admin`,
    /// [`crate::access::load_principals`]).
    pub principals: Vec<Principal>,
    /// Where run pages are, for links in notifications (`http://ADMIN` unless
    /// `--ui-base-url` says otherwise), without a trailing slash.
    pub base_url: String,
    /// The webhook told when a run is sealed with pending effects.
    pub notifier: Option<crate::notify::Notifier>,
    /// One-time sign-in links not used yet ([`login`]).
    pub sign_in_links: login::SignInLinks,
}

/// A signed-in browser session.
#[derive(Debug, Clone)]
pub struct Session {
    /// Who.
    pub principal: Principal,
    /// The CSRF token its forms carry.
    pub csrf: String,
}

impl Session {
    /// Whether this session's role may send `method` to `path` (a concrete path such as
    /// `/runs/run_…/abort`), by the route table.
    pub fn may(&self, method: &str, path: &str) -> bool {
        crate::access::routes::matching(method, path)
            .and_then(|route| route.access.action())
            .is_some_and(|action| self.principal.role.may(action))
    }
}

/// An error page: status, stable code (the admin API's `reason_code`s), what happened.
/// It becomes a page in one place, [`UiError::into_response`].
#[derive(Debug)]
pub struct UiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl UiError {
    /// An error with the usual code of `status`.
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        let code = match status {
            StatusCode::BAD_REQUEST => "bad_request",
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::FORBIDDEN => "forbidden",
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::CONFLICT => "conflict",
            _ if status.is_server_error() => "internal_error",
            _ => "error",
        };
        Self::with_code(status, code, message)
    }

    fn with_code(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// Whose move it is: the reviewer's for 4xx answers, airlock's own for the rest.
    pub fn side(&self) -> airlock_net::respond::Side {
        if self.status.is_server_error() {
            airlock_net::respond::Side::Internal
        } else {
            airlock_net::respond::Side::Client
        }
    }

    /// What to do about it.
    fn hint(&self) -> &'static str {
        if self.code == "forbidden_for_role" {
            return "your token's role does not allow this (docs/admin-api.md#roles lists what each role may do)";
        }
        match self.status {
            StatusCode::UNAUTHORIZED => "sign in with your token at /login",
            StatusCode::FORBIDDEN => "reload the page and try again",
            StatusCode::NOT_FOUND => "check the link; the runs page lists every run",
            StatusCode::CONFLICT => {
                "the run or effect is past that step; reload it to see its state"
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                "the ledger is recovering from a storage fault and nothing was changed; \
                 reload once /healthz answers 200"
            }
            StatusCode::INSUFFICIENT_STORAGE => {
                "the ledger's disk is below --ledger-min-free-mib and nothing was changed; \
                 free space, then reload"
            }
            status if status.is_server_error() => "see airlock's log; retry later",
            _ => "go back and try again",
        }
    }
}

impl From<crate::release::CommitError> for UiError {
    fn from(error: crate::release::CommitError) -> Self {
        match error {
            crate::release::CommitError::Ledger(error) => error.into(),
            crate::release::CommitError::Changed(changed) => {
                Self::with_code(StatusCode::CONFLICT, "set_changed", changed.to_string())
            }
            other => Self::new(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
        }
    }
}

impl From<LedgerError> for UiError {
    fn from(error: LedgerError) -> Self {
        match error {
            LedgerError::NotFound { .. } => Self::new(StatusCode::NOT_FOUND, error.to_string()),
            LedgerError::Refused(refused) => {
                Self::with_code(StatusCode::CONFLICT, refused.code(), refused.to_string())
            }
            // As the admin API answers them (docs/architecture.md "Durability and
            // recovery"): the ledger heals by itself, so these say when to retry.
            LedgerError::Degraded { .. } => Self::with_code(
                StatusCode::SERVICE_UNAVAILABLE,
                "ledger_degraded",
                error.to_string(),
            ),
            LedgerError::LowSpace { .. } => Self::with_code(
                StatusCode::INSUFFICIENT_STORAGE,
                "ledger_low_space",
                error.to_string(),
            ),
            other => Self::with_code(
                StatusCode::INTERNAL_SERVER_ERROR,
                "ledger_error",
                airlock_net::respond::error_chain(&other).unwrap_or_else(|| other.to_string()),
            ),
        }
    }
}

impl IntoResponse for UiError {
    /// The review UI's one error-to-response mapping: an HTML page with the status, the
    /// reason, the hint and the code.
    fn into_response(self) -> Response {
        if self.side().is_failure() {
            tracing::warn!(reason_code = self.code, reason = %self.message, "review UI request failed");
        }
        let title = self.status.canonical_reason().unwrap_or("error");
        let page = layout(
            title,
            None,
            html! {
                h1 { (self.status.as_u16()) " " (title) }
                p.error { (self.message) }
                p.hint { (self.hint()) " (" code { (self.code) } ")" }
                p { a href="/" { "back to runs" } }
            },
        );
        html_response(self.status, page)
    }
}

type UiResult<T> = Result<T, UiError>;

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LedgerError> + Send + 'static,
) -> UiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| UiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(UiError::from)
}

/// Content-Security-Policy of every page: nothing but this origin's own style and script,
/// forms posting only here, never framed.
const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

fn html_response(status: StatusCode, page: Markup) -> Response {
    let mut response = (status, hidden::mark(page.into_string())).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The page frame: header with navigation and the reviewer, then `content`.
fn layout(title: &str, session: Option<&Session>, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · airlock review" }
                link rel="stylesheet" href="/ui/ui.css";
                script src="/ui/ui.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { "airlock" span { " review" } }
                    @if let Some(session) = session {
                        nav {
                            a href="/" accesskey="r" { "Runs" }
                            a href="/?state=open" { "open" }
                            a href="/?state=sealed" { "sealed" }
                            a href="/?state=committed" { "committed" }
                        }
                        div.who {
                            "signed in as " strong { (session.principal.name) } " (" (session.principal.role.as_str()) ")"
                            form method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(session.csrf);
                                button.link type="submit" { "sign out" }
                            }
                        }
                    }
                }
                main { (content) }
                footer { "keys: " kbd { "j" } "/" kbd { "k" } " move · " kbd { "Enter" } " open · " kbd { "a" } " approve · " kbd { "x" } " reject · " kbd { "?" } " help" }
            }
        }
    }
}

/// The UI routes over `shared`, merged into the admin router.
pub fn router(shared: Arc<Control>) -> Router<Arc<Control>> {
    let pages = Router::new()
        .route("/", get(pages::runs_list))
        .route("/runs/{id}", get(pages::run_page))
        .route(
            "/runs/{id}/commit",
            get(pages::commit_confirm).post(actions::commit_run),
        )
        .route("/runs/{id}/abort", post(actions::abort_run))
        .route("/runs/{id}/approve-rule", post(actions::approve_rule))
        .route("/effects/{id}", get(effect_page::effect_page))
        .route("/effects/{id}/approve", post(actions::approve_effect))
        .route("/effects/{id}/reject", post(actions::reject_effect))
        .route("/logout", post(actions::logout))
        .route_layer(axum::middleware::from_fn_with_state(
            shared,
            require_session,
        ));
    Router::new()
        .route("/login", get(login::login_get).post(login::login_post))
        .route("/ui/ui.css", get(css))
        .route("/ui/ui.js", get(js))
        .merge(pages)
}

async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("ui/assets/ui.css"),
    )
        .into_response()
}

async fn js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("ui/assets/ui.js"),
    )
        .into_response()
}

/// The session of a request, if its cookie is genuine.
fn session_of(shared: &Control, headers: &HeaderMap) -> Option<Session> {
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| session::cookie_value(v, session::COOKIE))?;
    let principal = session::verify(cookie, &shared.review.principals, airlock_ledger::now_ms())?;
    Some(Session {
        csrf: session::csrf(principal, cookie),
        principal: principal.clone(),
    })
}

/// The review UI's role check: the session names a principal; the matched route's entry
/// in [`crate::access::routes::ROUTES`] says which action it takes; a role that may not
/// take it gets a readable 403 page; audited routes are recorded after the handler
/// answered. Without a session, a page redirects to `/login` and a form gets 401.
async fn require_session(
    State(shared): State<Arc<Control>>,
    matched: Option<axum::extract::MatchedPath>,
    mut request: Request,
    next: Next,
) -> Response {
    use crate::access::{audit, routes};
    let Some(session) = session_of(&shared, request.headers()) else {
        return sign_in_first(&request);
    };
    let path = request.uri().path().to_owned();
    let route = matched
        .as_ref()
        .and_then(|m| routes::lookup(request.method(), m.as_str()))
        .filter(|r| matches!(r.access, routes::Access::Session(_)));
    let Some(route) = route else {
        let template = matched.as_ref().map(|m| m.as_str());
        let declared = template.is_some_and(|t| !routes::methods_of(t).is_empty());
        if declared {
            return UiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!(
                    "{} is not how this page is used (go back and use its buttons)",
                    request.method()
                ),
            )
            .into_response();
        }
        tracing::error!(method = %request.method(), path = %path, "review UI route missing from the route table: refused");
        return UiError::new(
            StatusCode::FORBIDDEN,
            "this page declares no role that may open it (a bug in airlock: proxy/control/src/access/routes.rs)",
        )
        .into_response();
    };
    let action = route.access.action().unwrap_or(crate::access::Action::Read);
    if let Err(forbidden) = session.principal.require(action) {
        if route.audited() {
            let answered = audit::Answered::Forbidden;
            audit::record_call(&shared, &session.principal, route, &path, answered).await;
        }
        return UiError {
            status: StatusCode::FORBIDDEN,
            code: "forbidden_for_role",
            message: format!(
                "{forbidden}. Ask an admin for a token of that role, or sign out and sign in with it."
            ),
        }
        .into_response();
    }
    let principal = session.principal.clone();
    request.extensions_mut().insert(session);
    if !route.audited() {
        return next.run(request).await;
    }
    // As on the API: the action and its audit entry outlive a browser that goes away.
    audit::run_audited(shared, principal, route, path, request, next)
        .await
        .unwrap_or_else(|e| {
            UiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
        })
}

/// No session: a page redirects to `/login?next=…`, anything else gets 401.
fn sign_in_first(request: &Request) -> Response {
    if request.method() == http::Method::GET {
        let next_path = request
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/".to_owned());
        let location = format!(
            "/login?next={}",
            airlock_net::authority::percent_encode(&next_path, b"/")
        );
        let mut response = StatusCode::SEE_OTHER.into_response();
        if let Ok(value) = HeaderValue::from_str(&location) {
            response.headers_mut().insert(header::LOCATION, value);
        }
        return response;
    }
    UiError::new(
        StatusCode::UNAUTHORIZED,
        "sign in first: this action needs a session (see /login)",
    )
    .into_response()
}

/// Where to go after signing in: a local path only (never another site).
fn safe_next(next: Option<&str>) -> String {
    match next {
        // No control characters or spaces either: a URL parser drops tabs and newlines
        // (WHATWG URL, "basic URL parser"), which would turn `/\t/evil` into `//evil`.
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.contains('\\')
                && !path.chars().any(|c| c.is_control() || c.is_whitespace())
                && !path.starts_with("/login") =>
        {
            path.to_owned()
        }
        _ => "/".to_owned(),
    }
}

fn redirect(to: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

fn parse_run(id: &str) -> UiResult<RunId> {
    RunId::parse(id).ok_or_else(|| {
        UiError::new(
            StatusCode::BAD_REQUEST,
            format!("{id:?} is not a run id (run_<ulid>)"),
        )
    })
}

fn parse_effect(id: &str) -> UiResult<EffectId> {
    EffectId::parse(id).ok_or_else(|| {
        UiError::new(
            StatusCode::BAD_REQUEST,
            format!("{id:?} is not an effect id (eff_<ulid>)"),
        )
    })
}

#[cfg(test)]
mod tests;
