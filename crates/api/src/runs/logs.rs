//! `GET /v1/runs/{id}/steps/{step_id}/logs`: the log of one step attempt's pod (the
//! `step` container of its Job), as text, streamed as the API server sends it.
//!
//! The pod is found by its Job's name, which is derived from the run, the attempt key
//! and the attempt (flowline-core's `engine::step_pod`), so no Job is read. Logs live as
//! long as the Job (`--step-job-ttl`); after that, and for an attempt that never ran in
//! a pod, the answer is 404 `logs_not_found`.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::io::AsyncBufReadExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams};
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::read_whole;
use crate::plumbing::auth::{Authorized, needs};
use crate::plumbing::error::{ApiError, ApiResult, Missing};
use crate::plumbing::path::Path;
use crate::state::ApiState;
use flowline_core::crd::{Run, StepRecord};
use flowline_core::engine::step_pod::{STEP_CONTAINER, attempt_key, container_state, job_name};

/// How long a followed log waits for its container to start.
const START_WAIT: Duration = Duration::from_secs(60);

/// How many logs one account may follow at once on one API replica.
pub const MAX_FOLLOWS_PER_ACCOUNT: usize = 16;

pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(logs))
}

/// Which attempt's log, and whether to follow it.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    /// The attempt (1, 2, …); default the latest.
    #[param(minimum = 1)]
    attempt: Option<u32>,
    /// For a `for_each` step: the iteration (0, 1, …). Required for those steps.
    iteration: Option<u32>,
    /// `true`: stream the log until the container ends.
    follow: Option<bool>,
}

impl LogQuery {
    fn parse(raw: Option<&str>) -> ApiResult<Self> {
        let query: LogQuery = serde_urlencoded::from_str(raw.unwrap_or("")).map_err(|e| {
            ApiError::field(
                "query",
                format!("expected attempt (≥ 1), iteration (≥ 0) and follow (true or false): {e}"),
            )
        })?;
        if query.attempt == Some(0) {
            return Err(ApiError::field("attempt", "must be 1 or more"));
        }
        Ok(query)
    }
}

#[utoipa::path(get, path = "/v1/runs/{id}/steps/{step_id}/logs", operation_id = "runs.logs", summary = "Read a container step's log", tag = "runs",
    description = "Scope: `read`. The log of a step attempt that ran in a pod (a `container` step, or any \
        step of a workflow whose executor is `job`), as text. `follow=true` streams it until the \
        container ends. Logs are kept as long as the step's Job (the operator's `--step-job-ttl`).",
    params(("id" = String, Path, description = "Run id"), ("step_id" = String, Path, description = "Step id"), LogQuery),
    responses((status = 200, description = "The log", content_type = "text/plain; charset=utf-8", body = String),
              (status = 400, description = "Bad attempt, iteration or follow"),
              (status = 404, description = "No such run or step, or no log kept for the attempt")))]
async fn logs(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
    Path((id, step_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let query = LogQuery::parse(query.as_deref())?;
    let run = read_whole(&state, &who.namespace, &id).await?;
    let job = attempt_job(&run, &step_id, &query)?;
    let pods: Api<Pod> = Api::namespaced(state.client.clone(), &who.namespace);
    let pod = step_pod(&pods, &job).await?;
    let follow = query.follow.unwrap_or(false);
    let place = if follow {
        let place = state
            .follows
            .enter(&who.namespace)
            .ok_or(ApiError::RateLimited {
                retry_after_secs: 5,
            })?;
        started(&pods, &pod).await?;
        Some(place)
    } else {
        None
    };
    let params = LogParams {
        container: Some(STEP_CONTAINER.to_owned()),
        follow,
        ..Default::default()
    };
    let reader = match pods.log_stream(&pod, &params).await {
        Ok(reader) => reader,
        // The container has not started (400), or the pod went away meanwhile (404).
        Err(kube::Error::Api(status)) if matches!(status.code, 400 | 404) => {
            return Err(ApiError::NotFound(Missing::Logs));
        }
        Err(e) => return Err(e.into()),
    };
    // The place of a followed log travels with its stream, and is given back with it.
    let chunks = futures::stream::try_unfold(
        (Box::pin(reader), place),
        |(mut reader, place)| async move {
            let chunk = Bytes::copy_from_slice(reader.fill_buf().await?);
            if chunk.is_empty() {
                return Ok::<_, std::io::Error>(None);
            }
            reader.consume_unpin(chunk.len());
            Ok(Some((chunk, (reader, place))))
        },
    );
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}

/// The name of the Job of the attempt asked for.
fn attempt_job(run: &Run, step_id: &str, query: &LogQuery) -> ApiResult<String> {
    let record: &StepRecord = run
        .status
        .as_ref()
        .and_then(|s| s.steps.iter().find(|s| s.step_id == step_id))
        .ok_or(ApiError::NotFound(Missing::Step))?;
    let (key, attempts) = match (query.iteration, record.items) {
        (Some(index), Some(_)) => {
            let attempts = record
                .iterations
                .iter()
                .find(|i| i.index == index)
                .map_or(0, |i| i.attempts);
            (attempt_key(step_id, Some(index as usize)), attempts)
        }
        (None, Some(_)) => {
            return Err(ApiError::field(
                "iteration",
                "this step runs for each item: say which iteration",
            ));
        }
        (Some(_), None) => {
            return Err(ApiError::field(
                "iteration",
                "this step does not run for each item",
            ));
        }
        (None, None) => (attempt_key(step_id, None), record.attempts),
    };
    let attempt = query.attempt.unwrap_or(attempts);
    if attempt == 0 || attempt > attempts {
        return Err(ApiError::NotFound(Missing::Logs));
    }
    Ok(job_name(&run.name_any(), &key, attempt))
}

/// The pod of a Job, by the `job-name` label the Job controller gives it.
async fn step_pod(pods: &Api<Pod>, job: &str) -> ApiResult<String> {
    let list = pods
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await?;
    // A Job of one attempt has one pod (backoffLimit 0); the newest if ever more.
    list.items
        .into_iter()
        .max_by_key(|p| p.creation_timestamp())
        .map(|p| p.name_any())
        .ok_or(ApiError::NotFound(Missing::Logs))
}

/// Waits (a bounded time) until the pod's step container has started, so a log can be
/// followed from its first line.
/// A pod that is gone counts as started: reading its log then answers `logs_not_found`.
async fn started(pods: &Api<Pod>, pod: &str) -> ApiResult<()> {
    let running = await_condition(pods.clone(), pod, |p: Option<&Pod>| {
        p.is_none_or(|p| {
            container_state(p, STEP_CONTAINER)
                .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        })
    });
    match tokio::time::timeout(START_WAIT, running).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(ApiError::Internal(e.into())),
        Err(_) => Err(ApiError::NotFound(Missing::Logs)),
    }
}
