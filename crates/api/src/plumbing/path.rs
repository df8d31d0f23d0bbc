//! Path parameters with the contract's refusals: axum's `Path` answers a segment that
//! is not UTF-8 (`/v1/workflows/%FF`) with a plain-text 400 of its own.

use axum::extract::FromRequestParts;
use axum::extract::path::ErrorKind;
use axum::extract::rejection::PathRejection;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// The path parameters of a route, as axum's `Path` reads them. A parameter that is
/// not UTF-8 once percent-decoded, or not of its type, is a 400 `validation_error` on
/// that parameter: no object can have such an id.
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(params)) => Ok(Path(params)),
            Err(PathRejection::FailedToDeserializePathParams(e)) => Err(match e.kind() {
                ErrorKind::InvalidUtf8InPathParam { key } => {
                    ApiError::field(key.as_str(), "must be UTF-8 once percent-decoded")
                }
                ErrorKind::ParseErrorAtKey { key, .. } => {
                    ApiError::field(key.as_str(), e.body_text())
                }
                _ => ApiError::field("path", e.body_text()),
            }),
            // A route whose handler reads parameters it does not have: a bug.
            Err(other) => Err(ApiError::Internal(anyhow::anyhow!(other.body_text()))),
        }
    }
}
