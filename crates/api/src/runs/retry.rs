//! `POST /v1/runs/{id}/retry`: a new run of a finished run — the same payload, the
//! same workflow version — that keeps the results of the steps that succeeded before
//! the first failure, or starts over.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use jiff::Timestamp;
use kube::ResourceExt;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input::{RetryCreate, RetryFrom, RetryVersion};
use super::views::RunView;
use super::{answer, check_spec_size, create, read_whole};
use crate::plumbing::auth::{Authorized, needs};
use crate::plumbing::error::{ApiError, ApiResult, write_error};
use crate::plumbing::json::Valid;
use crate::plumbing::path::Path;
use crate::state::ApiState;
use crate::workflows::find as find_workflow;
use flowline_core::clock::now_ms;
use flowline_core::crd::{Run, RunPhase, Step, Workflow, WorkflowState, labels, tags};
use flowline_core::ids::new_id;

/// The routes, as the handlers' `#[utoipa::path]` declare them (one declaration
/// serves the router and the OpenAPI document).
pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(retry))
}

#[utoipa::path(post, path = "/v1/runs/{id}/retry", operation_id = "runs.retry", summary = "Retry a finished run", tag = "runs",
    description = "Scope: `execute`. Starts a new run of a finished run (`succeeded`, `failed` or \
        `cancelled`) with its payload and the workflow version it executed, linked by `retry_of`. \
        `from: failed` (the default) keeps the results of the steps that succeeded before the first \
        step that did not (shown with `reused: true`) and starts there; `from: start` runs every step again.",
    params(("id" = String, Path, description = "Run id")),
    request_body(content = Option<RetryCreate>, content_type = "application/json"),
    responses((status = 201, description = "The new run", body = RunView,
               headers(("Location" = String, description = "Path of the new run"))),
              (status = 404, description = "No such run"),
              (status = 409, description = "The run has not finished (`run_not_finished`), or its workflow \
               is paused (`workflow_paused`)")))]
async fn retry(
    State(state): State<ApiState>,
    who: Authorized<needs::Execute>,
    Path(id): Path<String>,
    Valid(body): Valid<Option<RetryCreate>>,
) -> ApiResult<Response> {
    let how = (RetryFrom::of(&body), RetryVersion::of(&body));
    let created = retry_run(&state, &who.namespace, &id, how).await?;
    Ok(answer(&state, StatusCode::CREATED, &created))
}

/// Creates the retry of run `id` of `namespace`, as `how` says, and returns it once
/// the cache holds it: the work of `POST /v1/runs/{id}/retry` and of each run of a
/// bulk retry.
pub(super) async fn retry_run(
    state: &ApiState,
    namespace: &str,
    id: &str,
    how: (RetryFrom, RetryVersion),
) -> ApiResult<Run> {
    // Judged on the run as the API server has it, as `GET /v1/runs/{id}` shows it: a
    // run just seen finished there may still be `running` in the watch cache. The cache
    // keeps only a summary anyway; the version the retry executes and the outputs it
    // keeps come whole from here.
    let original = read_whole(state, namespace, id).await?;
    let phase = original.phase();
    // Listed, not `is_finished()`: a phase added later is not retryable unless it says so.
    if !matches!(
        phase,
        RunPhase::Succeeded | RunPhase::Failed | RunPhase::Cancelled
    ) {
        return Err(ApiError::RunNotFinished(phase.as_str()));
    }
    let wf = find_workflow(state, namespace, &original.spec.workflow_ref)?;
    if wf.spec.state == WorkflowState::Paused {
        return Err(ApiError::WorkflowPaused);
    }
    let run = retry_of(&original, &wf, how, &new_id("run"), now_ms());
    let advice = if run.spec.reused_steps.is_empty() {
        "the run it retries is too large to retry"
    } else {
        "retry with \"from\": \"start\" to keep no step outputs"
    };
    check_spec_size(
        &run,
        "from",
        "the payload, the workflow's steps and the step outputs kept together",
        advice,
    )?;
    create(state, namespace, &run).await.map_err(write_error)
}

/// The retry of `original` (a run of `wf`) named `name`: its trigger, payload and
/// tags; with [`RetryVersion::Pinned`] the workflow version it executed, with
/// [`RetryVersion::Current`] `wf` as it is now; and with [`RetryFrom::Failed`] the
/// results it keeps, of the steps whose definition the retry's version has unchanged
/// (a kept step's ancestors must be kept too, as for any retry). A run that never
/// recorded a version (it never executed a step) is retried with the workflow's
/// current version and keeps nothing. Pure.
pub fn retry_of(
    original: &Run,
    wf: &Workflow,
    how: (RetryFrom, RetryVersion),
    name: &str,
    now: Timestamp,
) -> Run {
    let (from, version) = how;
    let mut run = Run::of_workflow(
        wf,
        name,
        original.spec.trigger,
        original.spec.payload.clone(),
        now,
    );
    run.spec.retry_of = Some(original.name_any());
    run.labels_mut().extend(tags::labels(&tags::of(original)));
    let Some(executed) = &original.spec.workflow else {
        return run;
    };
    if version == RetryVersion::Pinned {
        run.spec.workflow = Some(executed.clone());
        let waits = labels::WAITS_FOR_EVENTS.to_string();
        if executed.waits_for_events() {
            run.labels_mut().insert(waits, "true".into());
        } else {
            run.labels_mut().remove(&waits);
        }
    }
    if from == RetryFrom::Failed {
        let kept =
            flowline_core::engine::reuse::reusable(original.status.as_ref(), &executed.steps);
        let steps = run
            .spec
            .workflow
            .as_ref()
            .map(|v| v.steps.as_slice())
            .unwrap_or_default();
        let step = |list: &[Step], id: &str| list.iter().find(|s| s.id == id).cloned();
        run.spec.reused_steps = kept
            .into_iter()
            .filter(|r| {
                step(steps, &r.step_id).is_some()
                    && step(steps, &r.step_id) == step(&executed.steps, &r.step_id)
            })
            .collect();
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const PINNED_FROM_FAILED: (RetryFrom, RetryVersion) = (RetryFrom::Failed, RetryVersion::Pinned);

    /// The ids of the steps whose results `retry` keeps.
    fn kept(retry: &Run) -> Vec<&str> {
        retry
            .spec
            .reused_steps
            .iter()
            .map(|r| r.step_id.as_str())
            .collect()
    }

    fn workflow(generation: i64, steps: Value) -> Workflow {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "wf", "namespace": "n", "uid": "wf-uid", "generation": generation},
            "spec": {"name": "W", "steps": steps},
        }))
        .unwrap()
    }

    fn original(wf: &Workflow) -> Run {
        let mut run = Run::of_workflow(
            wf,
            "run-1",
            flowline_core::crd::RunTrigger::Schedule,
            Some(json!({"n": 1})),
            now_ms(),
        );
        run.status = Some(
            serde_json::from_value(json!({"phase": "failed", "steps": [
                {"stepId": "a", "name": "a", "status": "succeeded", "output": {"v": 1}},
                {"stepId": "b", "name": "b", "status": "failed", "error": "boom"}]}))
            .unwrap(),
        );
        run
    }

    #[test]
    fn a_retry_runs_the_original_version_with_its_payload_and_kept_results() {
        let v1 = workflow(
            1,
            json!([{"id": "a", "action": "transform"}, {"id": "b", "action": "fail"}]),
        );
        let first = original(&v1);
        let edited = workflow(2, json!([{"id": "other", "action": "delay"}]));
        let retry = retry_of(&first, &edited, PINNED_FROM_FAILED, "run-2", now_ms());
        assert_eq!(retry.name_any(), "run-2");
        assert_eq!(retry.spec.retry_of.as_deref(), Some("run-1"));
        assert_eq!(
            retry.spec.workflow, first.spec.workflow,
            "the original's version"
        );
        assert_eq!(retry.workflow_generation(), Some(1));
        assert_eq!(retry.spec.payload, Some(json!({"n": 1})));
        assert_eq!(retry.spec.trigger, flowline_core::crd::RunTrigger::Schedule);
        assert!(retry.status.is_none());
        assert_eq!(kept(&retry), ["a"]);
        assert_eq!(retry.spec.reused_steps[0].output, Some(json!({"v": 1})));
        assert_eq!(retry.spec.idempotency_key, None, "a retry is a new request");

        let over = retry_of(
            &first,
            &edited,
            (RetryFrom::Start, RetryVersion::Pinned),
            "run-3",
            now_ms(),
        );
        assert!(over.spec.reused_steps.is_empty());
        assert_eq!(over.spec.workflow, first.spec.workflow);
    }

    #[test]
    fn an_unpinned_run_is_retried_with_the_current_version_and_keeps_nothing() {
        let v1 = workflow(1, json!([{"id": "a", "action": "transform"}]));
        let mut first = original(&v1);
        first.spec.workflow = None;
        let now = workflow(3, json!([{"id": "a", "action": "transform"}]));
        let retry = retry_of(&first, &now, PINNED_FROM_FAILED, "run-2", now_ms());
        assert_eq!(retry.workflow_generation(), Some(3));
        assert!(retry.spec.reused_steps.is_empty());
    }

    #[test]
    fn a_retry_on_the_current_version_keeps_only_unchanged_steps_and_the_tags() {
        let v1 = workflow(
            1,
            json!([{"id": "a", "action": "transform"}, {"id": "b", "action": "fail"}]),
        );
        let mut first = original(&v1);
        first
            .labels_mut()
            .insert("tags.flowline.io/customer".into(), "acme".into());
        let current = (RetryFrom::Failed, RetryVersion::Current);
        // b fixed, a unchanged: a's result is kept, b runs in its new form.
        let fixed = workflow(
            2,
            json!([{"id": "a", "action": "transform"}, {"id": "b", "action": "delay"}]),
        );
        let retry = retry_of(&first, &fixed, current, "run-2", now_ms());
        assert_eq!(retry.workflow_generation(), Some(2));
        assert_eq!(kept(&retry), ["a"]);
        assert_eq!(
            tags::of(&retry),
            std::collections::BTreeMap::from([("customer".to_string(), "acme".to_string())])
        );
        // a changed: nothing is kept.
        let changed = workflow(
            3,
            json!([{"id": "a", "action": "transform", "with": {"value": 2}}, {"id": "b", "action": "delay"}]),
        );
        let retry = retry_of(&first, &changed, current, "run-3", now_ms());
        assert!(retry.spec.reused_steps.is_empty());
        // a gone: nothing is kept.
        let gone = workflow(4, json!([{"id": "b", "action": "delay"}]));
        assert!(
            retry_of(&first, &gone, current, "run-4", now_ms())
                .spec
                .reused_steps
                .is_empty()
        );
    }
}
