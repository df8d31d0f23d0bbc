//! `/v1/workflows/{id}/runs` and `/v1/runs`: starting (with an `Idempotency-Key`, see
//! `keyed_start`), reading and cancelling runs, retrying finished ones ([`retry`]) and
//! deciding on their approval steps ([`approvals`]).

pub mod approvals;
pub mod bulk;
pub mod filter;
pub mod input;
mod keyed_start;
pub mod logs;
pub mod retry;
pub mod views;
mod waiting;

#[cfg(test)]
mod error_paths;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kube::api::Patch;
use kube::{Api, ResourceExt};
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use self::filter::RunFilter;
use self::input::RunCreate;
use self::views::{RunListItem, RunView};
use crate::cache;
use crate::plumbing::auth::{Authorized, needs};
use crate::plumbing::error::{ApiError, ApiResult, Missing, not_found_as, write_error};
use crate::plumbing::idempotency::IdempotencyKey;
use crate::plumbing::json::Valid;
use crate::plumbing::pagination::{self, Page, SortKey};
use crate::plumbing::path::Path;
use crate::state::ApiState;
use crate::workflows::{find as find_workflow, location};
use flowline_core::clock::now_ms;
use flowline_core::crd::timestamps::created_at;
use flowline_core::crd::{Run, RunTrigger, Workflow, WorkflowState, tags};
use flowline_core::ids::new_id;
use flowline_kube::lenient::Lenient;

/// The routes, as the handlers' `#[utoipa::path]` declare them (one declaration
/// serves the router and the OpenAPI document).
pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list, start))
        .routes(routes!(list_all))
        .routes(routes!(show))
        .routes(routes!(cancel))
        .merge(retry::router())
        .merge(bulk::router())
        .merge(approvals::router())
        .merge(logs::router())
}

pub(crate) fn find(state: &ApiState, namespace: &str, id: &str) -> ApiResult<std::sync::Arc<Run>> {
    cache::get(&state.caches.runs, namespace, id).ok_or(ApiError::NotFound(Missing::Run))
}

fn full(state: &ApiState, run: &Run) -> RunView {
    let ns = run.namespace().unwrap_or_default();
    let wf = cache::get(&state.caches.workflows, &ns, &run.spec.workflow_ref);
    let shown = waiting::shown_one(state, run);
    views::run(shown.as_ref().unwrap_or(run), wf.as_deref())
}

#[utoipa::path(get, path = "/v1/workflows/{id}/runs", operation_id = "runs.list", summary = "List runs of a workflow", tag = "runs", description = "Scope: `read`. Newest first.",
    params(("id" = String, Path, description = "Workflow id"), filter::RunsQuery),
    responses((status = 200, description = "A page of runs", body = Page<RunListItem>),
              (status = 400, description = "Bad limit, cursor or filter"),
              (status = 404, description = "No such workflow")))]
async fn list(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
    Path(workflow_id): Path<String>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Page<RunListItem>>> {
    find_workflow(&state, &who.namespace, &workflow_id)?;
    let filter = RunFilter::from_query(query.as_deref(), false)?;
    let runs = state.caches.runs_of_workflow(&who.namespace, &workflow_id);
    page_of(&state, runs, &filter, query.as_deref())
}

#[utoipa::path(get, path = "/v1/runs", operation_id = "runs.listAll", summary = "List runs of every workflow", tag = "runs",
    description = "Scope: `read`. Newest first; every filter given must hold.",
    params(filter::WorkflowIdQuery, filter::RunsQuery),
    responses((status = 200, description = "A page of runs", body = Page<RunListItem>),
              (status = 400, description = "Bad limit, cursor or filter")))]
async fn list_all(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Page<RunListItem>>> {
    let filter = RunFilter::from_query(query.as_deref(), true)?;
    let runs = match &filter.workflow_id {
        Some(workflow) => state.caches.runs_of_workflow(&who.namespace, workflow),
        None => state.caches.runs.in_namespace(&who.namespace),
    };
    page_of(&state, runs, &filter, query.as_deref())
}

/// The page the query asks for of the `runs` that pass `filter`, newest first.
fn page_of(
    state: &ApiState,
    runs: Vec<std::sync::Arc<Run>>,
    filter: &RunFilter,
    query: Option<&str>,
) -> ApiResult<Json<Page<RunListItem>>> {
    let q = pagination::parse_query(query, None)?;
    let runs = waiting::shown(state, runs)
        .into_iter()
        .filter(|r| filter.matches(r))
        .map(|r| (SortKey::new(created_at(&r.metadata), &r.name_any()), r))
        .collect();
    let page = pagination::paginate(runs, &q);
    // Only the page's runs are shaped for the answer.
    Ok(Json(Page {
        data: page.data.iter().map(|r| RunListItem::from(&**r)).collect(),
        next_cursor: page.next_cursor,
    }))
}

#[utoipa::path(get, path = "/v1/runs/{id}", operation_id = "runs.get", summary = "Get a run with its steps", tag = "runs", description = "Scope: `read`.",
    params(("id" = String, Path, description = "Run id")),
    responses((status = 200, description = "The run with its steps", body = RunView),
              (status = 404, description = "No such run")))]
async fn show(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
    Path(id): Path<String>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(full(
        &state,
        &read_whole(&state, &who.namespace, &id).await?,
    )))
}

/// The whole run from the API server: the cache holds summaries only (see
/// `cache::summarize_run`). A run that is gone, or stored in a shape this version
/// cannot read (the cache leaves those out too), is not found. Only ids the cache
/// knows reach the API server: any other (not a valid name, another account's, made
/// up) is not found without a request.
pub(crate) async fn read_whole(state: &ApiState, namespace: &str, id: &str) -> ApiResult<Run> {
    find(state, namespace, id)?;
    let api: Api<Lenient<Run>> = Api::namespaced(state.client.clone(), namespace);
    match api.get_opt(id).await? {
        Some(Lenient::Decoded(run)) => Ok(std::sync::Arc::unwrap_or_clone(run)),
        _ => Err(ApiError::NotFound(Missing::Run)),
    }
}

#[utoipa::path(post, path = "/v1/workflows/{id}/runs", operation_id = "runs.create", summary = "Start a run", tag = "runs",
    description = "Scope: `execute`. The body is optional. With an `Idempotency-Key`, a repeated \
        request (same key, same workflow, same body, within 24 h) answers the run the first one \
        started, with 200, instead of starting another.",
    params(("id" = String, Path, description = "Workflow id"),
           ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255,
            pattern = "^[!-~]([ -~]*[!-~])?$",
            description = "1 to 255 visible ASCII characters; the same key returns the same run for 24 h")),
    request_body(content = Option<RunCreate>, content_type = "application/json"),
    responses((status = 201, description = "The run, running", body = RunView,
               headers(("Location" = String, description = "Path of the new run"))),
              (status = 200, description = "The run an earlier request with this Idempotency-Key started", body = RunView,
               headers(("Location" = String, description = "Path of the run"))),
              (status = 404, description = "No such workflow"),
              (status = 409, description = "The workflow is paused (`workflow_paused`), or the Idempotency-Key \
               started a run with a different body (`idempotency_key_reused`)")))]
async fn start(
    State(state): State<ApiState>,
    who: Authorized<needs::Execute>,
    Path(workflow_id): Path<String>,
    IdempotencyKey(key): IdempotencyKey,
    Valid(body): Valid<Option<RunCreate>>,
) -> ApiResult<Response> {
    let wf = find_workflow(&state, &who.namespace, &workflow_id)?;
    let Some(key) = key else {
        let run = new_run(&wf, &new_id("run"), &body, |_| {})?;
        let created = create(&state, &who.namespace, &run)
            .await
            .map_err(write_error)?;
        return Ok(answer(&state, StatusCode::CREATED, &created));
    };
    keyed_start::start(&state, &who.namespace, &wf, &body, key).await
}

/// A run of `wf` named `name` as `body` asks (payload, tags, priority), completed by
/// `complete`, if it fits: refused when the workflow is paused or the run spec would
/// exceed its size limit.
pub(crate) fn new_run(
    wf: &Workflow,
    name: &str,
    body: &Option<RunCreate>,
    complete: impl FnOnce(&mut Run),
) -> ApiResult<Run> {
    if wf.spec.state == WorkflowState::Paused {
        return Err(ApiError::WorkflowPaused);
    }
    let mut run = Run::of_workflow(wf, name, RunTrigger::Manual, input::payload(body), now_ms());
    run.labels_mut().extend(tags::labels(&input::tags(body)));
    run.spec.priority = input::priority(body).or(run.spec.priority);
    complete(&mut run);
    check_spec_size(
        &run,
        "payload",
        "the payload and the workflow's steps together",
        "make the payload or the steps' inputs smaller",
    )?;
    Ok(run)
}

/// Refuses a run whose spec exceeds [`flowline_core::limits::MAX_RUN_SPEC_BYTES`], as a problem of
/// `field`: `what` takes the bytes, `advice` says what to do.
pub(crate) fn check_spec_size(run: &Run, field: &str, what: &str, advice: &str) -> ApiResult<()> {
    let spec_bytes = serde_json::to_vec(&run.spec).map_or(usize::MAX, |b| b.len());
    if spec_bytes > flowline_core::limits::MAX_RUN_SPEC_BYTES {
        return Err(ApiError::field(
            field,
            format!("{what} take {spec_bytes} bytes; a run holds at most 1 MiB of them ({advice})"),
        ));
    }
    Ok(())
}

/// Creates `run` and waits until the cache holds it (read-your-writes).
pub(crate) async fn create(
    state: &ApiState,
    namespace: &str,
    run: &Run,
) -> Result<Run, kube::Error> {
    let api: Api<Run> = Api::namespaced(state.client.clone(), namespace);
    let created = api.create(&ApiState::post_params(), run).await?;
    cache::await_write(&state.caches.runs, &created).await;
    Ok(created)
}

/// The run as `GET /v1/runs/{id}` shows it, with `status` and its `Location`.
pub(crate) fn answer(state: &ApiState, status: StatusCode, run: &Run) -> Response {
    let id = run.name_any();
    (
        status,
        location(format!("/v1/runs/{id}")),
        Json(full(state, run)),
    )
        .into_response()
}

#[utoipa::path(post, path = "/v1/runs/{id}/cancel", operation_id = "runs.cancel", summary = "Cancel a run", tag = "runs", description = "Scope: `execute`.",
    params(("id" = String, Path, description = "Run id")),
    responses((status = 202, description = "Cancellation accepted", body = RunView),
              (status = 404, description = "No such run"),
              (status = 409, description = "The run has finished (neither running nor queued)")))]
async fn cancel(
    State(state): State<ApiState>,
    who: Authorized<needs::Execute>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let patched = request_cancel(&state, &who.namespace, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(full(&state, &patched))))
}

/// Sets `spec.cancel` on the unfinished run `id` of `namespace` and returns the run
/// once the cache holds the write: the work of `POST /v1/runs/{id}/cancel` and of each
/// run of a bulk cancel.
pub(crate) async fn request_cancel(state: &ApiState, namespace: &str, id: &str) -> ApiResult<Run> {
    let run = find(state, namespace, id)?;
    let phase = run.phase();
    // A queued run has not started, but it is unfinished: cancelling it ends its wait.
    if phase.is_finished() {
        return Err(ApiError::RunNotRunning(phase.as_str()));
    }
    let api: Api<Run> = Api::namespaced(state.client.clone(), namespace);
    let patched = api
        .patch(
            id,
            &ApiState::patch_params(),
            &Patch::Merge(json!({"spec": {"cancel": true}})),
        )
        .await
        .map_err(|e| not_found_as(e, Missing::Run))?;
    cache::await_write(&state.caches.runs, &patched).await;
    Ok(patched)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with_payload(bytes: usize) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run", "metadata": {"name": "r"},
            "spec": {"workflowRef": "wf", "payload": {"p": "x".repeat(bytes)}},
        }))
        .unwrap()
    }

    #[test]
    fn a_run_spec_over_1_mib_is_refused_naming_the_field_and_what_to_do() {
        assert!(check_spec_size(&run_with_payload(1000), "from", "it", "do less").is_ok());
        match check_spec_size(&run_with_payload(1 << 20), "from", "the parts", "do less") {
            Err(ApiError::Validation { message, details }) => {
                assert_eq!(details[0].field, "from");
                assert!(
                    message.contains("the parts take 1048649 bytes"),
                    "{message}"
                );
                assert!(message.ends_with("(do less)"), "{message}");
            }
            other => panic!("expected a validation error, got {other:?}"),
        }
    }
}
