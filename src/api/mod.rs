//! The `/v1` REST facade: reads from watch caches, writes to the API server.
//! One router per resource, merged here behind authentication and rate limits.

pub mod auth;
pub mod cache;
pub mod error;
pub mod input;
pub mod json;
pub mod keys;
mod middleware;
pub mod pagination;
pub mod ratelimit;
mod runs;
pub mod state;
pub mod views;
mod webhooks;
mod workflows;

use axum::Router;
use axum::middleware::from_fn_with_state;

use self::error::ApiError;
use self::state::ApiState;

/// The `/v1` routes, authenticated and rate limited (unknown routes included).
pub fn router(state: ApiState) -> Router {
    Router::new()
        .merge(workflows::router())
        .merge(runs::router())
        .merge(webhooks::router())
        .merge(keys::router())
        .fallback(|| async { ApiError::RouteNotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(from_fn_with_state(state.clone(), middleware::authenticate))
        .with_state(state)
}
