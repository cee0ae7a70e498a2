//! Signing a browser in to the review UI: the form that takes a token (`POST /login`), and
//! one-time sign-in links (`GET /login?code=…`) that `airlock ui` asks the admin API for
//! (`POST /v1/ui/sign-in-links`).
//!
//! A link is good for one sign-in, within [`LINK_MS`] of being made, as the reviewer whose
//! token asked for it. The token itself never goes in a URL: a `GET /login?token=…` signs
//! nobody in (it would sit in the browser's history, and any site could make a browser
//! follow it to sign it in as whoever the attacker chose). A link followed from another
//! site (`Sec-Fetch-Site: cross-site` or `same-site`) is not used at once: the page asks
//! the reviewer to confirm with a button, a `POST` from this UI's own page. A `POST /login`
//! from another site is refused (login CSRF, OWASP's Cross-Site Request Forgery Prevention
//! Cheat Sheet, "Login CSRF").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::{Extension, Form, Json};
use maud::html;
use serde::Deserialize;

use super::{html_response, layout, redirect, safe_next, session};
use crate::access::{principal_for_token, Action, Principal};
use crate::Control;

/// How long a sign-in link stays good: 5 minutes, in milliseconds.
pub const LINK_MS: u64 = 5 * 60 * 1000;
/// Most links waiting to be used; past it the one closest to expiring is dropped.
const MAX_PENDING: usize = 1024;

/// The one-time sign-in links handed out and not used yet (in memory: a restart ends
/// them, as it ends nothing else).
#[derive(Debug, Default)]
pub struct SignInLinks {
    pending: Mutex<HashMap<String, Pending>>,
}

#[derive(Debug, Clone)]
struct Pending {
    reviewer: String,
    expires_at_ms: u64,
}

impl SignInLinks {
    /// A new code that signs one browser in as `reviewer`, until `now_ms + LINK_MS`:
    /// 32 random bytes, hex. Returns the code and its expiry (ms since the epoch).
    pub fn issue(&self, reviewer: &Principal, now_ms: u64) -> (String, u64) {
        use rand::RngCore as _;
        let mut bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        let code: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let expires_at_ms = now_ms + LINK_MS;
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|_, p| p.expires_at_ms > now_ms);
        if pending.len() >= MAX_PENDING {
            let first = pending
                .iter()
                .min_by_key(|(_, p)| p.expires_at_ms)
                .map(|(code, _)| code.clone());
            if let Some(first) = first {
                pending.remove(&first);
            }
        }
        pending.insert(
            code.clone(),
            Pending {
                reviewer: reviewer.name.clone(),
                expires_at_ms,
            },
        );
        (code, expires_at_ms)
    }

    /// The reviewer `code` would sign in as, leaving it unused; `None` when it is unknown,
    /// used or expired.
    pub fn peek(&self, code: &str, now_ms: u64) -> Option<String> {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending
            .get(code)
            .filter(|p| p.expires_at_ms > now_ms)
            .map(|p| p.reviewer.clone())
    }

    /// Uses `code`: the reviewer it signs in as, and it is gone; `None` when it is
    /// unknown, used or expired.
    pub fn redeem(&self, code: &str, now_ms: u64) -> Option<String> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending
            .remove(code)
            .filter(|p| p.expires_at_ms > now_ms)
            .map(|p| p.reviewer)
    }
}

/// `POST /v1/ui/sign-in-links` body: empty for a link of one's own, or `{"for": NAME}`
/// (the admin role only) for a link that signs in as another token's holder.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LinkRequest {
    /// The token name to sign in as (default: the caller's own).
    #[serde(default, rename = "for")]
    for_name: Option<String>,
}

/// `POST /v1/ui/sign-in-links` (bearer token): a one-time link that signs a browser in as
/// the token's holder, or with `{"for": NAME}` (admin role) as NAME → 201 `{link, path,
/// reviewer, expires_at_ms}`; `link` is `--ui-base-url` (default `http://ADMIN`) + `path`
/// (`/login?code=…`).
///
/// Errors: 400 `bad_json`; 403 `forbidden_for_role` for `for` from another role than
/// admin; 404 `not_found` for a `for` no token is named.
#[utoipa::path(post, path = "/v1/ui/sign-in-links", tag = "other", request_body(content = LinkRequest, description = "Optional: `{\"for\": NAME}` (admin role only)", content_type = "application/json"), responses((status = 201, description = "`{link, path, reviewer, expires_at_ms}`: a one-time sign-in link", body = crate::admin::views::SignInLink), (status = 403, description = "`for` from a role other than admin (`forbidden_for_role`)", body = crate::admin::openapi::ApiErrorBody), (status = 404, description = "`for` names no token of this server (`not_found`)", body = crate::admin::openapi::ApiErrorBody)))]
pub(crate) async fn create_link(
    State(shared): State<Arc<Control>>,
    Extension(caller): Extension<Principal>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<crate::admin::views::SignInLink>), crate::admin::ApiError> {
    let request: LinkRequest = crate::admin::parse_body(&body)?;
    let holder = match request.for_name {
        Some(name) if name != caller.name => {
            caller.require(Action::SignInLinkForOthers)?;
            shared
                .review
                .principals
                .iter()
                .find(|p| p.name == name)
                .cloned()
                .ok_or_else(|| {
                    crate::admin::ApiError::not_found(
                        "token",
                        format!("no token of this server is named {name:?}"),
                    )
                })?
        }
        _ => caller.clone(),
    };
    let (code, expires_at_ms) = shared
        .review
        .sign_in_links
        .issue(&holder, airlock_ledger::now_ms());
    tracing::info!(reviewer = %holder.name, by = %caller.name, "review UI sign-in link issued");
    let path = format!("/login?code={code}");
    Ok((
        StatusCode::CREATED,
        Json(crate::admin::views::SignInLink {
            link: format!("{}{path}", shared.ui_base_url()),
            path,
            reviewer: holder.name,
            expires_at_ms,
        }),
    ))
}

/// What `/login` takes, in the query or the form.
#[derive(Debug, Default, Deserialize)]
pub(super) struct LoginQuery {
    token: Option<String>,
    code: Option<String>,
    next: Option<String>,
}

fn login_page(status: StatusCode, error: Option<&str>, next: &str) -> Response {
    html_response(
        status,
        layout(
            "Sign in",
            None,
            html! {
                section.login {
                    h1 { "Sign in to review" }
                    p { "Paste your token (the admin token is in " code { "DATA/admin.token" } "; reviewers and viewers paste the one they were given), or run " code { "airlock ui" } " for a one-time sign-in link." }
                    @if let Some(error) = error { p.error role="alert" { (error) } }
                    form method="post" action="/login" {
                        input type="hidden" name="next" value=(next);
                        label for="token" { "Token" }
                        input #token type="password" name="token" autocomplete="off" autofocus required;
                        button type="submit" { "Sign in" }
                    }
                }
            },
        ),
    )
}

/// The page a link followed from another site shows: sign in only by pressing the button.
fn confirm_page(code: &str, reviewer: &str, next: &str) -> Response {
    html_response(
        StatusCode::OK,
        layout(
            "Sign in",
            None,
            html! {
                section.login {
                    h1 { "Sign in to review" }
                    p { "This sign-in link was opened from another site. Sign in as " strong { (reviewer) } " only if you asked for it (" code { "airlock ui" } ")." }
                    form method="post" action="/login" {
                        input type="hidden" name="code" value=(code);
                        input type="hidden" name="next" value=(next);
                        button type="submit" { "Sign in as " (reviewer) }
                    }
                }
            },
        ),
    )
}

/// A session for `reviewer`, then on to `next`.
fn signed_in(reviewer: &Principal, next: &str) -> Response {
    let cookie = session::issue(reviewer, airlock_ledger::now_ms());
    tracing::info!(reviewer = %reviewer.name, "review UI sign-in");
    let mut response = redirect(next);
    if let Ok(value) = HeaderValue::from_str(&session::set_cookie(&cookie)) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

fn with_token(shared: &Control, token: &str, next: &str) -> Response {
    match principal_for_token(&shared.review.principals, token.trim()) {
        Some(reviewer) => signed_in(reviewer, next),
        None => login_page(
            StatusCode::UNAUTHORIZED,
            Some("that token is not a token of this server (admin, reviewer, viewer or runner)"),
            next,
        ),
    }
}

fn with_code(shared: &Control, code: &str, next: &str) -> Response {
    let reviewer = shared
        .review
        .sign_in_links
        .redeem(code, airlock_ledger::now_ms())
        .and_then(|name| shared.review.principals.iter().find(|r| r.name == name));
    match reviewer {
        Some(reviewer) => signed_in(reviewer, next),
        None => expired_link(next),
    }
}

fn expired_link(next: &str) -> Response {
    login_page(
        StatusCode::UNAUTHORIZED,
        Some("this sign-in link was used already or has expired (links work once, within 5 minutes): run `airlock ui` for a new one, or paste a token"),
        next,
    )
}

/// Whether the browser says the request comes from another site (`Sec-Fetch-Site`, Fetch
/// Metadata; browsers send `none` for a link opened from the address bar or another
/// program).
fn from_another_site(headers: &HeaderMap) -> bool {
    matches!(
        headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()),
        Some("cross-site" | "same-site")
    )
}

/// `GET /login`: the form; `?code=` a one-time link; `?token=` signs nobody in.
pub(super) async fn login_get(
    State(shared): State<Arc<Control>>,
    headers: HeaderMap,
    Query(query): Query<LoginQuery>,
) -> Response {
    let next = safe_next(query.next.as_deref());
    if query.token.is_some() {
        return login_page(
            StatusCode::BAD_REQUEST,
            Some("a token in the URL does not sign in (it would stay in the browser's history, and any site could use such a link): paste it below, or run `airlock ui` for a one-time link"),
            &next,
        );
    }
    let Some(code) = query.code.as_deref() else {
        return login_page(StatusCode::OK, None, &next);
    };
    if from_another_site(&headers) {
        return match shared
            .review
            .sign_in_links
            .peek(code, airlock_ledger::now_ms())
        {
            Some(reviewer) => confirm_page(code, &reviewer, &next),
            None => expired_link(&next),
        };
    }
    with_code(&shared, code, &next)
}

/// `POST /login` (form: `token` or `code`, and `next`), refused when posted from another
/// site.
pub(super) async fn login_post(
    State(shared): State<Arc<Control>>,
    headers: HeaderMap,
    Form(form): Form<LoginQuery>,
) -> Response {
    // Login CSRF: a form posted from another site must not sign the browser in (with the
    // attacker's token). Browsers say where a POST comes from: `Sec-Fetch-Site`, and
    // `Origin` (`null` under this UI's no-referrer policy, so only a named origin is
    // compared with this listener's own).
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let foreign_origin = header("origin")
        .filter(|origin| *origin != "null")
        .is_some_and(|origin| {
            let named = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            named.is_none() || named != header("host")
        });
    if from_another_site(&headers) || foreign_origin {
        return login_page(
            StatusCode::FORBIDDEN,
            Some("sign-in refused: the form was posted from another site"),
            "/",
        );
    }
    let next = safe_next(form.next.as_deref());
    match (&form.code, &form.token) {
        (Some(code), _) => with_code(&shared, code, &next),
        (None, token) => with_token(&shared, token.as_deref().unwrap_or(""), &next),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_signs_in_once_and_not_after_it_expires() {
        let links = SignInLinks::default();
        let alice = Principal::new(
            "alice",
            crate::access::Role::Reviewer,
            "t0ken-alice-0000000000",
        );
        let (code, expiry) = links.issue(&alice, 1_000);
        assert_eq!(expiry, 1_000 + LINK_MS);
        assert_eq!(code.len(), 64);
        assert_eq!(links.peek(&code, 2_000).as_deref(), Some("alice"));
        assert_eq!(links.redeem(&code, 2_000).as_deref(), Some("alice"));
        assert_eq!(links.redeem(&code, 2_000), None, "used");
        let (late, _) = links.issue(&alice, 1_000);
        assert_eq!(links.peek(&late, 1_000 + LINK_MS), None, "expired");
        assert_eq!(links.redeem(&late, 1_000 + LINK_MS), None, "expired");
        assert_eq!(links.redeem("not-a-code", 0), None);
    }
}
