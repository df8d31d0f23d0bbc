//! `/v1/workflows/{id}/runs` and `/v1/runs`.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use kube::api::Patch;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use super::auth::{Principal, Scope};
use super::cache;
use super::error::{ApiError, ApiResult, Missing};
use super::input;
use super::json::OptionalJson;
use super::pagination::{self, SortKey};
use super::state::{ApiState, new_id};
use super::views;
use super::workflows::{find as find_workflow, location, not_found_as, write_error};
use crate::crd::{Run, RunPhase, RunSpec, RunTrigger, WorkflowState, labels};

pub fn router() -> Router<ApiState> {
    Router::new()
        .route("/v1/workflows/{id}/runs", get(list).post(start))
        .route("/v1/runs/{id}", get(show))
        .route("/v1/runs/{id}/cancel", post(cancel))
}

fn find(state: &ApiState, namespace: &str, id: &str) -> ApiResult<std::sync::Arc<Run>> {
    cache::get(&state.caches.runs, namespace, id).ok_or(ApiError::NotFound(Missing::Run))
}

fn full(state: &ApiState, run: &Run) -> Value {
    let ns = run.namespace().unwrap_or_default();
    let wf = cache::get(&state.caches.workflows, &ns, &run.spec.workflow_ref);
    views::run(run, wf.as_deref())
}

async fn list(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(workflow_id): Path<String>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Value>> {
    who.require(Scope::Read)?;
    find_workflow(&state, &who.namespace, &workflow_id)?;
    let q = pagination::parse_query(
        query.as_deref(),
        Some(("status", &["running", "succeeded", "failed", "cancelled"])),
    )?;
    let items = cache::in_namespace(&state.caches.runs, &who.namespace)
        .into_iter()
        .filter(|r| r.spec.workflow_ref == workflow_id)
        .filter(|r| {
            q.filter
                .as_deref()
                .is_none_or(|s| views::run_phase(r).as_str() == s)
        })
        .map(|r| {
            (
                SortKey::new(views::created_at(&r.metadata), &r.name_any()),
                views::RunListItem::from(&*r),
            )
        })
        .collect();
    Ok(Json(json!(pagination::paginate(items, &q))))
}

async fn show(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    who.require(Scope::Read)?;
    Ok(Json(full(&state, &*find(&state, &who.namespace, &id)?)))
}

async fn start(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(workflow_id): Path<String>,
    OptionalJson(body): OptionalJson<Value>,
) -> ApiResult<impl IntoResponse> {
    who.require(Scope::Execute)?;
    let wf = find_workflow(&state, &who.namespace, &workflow_id)?;
    let payload = input::run_request(body)?;
    if wf.spec.state == WorkflowState::Paused {
        return Err(ApiError::WorkflowPaused);
    }
    let mut run = Run::new(
        &new_id("run"),
        RunSpec {
            workflow_ref: workflow_id.clone(),
            trigger: RunTrigger::Manual,
            payload,
            cancel: false,
        },
    );
    let meta = run.meta_mut();
    meta.annotations = Some(views::creation_annotations(views::now_ms()));
    meta.labels = Some([(labels::WORKFLOW.to_string(), workflow_id.clone())].into());
    meta.owner_references = wf.controller_owner_ref(&()).map(|o| vec![o]);
    let api: Api<Run> = Api::namespaced(state.client.clone(), &who.namespace);
    let created = api
        .create(&ApiState::post_params(), &run)
        .await
        .map_err(write_error)?;
    cache::await_write(&state.caches.runs, &created).await;
    let id = created.name_any();
    Ok((
        StatusCode::CREATED,
        location(format!("/v1/runs/{id}")),
        Json(full(&state, &created)),
    ))
}

async fn cancel(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    who.require(Scope::Execute)?;
    let run = find(&state, &who.namespace, &id)?;
    let phase = views::run_phase(&run);
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
