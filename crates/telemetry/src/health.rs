//! `/healthz`, `/readyz` and `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::metrics::Metrics;

type NamedGates = Vec<(&'static str, Arc<AtomicBool>)>;

/// Named readiness gates; the process is ready when every registered gate is open.
#[derive(Clone, Default)]
pub struct Readiness {
    gates: Arc<std::sync::RwLock<NamedGates>>,
}

impl Readiness {
    /// Registers a closed gate and returns its handle.
    pub fn gate(&self, name: &'static str) -> Gate {
        let flag = Arc::new(AtomicBool::new(false));
        self.gates
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push((name, flag.clone()));
        Gate(flag)
    }

    /// Names of the gates still closed.
    pub fn pending(&self) -> Vec<&'static str> {
        self.gates
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, open)| !open.load(Ordering::Acquire))
            .map(|(name, _)| *name)
            .collect()
    }

    pub fn is_ready(&self) -> bool {
        self.pending().is_empty()
    }
}

/// One readiness gate.
#[derive(Clone)]
pub struct Gate(Arc<AtomicBool>);

impl Gate {
    pub fn open(&self) {
        self.0.store(true, Ordering::Release);
    }
    pub fn close(&self) {
        self.0.store(false, Ordering::Release);
    }
}

#[derive(Clone)]
struct OpsState {
    readiness: Readiness,
    metrics: Metrics,
}

/// Router with the three operational endpoints.
pub fn router(readiness: Readiness, metrics: Metrics) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(render_metrics))
        .with_state(OpsState { readiness, metrics })
}

async fn readyz(State(state): State<OpsState>) -> impl IntoResponse {
    let pending = state.readiness.pending();
    if pending.is_empty() {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: waiting for {}\n", pending.join(", ")),
        )
    }
}

async fn render_metrics(State(state): State<OpsState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get_status(app: Router, path: &str) -> (StatusCode, String) {
        let res = app
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let body = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readyz_follows_gates() {
        let readiness = Readiness::default();
        let crds = readiness.gate("crds");
        let app = router(readiness.clone(), Metrics::default());
        let (status, body) = get_status(app.clone(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("crds"), "{body}");
        crds.open();
        assert_eq!(get_status(app.clone(), "/readyz").await.0, StatusCode::OK);
        assert_eq!(get_status(app, "/healthz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_are_openmetrics_text() {
        let (status, body) =
            get_status(router(Readiness::default(), Metrics::default()), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.ends_with("# EOF\n"), "{body}");
    }
}
