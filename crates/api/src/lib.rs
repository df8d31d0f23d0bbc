//! The `/v1` REST facade: reads from watch caches, writes to the API server.
//! One folder per resource (`workflows`, `runs`, `webhooks`, `events`, `keys`, `hooks`), each with
//! its router and handlers (`mod.rs`), its request bodies and their rules (`input.rs`)
//! and its answers (`views.rs`); the HTTP parts they share are in `plumbing`. The
//! routers are merged here behind authentication and rate limits.

pub mod cache;
pub mod callbacks;
pub mod events;
pub mod hooks;
pub mod keys;
pub mod openapi;
pub mod plumbing;
pub mod rendered;
pub mod runs;
pub mod state;
pub mod webhooks;
pub mod workflows;

#[cfg(test)]
mod testing;

use axum::Router;
use axum::middleware::from_fn_with_state;
use utoipa_axum::router::OpenApiRouter;

use self::plumbing::error::ApiError;
use self::plumbing::middleware;
use self::state::ApiState;

/// The `/v1` routes as their handlers declare them: those that take an API key, and
/// the inbound hooks (a signature instead). The router and the OpenAPI document are
/// both made from these, so neither keeps a list of its own.
pub(crate) fn declared() -> (OpenApiRouter<ApiState>, OpenApiRouter<ApiState>) {
    let keyed = OpenApiRouter::new()
        .merge(workflows::router())
        .merge(runs::router())
        .merge(webhooks::router())
        .merge(events::router())
        .merge(keys::router());
    (keyed, hooks::router().merge(callbacks::router()))
}

/// The `/v1` routes, authenticated and rate limited (unknown routes included).
pub fn router(state: ApiState) -> Router {
    let (keyed, hooks) = declared();
    let (keyed, keyed_doc) = keyed.split_for_parts();
    let (hooks, hooks_doc) = hooks.split_for_parts();
    let document = std::sync::Arc::new(openapi::Served::of(&openapi::assemble(
        keyed_doc, hooks_doc,
    )));
    keyed
        .fallback(|| async { ApiError::RouteNotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(from_fn_with_state(state.clone(), middleware::authenticate))
        // Added after the layer: hooks carry a signature instead of an API key, and
        // spend the per-address budget of unauthenticated requests.
        .merge(
            hooks
                // Merged after the main router's own, which covers only its routes.
                .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
                .layer(from_fn_with_state(
                    state.clone(),
                    middleware::limit_by_address,
                )),
        )
        // Added after the layer: the description is public.
        .route(
            "/v1/openapi.json",
            axum::routing::get(move |headers: axum::http::HeaderMap| {
                let document = document.clone();
                async move { document.answer(&headers) }
            }),
        )
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    /// Before the watch caches have listed everything, the API refuses to answer
    /// from an empty cache: 503 `unavailable`, with the rate-limit headers.
    #[tokio::test]
    async fn answers_503_until_the_caches_are_synced() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let caches = cache::Caches::start(
            client.clone(),
            &flowline_kube::WatchScope::Cluster,
            shutdown.clone(),
        );
        let api_config = state::ApiConfig::default();
        let seal = std::sync::Arc::new(crate::testing::seal_key());
        let app = router(ApiState::new(client, caches, api_config, seal));
        let req = Request::get("/v1/workflows")
            .header("authorization", "Bearer flk_x")
            .body(Body::empty())
            .unwrap();
        let res = app.oneshot(req).await.unwrap();
        assert_eq!(res.status(), 503);
        assert!(res.headers().contains_key("retry-after"));
        assert!(res.headers().contains_key("x-ratelimit-remaining"));
        let body = axum::body::to_bytes(res.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], "unavailable");
        shutdown.cancel();
    }
}
