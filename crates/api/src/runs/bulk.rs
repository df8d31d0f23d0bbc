//! `POST /v1/runs/bulk-cancel` and `POST /v1/runs/bulk-retry`: one action on many runs
//! of the account, chosen by id or by the run list's filters. At most
//! [`MAX_BULK`] runs per call, newest first; the answer says how many were acted on
//! and whether more matched. An account runs one bulk action at a time, and each makes
//! at most [`IN_FLIGHT`] writes at once, so a bulk call never crowds out other
//! accounts' requests on the API server.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::filter::{RunFilter, RunFilterInput};
use super::input::{RetryFrom, RetryVersion};
use super::retry::retry_run;
use crate::cache;
use crate::plumbing::auth::{Authorized, needs};
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::json::Valid;
use crate::plumbing::validation::{Problems, Validate};
use crate::state::{ApiConfig, ApiState};
use flowline_core::crd::timestamps::created_at;
use flowline_core::crd::{Run, RunPhase, WorkflowState};

/// The most runs one call acts on.
pub const MAX_BULK: usize = 1000;
/// The 429 of a bulk call.
const BUSY: &str = "`rate_limited`: another bulk call of this account is in progress (`Retry-After: 1`), \
    or the account's request budget is spent";
/// Writes one call has in flight at once.
const IN_FLIGHT: usize = 8;

pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(bulk_cancel))
        .routes(routes!(bulk_retry))
}

/// Body of `POST /v1/runs/bulk-cancel`: `ids` or `filter`, not both.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"filter": {"status": "queued", "tag": ["customer:acme"]}})))]
pub struct BulkCancel {
    /// Runs by id, at most 1,000 (ids the account does not have are passed over).
    #[schema(max_items = 1000)]
    pub ids: Option<Vec<String>>,
    /// Runs by the filters of `GET /v1/runs`.
    pub filter: Option<RunFilterInput>,
}

/// Body of `POST /v1/runs/bulk-retry`: `ids` or `filter`, and how each run is retried.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"filter": {"workflow_id": "wf-7k2m9x", "status": "failed"}, "version": "current"})))]
pub struct BulkRetry {
    /// Runs by id, at most 1,000 (ids the account does not have are passed over).
    #[schema(max_items = 1000)]
    pub ids: Option<Vec<String>>,
    /// Runs by the filters of `GET /v1/runs`.
    pub filter: Option<RunFilterInput>,
    /// As for `POST /v1/runs/{id}/retry`; default `failed`.
    pub from: Option<RetryFrom>,
    /// As for `POST /v1/runs/{id}/retry`; default `pinned`.
    pub version: Option<RetryVersion>,
}

/// What a bulk action did.
#[derive(Serialize, ToSchema, Debug, PartialEq)]
pub struct BulkAccepted {
    /// Runs acted on: cancellation requested, or a retry started.
    pub matched: usize,
    /// True when more runs matched than one call acts on (1,000, newest first): call
    /// again to go on.
    pub truncated: bool,
}

/// Which runs: by id or by filter.
enum Selection {
    Ids(Vec<String>),
    Filter(RunFilter),
}

fn selection(
    ids: &Option<Vec<String>>,
    filter: &Option<RunFilterInput>,
) -> Result<Selection, Problems> {
    let mut p = Problems::default();
    let chosen = match (ids, filter) {
        (Some(ids), None) if ids.len() > MAX_BULK => {
            p.add("ids", format!("at most {MAX_BULK} ids per call"));
            return Err(p);
        }
        (Some(ids), None) => Selection::Ids(ids.clone()),
        (None, Some(filter)) => Selection::Filter(filter.parse("filter", &mut p)),
        _ => {
            p.add("ids", "give either ids or filter, not both");
            return Err(p);
        }
    };
    p.finish().map(|()| chosen)
}

impl Validate for BulkCancel {
    fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
        selection(&self.ids, &self.filter).map(|_| ())
    }
}

impl Validate for BulkRetry {
    fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
        selection(&self.ids, &self.filter).map(|_| ())
    }
}

/// The runs of `namespace` the selection names that `eligible` admits, newest first,
/// at most [`MAX_BULK`], and whether more were left out.
fn chosen(
    state: &ApiState,
    namespace: &str,
    selection: &Selection,
    eligible: impl Fn(&Run) -> bool,
) -> (Vec<Arc<Run>>, bool) {
    let mut runs: Vec<Arc<Run>> = match selection {
        Selection::Ids(ids) => {
            let mut ids = ids.clone();
            ids.sort_unstable();
            ids.dedup();
            ids.iter()
                .filter_map(|id| cache::get(&state.caches.runs, namespace, id))
                .collect()
        }
        Selection::Filter(filter) => {
            super::waiting::shown(state, state.caches.runs.in_namespace(namespace))
                .into_iter()
                .filter(|r| filter.matches(r))
                .collect()
        }
    };
    runs.retain(|r| eligible(r));
    runs.sort_by_key(|r| std::cmp::Reverse((created_at(&r.metadata), r.name_any())));
    let truncated = runs.len() > MAX_BULK;
    runs.truncate(MAX_BULK);
    (runs, truncated)
}

/// Holds the account's one bulk place for the call, or refuses it while another runs.
fn one_at_a_time(state: &ApiState, namespace: &str) -> ApiResult<crate::plumbing::places::Place> {
    state.bulk.enter(namespace).ok_or(ApiError::RateLimited {
        retry_after_secs: 1,
    })
}

/// Runs `act` on each run, [`IN_FLIGHT`] at a time; counts those it acted on (`true`).
/// A refusal that concerns one run (it changed or went meanwhile) passes it over; any
/// other failure ends the call with that error.
async fn each<F, Fut>(runs: Vec<Arc<Run>>, act: F) -> ApiResult<usize>
where
    F: Fn(Arc<Run>) -> Fut,
    Fut: std::future::Future<Output = ApiResult<()>>,
{
    futures::stream::iter(runs)
        .map(|run| {
            let done = act(run);
            async move {
                match done.await {
                    Ok(()) => Ok(1),
                    Err(
                        ApiError::NotFound(_)
                        | ApiError::RunNotRunning(_)
                        | ApiError::RunNotFinished(_)
                        | ApiError::WorkflowPaused
                        | ApiError::Validation { .. },
                    ) => Ok(0),
                    Err(other) => Err(other),
                }
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_fold(0, |n, acted| async move { Ok(n + acted) })
        .await
}

/// One bulk call of `namespace`: holds the account's bulk place, acts with `act`
/// (given the state, the namespace and a run's id) on the chosen runs that are
/// `eligible`, and answers what it did.
async fn carry_out<F, Fut>(
    state: &ApiState,
    namespace: &str,
    selection: &Selection,
    eligible: impl Fn(&Run) -> bool,
    act: F,
) -> ApiResult<(StatusCode, Json<BulkAccepted>)>
where
    F: Fn(ApiState, String, String) -> Fut,
    Fut: std::future::Future<Output = ApiResult<()>>,
{
    let _place = one_at_a_time(state, namespace)?;
    let (runs, truncated) = chosen(state, namespace, selection, eligible);
    let matched = each(runs, |run| {
        act(state.clone(), namespace.to_string(), run.name_any())
    })
    .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(BulkAccepted { matched, truncated }),
    ))
}

#[utoipa::path(post, path = "/v1/runs/bulk-cancel", operation_id = "runs.bulkCancel", summary = "Cancel many runs", tag = "runs",
    description = "Scope: `execute`. Requests cancellation of the unfinished (`queued` or `running`) runs \
        chosen by `ids` or `filter`, at most 1,000 per call, newest first. One bulk call per account at a time.",
    request_body(content = BulkCancel, content_type = "application/json"),
    responses((status = 202, description = "Cancellation requested", body = BulkAccepted),
              (status = 429, description = BUSY)))]
async fn bulk_cancel(
    State(state): State<ApiState>,
    who: Authorized<needs::Execute>,
    Valid(body): Valid<BulkCancel>,
) -> ApiResult<(StatusCode, Json<BulkAccepted>)> {
    let selection = selection(&body.ids, &body.filter).map_err(ApiError::from)?;
    let eligible = |r: &Run| !r.phase().is_finished() && !r.spec.cancel;
    carry_out(
        &state,
        &who.namespace,
        &selection,
        eligible,
        |state, namespace, id| async move {
            super::request_cancel(&state, &namespace, &id)
                .await
                .map(drop)
        },
    )
    .await
}

#[utoipa::path(post, path = "/v1/runs/bulk-retry", operation_id = "runs.bulkRetry", summary = "Retry many runs", tag = "runs",
    description = "Scope: `execute`. Starts a retry of each finished run chosen by `ids` or `filter` (as \
        `POST /v1/runs/{id}/retry` with `from` and `version`), at most 1,000 per call, newest first. \
        Runs of paused workflows are passed over. One bulk call per account at a time. A call that fails \
        part way leaves the retries it started; list them with `created_after`.",
    request_body(content = BulkRetry, content_type = "application/json"),
    responses((status = 202, description = "Retries started", body = BulkAccepted),
              (status = 429, description = BUSY)))]
async fn bulk_retry(
    State(state): State<ApiState>,
    who: Authorized<needs::Execute>,
    Valid(body): Valid<BulkRetry>,
) -> ApiResult<(StatusCode, Json<BulkAccepted>)> {
    let selection = selection(&body.ids, &body.filter).map_err(ApiError::from)?;
    let how = (
        body.from.unwrap_or(RetryFrom::Failed),
        body.version.unwrap_or_default(),
    );
    let eligible = |r: &Run| {
        matches!(
            r.phase(),
            RunPhase::Succeeded | RunPhase::Failed | RunPhase::Cancelled
        ) && cache::get(
            &state.caches.workflows,
            &who.namespace,
            &r.spec.workflow_ref,
        )
        .is_some_and(|wf| wf.spec.state != WorkflowState::Paused)
    };
    carry_out(&state, &who.namespace, &selection, eligible, |state, namespace, id| async move {
        retry_run(&state, &namespace, &id, how).await.map(drop)
    })
    .await
}
