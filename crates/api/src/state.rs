//! Shared state of the API handlers.

use std::sync::Arc;

use kube::Client;

use axum::extract::FromRef;

use crate::cache::Caches;
use crate::plumbing::client_ip::TrustedProxies;
use crate::plumbing::key_index::KeyIndex;
use crate::plumbing::ratelimit::{
    DEFAULT_CAPACITY, FREE_REQUESTS, Plan, PlanDefaults, RateLimiter,
};
use crate::rendered::Rendered;
use flowline_core::crd::Workflow;
use flowline_core::sealed::SealKey;
use flowline_telemetry::http_metrics::HttpMetrics;

/// Field manager of every write the API makes.
pub const FIELD_MANAGER: &str = "flowline-api";

#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Accept `http://` webhook URLs (development only).
    pub allow_http_webhooks: bool,
    pub plans: PlanDefaults,
    /// Length of a rate-limit window; 60 s in production, shorter in tests.
    pub rate_limit_window_secs: u64,
    /// Requests per window of one client address without a valid key.
    pub unauthenticated_requests: u32,
    /// Client addresses tracked per window; beyond that, new addresses share one
    /// budget until the window ends.
    pub tracked_clients: usize,
    /// Proxies whose `X-Forwarded-For` names the client.
    pub trusted_proxies: TrustedProxies,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            allow_http_webhooks: false,
            plans: PlanDefaults {
                plan: Plan::Free,
                enterprise_requests: 6000,
            },
            rate_limit_window_secs: 60,
            unauthenticated_requests: FREE_REQUESTS,
            tracked_clients: DEFAULT_CAPACITY,
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

/// Cloned for every request (by each `State` extractor): one reference count, not
/// one per part (the kube client alone is a tower buffer whose clone is not free).
#[derive(Clone)]
pub struct ApiState(Arc<Shared>);

impl std::ops::Deref for ApiState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What the handlers share, behind [`ApiState`].
#[derive(Clone)]
pub struct Shared {
    pub client: Client,
    pub caches: Caches,
    /// Authenticated requests, per account (namespace).
    pub limiter: Arc<RateLimiter<String>>,
    /// Requests without a valid key, per client address.
    pub client_limiter: Arc<RateLimiter<std::net::IpAddr>>,
    pub key_index: Arc<KeyIndex>,
    /// `GET /v1/workflows/{id}` answers, kept per cached copy (see `rendered`).
    pub rendered_workflows: Arc<Rendered<Workflow>>,
    /// `GET /v1/workflows` items, kept the same way (`workflows::list_page`).
    pub rendered_workflow_items: Arc<Rendered<Workflow>>,
    /// Whole `GET /v1/workflows` pages, kept while the workflow cache does not change.
    pub workflow_pages: Arc<crate::workflows::pages::Pages>,
    pub config: Arc<ApiConfig>,
    /// Where the rate limiter's refusals are counted (registered nowhere unless
    /// [`ApiState::with_metrics`] says).
    pub metrics: HttpMetrics,
    /// Step logs being followed, per account: each holds a connection open while its
    /// step runs, so an account may hold only so many (`runs::logs`).
    pub follows: Arc<crate::plumbing::places::Places>,
    /// Bulk actions in progress, per account (`runs::bulk`): one at a time.
    pub bulk: Arc<crate::plumbing::places::Places>,
    /// The installation's key for inbound hook secrets sealed into Workflows.
    pub seal: Arc<SealKey>,
}

/// What [`crate::plumbing::json::Valid`] checks bodies against (`allow_http_webhooks`).
impl FromRef<ApiState> for Arc<ApiConfig> {
    fn from_ref(state: &ApiState) -> Self {
        state.config.clone()
    }
}

impl ApiState {
    pub fn new(client: Client, caches: Caches, config: ApiConfig, seal: Arc<SealKey>) -> Self {
        ApiState(Arc::new(Shared {
            client,
            caches,
            limiter: Arc::new(RateLimiter::new(config.rate_limit_window_secs)),
            client_limiter: Arc::new(RateLimiter::with_capacity(
                config.rate_limit_window_secs,
                config.tracked_clients,
            )),
            key_index: Arc::new(KeyIndex::default()),
            rendered_workflows: Arc::new(Rendered::default()),
            rendered_workflow_items: Arc::new(Rendered::default()),
            workflow_pages: Arc::default(),
            config: Arc::new(config),
            metrics: HttpMetrics::default(),
            follows: crate::plumbing::places::Places::new(
                crate::runs::logs::MAX_FOLLOWS_PER_ACCOUNT,
            ),
            bulk: crate::plumbing::places::Places::new(1),
            seal,
        }))
    }

    /// Counts into `metrics` (the families the process serves on /metrics).
    pub fn with_metrics(self, metrics: HttpMetrics) -> Self {
        ApiState(Arc::new(Shared {
            metrics,
            ..Arc::unwrap_or_clone(self.0)
        }))
    }

    pub fn post_params() -> kube::api::PostParams {
        kube::api::PostParams {
            dry_run: false,
            field_manager: Some(FIELD_MANAGER.to_string()),
        }
    }

    pub fn patch_params() -> kube::api::PatchParams {
        kube::api::PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        }
    }
}
