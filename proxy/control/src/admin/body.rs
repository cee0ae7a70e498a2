//! Request bodies of the admin API: read whole up to [`BODY_LIMIT`], with every failure
//! (a body over the limit, one that breaks off) answered in the API's JSON error format
//! instead of axum's plain-text rejection.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;

use super::ApiError;

/// Largest request body the admin API reads, in bytes: 2 MiB (axum's default, made
/// explicit so it is documented and answered in JSON). A policy text posted to
/// `POST /v1/policy` is the largest body any endpoint takes.
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// A request body read whole, at most [`BODY_LIMIT`] bytes.
///
/// # Errors
/// The rejection is an [`ApiError`]: 413 `body_too_large` (with `details.limit`, the limit
/// in bytes) past the limit, 400 `bad_body` when the body cannot be read.
#[derive(Debug)]
pub struct ApiBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Bytes::from_request(request, state).await {
            Ok(bytes) => Ok(Self(bytes)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(too_large())
            }
            Err(rejection) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_body",
                format!(
                    "the request body could not be read: {}",
                    rejection.body_text()
                ),
            )),
        }
    }
}

/// 413 `body_too_large` naming [`BODY_LIMIT`].
fn too_large() -> ApiError {
    ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: "body_too_large",
        reason: format!(
            "the request body is over the admin API's limit of {BODY_LIMIT} bytes (2 MiB); nothing was read"
        ),
        details: Some(serde_json::json!({ "limit": BODY_LIMIT })),
        hint: None,
    }
}

impl std::ops::Deref for ApiBody {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}
