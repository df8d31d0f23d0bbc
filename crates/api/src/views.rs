//! JSON shapes of the API, built from the custom resources.
//! The CRDs use Kubernetes' camelCase; the API uses the contract's snake_case.

use jiff::Timestamp;
use kube::ResourceExt;
use serde::{Serialize, Serializer};
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::auth::{KeyRecord, Scope};
use flowline_core::clock::format_ts;
use flowline_core::crd::timestamps::{created_at, updated_at};
use flowline_core::crd::{
    Action, ConcurrencyPolicy, DeliveryAttempt, EventKind, Executor, Run, RunPhase, RunTrigger,
    StepPhase, StepRecord, TriggerType, Webhook, Workflow, WorkflowState,
};

/// A timestamp as the contract writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ApiTime(pub Timestamp);

impl Serialize for ApiTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_ts(self.0))
    }
}

/// Workflow list item.
#[derive(Serialize, ToSchema)]
pub struct WorkflowListItem {
    pub id: String,
    pub name: String,
    pub state: WorkflowState,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: ApiTime,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: ApiTime,
}

impl From<&Workflow> for WorkflowListItem {
    fn from(wf: &Workflow) -> Self {
        WorkflowListItem {
            id: wf.name_any(),
            name: wf.spec.name.clone(),
            state: wf.spec.state,
            created_at: ApiTime(created_at(&wf.metadata)),
            updated_at: ApiTime(updated_at(&wf.metadata)),
        }
    }
}

/// What starts runs: `{"type": "manual"}` or a schedule with `cron` and `timezone`.
#[derive(Serialize, ToSchema)]
pub struct TriggerView {
    #[serde(rename = "type")]
    pub type_: TriggerType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct RetryView {
    pub max_attempts: u32,
    pub backoff_ms: u64,
    pub backoff_factor: f64,
}

/// One step of a workflow.
#[derive(Serialize, ToSchema)]
pub struct StepView {
    pub id: String,
    pub name: String,
    pub action: Action,
    /// Inputs of the action; string values may hold `{{ … }}` templates.
    #[schema(value_type = Object)]
    pub with: Value,
    pub retry: Option<RetryView>,
    pub timeout_ms: Option<u64>,
    pub when: Option<String>,
    /// Ids of the steps this one runs after (empty: none; see `parallelism`).
    pub needs: Vec<String>,
    /// Template rendering to the array the step iterates over; `null` for none.
    pub for_each: Option<String>,
    /// Iterations running at once; `null` for the default (4).
    pub for_each_concurrency: Option<u32>,
}

/// How many runs of a workflow execute at once.
#[derive(Serialize, ToSchema)]
pub struct ConcurrencyView {
    /// Runs of one group that may execute at once.
    pub limit: u32,
    /// Template over the trigger naming a run's group; `null` = one group per workflow.
    pub key: Option<String>,
    pub policy: ConcurrencyPolicy,
}

/// The full workflow definition.
#[derive(Serialize, ToSchema)]
pub struct WorkflowView {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub state: WorkflowState,
    pub trigger: TriggerView,
    /// `null` means the operator's default executor.
    pub executor: Option<Executor>,
    pub steps: Vec<StepView>,
    /// Longest a run may take, in milliseconds from its start; `null` for no limit.
    pub timeout_ms: Option<u64>,
    /// Concurrency control of the workflow's runs; `null` for none.
    pub concurrency: Option<ConcurrencyView>,
    /// Most steps of one run executing at once when the steps form a graph; `null` for
    /// the default (10).
    pub parallelism: Option<u32>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: ApiTime,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: ApiTime,
}

impl From<&Workflow> for WorkflowView {
    fn from(wf: &Workflow) -> Self {
        let spec = &wf.spec;
        let trigger = match spec.trigger.type_ {
            TriggerType::Manual | TriggerType::Webhook => TriggerView {
                type_: spec.trigger.type_,
                cron: None,
                timezone: None,
            },
            TriggerType::Schedule => TriggerView {
                type_: TriggerType::Schedule,
                cron: spec.trigger.cron.clone(),
                timezone: Some(
                    spec.trigger
                        .timezone
                        .clone()
                        .unwrap_or_else(|| "UTC".into()),
                ),
            },
        };
        let steps = spec
            .steps
            .iter()
            .map(|s| StepView {
                id: s.id.clone(),
                name: s.display_name().to_string(),
                action: s.action,
                with: s.with.clone().unwrap_or_else(|| json!({})),
                retry: s.retry.as_ref().map(|r| RetryView {
                    max_attempts: r.max_attempts,
                    backoff_ms: r.backoff_ms,
                    backoff_factor: r.backoff_factor,
                }),
                timeout_ms: s.timeout_ms,
                when: s.when.clone(),
                needs: s.needs.clone(),
                for_each: s.for_each.clone(),
                for_each_concurrency: s.for_each_concurrency,
            })
            .collect();
        WorkflowView {
            id: wf.name_any(),
            name: spec.name.clone(),
            description: spec.description.clone(),
            state: spec.state,
            trigger,
            executor: spec.executor,
            steps,
            timeout_ms: spec.timeout_ms,
            concurrency: spec.concurrency.as_ref().map(|c| ConcurrencyView {
                limit: c.limit,
                key: c.key.clone(),
                policy: c.policy,
            }),
            parallelism: spec.parallelism,
            created_at: ApiTime(created_at(&wf.metadata)),
            updated_at: ApiTime(updated_at(&wf.metadata)),
        }
    }
}

/// Run list item.
#[derive(Serialize, ToSchema)]
pub struct RunListItem {
    pub id: String,
    pub workflow_id: String,
    pub status: RunPhase,
    #[schema(value_type = String, format = DateTime)]
    pub started_at: ApiTime,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<ApiTime>,
    pub duration_ms: Option<u64>,
}

impl From<&Run> for RunListItem {
    fn from(run: &Run) -> Self {
        let status = run.status.as_ref();
        RunListItem {
            id: run.name_any(),
            workflow_id: run.spec.workflow_ref.clone(),
            status: run.phase(),
            started_at: ApiTime(run.started_at()),
            finished_at: status.and_then(|s| s.finished_at).map(ApiTime),
            duration_ms: status.and_then(|s| s.duration_ms),
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
    /// Output of the action; its keys depend on the action.
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    pub output_truncated: bool,
    pub error: Option<String>,
    /// True when the output was kept from the run this one retries, not produced again.
    pub reused: bool,
    /// A `for_each` step: how many elements it iterates over; `null` otherwise.
    pub items: Option<u32>,
    /// A `for_each` step: one record per iteration, for the first 100 elements.
    pub iterations: Vec<IterationView>,
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
            output: r.output.clone(),
            output_truncated: r.output_truncated,
            error: r.error.clone(),
            reused: r.reused,
            items: r.items,
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
    #[schema(value_type = Object)]
    pub payload: Value,
    /// Whether cancellation was requested (`spec.cancel`).
    pub cancel_requested: bool,
    /// The workflow version (its `metadata.generation`) this run executes: the steps
    /// and settings it had when the run was created; later edits do not change it.
    pub workflow_generation: Option<i64>,
    /// The `Idempotency-Key` of the request that started the run (`spec.idempotencyKey`).
    pub idempotency_key: Option<String>,
    /// The run this one retries (`POST /v1/runs/{id}/retry`).
    pub retry_of: Option<String>,
    pub error: Option<String>,
    pub steps: Vec<StepRecordView>,
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
        workflow_generation: run.workflow_generation(),
        idempotency_key: run.spec.idempotency_key.clone(),
        retry_of: run.spec.retry_of.clone(),
        error: status.and_then(|s| s.error.clone()),
        steps,
    }
}

/// A webhook.
#[derive(Serialize, ToSchema)]
pub struct WebhookView {
    pub id: String,
    pub url: String,
    pub events: Vec<EventKind>,
    /// `null`: events of every workflow of the account.
    pub workflow_id: Option<String>,
    pub enabled: bool,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: ApiTime,
}

impl From<&Webhook> for WebhookView {
    fn from(hook: &Webhook) -> Self {
        WebhookView {
            id: hook.name_any(),
            url: hook.spec.url.clone(),
            events: hook.spec.events.clone(),
            workflow_id: hook.spec.workflow_ref.clone(),
            enabled: hook.status.as_ref().map(|s| s.enabled).unwrap_or(true),
            created_at: ApiTime(created_at(&hook.metadata)),
        }
    }
}

/// A webhook just created, with its signing secret (shown only here).
#[derive(Serialize, ToSchema)]
pub struct WebhookCreated {
    #[serde(flatten)]
    pub webhook: WebhookView,
    pub secret: String,
}

/// A webhook whose secret was just rotated, with the new secret (shown only here).
#[derive(Serialize, ToSchema)]
pub struct SecretRotated {
    #[serde(flatten)]
    pub webhook: WebhookView,
    pub secret: String,
    /// Until then deliveries are signed with both the new and the previous secret.
    #[schema(value_type = String, format = DateTime)]
    pub previous_secret_expires_at: ApiTime,
}

/// One delivery attempt of a webhook.
#[derive(Serialize, ToSchema)]
pub struct DeliveryView {
    pub id: String,
    pub event_id: String,
    pub event: EventKind,
    /// Attempt number for this event, from 1.
    pub attempt: u32,
    /// HTTP status received; `null` when the attempt got no response.
    pub status_code: Option<u16>,
    /// Why the attempt got no response (refused destination, timeout, …).
    pub error: Option<String>,
    pub duration_ms: u64,
    #[schema(value_type = String, format = DateTime)]
    pub attempted_at: ApiTime,
}

impl From<&DeliveryAttempt> for DeliveryView {
    fn from(a: &DeliveryAttempt) -> Self {
        DeliveryView {
            id: a.id.clone(),
            event_id: a.event_id.clone(),
            event: a.event,
            attempt: a.attempt,
            status_code: a.status_code,
            error: a.error.clone(),
            duration_ms: a.duration_ms,
            attempted_at: ApiTime(a.at),
        }
    }
}

/// A redelivery request accepted; the worker sends the event once more.
#[derive(Serialize, ToSchema)]
pub struct RedeliveryAccepted {
    /// Id of the request.
    pub id: String,
    pub delivery_id: String,
    pub event_id: String,
    pub event: EventKind,
    /// Always `queued`: the attempt shows in the deliveries list once made.
    pub status: &'static str,
}

/// An API key (never its value).
#[derive(Serialize, ToSchema)]
pub struct ApiKeyView {
    pub id: String,
    pub name: String,
    pub scopes: Vec<Scope>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub created_at: Option<ApiTime>,
}

impl From<&KeyRecord> for ApiKeyView {
    fn from(record: &KeyRecord) -> Self {
        ApiKeyView {
            id: record.id.clone(),
            name: record.name.clone(),
            scopes: record.scopes.iter().copied().collect(),
            created_at: record.created_at.map(ApiTime),
        }
    }
}

/// An API key just created, with its value (shown only here).
#[derive(Serialize, ToSchema)]
pub struct ApiKeyCreated {
    #[serde(flatten)]
    pub api_key: ApiKeyView,
    pub key: String,
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
    }
}
