// kube-derive's printcolumn(...) lists repeat `type_ = ...`, which clippy mistakes for
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use jiff::Timestamp;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Condition, PendingEvent, any_value, schemaless_object};
use super::workflow::{Action, Concurrency, Executor, Step, Workflow};

/// One execution of a workflow. Created by the API, by a schedule tick, or with kubectl;
/// owned by its Workflow, so deleting the workflow deletes its history.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "flowline.io",
    version = "v1",
    kind = "Run",
    plural = "runs",
    shortname = "flrun",
    category = "flowline",
    doc = "One execution of a workflow: the workflow version it executes, its trigger and payload, and in its status the outcome and one record per step.",
    namespaced,
    status = "RunStatus",
    selectable = ".status.phase",
    selectable = ".spec.workflowRef",
    printcolumn(name = "Status", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Succeeded\")].reason"),
    printcolumn(name = "Started", type_ = "date", json_path = ".status.startedAt"),
    printcolumn(name = "Completed", type_ = "date", json_path = ".status.finishedAt"),
    // Created, not started: a queued run has an age before it has a start.
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Workflow", type_ = "string", json_path = ".spec.workflowRef", priority = 1),
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority", priority = 1),
    printcolumn(name = "Duration(ms)", type_ = "integer", json_path = ".status.durationMs", priority = 1),
    validation = Rule::new("self.spec.workflowRef == oldSelf.spec.workflowRef").message("spec.workflowRef is immutable"),
    validation = Rule::new("!has(oldSelf.spec.workflow) || (has(self.spec.workflow) && self.spec.workflow == oldSelf.spec.workflow)").message("spec.workflow is immutable once set: a run executes the workflow version it was created with"),
    validation = Rule::new("has(self.spec.idempotencyKey) == has(oldSelf.spec.idempotencyKey) && (!has(self.spec.idempotencyKey) || self.spec.idempotencyKey == oldSelf.spec.idempotencyKey)").message("spec.idempotencyKey is immutable: it names the request that created the run"),
    validation = Rule::new("has(self.spec.parent) == has(oldSelf.spec.parent) && (!has(self.spec.parent) || self.spec.parent == oldSelf.spec.parent)").message("spec.parent is immutable: it names the run that started this one"),
    validation = Rule::new("!has(oldSelf.spec.priority) || (has(self.spec.priority) && self.spec.priority == oldSelf.spec.priority)").message("spec.priority is immutable once set: a waiting run keeps its place"),
    printcolumn(name = "Parent", type_ = "string", json_path = ".spec.parent.runId", priority = 1),
    printcolumn(name = "Queued-For", type_ = "string", json_path = ".status.queuedFor", priority = 1),
    printcolumn(name = "Idempotency-Key", type_ = "string", json_path = ".spec.idempotencyKey", priority = 1),
    printcolumn(name = "Retry-Of", type_ = "string", json_path = ".spec.retryOf", priority = 1),
    printcolumn(name = "Waiting-For", type_ = "string", json_path = ".status.steps[?(@.status==\"waiting\")].stepId", priority = 1),
)]
#[derive(Default)]
#[serde(rename_all = "camelCase")]
pub struct RunSpec {
    /// Name of the Workflow (in this namespace) this run executes.
    #[schemars(length(min = 1, max = 253))]
    pub workflow_ref: String,
    /// What started the run.
    #[serde(default)]
    pub trigger: RunTrigger,
    /// Trigger payload, available to steps as `trigger.payload.*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schemaless_object")]
    pub payload: Option<serde_json::Value>,
    /// Request headers of a webhook-triggered run (an allow-list, lowercase names),
    /// available to steps as `trigger.headers.*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    /// Set to true to cancel the run: in-flight work stops, completed steps stay.
    #[serde(default)]
    pub cancel: bool,
    /// Why the run was cancelled, shown as its error (an event's `cancelOn` sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000))]
    pub cancel_reason: Option<String>,
    /// The workflow version this run executes: its steps and settings as they were
    /// when the run was created, so later edits of the Workflow never change a run in
    /// flight. Filled in by Flowline (the API and schedules at creation; the run
    /// controller before the first step of a Run created without it); immutable once
    /// set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<WorkflowSnapshot>,
    /// The `Idempotency-Key` of the API request that created the run. The API answers
    /// a repeated request with the same key for the same workflow (within 24 h) with
    /// this run instead of starting another one; on a Run applied with kubectl it is a
    /// label for people and tools (the object name already makes `kubectl apply`
    /// idempotent), and the API treats the run as that key's run all the same.
    /// Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub idempotency_key: Option<String>,
    /// The run this one retries (`POST /v1/runs/{id}/retry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub retry_of: Option<String>,
    /// Results of the run this one retries that it keeps instead of executing the
    /// steps again: the leading steps of `workflow.steps`, in order. The engine records
    /// them as finished (`reused: true`) and starts at the first step not listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub reused_steps: Vec<ReusedStep>,
    /// Decisions on `approval` steps: appended by `POST /v1/runs/{id}/steps/{step}/approve`
    /// (or `/reject`), or by hand (`kubectl patch run … --type=json`). The first entry for
    /// a step that waits decides it; later ones for the same step are ignored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub approvals: Vec<ApprovalDecision>,
    /// The run and step that started this run (a `workflow` step). Set by Flowline when
    /// it creates the child; immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRef>,
    /// Bodies received by the run's `callback` steps: appended by `POST
    /// /v1/callbacks/{token}` (or by hand with kubectl). The first entry for a step
    /// completes it; a step's URL accepts one call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub callbacks: Vec<CallbackReceived>,
    /// Events that completed the run's `wait_for_event` steps: appended by the operator
    /// when it fans an event out. The first entry for a step completes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub matched_events: Vec<MatchedEvent>,
    /// The event that started the run (`trigger: event`), as `trigger.event` in templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<super::EventRef>,
    /// 1 (first) to 5: among runs waiting for a slot, those of a lower number start
    /// first, then the older. Unset: the workflow's `priority` (written when the run is
    /// created, or pinned), else 3. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 5))]
    pub priority: Option<u8>,
}

/// The priority of runs that neither set one nor belong to a workflow that does.
pub const DEFAULT_PRIORITY: u8 = 3;

/// A body a `callback` step received.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallbackReceived {
    /// The id of the callback step.
    #[schemars(length(min = 1, max = 63))]
    pub step_id: String,
    /// The JSON body of the call: the step's output.
    #[serde(default)]
    #[schemars(schema_with = "any_value")]
    pub body: serde_json::Value,
    /// When it was received (the API sets it; unset: when the engine reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
}

/// An event a `wait_for_event` step received.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchedEvent {
    /// The id of the waiting step.
    #[schemars(length(min = 1, max = 63))]
    pub step_id: String,
    /// The event's id (`evt_…`).
    #[schemars(length(min = 1, max = 253))]
    pub event_id: String,
    /// The event's payload.
    #[serde(default)]
    #[schemars(schema_with = "any_value")]
    pub payload: serde_json::Value,
    /// When the event was received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
}

/// The single-use token of a `callback` step's URL.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallbackToken {
    /// The id of the callback step.
    #[schemars(length(min = 1, max = 63))]
    pub step_id: String,
    /// The token: the last part of `/v1/callbacks/{token}`, the only credential of the
    /// call. Whoever may read the Run may read it.
    #[schemars(length(max = 400))]
    pub token: String,
}

/// The run that started a child run, and where.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    /// The parent run's name (its id).
    #[schemars(length(min = 1, max = 253))]
    pub run_id: String,
    /// The parent's `workflow` step that started this run.
    #[schemars(length(min = 1, max = 63))]
    pub step_id: String,
    /// The element of the parent step's `forEach` this run was started for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u32>,
    /// How deep this run is in its chain of calls: 1 for a run a top-level run started.
    #[schemars(range(min = 1, max = 10))]
    pub depth: u32,
}

/// A decision on an `approval` step.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalDecision {
    /// The id of the approval step.
    #[schemars(length(min = 1, max = 63))]
    pub step_id: String,
    /// `approve` or `reject`.
    pub decision: Verdict,
    /// Why (at most 1000 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000))]
    pub comment: Option<String>,
    /// Who decided: the API key id for the API, as given for kubectl.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub by: Option<String>,
    /// When the decision was made (the API sets it; unset: when the engine reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
}

/// What an approver decided.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Approve,
    Reject,
}

/// A step result a retry keeps from the run it retries.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReusedStep {
    /// The step's id; it must match the step at the same position of `workflow.steps`.
    #[schemars(length(min = 1, max = 63))]
    pub step_id: String,
    /// `succeeded` or `skipped` (anything else is not reused).
    pub status: StepPhase,
    /// The step's output in the run it retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub output: Option<serde_json::Value>,
    /// True when that output was truncated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
}

/// What a run executes of its workflow, copied when the run is created.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowSnapshot {
    /// `metadata.generation` of the Workflow the copy was taken from.
    pub generation: i64,
    /// The workflow's display name at that generation.
    #[schemars(length(max = 200))]
    pub name: String,
    /// The workflow's executor setting (unset = the operator's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<Executor>,
    /// The steps, in order.
    #[serde(default)]
    #[schemars(length(max = 100))]
    pub steps: Vec<Step>,
    /// The workflow's run timeout in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The workflow's concurrency control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    /// The workflow's rate limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<super::RateLimit>,
    /// The workflow's debounce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce: Option<super::Debounce>,
    /// The workflow's `parallelism` (steps of a graph executing at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    /// The workflow's `output` template, rendered when the run succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub output: Option<serde_json::Value>,
}

impl WorkflowSnapshot {
    /// The parts of `wf` a run executes.
    pub fn of(wf: &Workflow) -> Self {
        WorkflowSnapshot {
            generation: wf.metadata.generation.unwrap_or_default(),
            name: wf.spec.name.clone(),
            executor: wf.spec.executor,
            steps: wf.spec.steps.clone(),
            timeout_ms: wf.spec.timeout_ms,
            concurrency: wf.spec.concurrency.clone(),
            rate_limit: wf.spec.rate_limit.clone(),
            debounce: wf.spec.debounce.clone(),
            parallelism: wf.spec.parallelism,
            output: wf.spec.output.clone(),
        }
    }

    /// Whether its runs may wait `queued` before they start: a concurrency limit, a
    /// rate limit or a debounce. Such a run's start time is when it leaves the queue,
    /// and a workflow's such runs are executed by one replica (its shard).
    pub fn holds_runs_back(&self) -> bool {
        self.concurrency.is_some() || self.rate_limit.is_some() || self.debounce.is_some()
    }

    /// Whether a step waits for an event (the run is labelled
    /// [`super::labels::WAITS_FOR_EVENTS`]).
    pub fn waits_for_events(&self) -> bool {
        self.steps
            .iter()
            .any(|s| s.action == super::Action::WaitForEvent)
    }
}

/// What started a run.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum RunTrigger {
    #[default]
    Manual,
    Schedule,
    /// A signed request to `POST /v1/hooks/{workflow}`.
    Webhook,
    /// A `workflow` step of another run (`spec.parent`).
    Workflow,
    /// An event posted to `POST /v1/events` (`spec.event` names it).
    Event,
}

/// What a `queued` run waits for.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum QueuedFor {
    /// A slot of its workflow's `concurrency` limit (its group's).
    Concurrency,
    /// The next window of its workflow's `rate_limit`.
    RateLimit,
    /// The end of its `debounce` burst (or its `max_wait`).
    Debounce,
    /// A place of its account: the operator's bound on runs executing per account or
    /// in all (`--max-runs-per-account`, `--max-running-runs`).
    Account,
}

impl QueuedFor {
    pub const ALL: [QueuedFor; 4] = [
        QueuedFor::Concurrency,
        QueuedFor::RateLimit,
        QueuedFor::Debounce,
        QueuedFor::Account,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            QueuedFor::Concurrency => "concurrency",
            QueuedFor::RateLimit => "rate_limit",
            QueuedFor::Debounce => "debounce",
            QueuedFor::Account => "account",
        }
    }

    /// What the `Succeeded` condition's message says of a run waiting for it.
    pub fn describe(self) -> &'static str {
        match self {
            QueuedFor::Concurrency => "waiting for a slot of its workflow's concurrency limit",
            QueuedFor::RateLimit => "waiting for its workflow's rate limit to allow another start",
            QueuedFor::Debounce => "waiting for its debounce period to pass without a newer run",
            QueuedFor::Account => {
                "waiting for a place among the runs its account may execute at once"
            }
        }
    }
}

/// Status of a run. A run without status has been accepted and is `running`
/// as far as clients are concerned; the run controller fills in the rest.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    JsonSchema,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum RunPhase {
    #[default]
    Running,
    /// Waiting to start (`status.queuedFor` says for what); not started yet.
    Queued,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunPhase {
    /// Every phase, in the order the API lists them.
    pub const ALL: [RunPhase; 5] = [
        RunPhase::Queued,
        RunPhase::Running,
        RunPhase::Succeeded,
        RunPhase::Failed,
        RunPhase::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunPhase::Running => "running",
            RunPhase::Queued => "queued",
            RunPhase::Succeeded => "succeeded",
            RunPhase::Failed => "failed",
            RunPhase::Cancelled => "cancelled",
        }
    }

    pub fn is_finished(self) -> bool {
        !matches!(self, RunPhase::Running | RunPhase::Queued)
    }
}

impl Run {
    /// A new run of `wf` named `name`, pinned to the workflow's current version, owned
    /// by it (deleting the workflow deletes its runs) and labelled with it.
    pub fn of_workflow(
        wf: &Workflow,
        name: &str,
        trigger: RunTrigger,
        payload: Option<serde_json::Value>,
        created: Timestamp,
    ) -> Run {
        use kube::{Resource, ResourceExt};
        let workflow_ref = wf.name_any();
        let mut run = Run::new(
            name,
            RunSpec {
                workflow_ref: workflow_ref.clone(),
                trigger,
                payload,
                workflow: Some(WorkflowSnapshot::of(wf)),
                priority: wf.spec.priority,
                ..Default::default()
            },
        );
        let waits = run
            .spec
            .workflow
            .as_ref()
            .is_some_and(WorkflowSnapshot::waits_for_events);
        let meta = run.meta_mut();
        meta.owner_references = wf.controller_owner_ref(&()).map(|o| vec![o]);
        let mut labels: std::collections::BTreeMap<String, String> =
            [(super::labels::WORKFLOW.to_string(), workflow_ref)].into();
        if waits {
            labels.insert(super::labels::WAITS_FOR_EVENTS.into(), "true".into());
        }
        meta.labels = Some(labels);
        meta.annotations = Some(super::timestamps::creation_annotations(created));
        run
    }

    /// The run of schedule tick `tick` of `wf`, created at `created`: named after the
    /// workflow's uid and the tick ([`scheduled_run_name`]), so the schedule, a
    /// restarted operator and a backfill never start a tick twice; `trigger.scheduled_at`
    /// is the tick.
    pub fn of_schedule(wf: &Workflow, tick: Timestamp, created: Timestamp) -> Run {
        use kube::ResourceExt;
        let name = scheduled_run_name(&wf.name_any(), &wf.uid().unwrap_or_default(), tick);
        let mut run = Run::of_workflow(wf, &name, RunTrigger::Schedule, None, created);
        run.annotations_mut().insert(
            super::timestamps::SCHEDULED_FOR_ANNOTATION.into(),
            crate::clock::format_ts(tick),
        );
        run
    }

    /// The tick a scheduled run is for (`trigger.scheduled_at`).
    pub fn scheduled_for(&self) -> Option<Timestamp> {
        use kube::ResourceExt;
        self.annotations()
            .get(super::timestamps::SCHEDULED_FOR_ANNOTATION)?
            .parse()
            .ok()
    }

    /// The workflow generation this run executes: the pinned copy's, or for a run
    /// created before runs were pinned, the one recorded when it started.
    pub fn workflow_generation(&self) -> Option<i64> {
        self.spec
            .workflow
            .as_ref()
            .map(|w| w.generation)
            .or_else(|| self.status.as_ref()?.workflow_generation)
    }

    /// The phase clients see: a Run without status has been accepted and is running.
    pub fn phase(&self) -> RunPhase {
        self.status
            .as_ref()
            .map(|s| s.phase)
            .unwrap_or(RunPhase::Running)
    }

    /// Drops what only the run's execution and a read of the whole run need: its
    /// payload and headers, the pinned version, reused steps, callback bodies, step records, error, output
    /// and conditions, and the data of its pending events unless `events` says to keep
    /// them whole. What remains (metadata, workflow reference, cancel, idempotency key,
    /// retry link, phase, times, event identities) is what list caches serve and decide
    /// from: a cache of summaries stays small however large runs grow.
    pub fn drop_details(&mut self, events: EventDetail) {
        self.spec.payload = None;
        self.spec.headers = None;
        self.spec.workflow = None;
        self.spec.reused_steps = Vec::new();
        self.spec.callbacks = Vec::new();
        self.spec.matched_events = Vec::new();
        if let Some(status) = self.status.as_mut() {
            status.steps = Vec::new();
            status.error = None;
            status.output = None;
            status.conditions = Vec::new();
            if events == EventDetail::IdentityOnly {
                for event in &mut status.pending_events {
                    event.data = serde_json::Value::Null;
                }
            }
        }
    }

    /// The ids of its `approval` steps waiting for a decision (none once it finished).
    pub fn awaiting_decision(&self) -> Vec<String> {
        let Some(status) = self.status.as_ref().filter(|s| !s.phase.is_finished()) else {
            return Vec::new();
        };
        status
            .steps
            .iter()
            .filter(|s| s.status == StepPhase::Waiting && s.action == Some(Action::Approval))
            .map(|s| s.step_id.clone())
            .collect()
    }

    /// When execution started; before the controller records it, when the Run was
    /// created.
    /// Whether it left the start line: it has a status other than `queued` (running,
    /// parked, or finished, whether or not it executed).
    pub fn has_started(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.phase != RunPhase::Queued)
    }

    pub fn started_at(&self) -> Timestamp {
        self.status
            .as_ref()
            .and_then(|s| s.started_at)
            .unwrap_or_else(|| super::timestamps::created_at(&self.metadata))
    }
}

/// How much of a run's pending events [`Run::drop_details`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventDetail {
    /// Whole: the delivery worker sends their data.
    Whole,
    /// Id, kind and time only: enough to tell whether they are settled.
    IdentityOnly,
}

/// Status of one step.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum StepPhase {
    #[default]
    Pending,
    Running,
    Succeeded,
    Failed,
    Skipped,
    Cancelled,
    /// A step waiting for its time, a decision, a child run, a callback or an event.
    Waiting,
}

/// Observed state of a run, written by the run controller only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStatus {
    /// `queued`, `running`, `succeeded`, `failed` or `cancelled`.
    #[serde(default)]
    pub phase: RunPhase,
    /// Why the run failed: names the step, its action and the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When execution started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// When the run reached a final status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
    /// `finishedAt - startedAt` in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The workflow generation whose steps this run executes (snapshotted at start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_generation: Option<i64>,
    /// One record per workflow step, in order.
    #[serde(default)]
    pub steps: Vec<StepRecord>,
    /// Standard conditions: `Succeeded` (`Unknown` while queued or running, then
    /// `True`, or `False` with the reason `Failed` or `Cancelled` and the error), so
    /// `kubectl wait --for=condition=Succeeded` works.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The Run's `metadata.generation` this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Which execution wrote this status: a random id per execution of the run. Status
    /// writes are conditional on the Run's resourceVersion; when one conflicts, the
    /// writer reads the Run and goes on only if the status is still its own (or the one
    /// it started from), so a late write of a process that lost its lease can never
    /// replace a newer execution's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub execution_id: Option<String>,
    /// Events recorded but not yet delivered to every matching webhook.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_events: Vec<PendingEvent>,
    /// True while the run is parked: every step that can make progress is `waiting`
    /// (a `wait` or an `approval`), and no process executes it until a step's time
    /// comes, a decision arrives or the run is cancelled.
    // Always serialized, `false` included: statuses are merge patches, and a field
    // left out would keep the stored `true` of the park before.
    #[serde(default)]
    pub parked: bool,
    /// A succeeded run of a workflow with `output`: that template rendered with the
    /// run's context (capped at 64 KiB; see `outputTruncated`). Unset otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub output: Option<serde_json::Value>,
    /// True when the stored `output` was truncated to respect size limits.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
    /// The tokens of the run's `callback` steps' URLs, made before its first step
    /// executes (so a URL handed out early never changes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callback_tokens: Vec<CallbackToken>,
    /// A `queued` run: what it waits for (`concurrency`, `rate_limit`, `debounce` or
    /// `account`), as judged when it was recorded `queued`. Always serialized (as
    /// `null` when unset): status writes are merge patches, and only a `null` removes
    /// it once the run starts.
    #[serde(default)]
    pub queued_for: Option<QueuedFor>,
}

/// Execution record of one step.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    /// The step's id.
    pub step_id: String,
    /// The step's display name.
    pub name: String,
    /// The step's action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    /// `pending`, `running`, `waiting`, `succeeded`, `failed`, `skipped` or `cancelled`.
    #[serde(default)]
    pub status: StepPhase,
    /// Attempts made so far.
    #[serde(default)]
    pub attempts: u32,
    /// A waiting step: when its `wait` ends, or when its `approval` times out (unset: an
    /// approval without a timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<Timestamp>,
    /// How often an attempt was cut short because the process executing it stopped (a
    /// crash, a rollout, a lost lease) and was executed again; not an attempt of its own.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub interruptions: u32,
    /// When the step's first attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// When the step reached a final status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
    /// `finishedAt - startedAt` in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The step's `with` as it was rendered when the step started, for people to read:
    /// every secret value shown as `[redacted]`, capped at 4 KiB (see `inputTruncated`).
    /// Unset for `forEach` steps (each element renders its own) and steps not started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub input: Option<serde_json::Value>,
    /// True when `input` is a preview of the start of its JSON text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub input_truncated: bool,
    /// Output of the action (capped at 64 KiB; see `outputTruncated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub output: Option<serde_json::Value>,
    /// True when the stored output was truncated to respect size limits.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the next attempt is due, while waiting out a retry backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<Timestamp>,
    /// True when the result was kept from the run this one retries (`spec.reusedSteps`)
    /// instead of executing the step again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
    /// A `forEach` step: how many elements its template rendered to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<u32>,
    /// A `forEach` step: one record per iteration, for the first 100 elements (the
    /// outputs are in `output`, in input order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub iterations: Vec<IterationRecord>,
    /// A `forEach` step still running: the elements whose iteration has succeeded, in
    /// order, their outputs in `output` (an array with `null` for the others). An
    /// execution after a restart runs only the other elements. Empty once the step
    /// ended, and while the outputs so far are larger than a step output may be.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub items_done: Vec<u32>,
    /// A `workflow` step (without `forEach`): the child run its latest attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_run_id: Option<String>,
}

/// Execution record of one iteration of a `forEach` step.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IterationRecord {
    /// The element's position in the array (`{{ index }}`).
    pub index: u32,
    /// `pending`, `running`, `succeeded`, `failed` or `cancelled`.
    #[serde(default)]
    pub status: StepPhase,
    /// Attempts made so far.
    #[serde(default)]
    pub attempts: u32,
    /// When the iteration's first attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// When the iteration reached a final status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A `workflow` step: the child run this iteration's latest attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_run_id: Option<String>,
    /// A `workflow` step: when this iteration's next attempt starts a new child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<Timestamp>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The scheduled run of one tick has a name derived from the workflow's uid and the
/// tick, so a second replica or a restarted operator cannot start it twice, and two
/// workflows (however alike their names) never share one. The name's prefix is only
/// for people reading `kubectl get runs`.
pub fn scheduled_run_name(workflow: &str, workflow_uid: &str, tick: Timestamp) -> String {
    let second = tick.as_second().to_be_bytes();
    crate::ids::derived_run_name(workflow, &[workflow_uid.as_bytes(), &second])
}
