//! `/v1/workflows`: the stored automations, and the rotation of a webhook-triggered
//! workflow's inbound secret (kept by [`crate::hooks::secret`]).

pub mod backfill;
pub mod input;
pub mod list_page;
pub mod pages;
pub mod versions;
pub mod views;

#[cfg(test)]
mod error_paths;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use kube::api::{DeleteParams, Patch};
use kube::{Api, ResourceExt};
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use self::input::{WorkflowCreate, WorkflowPatchBody};
use self::views::{HookSecret, WorkflowListItem, WorkflowView, WorkflowWithSecret};
use crate::cache;
use crate::hooks::secret as hook_secret;
use crate::plumbing::auth::{Authorized, needs};
use crate::plumbing::error::{ApiError, ApiResult, Missing, not_found_as, write_error};
use crate::plumbing::json::Valid;
use crate::plumbing::pagination::{self, Page};
use crate::plumbing::path::Path;
use crate::plumbing::validation::Problems;
use crate::state::ApiState;
use flowline_core::clock::{format_ts, now_ms};
use flowline_core::crd::timestamps::{UPDATED_AT_ANNOTATION, creation_annotations};
use flowline_core::crd::{TriggerType, Workflow, WorkflowSpec, WorkflowState};
use flowline_core::ids::new_id;

/// The routes, as the handlers' `#[utoipa::path]` declare them (one declaration
/// serves the router and the OpenAPI document).
pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(show, update, remove))
        .routes(routes!(rotate_hook_secret))
        .merge(backfill::router())
        .merge(versions::router())
}

/// The workflow from the cache, or `workflow_not_found` (also for other accounts).
pub fn find(state: &ApiState, namespace: &str, id: &str) -> ApiResult<std::sync::Arc<Workflow>> {
    cache::get(&state.caches.workflows, namespace, id).ok_or(ApiError::NotFound(Missing::Workflow))
}

pub fn location(path: String) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&path) {
        headers.insert(header::LOCATION, v);
    }
    headers
}

#[utoipa::path(get, path = "/v1/workflows", operation_id = "workflows.list", summary = "List workflows", tag = "workflows", description = "Scope: `read`. Newest first.",
    params(crate::openapi::WorkflowListQuery),
    responses((status = 200, description = "A page of workflows", body = Page<WorkflowListItem>),
              (status = 400, description = "Bad limit, cursor or state filter")))]
async fn list(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let q = pagination::parse_query(query.as_deref(), Some(list_page::STATE_FILTER))?;
    let key = pages::QueryKey::of(&q);
    let cache = &state.caches.workflows;
    let version = cache.version();
    if let Some(version) = version
        && let Some(page) = state.workflow_pages.get(version, &who.namespace, &key)
    {
        return Ok(json_answer(page));
    }
    let json = list_page::render(
        &state.rendered_workflow_items,
        &who.namespace,
        cache.in_namespace(&who.namespace),
        &q,
    )
    .map_err(|e| ApiError::Internal(e.into()))?;
    // Kept only when nothing changed while it was built.
    if let Some(version) = version
        && cache.version() == Some(version)
    {
        (state.workflow_pages).keep(version, &who.namespace, key, json.clone());
    }
    Ok(json_answer(json))
}

#[utoipa::path(get, path = "/v1/workflows/{id}", operation_id = "workflows.get", summary = "Get a workflow", tag = "workflows", description = "Scope: `read`.",
    params(("id" = String, Path, description = "Workflow id")),
    responses((status = 200, description = "The full workflow", body = WorkflowView),
              (status = 404, description = "No such workflow")))]
async fn show(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let wf = find(&state, &who.namespace, &id)?;
    // The bytes `Json(WorkflowView::from(..))` would send, rendered once per cached copy.
    let json = state
        .rendered_workflows
        .get_or_render(&who.namespace, &id, &wf, |wf| {
            serde_json::to_vec(&WorkflowView::from(wf))
        })
        .map_err(|e| ApiError::Internal(e.into()))?;
    Ok(json_answer(json))
}

/// A 200 with JSON rendered beforehand.
fn json_answer(json: Bytes) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        json,
    )
        .into_response()
}

#[utoipa::path(post, path = "/v1/workflows", operation_id = "workflows.create", summary = "Create a workflow", tag = "workflows", description = "Scope: `write`. Creates a draft with no steps.",
    request_body = WorkflowCreate,
    responses((status = 201, description = "Created; `hook_secret` when the trigger is `webhook`", body = WorkflowWithSecret,
               headers(("Location" = String, description = "Path of the new workflow")))))]
async fn create(
    State(state): State<ApiState>,
    who: Authorized<needs::Write>,
    Valid(body): Valid<WorkflowCreate>,
) -> ApiResult<impl IntoResponse> {
    let trigger = body.stored_trigger();
    let mut wf = Workflow::new(
        &new_id("wf"),
        WorkflowSpec {
            name: body.name,
            description: body.description,
            state: WorkflowState::Draft,
            trigger,
            executor: None,
            steps: Vec::new(),
            history: Default::default(),
            timeout_ms: None,
            concurrency: None,
            rate_limit: None,
            debounce: None,
            parallelism: None,
            priority: None,
            output: body.output,
            cancel_on: Vec::new(),
        },
    );
    wf.metadata.annotations = Some(creation_annotations(now_ms()));
    let api: Api<Workflow> = Api::namespaced(state.client.clone(), &who.namespace);
    let created = api
        .create(&ApiState::post_params(), &wf)
        .await
        .map_err(write_error)?;
    cache::await_write(&state.caches.workflows, &created).await;
    let hook_secret = with_hook_secret(&state, None, &created).await?;
    let id = created.name_any();
    Ok((
        StatusCode::CREATED,
        location(format!("/v1/workflows/{id}")),
        hook_secret,
    ))
}

#[utoipa::path(patch, path = "/v1/workflows/{id}", operation_id = "workflows.update", summary = "Update a workflow", tag = "workflows", description = "Scope: `write`.",
    params(("id" = String, Path, description = "Workflow id")),
    request_body = WorkflowPatchBody,
    responses((status = 200, description = "The updated workflow; `hook_secret` when the trigger became `webhook`", body = WorkflowWithSecret),
              (status = 404, description = "No such workflow")))]
async fn update(
    State(state): State<ApiState>,
    who: Authorized<needs::Write>,
    Path(id): Path<String>,
    Valid(body): Valid<WorkflowPatchBody>,
) -> ApiResult<Json<WorkflowWithSecret>> {
    let stored = find(&state, &who.namespace, &id)?;
    let before = stored.spec.trigger.type_;
    let patch = body.into_patch();
    // The output as it will be stored reads the steps as they will be: refused here
    // (400 on `output…`) rather than left to the controller's `InvalidSpec`.
    let new_steps = patch.steps.as_deref().unwrap_or(&stored.spec.steps);
    let new_output = match &patch.output {
        Some(output) => output.as_ref(),
        None => stored.spec.output.as_ref(),
    };
    if let Some(output) = new_output {
        let mut p = Problems::default();
        input::check_output(output, new_steps, &mut p);
        p.finish()?;
    }
    let mut spec = serde_json::Map::new();
    if let Some(name) = patch.name {
        spec.insert("name".into(), json!(name));
    }
    if let Some(description) = patch.description {
        spec.insert("description".into(), json!(description));
    }
    if let Some(s) = patch.state {
        spec.insert("state".into(), json!(s));
    }
    if let Some(t) = patch.trigger {
        // Explicit nulls: a merge patch would otherwise keep a stale cron.
        spec.insert(
            "trigger".into(),
            json!({"type": t.type_, "cron": t.cron, "timezone": t.timezone,
                   "event": t.event, "filter": t.filter}),
        );
    }
    if let Some(e) = patch.executor {
        spec.insert("executor".into(), json!(e));
    }
    if let Some(steps) = patch.steps {
        spec.insert("steps".into(), json!(steps));
    }
    if let Some(t) = patch.timeout_ms {
        spec.insert("timeoutMs".into(), json!(t));
    }
    if let Some(c) = patch.concurrency {
        // Sent whole: a merge patch would otherwise keep a stale key.
        spec.insert(
            "concurrency".into(),
            json!(c.map(|c| json!({"limit": c.limit, "key": c.key, "policy": c.policy}))),
        );
    }
    // Sent whole, like the concurrency: a merge patch would otherwise keep a stale key.
    if let Some(r) = patch.rate_limit {
        spec.insert(
            "rateLimit".into(),
            json!(r.map(|r| json!({"key": r.key, "limit": r.limit, "periodMs": r.period_ms}))),
        );
    }
    if let Some(d) = patch.debounce {
        spec.insert(
            "debounce".into(),
            json!(d.map(
                |d| json!({"key": d.key, "periodMs": d.period_ms, "maxWaitMs": d.max_wait_ms})
            )),
        );
    }
    if let Some(n) = patch.parallelism {
        spec.insert("parallelism".into(), json!(n));
    }
    if let Some(n) = patch.priority {
        spec.insert("priority".into(), json!(n));
    }
    if let Some(output) = patch.output {
        // A merge patch merges objects key by key: sent as the changes from the stored
        // value, so the stored output is replaced whole (`null` removes it).
        spec.insert(
            "output".into(),
            replacing(stored.spec.output.as_ref(), output.as_ref()),
        );
    }
    if let Some(entries) = patch.cancel_on {
        // Replaced whole (a merge patch replaces lists); none: removed.
        let entries = (!entries.is_empty()).then_some(entries);
        spec.insert("cancelOn".into(), json!(entries));
    }
    let body = json!({
        "metadata": {"annotations": {UPDATED_AT_ANNOTATION: format_ts(now_ms())}},
        "spec": spec,
    });
    let api: Api<Workflow> = Api::namespaced(state.client.clone(), &who.namespace);
    let updated = api
        .patch(&id, &ApiState::patch_params(), &Patch::Merge(&body))
        .await
        .map_err(|e| not_found_as(e, Missing::Workflow))?;
    cache::await_write(&state.caches.workflows, &updated).await;
    with_hook_secret(&state, Some(before), &updated).await
}

/// The merge patch (RFC 7386) that turns `old` into `new`: members of `old` that `new`
/// lacks become `null`, objects are compared member by member, anything else is sent
/// whole. (A `null` member of `new` means removal in a merge patch: it is dropped.)
fn replacing(
    old: Option<&serde_json::Value>,
    new: Option<&serde_json::Value>,
) -> serde_json::Value {
    use serde_json::Value;
    match (old, new) {
        (Some(Value::Object(old)), Some(Value::Object(new))) => {
            let mut patch = serde_json::Map::new();
            // Gone, or `null` (which the stored value cannot hold): removed.
            let gone = |k: &&String| new.get(*k).is_none_or(Value::is_null);
            for key in old.keys().filter(gone) {
                patch.insert(key.clone(), Value::Null);
            }
            for (key, value) in new {
                if value.is_null() || old.get(key) == Some(value) {
                    continue;
                }
                patch.insert(key.clone(), replacing(old.get(key), Some(value)));
            }
            Value::Object(patch)
        }
        (_, new) => new.cloned().map(strip_nulls).unwrap_or(Value::Null),
    }
}

/// `value` without `null` object members (which a merge patch would read as removals).
fn strip_nulls(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

/// The response of a write that leaves `wf` in place: the workflow, and a new inbound
/// secret when its trigger became `webhook` (or it has none). The workflow is written
/// first because the Secret is owned by it; if storing the secret fails, the error is
/// returned and the rotate endpoint makes one.
async fn with_hook_secret(
    state: &ApiState,
    before: Option<TriggerType>,
    wf: &Workflow,
) -> ApiResult<Json<WorkflowWithSecret>> {
    let has_secret = hook_secret::current(&state.seal, wf).is_some();
    let hook_secret = if hook_secret::needs_secret(before, wf, has_secret) {
        Some(hook_secret::install(state, wf).await?)
    } else {
        None
    };
    Ok(Json(WorkflowWithSecret {
        workflow: WorkflowView::from(wf),
        hook_secret,
    }))
}

#[utoipa::path(delete, path = "/v1/workflows/{id}", operation_id = "workflows.delete", summary = "Delete a workflow", tag = "workflows", description = "Scope: `write`. Deletes the workflow and its run history.",
    params(("id" = String, Path, description = "Workflow id")),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such workflow"),
              (status = 409, description = "The workflow is active; pause it first")))]
async fn remove(
    State(state): State<ApiState>,
    who: Authorized<needs::Write>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let wf = find(&state, &who.namespace, &id)?;
    if wf.spec.state == WorkflowState::Active {
        return Err(ApiError::WorkflowActive);
    }
    let api: Api<Workflow> = Api::namespaced(state.client.clone(), &who.namespace);
    // Delete with a precondition on the version we checked, so a concurrent
    // activation cannot slip through; on a conflict, look again.
    let mut version = wf.resource_version();
    for _ in 0..3 {
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                resource_version: version.clone(),
                uid: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&id, &params).await {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let fresh = api
                    .get(&id)
                    .await
                    .map_err(|e| not_found_as(e, Missing::Workflow))?;
                if fresh.spec.state == WorkflowState::Active {
                    return Err(ApiError::WorkflowActive);
                }
                version = fresh.resource_version();
            }
            Err(e) => return Err(not_found_as(e, Missing::Workflow)),
        }
    }
    cache::await_delete(&state.caches.workflows, &who.namespace, &id).await;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/workflows/{id}/hook-secret/rotate", operation_id = "workflows.rotateHookSecret", summary = "Rotate a workflow's inbound hook secret", tag = "workflows",
    description = "Scope: `write`. Replaces the inbound secret of a webhook-triggered workflow; the previous one stops verifying at once.",
    params(("id" = String, Path, description = "Workflow id")),
    responses((status = 200, description = "The new secret, shown only here", body = HookSecret),
              (status = 404, description = "No such workflow"),
              (status = 409, description = "The workflow's trigger is not `webhook`")))]
async fn rotate_hook_secret(
    State(state): State<ApiState>,
    who: Authorized<needs::Write>,
    Path(id): Path<String>,
) -> ApiResult<Json<HookSecret>> {
    let wf = find(&state, &who.namespace, &id)?;
    if wf.spec.trigger.type_ != TriggerType::Webhook {
        return Err(ApiError::NotWebhookTriggered);
    }
    let hook_secret = hook_secret::install(&state, &wf).await?;
    Ok(Json(HookSecret { hook_secret }))
}

#[cfg(test)]
mod tests {
    use super::replacing;
    use serde_json::{Value, json};

    /// Merges `patch` into `target` as the API server does (RFC 7386).
    fn merge(target: &mut Value, patch: &Value) {
        let Value::Object(patch) = patch else {
            *target = patch.clone();
            return;
        };
        if !target.is_object() {
            *target = json!({});
        }
        let map = target.as_object_mut().unwrap();
        for (key, value) in patch {
            if value.is_null() {
                map.remove(key);
            } else {
                merge(map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }

    #[test]
    fn an_output_patch_replaces_the_stored_output_whole() {
        let cases = [
            (
                json!({"a": 1, "b": {"c": 2, "d": 3}}),
                json!({"b": {"c": 2}, "e": [1]}),
            ),
            (json!({"a": 1}), json!("{{ steps.s.output }}")),
            (json!("x"), json!({"a": {"b": 1}})),
            (json!({"a": {"b": 1}}), json!({"a": 5})),
            (json!({"a": 1, "b": 2}), json!({"b": 2})),
        ];
        for (old, new) in cases {
            let mut spec = json!({"output": old.clone()});
            merge(
                &mut spec,
                &json!({"output": replacing(Some(&old), Some(&new))}),
            );
            assert_eq!(spec["output"], new, "{old} -> {new}");
        }
        let mut spec = json!({"name": "n", "output": {"a": 1}});
        merge(
            &mut spec,
            &json!({"output": replacing(Some(&json!({"a": 1})), None)}),
        );
        assert_eq!(spec, json!({"name": "n"}));
        let mut spec = json!({"name": "n"});
        merge(
            &mut spec,
            &json!({"output": replacing(None, Some(&json!({"a": {"b": null}, "c": 1})))}),
        );
        assert_eq!(spec["output"], json!({"a": {}, "c": 1}));
        // A `null` member is not stored: one stored before goes.
        let old = json!({"a": 1, "b": {"c": 1, "d": 2}});
        let mut spec = json!({"output": old.clone()});
        let new = json!({"a": null, "b": {"c": null, "d": 2}});
        merge(
            &mut spec,
            &json!({"output": replacing(Some(&old), Some(&new))}),
        );
        assert_eq!(spec["output"], json!({"b": {"d": 2}}));
    }
}
