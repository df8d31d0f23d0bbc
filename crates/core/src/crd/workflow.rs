// kube-derive's printcolumn(...) lists repeat `type_ = ...`, which clippy mistakes for
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use jiff::Timestamp;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Condition, PendingEvent, schemaless_object};

/// Most steps one workflow may hold; bounds the cost of the CEL rules and the size
/// of a Run's status.
pub const MAX_STEPS: usize = 100;
const _: () = assert!(
    MAX_STEPS == 100,
    "keep the schema bound on spec.steps in step"
);

/// A stored automation: a trigger and ordered steps.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "flowline.io",
    version = "v1",
    kind = "Workflow",
    plural = "workflows",
    shortname = "flw",
    category = "flowline",
    doc = "An automation workflow: a trigger (manual, schedule or inbound webhook) and the steps a run executes. Its runs are owned by it.",
    namespaced,
    status = "WorkflowStatus",
    printcolumn(name = "Display Name", type_ = "string", json_path = ".spec.name"),
    printcolumn(name = "State", type_ = "string", json_path = ".spec.state"),
    printcolumn(name = "Trigger", type_ = "string", json_path = ".spec.trigger.type"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Last Run", type_ = "date", json_path = ".status.lastRunAt"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowSpec {
    /// Display name; any text.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    /// Free-form description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub description: Option<String>,
    /// Lifecycle state: `draft` (editable, manual runs allowed), `active` (schedule
    /// fires, manual runs allowed, deletion refused) or `paused` (no runs).
    #[serde(default)]
    pub state: WorkflowState,
    /// What starts a run besides a manual trigger.
    #[serde(default)]
    pub trigger: Trigger,
    /// Where steps execute: `inline` in the operator, or `job` as one Kubernetes Job
    /// per step attempt. Unset means the operator's `--default-executor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<Executor>,
    /// Steps: executed in order, or as a graph when some step has `needs`. Step ids must
    /// be unique.
    #[serde(default)]
    #[schemars(length(max = 100))]
    #[x_kube(validation = Rule::new("self.all(s, self.filter(t, t.id == s.id).size() == 1)").message("steps[].id must be unique within the workflow"))]
    pub steps: Vec<Step>,
    /// How many finished runs to keep.
    #[serde(default)]
    pub history: History,
    /// Longest a run may take, in milliseconds from its start (at most 7 days). A run
    /// still unfinished then is stopped and fails with `run timed out after <n> ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604_800_000))]
    pub timeout_ms: Option<u64>,
    /// How many runs may execute at once, per group, and what happens to the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    /// At most `limit` runs of one key start in any window of `periodMs`; the others
    /// wait `queued` and start as the window allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<super::RateLimit>,
    /// Of a burst of runs of one key, only the newest starts: each waits `periodMs` for
    /// a newer one, which supersedes it, and the newest starts at the latest
    /// `maxWaitMs` after the burst's first run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce: Option<super::Debounce>,
    /// The priority of its runs that do not set their own: 1 (first) to 5; unset is 3.
    /// Runs waiting for a slot of a concurrency group (or of the account's bound) start
    /// by priority, then in creation order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 5))]
    pub priority: Option<u8>,
    /// Most steps of one run that execute at once when the steps form a graph (some
    /// step has `needs`); default 10, at most 100. Sequential workflows run one step
    /// at a time whatever it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub parallelism: Option<u32>,
    /// The run's result: any JSON value whose strings may hold `{{ … }}` templates, like
    /// a step's `with`, rendered once the last step has succeeded with the run's whole
    /// context (`trigger.*`, `steps.<id>.*` of every step, `run.id`, `workflow.*`; not
    /// `secrets`, since any key that may read runs reads it). Stored as the Run's
    /// `status.output` (capped at 64 KiB like a step output). A template that cannot be
    /// rendered (a missing path) fails the run with an error naming `output`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::any_value")]
    pub output: Option<serde_json::Value>,
    /// Events that cancel this workflow's unfinished runs (at most 10): a posted event
    /// of an entry's name cancels each run for which the entry's `match` holds, with the
    /// error `cancelled by event <id>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub cancel_on: Vec<super::CancelOn>,
}

/// Steps of one run executing at once in a graph workflow, by default.
pub const DEFAULT_PARALLELISM: u32 = 10;
/// Most steps of one run executing at once in a graph workflow.
pub const MAX_PARALLELISM: u32 = 100;
/// Iterations of one `forEach` step executing at once, by default.
pub const DEFAULT_FOR_EACH_CONCURRENCY: u32 = 4;
/// Most iterations of one `forEach` step executing at once.
pub const MAX_FOR_EACH_CONCURRENCY: u32 = 50;
/// Most elements a `forEach` template may render to.
pub const MAX_FOR_EACH_ITEMS: usize = 1000;
/// Iterations of one step with a record of their own in the status.
pub const MAX_ITERATION_RECORDS: usize = 100;
/// Longest `forEach` template.
pub const MAX_FOR_EACH: usize = 1000;
const _: () = assert!(
    MAX_PARALLELISM == 100 && MAX_FOR_EACH_CONCURRENCY == 50 && MAX_FOR_EACH == 1000,
    "keep the schema bounds of parallelism, forEachConcurrency and forEach in step"
);

/// Longest run timeout: 7 days.
pub const MAX_RUN_TIMEOUT_MS: u64 = 604_800_000;

/// Most runs of one group that may execute at once.
pub const MAX_CONCURRENCY_LIMIT: u32 = 10_000;
/// Longest concurrency key template.
pub const MAX_CONCURRENCY_KEY: usize = 500;
const _: () = assert!(
    MAX_RUN_TIMEOUT_MS == 604_800_000
        && MAX_CONCURRENCY_LIMIT == 10_000
        && MAX_CONCURRENCY_KEY == 500,
    "keep the schema bounds of timeoutMs and concurrency in step"
);

/// Concurrency control of a workflow's runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Concurrency {
    /// Runs of one group that may execute at once.
    #[schemars(range(min = 1, max = 10_000))]
    pub limit: u32,
    /// Template over the trigger naming a run's group, e.g.
    /// `{{ trigger.payload.customer }}`; unset = one group for the whole workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 500))]
    pub key: Option<String>,
    /// What a run does when its group is full: `queue` (wait, default),
    /// `cancel_in_progress` (cancel the group's oldest running runs and start), or
    /// `cancel_newest` (the new run is cancelled at once).
    #[serde(default)]
    pub policy: ConcurrencyPolicy,
}

/// What a run does when its concurrency group is full.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ConcurrencyPolicy {
    /// Wait (status `queued`); queued runs start in creation order.
    #[default]
    Queue,
    /// Cancel the oldest running runs of the group to make room.
    CancelInProgress,
    /// Cancel the new run at once.
    CancelNewest,
}

impl ConcurrencyPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ConcurrencyPolicy::Queue => "queue",
            ConcurrencyPolicy::CancelInProgress => "cancel_in_progress",
            ConcurrencyPolicy::CancelNewest => "cancel_newest",
        }
    }
}

/// Lifecycle state of a workflow.
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
pub enum WorkflowState {
    #[default]
    Draft,
    Active,
    Paused,
}

impl WorkflowState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowState::Draft => "draft",
            WorkflowState::Active => "active",
            WorkflowState::Paused => "paused",
        }
    }
}

/// What starts runs of a workflow.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type == 'schedule' ? has(self.cron) : !has(self.cron)").message("trigger.cron is required when trigger.type is schedule, and not allowed otherwise"))]
#[x_kube(validation = Rule::new("self.type == 'schedule' || !has(self.timezone)").message("trigger.timezone is only allowed when trigger.type is schedule"))]
#[x_kube(validation = Rule::new("self.type == 'schedule' || (!has(self.overlap) && !has(self.catchupWindowMs))").message("trigger.overlap and trigger.catchupWindowMs are only allowed when trigger.type is schedule"))]
#[x_kube(validation = Rule::new("self.type == 'event' ? has(self.event) : !has(self.event)").message("trigger.event is required when trigger.type is event, and not allowed otherwise"))]
#[x_kube(validation = Rule::new("self.type == 'event' || !has(self.filter)").message("trigger.filter is only allowed when trigger.type is event"))]
pub struct Trigger {
    /// `manual` (runs start only through the API or by creating a Run),
    /// `schedule` (runs also start at each cron tick while the workflow is active),
    /// `webhook` (runs also start on each signed `POST /v1/hooks/{id}` while the
    /// workflow is active; the secret is in the Secret `<name>-hook`) or `event` (runs
    /// also start on each posted event named `event` while the workflow is active).
    #[serde(rename = "type")]
    pub type_: TriggerType,
    /// Standard 5-field cron expression, e.g. `*/5 * * * *`. Required for `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 9, max = 100))]
    pub cron: Option<String>,
    /// IANA time zone the cron expression is read in; default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub timezone: Option<String>,
    /// What a tick does while an earlier run of the workflow is unfinished: `allow`
    /// (default: start anyway), `skip` (start nothing), `queue` (start a run that waits
    /// `queued` until the earlier ones end) or `cancel_previous` (cancel them, then
    /// start). Only for `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
    /// After the operator was stopped: every tick missed within this many milliseconds
    /// before now runs, oldest first (the newest 100 at most). 0 or unset: only the
    /// latest missed tick runs. At most 7 days. Only for `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 604_800_000))]
    pub catchup_window_ms: Option<u64>,
    /// The event name that starts runs; required for `event`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub event: Option<String>,
    /// Expression over `event.payload`, `event.name` and `event.id` (the language of a
    /// step's `when`); a run starts only when it holds. Only for `event`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000))]
    pub filter: Option<String>,
}

/// What a schedule tick does while an earlier run of its workflow is unfinished.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Start the tick's run anyway.
    #[default]
    Allow,
    /// Start nothing for the tick.
    Skip,
    /// Start a run that waits `queued` until the earlier runs have ended.
    Queue,
    /// Cancel the earlier runs, then start the tick's run.
    CancelPrevious,
}

impl Default for Trigger {
    fn default() -> Self {
        Trigger {
            type_: TriggerType::Manual,
            cron: None,
            timezone: None,
            overlap: None,
            catchup_window_ms: None,
            event: None,
            filter: None,
        }
    }
}

/// Kind of trigger.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TriggerType {
    #[default]
    Manual,
    Schedule,
    Webhook,
    /// Runs also start on each `POST /v1/events` of the named event (see `event`).
    Event,
}

/// Where a workflow's steps execute: `inline` (built-in actions run as tasks inside the
/// operator) or `job` (each step attempt runs as a Kubernetes Job owned by the Run).
/// Unset means the operator's `--default-executor`. `container` steps always run as Jobs.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Executor {
    /// Built-in actions run as tasks inside the operator.
    Inline,
    /// Each step attempt runs as a Kubernetes Job owned by the Run.
    Job,
}

/// One step of a workflow.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// Step id, unique in the workflow; a DNS label (lowercase letters, digits, `-`).
    /// Later steps read this step's output as `steps.<id>.output`.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("steps[].id must be a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit"))]
    pub id: String,
    /// Display name of the step; defaults to its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 200))]
    pub name: Option<String>,
    /// Built-in action the step performs.
    pub action: Action,
    /// Inputs of the action; string values may hold `{{ … }}` templates.
    /// `http.request`: url, method, headers, query, body, expect_status,
    /// follow_redirects, timeout_ms. `transform`: value. `delay`: ms. `fail`: message.
    /// `container`: image, command, args, env. `wait`: ms or until. `approval`:
    /// timeout_ms. `workflow`: workflow, payload, wait. `callback`: timeout_ms.
    /// `wait_for_event`: event, match, timeout_ms.
    #[serde(default, rename = "with", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schemaless_object")]
    pub with: Option<serde_json::Value>,
    /// Retry policy for failed attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Longest one attempt may take, in milliseconds (at most a day); an attempt still
    /// running then fails, and `retry` decides whether another follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86_400_000))]
    pub timeout_ms: Option<u64>,
    /// Expression over the step's context, e.g. `steps.fetch.output.status == 200`; when
    /// it is falsy the step is skipped (status `skipped`) and the steps after it still run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000))]
    pub when: Option<String>,
    /// Ids of the steps this step runs after. When any step of the workflow has
    /// `needs`, the steps form a graph: a step starts once every step it needs has
    /// succeeded or been skipped, steps without `needs` start at once, and independent
    /// steps run in parallel (bounded by `parallelism`). Without `needs` anywhere the
    /// steps run in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 63)))]
    pub needs: Vec<String>,
    /// A template rendering to a JSON array: the step runs once per element, with
    /// `{{ item }}` and `{{ index }}` in its context; its output is the array of the
    /// iterations' outputs, in input order (at most 1000 elements).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1000))]
    pub for_each: Option<String>,
    /// Iterations of a `forEach` step executing at once; default 4, at most 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub for_each_concurrency: Option<u32>,
}

impl Step {
    /// How many of a `forEach` step's iterations run at once (for a `workflow` step:
    /// how many of its children are unfinished at once): `forEachConcurrency`, by
    /// default [`DEFAULT_FOR_EACH_CONCURRENCY`], within 1 to [`MAX_FOR_EACH_CONCURRENCY`].
    pub fn iterations_at_once(&self) -> usize {
        self.for_each_concurrency
            .unwrap_or(DEFAULT_FOR_EACH_CONCURRENCY)
            .clamp(1, MAX_FOR_EACH_CONCURRENCY) as usize
    }

    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.id)
    }
}

/// The built-in action a step performs.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, utoipa::ToSchema,
)]
pub enum Action {
    /// An HTTP request; output `status`, `headers`, `body`.
    #[serde(rename = "http.request")]
    HttpRequest,
    /// Output is the rendered `value`.
    #[serde(rename = "transform")]
    Transform,
    /// Waits `ms` milliseconds.
    #[serde(rename = "delay")]
    Delay,
    /// Fails with `message`.
    #[serde(rename = "fail")]
    Fail,
    /// Runs a container image as a Job; output is the JSON it writes to /dev/termination-log.
    #[serde(rename = "container")]
    Container,
    /// Waits until `ms` milliseconds after the step started, or until the time `until`
    /// (RFC 3339, may be a template); output `waited_until`. Engine-internal: no Job, no
    /// task while it waits.
    #[serde(rename = "wait")]
    Wait,
    /// Waits for a decision (`POST /v1/runs/{id}/steps/{step}/approve` or `/reject`, or
    /// an entry of the Run's `spec.approvals`), at most `timeout_ms` when set.
    /// Engine-internal, like `wait`.
    #[serde(rename = "approval")]
    Approval,
    /// Starts a child run of another workflow of the same account (`workflow`, its id),
    /// with `payload` as its trigger payload. With `wait` (the default) the step waits,
    /// holding no task, until the child ends, and its output is the child's
    /// `{run_id, status, output}`; without, its output is `{run_id}` at once.
    /// Engine-internal, like `wait`.
    #[serde(rename = "workflow")]
    Workflow,
    /// Waits until its single-use URL (`{{ callbacks.<id>.url }}`, `POST
    /// /v1/callbacks/{token}`) is called with a JSON body, which becomes its output; at
    /// most `timeout_ms` when set. Engine-internal, like `wait`.
    #[serde(rename = "callback")]
    Callback,
    /// Waits for the first event named `event`, posted after the step started, whose
    /// `match` (an expression over `event.*`, `trigger.*` and `steps.*`) holds; its
    /// output is `{event_id, payload}`. At most `timeout_ms` when set. Engine-internal.
    #[serde(rename = "wait_for_event")]
    WaitForEvent,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::HttpRequest => "http.request",
            Action::Transform => "transform",
            Action::Delay => "delay",
            Action::Fail => "fail",
            Action::Container => "container",
            Action::Wait => "wait",
            Action::Approval => "approval",
            Action::Workflow => "workflow",
            Action::Callback => "callback",
            Action::WaitForEvent => "wait_for_event",
        }
    }

    /// `wait`, `approval` and `callback`: executed by the engine itself, never in a
    /// Job, and without a task while they wait (the run is parked).
    pub fn is_waiting_kind(self) -> bool {
        matches!(
            self,
            Action::Wait | Action::Approval | Action::Callback | Action::WaitForEvent
        )
    }
}

/// Retry policy of a step.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1, max = 20))]
    pub max_attempts: u32,
    /// Delay before the second attempt, in milliseconds.
    #[serde(default = "default_backoff_ms")]
    #[schemars(range(min = 0, max = 3_600_000))]
    pub backoff_ms: u64,
    /// Factor the delay grows by after each attempt (±20 % jitter is added).
    #[serde(default = "default_backoff_factor")]
    #[schemars(range(min = 1.0, max = 10.0))]
    pub backoff_factor: f64,
}

fn default_max_attempts() -> u32 {
    1
}
fn default_backoff_ms() -> u64 {
    1000
}
fn default_backoff_factor() -> f64 {
    2.0
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: default_max_attempts(),
            backoff_ms: default_backoff_ms(),
            backoff_factor: default_backoff_factor(),
        }
    }
}

/// Retention of finished runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct History {
    /// Newest succeeded (and cancelled) runs to keep.
    #[serde(default = "default_history")]
    #[schemars(range(min = 0, max = 10_000))]
    pub succeeded: u32,
    /// Newest failed runs to keep.
    #[serde(default = "default_history")]
    #[schemars(range(min = 0, max = 10_000))]
    pub failed: u32,
}

fn default_history() -> u32 {
    100
}

impl Default for History {
    fn default() -> Self {
        History {
            succeeded: default_history(),
            failed: default_history(),
        }
    }
}

/// Observed state of a workflow, written by the workflow controller only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The state the controller last acted on; a differing `spec.state` is a transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_state: Option<WorkflowState>,
    /// Standard conditions (`Ready`).
    #[serde(default)]
    #[schemars(schema_with = "super::common::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// When the newest run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_at: Option<Timestamp>,
    /// The last cron tick a run was started for; guards against duplicate runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Timestamp>,
    /// Runs currently kept, by status.
    #[serde(default)]
    pub run_counts: RunCounts,
    /// Events recorded but not yet delivered to every matching webhook.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_events: Vec<PendingEvent>,
    /// A webhook-triggered workflow whose Secret `<name>-hook` (type
    /// `flowline.io/hook-secret`) brings its inbound secret: that secret, sealed with
    /// the installation's key, so the API verifies hooks without reading Secrets. The
    /// annotation `flowline.io/hook-secret`, which the API writes, wins over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_secret: Option<SealedHookSecret>,
}

/// An inbound hook secret brought by a Secret, sealed (see `WorkflowStatus::hook_secret`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SealedHookSecret {
    /// The secret, sealed (`v1.` and base64url).
    #[schemars(length(max = 1024))]
    pub sealed: String,
    /// The resourceVersion of the Secret it was sealed from.
    #[schemars(length(max = 64))]
    pub source_version: String,
}

/// Number of kept runs per status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunCounts {
    /// Runs executing now.
    #[serde(default)]
    pub running: u32,
    /// Runs waiting for a concurrency slot.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub queued: u32,
    /// Succeeded runs kept (retention deletes the oldest beyond `spec.history`).
    #[serde(default)]
    pub succeeded: u32,
    /// Failed runs kept.
    #[serde(default)]
    pub failed: u32,
    /// Cancelled runs kept.
    #[serde(default)]
    pub cancelled: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
