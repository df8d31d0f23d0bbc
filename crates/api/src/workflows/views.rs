//! What `/v1/workflows` answers. The CRDs use Kubernetes' camelCase; the API uses the
//! contract's snake_case.

use kube::ResourceExt;
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::plumbing::time::ApiTime;
use flowline_core::crd::timestamps::{created_at, updated_at};
use flowline_core::crd::{
    Action, CancelOn, Concurrency, ConcurrencyPolicy, Executor, Overlap, Step, TriggerType,
    Workflow, WorkflowState,
};

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

/// What starts runs besides a manual start: `{"type": "manual"}`, a `schedule` with
/// `cron` and `timezone`, a signed inbound `webhook`, or an `event` with its name and
/// optional `filter`.
#[derive(Serialize, ToSchema)]
pub struct TriggerView {
    #[serde(rename = "type")]
    pub type_: TriggerType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// `schedule` only: what a tick does while an earlier run is unfinished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
    /// `schedule` only: how far back missed ticks run after downtime (0: the latest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catchup_window_ms: Option<u64>,
    /// `event` only: the event name that starts runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// `event` only: the filter expression, `null` for none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub filter: Option<Option<String>>,
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
    #[schema(value_type = HashMap<String, Value>)]
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

impl From<&Step> for StepView {
    fn from(s: &Step) -> Self {
        StepView {
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
        }
    }
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

impl From<&Concurrency> for ConcurrencyView {
    fn from(c: &Concurrency) -> Self {
        ConcurrencyView {
            limit: c.limit,
            key: c.key.clone(),
            policy: c.policy,
        }
    }
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
    /// The rate limit of its runs' starts; `null` for none.
    pub rate_limit: Option<super::input::RateLimitSetting>,
    /// The debounce of its runs; `null` for none.
    pub debounce: Option<super::input::DebounceSetting>,
    /// Most steps of one run executing at once when the steps form a graph; `null` for
    /// the default (10).
    pub parallelism: Option<u32>,
    /// The priority of runs that do not set their own; `null` for the default (3).
    pub priority: Option<u8>,
    /// The run's result: any JSON value whose strings may hold `{{ … }}` templates,
    /// rendered when a run succeeds (the run's `output`); `null` for none.
    #[schema(value_type = Option<Value>)]
    pub output: Option<Value>,
    /// Events that cancel this workflow's unfinished runs (empty: none).
    pub cancel_on: Vec<CancelOn>,
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
                overlap: None,
                catchup_window_ms: None,
                event: None,
                filter: None,
            },
            TriggerType::Event => TriggerView {
                type_: TriggerType::Event,
                cron: None,
                timezone: None,
                overlap: None,
                catchup_window_ms: None,
                event: spec.trigger.event.clone(),
                filter: Some(spec.trigger.filter.clone()),
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
                overlap: Some(spec.trigger.overlap.unwrap_or_default()),
                catchup_window_ms: Some(spec.trigger.catchup_window_ms.unwrap_or(0)),
                event: None,
                filter: None,
            },
        };
        let steps = spec.steps.iter().map(StepView::from).collect();
        WorkflowView {
            id: wf.name_any(),
            name: spec.name.clone(),
            description: spec.description.clone(),
            state: spec.state,
            trigger,
            executor: spec.executor,
            steps,
            timeout_ms: spec.timeout_ms,
            concurrency: spec.concurrency.as_ref().map(ConcurrencyView::from),
            rate_limit: spec
                .rate_limit
                .as_ref()
                .map(super::input::RateLimitSetting::of),
            debounce: spec
                .debounce
                .as_ref()
                .map(super::input::DebounceSetting::of),
            parallelism: spec.parallelism,
            priority: spec.priority,
            output: spec.output.clone(),
            cancel_on: spec.cancel_on.clone(),
            created_at: ApiTime(created_at(&wf.metadata)),
            updated_at: ApiTime(updated_at(&wf.metadata)),
        }
    }
}

/// A workflow as `POST`/`PATCH /v1/workflows` return it, with the inbound secret when
/// that request made one.
#[derive(Serialize, ToSchema)]
pub struct WorkflowWithSecret {
    #[serde(flatten)]
    pub workflow: WorkflowView,
    /// The new inbound secret (`whsec_…`), present only in the response that made it:
    /// when the trigger became `webhook`. Store it now; it is not shown again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook_secret: Option<String>,
}

/// Body of a rotation.
#[derive(Serialize, ToSchema)]
pub struct HookSecret {
    /// The new inbound secret (`whsec_…`); the previous one no longer verifies.
    pub hook_secret: String,
}
