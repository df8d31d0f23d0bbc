//! What `/v1/runs` and `/v1/workflows/{id}/runs` answer.

use std::collections::BTreeMap;

use kube::ResourceExt;
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::plumbing::time::ApiTime;
use crate::workflows::input::{DebounceSetting, RateLimitSetting};
use crate::workflows::views::{ConcurrencyView, StepView};
use flowline_core::crd::timestamps::created_at;
use flowline_core::crd::{
    Action, QueuedFor, Run, RunPhase, RunTrigger, StepPhase, StepRecord, Workflow,
    WorkflowSnapshot, tags,
};

/// Run list item.
#[derive(Serialize, ToSchema)]
pub struct RunListItem {
    pub id: String,
    pub workflow_id: String,
    pub status: RunPhase,
    /// When the run was created: what `created_after` and `created_before` compare.
    /// A run that waited `queued` has a later `started_at`.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: ApiTime,
    #[schema(value_type = String, format = DateTime)]
    pub started_at: ApiTime,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<ApiTime>,
    pub duration_ms: Option<u64>,
    /// The tags the run was created with (`tags.flowline.io/<key>` labels).
    pub tags: BTreeMap<String, String>,
    /// 1 (first) to 5: its place among runs waiting for a slot.
    pub priority: u8,
    /// The ids of its `approval` steps waiting for a decision (empty: none).
    pub awaiting_decision: Vec<String>,
}

impl From<&Run> for RunListItem {
    fn from(run: &Run) -> Self {
        let status = run.status.as_ref();
        RunListItem {
            id: run.name_any(),
            workflow_id: run.spec.workflow_ref.clone(),
            status: run.phase(),
            created_at: ApiTime(created_at(&run.metadata)),
            started_at: ApiTime(run.started_at()),
            finished_at: status.and_then(|s| s.finished_at).map(ApiTime),
            duration_ms: status.and_then(|s| s.duration_ms),
            tags: tags::of(run),
            priority: run
                .spec
                .priority
                .unwrap_or(flowline_core::crd::DEFAULT_PRIORITY),
            awaiting_decision: crate::cache::awaiting_decision(run),
        }
    }
}

/// Execution record of one step.
#[derive(Serialize, ToSchema)]
pub struct StepRecordView {
    pub step_id: String,
    pub name: String,
    pub action: Option<Action>,
    pub status: StepPhase,
    pub attempts: u32,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<ApiTime>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<ApiTime>,
    pub duration_ms: Option<u64>,
    /// The step's `with` as rendered when it started, for people to read: secret values
    /// shown as `[redacted]`, at most 4 KiB (else `input_truncated`). `null` for
    /// `for_each` steps, steps not started, and runs executed before inputs were kept.
    #[schema(value_type = Option<Value>)]
    pub input: Option<Value>,
    /// True when `input` is a string preview of the start of its JSON text (or, when
    /// `input` is `null`, was dropped to keep the run within its size limits).
    pub input_truncated: bool,
    /// Output of the action: any JSON value, shaped by the action.
    #[schema(value_type = Option<Value>)]
    pub output: Option<Value>,
    pub output_truncated: bool,
    pub error: Option<String>,
    /// True when the output was kept from the run this one retries, not produced again.
    pub reused: bool,
    /// A `for_each` step: how many elements it iterates over; `null` otherwise.
    pub items: Option<u32>,
    /// A `for_each` step: one record per iteration, for the first 100 elements.
    pub iterations: Vec<IterationView>,
    /// A `for_each` step still running: the elements whose iteration succeeded (their
    /// outputs are in `output`, `null` for the others); empty once the step ended.
    pub items_done: Vec<u32>,
    /// A `workflow` step (without `for_each`): the child run its latest attempt
    /// started.
    pub child_run_id: Option<String>,
}

/// Execution record of one iteration of a `for_each` step.
#[derive(Serialize, ToSchema)]
pub struct IterationView {
    pub index: u32,
    pub status: StepPhase,
    pub attempts: u32,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<ApiTime>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<ApiTime>,
    pub error: Option<String>,
    /// A `workflow` step: the child run this iteration's latest attempt started.
    pub child_run_id: Option<String>,
}

impl From<&StepRecord> for StepRecordView {
    fn from(r: &StepRecord) -> Self {
        StepRecordView {
            step_id: r.step_id.clone(),
            name: r.name.clone(),
            action: r.action,
            status: r.status,
            attempts: r.attempts,
            started_at: r.started_at.map(ApiTime),
            finished_at: r.finished_at.map(ApiTime),
            duration_ms: r.duration_ms,
            input: r.input.clone(),
            input_truncated: r.input_truncated,
            output: r.output.clone(),
            output_truncated: r.output_truncated,
            error: r.error.clone(),
            reused: r.reused,
            items: r.items,
            items_done: r.items_done.clone(),
            child_run_id: r.child_run_id.clone(),
            iterations: r
                .iterations
                .iter()
                .map(|i| IterationView {
                    index: i.index,
                    status: i.status,
                    attempts: i.attempts,
                    started_at: i.started_at.map(ApiTime),
                    finished_at: i.finished_at.map(ApiTime),
                    error: i.error.clone(),
                    child_run_id: i.child_run_id.clone(),
                })
                .collect(),
        }
    }
}

/// The full run with its step records.
#[derive(Serialize, ToSchema)]
pub struct RunView {
    #[serde(flatten)]
    pub item: RunListItem,
    pub trigger: RunTrigger,
    /// The trigger payload, available to steps as `trigger.payload.*`.
    #[schema(value_type = HashMap<String, Value>)]
    pub payload: Value,
    /// Whether cancellation was requested (`spec.cancel`).
    pub cancel_requested: bool,
    /// The event that started the run (`trigger: event`), else `null`.
    pub event_id: Option<String>,
    /// The schedule tick a `schedule` run is for (`trigger.scheduled_at` in templates),
    /// else `null`.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub scheduled_at: Option<ApiTime>,
    /// The workflow version (its `metadata.generation`) this run executes: the steps
    /// and settings it had when the run was created; later edits do not change it.
    pub workflow_generation: Option<i64>,
    /// That workflow version itself: what this run executes (`null` until the run is
    /// pinned to one, moments after it is created with kubectl). Comparing two runs'
    /// versions shows what changed between them.
    pub workflow_version: Option<WorkflowVersionView>,
    /// The `Idempotency-Key` of the request that started the run (`spec.idempotencyKey`).
    pub idempotency_key: Option<String>,
    /// The run this one retries (`POST /v1/runs/{id}/retry`).
    pub retry_of: Option<String>,
    /// A child run (`trigger: workflow`): the run whose `workflow` step started it.
    pub parent_run_id: Option<String>,
    /// A child run: the id of that `workflow` step.
    pub parent_step_id: Option<String>,
    /// A `queued` run: what it waits for (`concurrency`, `rate_limit`, `debounce` or
    /// `account`); `null` otherwise.
    pub queued_for: Option<QueuedFor>,
    pub error: Option<String>,
    /// The workflow's `output` rendered with the run's context once it succeeded;
    /// `null` when the workflow has none or the run has not succeeded.
    #[schema(value_type = Option<Value>)]
    pub output: Option<Value>,
    /// True when `output` was too large to keep whole (it is then a preview of its JSON
    /// text).
    pub output_truncated: bool,
    pub steps: Vec<StepRecordView>,
}

/// The parts of a workflow version a run executes, as `GET /v1/workflows/{id}` shows
/// them.
#[derive(Serialize, ToSchema)]
pub struct WorkflowVersionView {
    /// The workflow's `metadata.generation` at that version.
    pub generation: i64,
    pub name: String,
    pub steps: Vec<StepView>,
    pub timeout_ms: Option<u64>,
    pub concurrency: Option<ConcurrencyView>,
    pub rate_limit: Option<RateLimitSetting>,
    pub debounce: Option<DebounceSetting>,
    pub parallelism: Option<u32>,
    #[schema(value_type = Option<Value>)]
    pub output: Option<Value>,
}

impl From<&WorkflowSnapshot> for WorkflowVersionView {
    fn from(v: &WorkflowSnapshot) -> Self {
        WorkflowVersionView {
            generation: v.generation,
            name: v.name.clone(),
            steps: v.steps.iter().map(StepView::from).collect(),
            timeout_ms: v.timeout_ms,
            concurrency: v.concurrency.as_ref().map(ConcurrencyView::from),
            rate_limit: v.rate_limit.as_ref().map(RateLimitSetting::of),
            debounce: v.debounce.as_ref().map(DebounceSetting::of),
            parallelism: v.parallelism,
            output: v.output.clone(),
        }
    }
}

/// The full run. Before the engine has recorded steps, they are listed as `pending`
/// (or as kept from the run it retries) from the workflow version the run executes (for a Run created without one, the
/// workflow as it is now): nothing has happened to them yet.
pub fn run(run: &Run, workflow: Option<&Workflow>) -> RunView {
    let status = run.status.as_ref();
    let declared = match &run.spec.workflow {
        Some(pinned) => Some(&pinned.steps),
        None => workflow.map(|wf| &wf.spec.steps),
    };
    let steps = match status.filter(|s| !s.steps.is_empty()) {
        Some(s) => s.steps.iter().map(StepRecordView::from).collect(),
        None => declared
            .map(|steps| {
                flowline_core::engine::reuse::initial_records(steps, &run.spec.reused_steps)
            })
            .unwrap_or_default()
            .iter()
            .map(StepRecordView::from)
            .collect(),
    };
    RunView {
        item: RunListItem::from(run),
        trigger: run.spec.trigger,
        payload: run.spec.payload.clone().unwrap_or_else(|| json!({})),
        cancel_requested: run.spec.cancel,
        event_id: run.spec.event.as_ref().map(|e| e.id.clone()),
        scheduled_at: run.scheduled_for().map(ApiTime),
        workflow_generation: run.workflow_generation(),
        workflow_version: run.spec.workflow.as_ref().map(WorkflowVersionView::from),
        idempotency_key: run.spec.idempotency_key.clone(),
        retry_of: run.spec.retry_of.clone(),
        parent_run_id: run.spec.parent.as_ref().map(|p| p.run_id.clone()),
        parent_step_id: run.spec.parent.as_ref().map(|p| p.step_id.clone()),
        queued_for: status
            .filter(|s| s.phase == RunPhase::Queued)
            .and_then(|s| s.queued_for),
        error: status.and_then(|s| s.error.clone()),
        output: status
            .filter(|s| s.phase == RunPhase::Succeeded)
            .and_then(|s| s.output.clone()),
        output_truncated: status
            .is_some_and(|s| s.phase == RunPhase::Succeeded && s.output_truncated),
        steps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_without_status_is_running_with_pending_steps() {
        let wf: Workflow = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "wf-1", "namespace": "a", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"name": "W", "steps": [{"id": "s1", "action": "delay"}]}
        }))
        .unwrap();
        let r: Run = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "run-1", "namespace": "a", "creationTimestamp": "2026-01-01T00:00:01Z"},
            "spec": {"workflowRef": "wf-1"}
        }))
        .unwrap();
        let v = serde_json::to_value(run(&r, Some(&wf))).unwrap();
        assert_eq!(v["status"], "running");
        assert_eq!(v["finished_at"], Value::Null);
        assert_eq!(v["duration_ms"], Value::Null);
        assert_eq!(v["steps"][0]["status"], "pending");
        assert_eq!(v["steps"][0]["attempts"], 0);
        assert_eq!(v["output"], Value::Null);
        assert_eq!(v["output_truncated"], false);
    }

    #[test]
    fn a_pinned_run_shows_the_version_it_executes_not_the_workflow_now() {
        let now: Workflow = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "wf-1", "namespace": "a", "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"name": "W", "steps": [{"id": "edited", "action": "delay"}]}
        }))
        .unwrap();
        let r: Run = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "run-1", "namespace": "a", "creationTimestamp": "2026-01-01T00:00:01Z"},
            "spec": {"workflowRef": "wf-1", "workflow": {"generation": 2, "name": "W",
                "steps": [{"id": "s1", "action": "transform", "with": {"value": "{{ trigger.payload.x }}"}, "needs": []}],
                "rateLimit": {"limit": 3, "periodMs": 2000}}}
        }))
        .unwrap();
        let v = serde_json::to_value(run(&r, Some(&now))).unwrap();
        let version = &v["workflow_version"];
        assert_eq!(version["generation"], 2);
        assert_eq!(version["steps"][0]["id"], "s1");
        assert_eq!(
            version["steps"][0]["with"]["value"],
            "{{ trigger.payload.x }}"
        );
        assert_eq!(
            version["rate_limit"],
            json!({"limit": 3, "period_ms": 2000})
        );
        assert_eq!(v["steps"][0]["step_id"], "s1");
    }

    #[test]
    fn a_succeeded_run_shows_its_output() {
        let r: Run = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "run-1", "namespace": "a", "creationTimestamp": "2026-01-01T00:00:01Z"},
            "spec": {"workflowRef": "wf-1"},
            "status": {"phase": "succeeded", "output": {"total": 12}, "steps": []}
        }))
        .unwrap();
        let v = serde_json::to_value(run(&r, None)).unwrap();
        assert_eq!(v["output"], json!({"total": 12}));
        assert_eq!(v["output_truncated"], false);
    }
}
