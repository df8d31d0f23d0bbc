//! `/v1/workflows/{id}/runs` and `/v1/runs`.

use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use kube::api::Patch;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::pagination::Page;
use super::views::{RunListItem, RunView};

use super::auth::{Principal, Scope};
use super::cache;
use super::error::{ApiError, ApiResult, Missing, not_found_as, write_error};
use super::idempotency::{self, Outcome};
use super::input;
use super::json::OptionalJson;
use super::pagination::{self, SortKey};
use super::state::ApiState;
use super::views;
use super::workflows::{find as find_workflow, location};
use crate::clock::now_ms;
use crate::crd::timestamps::created_at;
use crate::crd::{Run, RunPhase, RunTrigger, Workflow, WorkflowState};
use crate::ids::new_id;
use crate::kubeutil::lenient::Lenient;

pub fn router() -> Router<ApiState> {
    Router::new()
        .route("/v1/workflows/{id}/runs", get(list).post(start))
        .route("/v1/runs/{id}", get(show))
        .route("/v1/runs/{id}/cancel", post(cancel))
}

pub(super) fn find(state: &ApiState, namespace: &str, id: &str) -> ApiResult<std::sync::Arc<Run>> {
    cache::get(&state.caches.runs, namespace, id).ok_or(ApiError::NotFound(Missing::Run))
}

fn full(state: &ApiState, run: &Run) -> RunView {
    let ns = run.namespace().unwrap_or_default();
    let wf = cache::get(&state.caches.workflows, &ns, &run.spec.workflow_ref);
    views::run(run, wf.as_deref())
}

#[utoipa::path(get, path = "/v1/workflows/{id}/runs", tag = "runs", description = "Scope: `read`. Newest first.",
    params(("id" = String, Path, description = "Workflow id"), crate::api::openapi::RunListQuery),
    responses((status = 200, description = "A page of runs", body = crate::api::pagination::Page<RunListItem>),
              (status = 400, description = "Bad limit, cursor or status filter"),
              (status = 404, description = "No such workflow")))]
async fn list(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(workflow_id): Path<String>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Page<RunListItem>>> {
    who.require(Scope::Read)?;
    find_workflow(&state, &who.namespace, &workflow_id)?;
    let q = pagination::parse_query(
        query.as_deref(),
        Some(("status", &["running", "succeeded", "failed", "cancelled"])),
    )?;
    let items = cache::in_namespace(&state.caches.runs, &who.namespace)
        .into_iter()
        .filter(|r| r.spec.workflow_ref == workflow_id)
        .filter(|r| q.filter.as_deref().is_none_or(|s| r.phase().as_str() == s))
        .map(|r| {
            (
                SortKey::new(created_at(&r.metadata), &r.name_any()),
                RunListItem::from(&*r),
            )
        })
        .collect();
    Ok(Json(pagination::paginate(items, &q)))
}

#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs", description = "Scope: `read`.",
    params(("id" = String, Path, description = "Run id")),
    responses((status = 200, description = "The run with its steps", body = RunView),
              (status = 404, description = "No such run")))]
async fn show(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<RunView>> {
    who.require(Scope::Read)?;
    Ok(Json(full(&state, &*find(&state, &who.namespace, &id)?)))
}

#[utoipa::path(post, path = "/v1/workflows/{id}/runs", tag = "runs",
    description = "Scope: `execute`. The body is optional. With an `Idempotency-Key`, a repeated \
        request (same key, same workflow, same body, within 24 h) answers the run the first one \
        started, with 200, instead of starting another.",
    params(("id" = String, Path, description = "Workflow id"),
           ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255,
            pattern = "^[!-~]([ -~]*[!-~])?$",
            description = "1 to 255 visible ASCII characters; the same key returns the same run for 24 h")),
    request_body(content = Option<crate::api::openapi::RunCreate>, content_type = "application/json"),
    responses((status = 201, description = "The run, running", body = RunView,
               headers(("Location" = String, description = "Path of the new run"))),
              (status = 200, description = "The run an earlier request with this Idempotency-Key started", body = RunView,
               headers(("Location" = String, description = "Path of the run"))),
              (status = 404, description = "No such workflow"),
              (status = 409, description = "The workflow is paused (`workflow_paused`), or the Idempotency-Key \
               started a run with a different body (`idempotency_key_reused`)")))]
async fn start(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(workflow_id): Path<String>,
    headers: HeaderMap,
    OptionalJson(body): OptionalJson<Value>,
) -> ApiResult<Response> {
    who.require(Scope::Execute)?;
    let key = idempotency::key_from(&headers)?;
    let wf = find_workflow(&state, &who.namespace, &workflow_id)?;
    let payload = input::run_request(body)?;
    let Some(key) = key else {
        let run = new_run(&wf, &new_id("run"), payload)?;
        let created = create(&state, &who.namespace, &run)
            .await
            .map_err(write_error)?;
        return Ok(answer(&state, StatusCode::CREATED, &created));
    };
    start_keyed(&state, &who.namespace, &wf, payload, key).await
}

/// A run of `wf` named `name`, if it fits: refused when the workflow is paused or the run
/// spec would exceed its size limit.
fn new_run(wf: &Workflow, name: &str, payload: Option<Value>) -> ApiResult<Run> {
    if wf.spec.state == WorkflowState::Paused {
        return Err(ApiError::WorkflowPaused);
    }
    let run = Run::of_workflow(wf, name, RunTrigger::Manual, payload, now_ms());
    check_spec_size(
        &run,
        "payload",
        "the payload and the workflow's steps together",
        "make the payload or the steps' inputs smaller",
    )?;
    Ok(run)
}

/// Refuses a run whose spec exceeds [`crate::limits::MAX_RUN_SPEC_BYTES`], as a problem of
/// `field`: `what` takes the bytes, `advice` says what to do.
pub(super) fn check_spec_size(run: &Run, field: &str, what: &str, advice: &str) -> ApiResult<()> {
    let spec_bytes = serde_json::to_vec(&run.spec).map_or(usize::MAX, |b| b.len());
    if spec_bytes > crate::limits::MAX_RUN_SPEC_BYTES {
        return Err(ApiError::field(
            field,
            format!("{what} take {spec_bytes} bytes; a run holds at most 1 MiB of them ({advice})"),
        ));
    }
    Ok(())
}

/// Creates `run` and waits until the cache holds it (read-your-writes).
pub(super) async fn create(
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
pub(super) fn answer(state: &ApiState, status: StatusCode, run: &Run) -> Response {
    let id = run.name_any();
    (
        status,
        location(format!("/v1/runs/{id}")),
        Json(full(state, run)),
    )
        .into_response()
}

/// Longest walk along a key's names; each step passes a distinct existing run, so only
/// a broken cache could make a walk this long.
const MAX_KEY_WALK: usize = 1000;

/// `start` with an Idempotency-Key: walks the key's names from the first, answering the
/// run that holds the key, or creating it under the first free name. The API server
/// arbitrates races: the loser's create fails with AlreadyExists, and it answers the
/// winner's run.
async fn start_keyed(
    state: &ApiState,
    namespace: &str,
    wf: &Workflow,
    payload: Option<Value>,
    key: String,
) -> ApiResult<Response> {
    let workflow = wf.name_any();
    let digest = idempotency::request_digest(payload.as_ref());
    let req = idempotency::Request {
        workflow: &workflow,
        key: &key,
        digest: &digest,
        now: now_ms(),
    };
    let mut name = idempotency::head_name(&workflow, &key);
    for _ in 0..MAX_KEY_WALK {
        // A free name is taken only when no run holds the key elsewhere: a Run applied
        // with kubectl with this key, or a later name whose predecessor retention deleted.
        let cached = cache::get(&state.caches.runs, namespace, &name)
            .or_else(|| live_holder(state, namespace, &req));
        let holder = match cached {
            Some(run) => Holder::Run(run),
            None => {
                let mut run = new_run(wf, &name, payload.clone())?;
                run.spec.idempotency_key = Some(key.clone());
                run.annotations_mut()
                    .insert(idempotency::DIGEST_ANNOTATION.into(), digest.clone());
                match create(state, namespace, &run).await {
                    Ok(created) => return Ok(answer(state, StatusCode::CREATED, &created)),
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(write_error(e)),
                }
                // Lost a race: judge the run that won as the API server has it (the
                // cache may not have it yet).
                match read_holder(state, namespace, &name).await? {
                    Some(winner) => winner,
                    None => continue, // deleted meanwhile: the name is free again
                }
            }
        };
        match holder {
            Holder::Run(run) => match idempotency::decide(Some(&run), &req) {
                Outcome::Replay => {
                    cache::await_write(&state.caches.runs, &*run).await;
                    return Ok(answer(state, StatusCode::OK, &run));
                }
                Outcome::Reused => return Err(ApiError::IdempotencyKeyReused),
                Outcome::Next(next) => name = next,
                Outcome::Create => {}
            },
            Holder::Undecodable(uid) => name = idempotency::next_name(&workflow, &key, &uid),
        }
    }
    Err(ApiError::Internal(anyhow::anyhow!(
        "Idempotency-Key walk of workflow {workflow} passed {MAX_KEY_WALK} names"
    )))
}

/// What holds a name, as read from the API server.
enum Holder {
    Run(std::sync::Arc<Run>),
    /// A Run stored with kubectl that cannot be decoded: only its uid is known.
    Undecodable(String),
}

async fn read_holder(state: &ApiState, namespace: &str, name: &str) -> ApiResult<Option<Holder>> {
    let api: Api<Lenient<Run>> = Api::namespaced(state.client.clone(), namespace);
    Ok(match api.get_opt(name).await? {
        None => None,
        Some(Lenient::Decoded(run)) => Some(Holder::Run(run)),
        Some(Lenient::Undecodable(failure)) => Some(Holder::Undecodable(
            failure.metadata.uid.clone().unwrap_or_default(),
        )),
    })
}

/// The newest cached run that holds `req`'s key, wherever it is named.
fn live_holder(
    state: &ApiState,
    namespace: &str,
    req: &idempotency::Request,
) -> Option<std::sync::Arc<Run>> {
    cache::in_namespace(&state.caches.runs, namespace)
        .into_iter()
        .filter(|r| idempotency::holds(r, req))
        .max_by_key(|r| created_at(&r.metadata))
}

#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "runs", description = "Scope: `execute`.",
    params(("id" = String, Path, description = "Run id")),
    responses((status = 202, description = "Cancellation accepted", body = RunView),
              (status = 404, description = "No such run"),
              (status = 409, description = "The run is not running")))]
async fn cancel(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    who.require(Scope::Execute)?;
    let run = find(&state, &who.namespace, &id)?;
    let phase = run.phase();
    if phase != RunPhase::Running {
        return Err(ApiError::RunNotRunning(phase.as_str()));
    }
    let api: Api<Run> = Api::namespaced(state.client.clone(), &who.namespace);
    let patched = api
        .patch(
            &id,
            &ApiState::patch_params(),
            &Patch::Merge(json!({"spec": {"cancel": true}})),
        )
        .await
        .map_err(|e| not_found_as(e, Missing::Run))?;
    cache::await_write(&state.caches.runs, &patched).await;
    Ok((StatusCode::ACCEPTED, Json(full(&state, &patched))))
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
