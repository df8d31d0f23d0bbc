//! `POST /v1/runs/{id}/steps/{step_id}/approve` and `/reject`: a decision on an
//! `approval` step, appended to the Run's `spec.approvals` (the field a kubectl user
//! patches too). The engine reads it: the watch event wakes the parked run.

use axum::Json;
use axum::extract::State;
use kube::api::Patch;
use kube::{Api, ResourceExt};
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input::DecisionCreate;
use super::read_whole;
use super::views::{self, RunView};
use crate::cache;
use crate::plumbing::auth::{Authorized, Principal, needs};
use crate::plumbing::error::{ApiError, ApiResult, Missing, not_found_as};
use crate::plumbing::json::Valid;
use crate::plumbing::path::Path;
use crate::state::ApiState;
use flowline_core::crd::{Action, ApprovalDecision, Run, StepPhase, Verdict};

/// How often a decision is written again after a conflict (another write to the Run
/// in between, typically a status write).
const CONFLICT_RETRIES: usize = 8;

pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(approve))
        .routes(routes!(reject))
}

#[utoipa::path(post, path = "/v1/runs/{id}/steps/{step_id}/approve", operation_id = "runs.approve", summary = "Approve a waiting approval step", tag = "runs",
    description = "Scope: `execute`. Approves an `approval` step that is `waiting`: the step succeeds with \
        `{\"approved\": true, \"comment\", \"by\", \"at\"}` (`by`: the API key id) and the run goes on. \
        Recorded in the Run's `spec.approvals`.",
    params(("id" = String, Path, description = "Run id"), ("step_id" = String, Path, description = "Step id")),
    request_body(content = Option<DecisionCreate>, content_type = "application/json"),
    responses((status = 200, description = "The run, with the decision recorded", body = RunView),
              (status = 400, description = "A comment longer than 1000 characters, or an unknown field"),
              (status = 404, description = "No such run (`run_not_found`) or step (`step_not_found`)"),
              (status = 409, description = "The step is not an approval waiting for a decision (`step_not_waiting`)")))]
async fn approve(
    State(state): State<ApiState>,
    who: Authorized<needs::Execute>,
    Path((id, step_id)): Path<(String, String)>,
    Valid(body): Valid<Option<DecisionCreate>>,
) -> ApiResult<Json<RunView>> {
    let comment = body.and_then(|b| b.comment);
    decide(state, &who, id, step_id, comment, Verdict::Approve).await
}

#[utoipa::path(post, path = "/v1/runs/{id}/steps/{step_id}/reject", operation_id = "runs.reject", summary = "Reject a waiting approval step", tag = "runs",
    description = "Scope: `execute`. Rejects an `approval` step that is `waiting`: the step fails (no retry) \
        with `rejected by <key id> at <time>: <comment>` and the run fails. Recorded in the Run's \
        `spec.approvals`.",
    params(("id" = String, Path, description = "Run id"), ("step_id" = String, Path, description = "Step id")),
    request_body(content = Option<DecisionCreate>, content_type = "application/json"),
    responses((status = 200, description = "The run, with the decision recorded", body = RunView),
              (status = 400, description = "A comment longer than 1000 characters, or an unknown field"),
              (status = 404, description = "No such run (`run_not_found`) or step (`step_not_found`)"),
              (status = 409, description = "The step is not an approval waiting for a decision (`step_not_waiting`)")))]
async fn reject(
    State(state): State<ApiState>,
    who: Authorized<needs::Execute>,
    Path((id, step_id)): Path<(String, String)>,
    Valid(body): Valid<Option<DecisionCreate>>,
) -> ApiResult<Json<RunView>> {
    let comment = body.and_then(|b| b.comment);
    decide(state, &who, id, step_id, comment, Verdict::Reject).await
}

async fn decide(
    state: ApiState,
    who: &Principal,
    id: String,
    step_id: String,
    comment: Option<String>,
    verdict: Verdict,
) -> ApiResult<Json<RunView>> {
    let api: Api<Run> = Api::namespaced(state.client.clone(), &who.namespace);
    let mut conflicts = 0;
    loop {
        // The cache holds summaries: the steps and decisions come from the API server.
        let run = read_whole(&state, &who.namespace, &id).await?;
        decidable(&run, &step_id)?;
        let mut approvals = run.spec.approvals.clone();
        approvals.push(ApprovalDecision {
            step_id: step_id.clone(),
            decision: verdict,
            comment: comment.clone(),
            by: Some(who.key_id.clone()),
            at: Some(flowline_core::clock::now_ms()),
        });
        // Conditional on the Run as read: a decision made in between is never lost
        // nor doubled.
        let patch = json!({
            "metadata": {"resourceVersion": run.resource_version()},
            "spec": {"approvals": approvals},
        });
        match api
            .patch(&id, &ApiState::patch_params(), &Patch::Merge(patch))
            .await
        {
            Ok(patched) => {
                cache::await_write(&state.caches.runs, &patched).await;
                let ns = patched.namespace().unwrap_or_default();
                let wf = cache::get(&state.caches.workflows, &ns, &patched.spec.workflow_ref);
                return Ok(Json(views::run(&patched, wf.as_deref())));
            }
            Err(kube::Error::Api(s)) if s.code == 409 && conflicts < CONFLICT_RETRIES => {
                conflicts += 1;
            }
            Err(e) => return Err(not_found_as(e, Missing::Run)),
        }
    }
}

/// Whether `run`'s step `step_id` can take a decision now: an `approval` step that is
/// `waiting` in a run that has not finished and that no decision settles yet. Pure.
pub fn decidable(run: &Run, step_id: &str) -> Result<(), ApiError> {
    let not_waiting = |why: &str| Err(ApiError::StepNotWaiting(why.to_string()));
    let steps = run
        .spec
        .workflow
        .as_ref()
        .map(|wf| wf.steps.as_slice())
        .unwrap_or_default();
    let Some(index) = steps.iter().position(|s| s.id == step_id) else {
        return Err(ApiError::NotFound(Missing::Step));
    };
    let phase = run.phase();
    if phase.is_finished() {
        return Err(ApiError::StepNotWaiting(format!(
            "the run has finished ({})",
            phase.as_str()
        )));
    }
    if steps[index].action != Action::Approval {
        return not_waiting("it is not an approval step");
    }
    if flowline_core::engine::waiting::decision_for(&run.spec.approvals, step_id).is_some() {
        return not_waiting("it has been decided already");
    }
    let status = run
        .status
        .as_ref()
        .and_then(|s| s.steps.get(index))
        .map(|r| r.status)
        .unwrap_or_default();
    match status {
        StepPhase::Waiting => Ok(()),
        StepPhase::Pending | StepPhase::Running => not_waiting("it has not started waiting yet"),
        _ => not_waiting("it has finished"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn run(phase: &str, step_status: &str, approvals: Value) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n"},
            "spec": {"workflowRef": "wf", "approvals": approvals,
                "workflow": {"generation": 1, "name": "W", "steps": [
                    {"id": "ok", "action": "approval"},
                    {"id": "t", "action": "transform", "with": {"value": 1}}]}},
            "status": {"phase": phase, "steps": [
                {"stepId": "ok", "name": "ok", "status": step_status},
                {"stepId": "t", "name": "t", "status": "pending"}]},
        }))
        .unwrap()
    }

    fn code(r: Result<(), ApiError>) -> &'static str {
        r.err().map_or("ok", |e| e.code())
    }

    #[test]
    fn only_a_waiting_undecided_approval_of_an_unfinished_run_takes_a_decision() {
        assert_eq!(
            code(decidable(&run("running", "waiting", json!([])), "ok")),
            "ok"
        );
        assert_eq!(
            code(decidable(&run("running", "waiting", json!([])), "ghost")),
            "step_not_found"
        );
        for (phase, status, approvals, step) in [
            ("running", "waiting", json!([]), "t"),
            ("running", "pending", json!([]), "ok"),
            ("running", "running", json!([]), "ok"),
            ("running", "succeeded", json!([]), "ok"),
            ("failed", "cancelled", json!([]), "ok"),
            ("cancelled", "waiting", json!([]), "ok"),
            (
                "running",
                "waiting",
                json!([{"stepId": "ok", "decision": "reject"}]),
                "ok",
            ),
        ] {
            assert_eq!(
                code(decidable(&run(phase, status, approvals), step)),
                "step_not_waiting",
                "{phase} {status} {step}"
            );
        }
    }
}
