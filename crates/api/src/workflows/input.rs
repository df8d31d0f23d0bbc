//! Bodies of `POST /v1/workflows` and `PATCH /v1/workflows/{id}`. Each is a type that
//! serde reads (`deny_unknown_fields`, so an unknown field is refused) and utoipa
//! documents: the type the handlers take is the schema in `/v1/openapi.json`. The rules
//! a schema cannot say (cron, time zones, DNS labels, an action's inputs, duplicates) are
//! its [`Validate`] impl; what would fail every run is the engine's own check
//! ([`flowline_core::engine::spec_check`]), the one the workflow controller runs on
//! workflows applied with kubectl.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::plumbing::validation::{
    MAX_NAME, Problems, Validate, is_dns_label, nullable, present, text,
};
use crate::state::ApiConfig;
use flowline_core::crd::{
    Action, CancelOn, Concurrency, ConcurrencyPolicy, Debounce, Executor, MAX_CONCURRENCY_KEY,
    MAX_CONCURRENCY_LIMIT, MAX_FOR_EACH, MAX_FOR_EACH_CONCURRENCY, MAX_PARALLELISM,
    MAX_RUN_TIMEOUT_MS, MAX_STEPS, Overlap, RateLimit, RetryPolicy, Step, Trigger, TriggerType,
    WorkflowState,
};
use flowline_core::cron::Schedule;

pub const MAX_DESCRIPTION: usize = 2000;
pub const MAX_WHEN: usize = 1000;
pub const MAX_STEP_TIMEOUT_MS: u64 = 86_400_000;
pub const MAX_ATTEMPTS: u32 = 20;
pub const MAX_BACKOFF_MS: u64 = 3_600_000;
const _: () = assert!(
    MAX_NAME == 200
        && MAX_DESCRIPTION == 2000
        && MAX_WHEN == 1000
        && MAX_STEP_TIMEOUT_MS == 86_400_000
        && MAX_ATTEMPTS == 20
        && MAX_BACKOFF_MS == 3_600_000
        && MAX_STEPS == 100
        && MAX_RUN_TIMEOUT_MS == 604_800_000
        && MAX_CONCURRENCY_LIMIT == 10_000
        && MAX_CONCURRENCY_KEY == 500
        && MAX_PARALLELISM == 100
        && MAX_FOR_EACH == 1000
        && MAX_FOR_EACH_CONCURRENCY == 50,
    "keep the #[schema(...)] bounds below in step"
);

/// Body of `POST /v1/workflows`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"name": "Order sync", "description": "Copies new orders to the ledger",
    "trigger": {"type": "schedule", "cron": "*/5 * * * *", "timezone": "Europe/Paris"}})))]
pub struct WorkflowCreate {
    /// Display name; any text.
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: String,
    #[schema(max_length = 2000)]
    pub description: Option<String>,
    /// Default `manual`. `webhook` makes an inbound secret, returned once as `hook_secret`.
    pub trigger: Option<TriggerInput>,
    /// The run's result: any JSON value whose strings may hold `{{ … }}` templates,
    /// rendered when a run succeeds and shown as the run's `output`. It may read
    /// `trigger`, `run`, `workflow` and `steps.<id>` of the workflow's steps, not
    /// `secrets`; a new workflow has no steps yet.
    #[schema(value_type = Option<Value>)]
    pub output: Option<Value>,
}

/// `trigger` of a workflow.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerInput {
    #[serde(rename = "type")]
    pub type_: TriggerType,
    /// Five-field cron expression; required for `schedule`, refused otherwise.
    #[schema(pattern = "^[0-9A-Za-z*,/?-]+( [0-9A-Za-z*,/?-]+){4}$")]
    pub cron: Option<String>,
    /// IANA time zone, e.g. `Europe/Paris`; only for `schedule` (default `UTC`).
    pub timezone: Option<String>,
    /// What a tick does while an earlier run is unfinished: `allow` (default), `skip`,
    /// `queue` or `cancel_previous`. Only for `schedule`.
    pub overlap: Option<Overlap>,
    /// Every tick missed within this many milliseconds before now runs after downtime
    /// (the newest 100 at most); 0 (default): only the latest missed tick. At most 7
    /// days. Only for `schedule`.
    #[schema(minimum = 0, maximum = 604_800_000)]
    pub catchup_window_ms: Option<u64>,
    /// The event name that starts runs; required for `event`, refused otherwise.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[a-z0-9][a-z0-9._-]{0,127}$"
    )]
    pub event: Option<String>,
    /// Expression over `event.payload`, `event.name` and `event.id` (the language of a
    /// step's `when`); a run starts only when it holds. Only for `event`.
    #[schema(max_length = 1000)]
    pub filter: Option<String>,
}

/// Body of `PATCH /v1/workflows/{id}`: at least one of these fields; each given field
/// replaces the stored one.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = WorkflowPatch, min_properties = 1,
    examples(json!({"state": "active", "steps": [
        {"id": "fetch", "action": "http.request", "with": {"url": "https://shop.example/orders"},
         "retry": {"max_attempts": 3}, "timeout_ms": 30000},
        {"id": "count", "action": "transform", "with": {"value": "{{ steps.fetch.output.body.total }}"}}]})))]
pub struct WorkflowPatchBody {
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false, min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: Option<String>,
    /// `null` removes the description.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, max_length = 2000)]
    pub description: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false)]
    pub state: Option<WorkflowState>,
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false)]
    pub trigger: Option<TriggerInput>,
    /// `null` returns to the operator's default executor.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Executor>)]
    pub executor: Option<Option<Executor>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false, max_items = 100)]
    pub steps: Option<Vec<StepInput>>,
    /// Longest a run may take, in milliseconds from its start (at most 7 days); `null`
    /// removes the limit.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 604_800_000)]
    pub timeout_ms: Option<Option<u64>>,
    /// How many runs may execute at once; `null` removes the limit.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<ConcurrencyInput>)]
    pub concurrency: Option<Option<ConcurrencyInput>>,
    /// At most `limit` runs of one key start in any window of `period_ms`; the others
    /// wait `queued` and start as the window allows. `null` removes it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<RateLimitSetting>)]
    pub rate_limit: Option<Option<RateLimitSetting>>,
    /// Of a burst of runs of one key only the newest starts. `null` removes it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<DebounceSetting>)]
    pub debounce: Option<Option<DebounceSetting>>,
    /// Most steps of one run executing at once when the steps form a graph (some step
    /// has `needs`); `null` returns to the default, 10.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 100)]
    pub parallelism: Option<Option<u32>>,
    /// The priority of runs that do not set their own, 1 (first) to 5; `null` returns
    /// to the default, 3. Waiting runs start by priority, then in creation order.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<u8>, minimum = 1, maximum = 5)]
    pub priority: Option<Option<u8>>,
    /// The run's result: any JSON value whose strings may hold `{{ … }}` templates,
    /// rendered when a run succeeds and shown as the run's `output`. It may read
    /// `trigger`, `run`, `workflow` and `steps.<id>` of the workflow's steps (as they
    /// are after this request), not `secrets`. Replaced whole; `null` removes it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Value>)]
    pub output: Option<Option<Value>>,
    /// Events that cancel this workflow's unfinished runs (at most 10), each
    /// `{"event": "<name>", "match": "<expression over event.* and trigger.*>"}`;
    /// replaced whole; `null` or `[]` removes them.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Vec<CancelOnInput>>, max_items = 10)]
    pub cancel_on: Option<Option<Vec<CancelOnInput>>>,
}

/// An entry of `cancel_on`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelOnInput {
    /// The event name.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[a-z0-9][a-z0-9._-]{0,127}$"
    )]
    pub event: String,
    /// Expression over `event.*` and the run's `trigger.*`; absent: every unfinished run.
    #[serde(rename = "match")]
    #[schema(max_length = 1000)]
    pub match_: Option<String>,
}

impl CancelOnInput {
    fn to_cancel_on(&self) -> CancelOn {
        CancelOn {
            event: self.event.clone(),
            match_: self.match_.clone(),
        }
    }
}

/// A step as written in `PATCH /v1/workflows/{id}`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepInput {
    /// Unique in the workflow; later steps read `steps.<id>.output`.
    #[schema(
        pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        min_length = 1,
        max_length = 63
    )]
    pub id: String,
    /// Display name; defaults to the id.
    #[schema(max_length = 200)]
    pub name: Option<String>,
    pub action: Action,
    /// Inputs of the action; string values may hold `{{ … }}` templates, which must
    /// parse and may read `steps.<id>` of earlier steps only.
    /// `http.request`: `url` (required), `method`, `headers`, `query`, `body`,
    /// `expect_status`, `follow_redirects`, `timeout_ms`. `transform`: `value`
    /// (required). `delay`: `ms` (required). `fail`: `message`. `container`: `image`
    /// (required), `command`, `args`, `env`. `wait`: `ms` or `until`. `approval`: `timeout_ms`. `workflow`: `workflow`
    /// (required), `payload`, `wait`. `callback`: `timeout_ms`. `wait_for_event`:
    /// `event` (required), `match`, `timeout_ms`. docs/reference/workflow.md has them
    /// all, with their outputs.
    #[schema(value_type = Option<HashMap<String, Value>>)]
    pub with: Option<Map<String, Value>>,
    pub retry: Option<RetryInput>,
    /// Timeout of one attempt, in milliseconds.
    #[schema(minimum = 1, maximum = 86_400_000)]
    pub timeout_ms: Option<u64>,
    /// Boolean expression over the template context; false skips the step. Must
    /// parse, and may read `steps.<id>` of earlier steps only.
    #[schema(min_length = 1, max_length = 1000, pattern = r"\S")]
    pub when: Option<String>,
    /// Ids of the steps this one runs after. With `needs` on any step the steps form a
    /// graph: a step starts when every step it needs has succeeded or been skipped, and
    /// independent steps run in parallel (`parallelism`). Unknown ids, the step itself,
    /// repeated ids and cycles are refused.
    #[schema(max_items = 100, inline)]
    pub needs: Option<Vec<NeedInput>>,
    /// A template that renders to a JSON array, e.g. `{{ steps.list.output.items }}`:
    /// the step runs once per element (at most 1000), reading `{{ item }}` and
    /// `{{ index }}`; its output is the array of the iterations' outputs, in order.
    #[schema(min_length = 1, max_length = 1000, pattern = r"\S")]
    pub for_each: Option<String>,
    /// Iterations of a `for_each` step running at once (default 4).
    #[schema(minimum = 1, maximum = 50)]
    pub for_each_concurrency: Option<u32>,
}

/// A step id in `needs`.
#[derive(Deserialize, ToSchema)]
#[schema(
    as = StepNeed,
    pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    min_length = 1,
    max_length = 63
)]
pub struct NeedInput(pub String);

/// `retry` of a step; absent fields take their defaults (1 attempt, 1000 ms, factor 2).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryInput {
    /// Attempts in all, the first included.
    #[schema(minimum = 1, maximum = 20)]
    pub max_attempts: Option<u32>,
    /// Delay before the second attempt, in milliseconds.
    #[schema(minimum = 0, maximum = 3_600_000)]
    pub backoff_ms: Option<u64>,
    /// Factor the delay grows by after each attempt (jitter is added).
    #[schema(minimum = 1, maximum = 10)]
    pub backoff_factor: Option<f64>,
}

/// `rate_limit` of a workflow, as sent and as shown.
#[derive(Serialize, Deserialize, ToSchema, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSetting {
    /// Template over the trigger naming a run's key, e.g.
    /// `{{ trigger.payload.customer }}`; absent = one key per workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 500, pattern = r"\S")]
    pub key: Option<String>,
    /// Runs of one key that may start in any window of `period_ms`.
    #[schema(minimum = 1, maximum = 10_000)]
    pub limit: u32,
    /// The window, in milliseconds (1 second to 24 hours).
    #[schema(minimum = 1_000, maximum = 86_400_000)]
    pub period_ms: u64,
}

impl RateLimitSetting {
    pub fn of(limit: &RateLimit) -> Self {
        RateLimitSetting {
            key: limit.key.clone(),
            limit: limit.limit,
            period_ms: limit.period_ms,
        }
    }

    fn to_rate_limit(&self) -> RateLimit {
        RateLimit {
            key: self.key.clone(),
            limit: self.limit,
            period_ms: self.period_ms,
        }
    }
}

/// `debounce` of a workflow, as sent and as shown: a new run waits `queued` for
/// `period_ms`; a newer run of the same key cancels it (error `superseded by <run id>`)
/// and waits in its place; the newest starts after `period_ms` without a newer one, or
/// once `max_wait_ms` passed since the burst's first run.
#[derive(Serialize, Deserialize, ToSchema, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DebounceSetting {
    /// Template over the trigger naming a run's key; absent = one key per workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 500, pattern = r"\S")]
    pub key: Option<String>,
    /// How long a run waits for a newer one, in milliseconds (1 second to 7 days).
    #[schema(minimum = 1_000, maximum = 604_800_000)]
    pub period_ms: u64,
    /// The longest a burst holds its newest run back, in milliseconds from its first
    /// run (at least `period_ms`, at most 7 days); absent: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1_000, maximum = 604_800_000)]
    pub max_wait_ms: Option<u64>,
}

impl DebounceSetting {
    pub fn of(debounce: &Debounce) -> Self {
        DebounceSetting {
            key: debounce.key.clone(),
            period_ms: debounce.period_ms,
            max_wait_ms: debounce.max_wait_ms,
        }
    }

    fn to_debounce(&self) -> Debounce {
        Debounce {
            key: self.key.clone(),
            period_ms: self.period_ms,
            max_wait_ms: self.max_wait_ms,
        }
    }
}

/// `concurrency` of a workflow.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyInput {
    /// Runs of one group that may execute at once.
    #[schema(minimum = 1, maximum = 10_000)]
    pub limit: u32,
    /// Template over the trigger, e.g. `{{ trigger.payload.customer }}`; absent = one
    /// group per workflow.
    #[schema(min_length = 1, max_length = 500, pattern = r"\S")]
    pub key: Option<String>,
    /// Default `queue`.
    pub policy: Option<ConcurrencyPolicy>,
}

impl Validate for WorkflowCreate {
    fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
        let mut p = Problems::default();
        text(&self.name, "name", MAX_NAME, true, &mut p);
        if let Some(d) = &self.description {
            text(d, "description", MAX_DESCRIPTION, false, &mut p);
        }
        if let Some(t) = &self.trigger {
            t.check(&mut p);
        }
        if let Some(output) = &self.output {
            check_output(output, &[], &mut p);
        }
        p.finish()
    }
}

/// The problems of an `output` template over `steps` (the workflow's steps as they
/// will be stored): the engine's own check, the one the workflow controller runs.
pub fn check_output(output: &Value, steps: &[Step], p: &mut Problems) {
    for problem in flowline_core::engine::spec_check::output(output, steps) {
        p.add(problem.path, problem.message);
    }
}

impl WorkflowCreate {
    /// The trigger to store (absent: `manual`).
    pub fn stored_trigger(&self) -> Trigger {
        self.trigger
            .as_ref()
            .map(TriggerInput::to_trigger)
            .unwrap_or_default()
    }
}

/// A PATCH of a workflow: each present field replaces the stored one.
#[derive(Default)]
pub struct WorkflowPatch {
    pub name: Option<String>,
    /// `Some(None)` clears the description.
    pub description: Option<Option<String>>,
    pub state: Option<WorkflowState>,
    pub trigger: Option<Trigger>,
    /// `Some(None)` returns to the operator's default executor.
    pub executor: Option<Option<Executor>>,
    pub steps: Option<Vec<Step>>,
    /// `Some(None)` removes the run timeout.
    pub timeout_ms: Option<Option<u64>>,
    /// `Some(None)` removes the concurrency control.
    pub concurrency: Option<Option<Concurrency>>,
    /// `Some(None)` removes the rate limit.
    pub rate_limit: Option<Option<RateLimit>>,
    /// `Some(None)` removes the debounce.
    pub debounce: Option<Option<Debounce>>,
    /// `Some(None)` returns to the default parallelism.
    pub parallelism: Option<Option<u32>>,
    /// `Some(None)` returns to the default priority.
    pub priority: Option<Option<u8>>,
    /// `Some(None)` removes the output.
    pub output: Option<Option<Value>>,
    /// `Some(vec![])` removes the entries.
    pub cancel_on: Option<Vec<CancelOn>>,
}

/// A priority outside 1–5, as a problem of `field` (runs and workflows alike).
pub fn priority_problem(n: u8, field: &str, p: &mut Problems) {
    if !(1..=5).contains(&n) {
        p.add(field, "must be an integer from 1 (first) to 5");
    }
}

impl Validate for WorkflowPatchBody {
    fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
        let mut p = Problems::default();
        if self.is_empty() {
            p.add(
                "body",
                "give at least one of: name, description, state, trigger, executor, steps, \
                 timeout_ms, concurrency, rate_limit, debounce, parallelism, priority, output, \
                 cancel_on",
            );
            return p.finish();
        }
        if let Some(name) = &self.name {
            text(name, "name", MAX_NAME, true, &mut p);
        }
        if let Some(Some(d)) = &self.description {
            text(d, "description", MAX_DESCRIPTION, false, &mut p);
        }
        if let Some(Some(n)) = self.parallelism
            && !(1..=MAX_PARALLELISM).contains(&n)
        {
            p.add(
                "parallelism",
                format!("must be an integer from 1 to {MAX_PARALLELISM}, or null for the default"),
            );
        }
        if let Some(Some(n)) = self.priority {
            priority_problem(n, "priority", &mut p);
        }
        if let Some(Some(ms)) = self.timeout_ms
            && !(1..=MAX_RUN_TIMEOUT_MS).contains(&ms)
        {
            p.add(
                "timeout_ms",
                format!(
                    "must be an integer from 1 to {MAX_RUN_TIMEOUT_MS} (7 days), or null for no \
                     run timeout"
                ),
            );
        }
        if let Some(t) = &self.trigger {
            t.check(&mut p);
        }
        if let Some(steps) = &self.steps {
            check_steps(steps, &mut p);
        }
        if let Some(Some(c)) = &self.concurrency {
            c.check(&mut p);
        }
        // The engine's own checks, the ones the workflow controller runs.
        let rate_limit = self
            .rate_limit
            .iter()
            .flatten()
            .map(RateLimitSetting::to_rate_limit);
        for problem in rate_limit.flat_map(|r| flowline_core::engine::spec_check::rate_limit(&r)) {
            p.add(problem.path, problem.message);
        }
        let debounce = self
            .debounce
            .iter()
            .flatten()
            .map(DebounceSetting::to_debounce);
        for problem in debounce.flat_map(|d| flowline_core::engine::spec_check::debounce(&d)) {
            p.add(problem.path, problem.message);
        }
        if let Some(Some(entries)) = &self.cancel_on {
            let entries: Vec<CancelOn> = entries.iter().map(CancelOnInput::to_cancel_on).collect();
            // The engine's own check, the one the workflow controller runs.
            for problem in flowline_core::engine::spec_check::cancel_on(&entries) {
                p.add(problem.path, problem.message);
            }
        }
        p.finish()
    }
}

impl WorkflowPatchBody {
    /// `{}`: nothing to change (an unknown field is refused before this is asked).
    fn is_empty(&self) -> bool {
        self.name.is_none()
            && self.description.is_none()
            && self.state.is_none()
            && self.trigger.is_none()
            && self.executor.is_none()
            && self.steps.is_none()
            && self.timeout_ms.is_none()
            && self.concurrency.is_none()
            && self.rate_limit.is_none()
            && self.debounce.is_none()
            && self.parallelism.is_none()
            && self.priority.is_none()
            && self.output.is_none()
            && self.cancel_on.is_none()
    }

    /// The patch in the custom resource's types (the defaults of a step's `retry`
    /// filled in).
    pub fn into_patch(self) -> WorkflowPatch {
        WorkflowPatch {
            trigger: self.trigger.as_ref().map(TriggerInput::to_trigger),
            steps: self
                .steps
                .as_ref()
                .map(|steps| steps.iter().map(StepInput::to_step).collect()),
            concurrency: self
                .concurrency
                .as_ref()
                .map(|c| c.as_ref().map(ConcurrencyInput::to_concurrency)),
            rate_limit: self
                .rate_limit
                .as_ref()
                .map(|r| r.as_ref().map(RateLimitSetting::to_rate_limit)),
            debounce: self
                .debounce
                .as_ref()
                .map(|d| d.as_ref().map(DebounceSetting::to_debounce)),
            name: self.name,
            description: self.description,
            state: self.state,
            executor: self.executor,
            timeout_ms: self.timeout_ms,
            parallelism: self.parallelism,
            priority: self.priority,
            output: self.output,
            cancel_on: self.cancel_on.as_ref().map(|c| {
                c.iter()
                    .flatten()
                    .map(CancelOnInput::to_cancel_on)
                    .collect()
            }),
        }
    }
}

/// The longest catch-up window of a schedule: 7 days.
pub const MAX_CATCHUP_WINDOW_MS: u64 = 604_800_000;

impl TriggerInput {
    fn check(&self, p: &mut Problems) {
        if self.type_ != TriggerType::Event {
            for (extra, given) in [
                ("event", self.event.is_some()),
                ("filter", self.filter.is_some()),
            ] {
                if given {
                    p.add(
                        format!("trigger.{extra}"),
                        "is only allowed when trigger.type is event",
                    );
                }
            }
        } else {
            // The engine's own check, the one the workflow controller runs.
            for problem in flowline_core::engine::spec_check::trigger(&self.to_trigger()) {
                p.add(problem.path, problem.message);
            }
        }
        if self.type_ != TriggerType::Schedule {
            for (extra, given) in [
                ("cron", self.cron.is_some()),
                ("timezone", self.timezone.is_some()),
                ("overlap", self.overlap.is_some()),
                ("catchup_window_ms", self.catchup_window_ms.is_some()),
            ] {
                if given {
                    p.add(
                        format!("trigger.{extra}"),
                        "is only allowed when trigger.type is schedule",
                    );
                }
            }
            return;
        }
        match &self.cron {
            Some(c) if is_cron(c) => {}
            Some(c) => {
                let why = match Schedule::parse(c.trim(), None) {
                    Err(e) => format!(": {e}"),
                    Ok(_) => String::new(),
                };
                p.add(
                    "trigger.cron",
                    format!("must be a 5-field cron expression, e.g. */5 * * * *{why}"),
                );
            }
            None => p.add("trigger.cron", "is required when trigger.type is schedule"),
        }
        if self
            .catchup_window_ms
            .is_some_and(|ms| ms > MAX_CATCHUP_WINDOW_MS)
        {
            p.add(
                "trigger.catchup_window_ms",
                format!("must be at most {MAX_CATCHUP_WINDOW_MS} (7 days)"),
            );
        }
        if let Some(tz) = &self.timezone
            && jiff::tz::db().get(tz).is_err()
        {
            p.add(
                "trigger.timezone",
                "must be an IANA time zone, e.g. Europe/Paris",
            );
        }
    }

    fn to_trigger(&self) -> Trigger {
        if self.type_ != TriggerType::Schedule {
            let event = self.type_ == TriggerType::Event;
            return Trigger {
                type_: self.type_,
                cron: None,
                timezone: None,
                overlap: None,
                catchup_window_ms: None,
                event: self.event.clone().filter(|_| event),
                filter: self.filter.clone().filter(|_| event),
            };
        }
        Trigger {
            type_: TriggerType::Schedule,
            cron: self.cron.as_deref().map(|c| c.trim().to_string()),
            timezone: self.timezone.clone(),
            overlap: self.overlap,
            catchup_window_ms: self.catchup_window_ms,
            event: None,
            filter: None,
        }
    }
}

/// Whether `expr` is a standard 5-field cron expression the schedule controller
/// accepts: the same parser decides both, so nothing accepted here fails later.
pub fn is_cron(expr: &str) -> bool {
    expr.split_whitespace().count() == 5 && Schedule::parse(expr.trim(), None).is_ok()
}

fn check_steps(items: &[StepInput], p: &mut Problems) {
    if items.len() > MAX_STEPS {
        p.add("steps", format!("at most {MAX_STEPS} steps"));
        return;
    }
    let mut steps: Vec<Step> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("steps[{i}]");
        if steps.iter().any(|s| s.id == item.id) {
            p.add(
                format!("{at}.id"),
                format!("duplicate step id {:?}", item.id),
            );
        }
        item.check(&at, p);
        steps.push(item.to_step());
    }
    // What would fail every run (an action's missing inputs, `when` and templates that
    // do not parse, reads of steps that do not run before): the engine's own check, the
    // one the workflow controller runs, on fields not already refused.
    let found = flowline_core::engine::spec_check::steps(&steps);
    let fresh: Vec<bool> = found.iter().map(|f| !p.has(&f.path)).collect();
    for (problem, fresh) in found.into_iter().zip(fresh) {
        if fresh {
            p.add(problem.path, problem.message);
        }
    }
}

impl StepInput {
    fn check(&self, at: &str, p: &mut Problems) {
        if !is_dns_label(&self.id) {
            p.add(
                format!("{at}.id"),
                "must be a DNS label (lowercase letters, digits, '-')",
            );
        }
        if let Some(name) = &self.name {
            text(name, &format!("{at}.name"), MAX_NAME, false, p);
        }
        if let Some(ms) = self.timeout_ms
            && !(1..=MAX_STEP_TIMEOUT_MS).contains(&ms)
        {
            p.add(
                format!("{at}.timeout_ms"),
                format!("must be an integer from 1 to {MAX_STEP_TIMEOUT_MS}"),
            );
        }
        if let Some(when) = &self.when {
            text(when, &format!("{at}.when"), MAX_WHEN, true, p);
        }
        for (j, need) in self.needs.iter().flatten().enumerate() {
            if !is_dns_label(&need.0) {
                p.add(format!("{at}.needs[{j}]"), "must be a step id");
            }
        }
        if let Some(f) = &self.for_each {
            text(f, &format!("{at}.for_each"), MAX_FOR_EACH, true, p);
        }
        if let Some(n) = self.for_each_concurrency
            && !(1..=MAX_FOR_EACH_CONCURRENCY).contains(&n)
        {
            p.add(
                format!("{at}.for_each_concurrency"),
                format!("must be an integer from 1 to {MAX_FOR_EACH_CONCURRENCY}"),
            );
        }
        if let Some(r) = &self.retry {
            r.check(&format!("{at}.retry"), p);
        }
    }

    fn to_step(&self) -> Step {
        Step {
            id: self.id.clone(),
            name: self.name.clone(),
            action: self.action,
            with: self.with.clone().map(Value::Object),
            retry: self.retry.as_ref().map(RetryInput::to_policy),
            timeout_ms: self.timeout_ms,
            when: self.when.clone(),
            needs: self.needs.iter().flatten().map(|n| n.0.clone()).collect(),
            for_each: self.for_each.clone(),
            for_each_concurrency: self.for_each_concurrency,
        }
    }
}

impl RetryInput {
    fn check(&self, at: &str, p: &mut Problems) {
        if let Some(n) = self.max_attempts
            && !(1..=MAX_ATTEMPTS).contains(&n)
        {
            p.add(
                format!("{at}.max_attempts"),
                format!("must be an integer from 1 to {MAX_ATTEMPTS}"),
            );
        }
        if let Some(ms) = self.backoff_ms
            && ms > MAX_BACKOFF_MS
        {
            p.add(
                format!("{at}.backoff_ms"),
                format!("must be an integer from 0 to {MAX_BACKOFF_MS}"),
            );
        }
        if let Some(f) = self.backoff_factor
            && !(1.0..=10.0).contains(&f)
        {
            p.add(
                format!("{at}.backoff_factor"),
                "must be a number from 1 to 10",
            );
        }
    }

    /// The policy, absent fields at their defaults.
    fn to_policy(&self) -> RetryPolicy {
        let default = RetryPolicy::default();
        RetryPolicy {
            max_attempts: self.max_attempts.unwrap_or(default.max_attempts),
            backoff_ms: self.backoff_ms.unwrap_or(default.backoff_ms),
            backoff_factor: self.backoff_factor.unwrap_or(default.backoff_factor),
        }
    }
}

impl ConcurrencyInput {
    fn check(&self, p: &mut Problems) {
        if !(1..=MAX_CONCURRENCY_LIMIT).contains(&self.limit) {
            p.add(
                "concurrency.limit",
                format!("must be an integer from 1 to {MAX_CONCURRENCY_LIMIT}"),
            );
        }
        if let Some(key) = &self.key {
            text(key, "concurrency.key", MAX_CONCURRENCY_KEY, true, p);
            if let Err(reason) = flowline_core::engine::concurrency_key::check(key) {
                p.add("concurrency.key", reason);
            }
        }
    }

    fn to_concurrency(&self) -> Concurrency {
        Concurrency {
            limit: self.limit,
            key: self.key.clone(),
            policy: self.policy.unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plumbing::error::{ApiError, FieldError};
    use crate::plumbing::validation::accept;
    use serde_json::json;

    fn create_workflow(body: Value) -> Result<WorkflowCreate, ApiError> {
        accept(&body, &ApiConfig::default())
    }

    fn workflow_patch(body: Value) -> Result<WorkflowPatch, ApiError> {
        accept::<WorkflowPatchBody>(&body, &ApiConfig::default()).map(WorkflowPatchBody::into_patch)
    }

    fn fields(err: ApiError) -> Vec<String> {
        match err {
            ApiError::Validation { details, .. } => details.into_iter().map(|d| d.field).collect(),
            other => panic!("expected a validation error, got {other:?}"),
        }
    }

    #[test]
    fn create_workflow_needs_a_name() {
        assert!(create_workflow(json!({"name": "Sync"})).is_ok());
        assert_eq!(fields(create_workflow(json!({})).err().unwrap()), ["name"]);
        assert_eq!(
            fields(create_workflow(json!({"name": "  "})).err().unwrap()),
            ["name"]
        );
        assert_eq!(
            fields(create_workflow(json!({"name": 3})).err().unwrap()),
            ["name"]
        );
        assert_eq!(
            fields(
                create_workflow(json!({"name": "a", "steps": []}))
                    .err()
                    .unwrap()
            ),
            ["steps"]
        );
        assert_eq!(
            create_workflow(json!([1])).err().unwrap().code(),
            "validation_error"
        );
    }

    #[test]
    fn needs_parallelism_and_for_each_are_read_and_checked_on_their_fields() {
        let patch = workflow_patch(json!({"parallelism": 5, "steps": [
            {"id": "a", "action": "transform", "with": {"value": [1]}},
            {"id": "b", "action": "transform", "needs": ["a"], "for_each": "{{ steps.a.output }}",
             "for_each_concurrency": 7, "with": {"value": "{{ item }}"}}]}))
        .unwrap();
        assert_eq!(patch.parallelism, Some(Some(5)));
        let steps = patch.steps.unwrap();
        assert_eq!(steps[1].needs, ["a"]);
        assert_eq!(steps[1].for_each.as_deref(), Some("{{ steps.a.output }}"));
        assert_eq!(steps[1].for_each_concurrency, Some(7));
        assert_eq!(
            workflow_patch(json!({"parallelism": null}))
                .unwrap()
                .parallelism,
            Some(None)
        );
        for (body, field) in [
            (json!({"parallelism": 101}), "parallelism"),
            (
                json!({"steps": [{"id": "a", "action": "fail", "needs": ["A!"]}]}),
                "steps[0].needs[0]",
            ),
            (
                json!({"steps": [{"id": "a", "action": "fail", "needs": ["b"]},
                                 {"id": "b", "action": "fail", "needs": ["a"]}]}),
                "steps[1].needs[0]",
            ),
            (
                json!({"steps": [{"id": "a", "action": "fail", "for_each": "{{ run.id }}",
                                  "for_each_concurrency": 51}]}),
                "steps[0].for_each_concurrency",
            ),
        ] {
            assert_eq!(
                fields(workflow_patch(body.clone()).err().unwrap()),
                [field],
                "{body}"
            );
        }
    }

    #[test]
    fn output_is_read_on_create_and_patch_and_null_removes_it() {
        let created = create_workflow(
            json!({"name": "O", "output": {"order": "{{ trigger.payload.order }}", "n": [1, null]}}),
        )
        .unwrap();
        assert_eq!(
            created.output,
            Some(json!({"order": "{{ trigger.payload.order }}", "n": [1, null]}))
        );
        assert_eq!(
            workflow_patch(json!({"output": "{{ steps.sum.output }}"}))
                .unwrap()
                .output,
            Some(Some(json!("{{ steps.sum.output }}")))
        );
        assert_eq!(
            workflow_patch(json!({"output": null})).unwrap().output,
            Some(None)
        );
        assert_eq!(workflow_patch(json!({"name": "x"})).unwrap().output, None);
    }

    #[test]
    fn an_output_the_engine_could_not_render_is_refused_on_create() {
        for (output, field) in [
            (json!({"total": "{{ steps.sum.output }}"}), "output.total"),
            (json!({"t": "{{ secrets.crm.token }}"}), "output.t"),
            (json!("{{ trigger.payload"), "output"),
        ] {
            assert_eq!(
                fields(
                    create_workflow(json!({"name": "O", "output": output.clone()}))
                        .err()
                        .unwrap()
                ),
                [field],
                "{output}"
            );
        }
    }

    #[test]
    fn a_webhook_trigger_is_accepted_on_create_and_patch_without_cron() {
        let created =
            create_workflow(json!({"name": "In", "trigger": {"type": "webhook"}})).unwrap();
        assert_eq!(created.trigger.unwrap().type_, TriggerType::Webhook);
        assert!(
            create_workflow(json!({"name": "In"}))
                .unwrap()
                .trigger
                .is_none()
        );
        let patch = workflow_patch(json!({"trigger": {"type": "webhook", "cron": null}})).unwrap();
        assert_eq!(patch.trigger.unwrap().type_, TriggerType::Webhook);
        assert_eq!(
            fields(
                workflow_patch(json!({"trigger": {"type": "webhook", "cron": "* * * * *"}}))
                    .err()
                    .unwrap()
            ),
            ["trigger.cron"]
        );
        assert_eq!(
            fields(
                create_workflow(json!({"name": "In", "trigger": {"type": "push"}}))
                    .err()
                    .unwrap()
            ),
            ["trigger.type"]
        );
    }

    #[test]
    fn a_shape_problem_is_reported_with_its_path() {
        for (body, field, says) in [
            (
                json!({"state": "archived"}),
                "state",
                "unknown variant `archived`",
            ),
            (
                json!({"executor": "lambda"}),
                "executor",
                "expected `inline` or `job`",
            ),
            (json!({"name": null}), "name", "invalid type: null"),
            (
                json!({"steps": [{"id": "a", "action": "launch"}]}),
                "steps[0].action",
                "unknown variant",
            ),
            (
                json!({"steps": [{"id": "a", "action": "fail", "timeout_ms": -1}]}),
                "steps[0].timeout_ms",
                "invalid value",
            ),
            (
                json!({"steps": [{"id": "a", "action": "fail", "retries": 3}]}),
                "steps[0].retries",
                "unknown field `retries`, expected one of",
            ),
            (
                json!({"steps": [{"action": "fail"}]}),
                "steps[0].id",
                "missing field `id`",
            ),
            (
                json!({"trigger": {"type": "manual", "tz": "UTC"}}),
                "trigger.tz",
                "unknown field `tz`",
            ),
            (
                json!({"concurrency": {"limit": 1, "group": "x"}}),
                "concurrency.group",
                "unknown field",
            ),
            (json!({"nmae": "typo"}), "nmae", "unknown field `nmae`"),
        ] {
            let err = workflow_patch(body.clone()).err().unwrap();
            assert_eq!(err.code(), "validation_error");
            assert!(err.to_string().contains(says), "{body}: {err}");
            assert_eq!(fields(err), [field], "{body}");
        }
    }

    #[test]
    fn a_quoted_shape_problem_is_capped() {
        let long = "x".repeat(100_000);
        for body in [json!({long.clone(): 1}), json!({"state": long})] {
            let err = workflow_patch(body).err().unwrap();
            let ApiError::Validation { message, details } = err else {
                panic!("not a validation error");
            };
            assert!(
                message.len() < 2 * flowline_core::limits::MAX_ERROR_BYTES,
                "{}",
                message.len()
            );
            assert!(details[0].field.len() <= flowline_core::limits::MAX_ERROR_BYTES + 16);
            assert!(
                details[0]
                    .message
                    .ends_with(flowline_core::limits::TRUNCATED_MARKER)
            );
        }
    }

    #[test]
    fn patch_reports_each_rule_broken_with_its_path() {
        let err = workflow_patch(json!({
            "name": " ",
            "timeout_ms": 0,
            "trigger": {"type": "schedule"},
            "concurrency": {"limit": 0, "key": "{{ nope"},
            "steps": [
                {"id": "ok", "action": "delay", "with": {"ms": 5}},
                {"id": "Bad Id", "action": "fail"},
                {"id": "ok", "action": "transform"},
                {"id": "r", "action": "fail", "retry": {"max_attempts": 0, "backoff_factor": 11}, "timeout_ms": 0, "when": ""}
            ]
        }))
        .err()
        .unwrap();
        let got = fields(err);
        for want in [
            "name",
            "timeout_ms",
            "trigger.cron",
            "concurrency.limit",
            "steps[1].id",
            "steps[2].id",
            "steps[2].with.value",
            "steps[3].retry.max_attempts",
            "steps[3].retry.backoff_factor",
            "steps[3].timeout_ms",
            "steps[3].when",
        ] {
            assert!(got.iter().any(|f| f == want), "{want} missing from {got:?}");
        }
    }

    #[test]
    fn steps_that_would_fail_every_run_are_refused_on_their_fields() {
        let err = workflow_patch(json!({"steps": [
            {"id": "a", "action": "transform", "with": {"value": "{{ steps.b.output }}"}},
            {"id": "b", "action": "http.request", "when": "trigger.payload.n = 1",
             "with": {"url": "https://x.test/{{ trigger.payload.id", "headers": {"X": "{{ }}"}}},
            {"id": "c", "action": "fail", "when": "steps.ghost.output"}
        ]}))
        .err()
        .unwrap();
        let ApiError::Validation { details, .. } = err else {
            panic!("not a validation error");
        };
        let got: Vec<(&str, &str)> = details
            .iter()
            .map(|d| (d.field.as_str(), d.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "steps[0].with.value",
                    r#""steps.b.output" reads step "b", which runs later (steps[1]); a step reads only the steps before it"#
                ),
                (
                    "steps[1].when",
                    "syntax error at position 18: expected '==' to compare"
                ),
                ("steps[1].with.headers.X", r#"empty template "{{ }}""#),
                (
                    "steps[1].with.url",
                    r#"unterminated template: "{{" at position 15 has no closing "}}""#
                ),
                (
                    "steps[2].when",
                    r#""steps.ghost.output" reads step "ghost", which this workflow does not have"#
                ),
            ]
        );
        // A field already refused is not refused twice.
        let err = workflow_patch(json!({"steps": [{"id": "a", "action": "fail", "when": " "}]}))
            .err()
            .unwrap();
        let ApiError::Validation { details, .. } = err else {
            panic!("not a validation error");
        };
        assert_eq!(
            details,
            [FieldError::new("steps[0].when", "must not be empty")]
        );
    }

    #[test]
    fn wait_and_approval_inputs_are_checked() {
        let ok = workflow_patch(json!({"steps": [
            {"id": "a", "action": "wait", "with": {"ms": 2000}},
            {"id": "b", "action": "wait", "with": {"until": "2026-12-01T09:00:00Z"}},
            {"id": "c", "action": "wait", "with": {"until": "{{ trigger.payload.at }}"}},
            {"id": "d", "action": "approval"},
            {"id": "e", "action": "approval", "with": {"timeout_ms": 60000}},
        ]}));
        assert!(ok.is_ok(), "{:?}", ok.err());
        let err = workflow_patch(json!({"steps": [
            {"id": "a", "action": "wait"},
            {"id": "b", "action": "wait", "with": {"ms": 1, "until": "2026-12-01T09:00:00Z"}},
            {"id": "c", "action": "wait", "with": {"ms": -5}},
            {"id": "d", "action": "wait", "with": {"until": "tomorrow"}},
            {"id": "e", "action": "approval", "with": {"timeout_ms": 0}},
            {"id": "f", "action": "approval", "with": {"timeout_ms": "soon"}},
        ]}))
        .err()
        .unwrap();
        assert_eq!(
            fields(err),
            [
                "steps[0].with",
                "steps[1].with",
                "steps[2].with.ms",
                "steps[3].with.until",
                "steps[4].with.timeout_ms",
                "steps[5].with.timeout_ms",
            ]
        );
    }

    #[test]
    fn duplicate_step_ids_are_refused() {
        let err = workflow_patch(json!({"steps": [
            {"id": "a", "action": "fail"}, {"id": "a", "action": "fail"}
        ]}))
        .err()
        .unwrap();
        assert_eq!(fields(err), ["steps[1].id"]);
    }

    #[test]
    fn a_valid_patch_converts_to_crd_types() {
        let patch = workflow_patch(json!({
            "state": "active",
            "executor": null,
            "trigger": {"type": "schedule", "cron": "*/5 * * * *", "timezone": "Europe/Paris"},
            "steps": [{"id": "get", "action": "http.request", "with": {"url": "https://x.test/{{ trigger.payload.p }}"},
                       "retry": {"max_attempts": 3}, "timeout_ms": 1000, "when": "true"}]
        }))
        .unwrap();
        assert_eq!(patch.state, Some(WorkflowState::Active));
        assert_eq!(patch.executor, Some(None));
        assert_eq!(
            patch.trigger.unwrap().timezone.as_deref(),
            Some("Europe/Paris")
        );
        let steps = patch.steps.unwrap();
        assert_eq!(steps[0].retry.as_ref().unwrap().max_attempts, 3);
        assert_eq!(
            steps[0].retry.as_ref().unwrap().backoff_ms,
            1000,
            "defaults fill the rest"
        );
    }

    #[test]
    fn empty_patch_and_bad_timezone_are_refused() {
        assert_eq!(fields(workflow_patch(json!({})).err().unwrap()), ["body"]);
        let err = workflow_patch(
            json!({"trigger": {"type": "schedule", "cron": "* * * * *", "timezone": "Mars/Olympus"}}),
        );
        assert_eq!(fields(err.err().unwrap()), ["trigger.timezone"]);
        let err = workflow_patch(json!({"trigger": {"type": "manual", "cron": "* * * * *"}}));
        assert_eq!(fields(err.err().unwrap()), ["trigger.cron"]);
    }

    #[test]
    fn a_cron_the_schedule_controller_would_reject_is_refused_here() {
        for cron in [
            "61 * * * *",
            "* 25 * * *",
            "* * 32 * *",
            "*/0 * * * *",
            "* * * * * *",
        ] {
            let err = workflow_patch(json!({"trigger": {"type": "schedule", "cron": cron}}));
            assert_eq!(fields(err.err().unwrap()), ["trigger.cron"], "{cron}");
            assert!(Schedule::parse(cron, None).is_err() || cron.split(' ').count() != 5);
        }
        for cron in ["*/5 * * * *", "0 9 * * MON-FRI", "15 3 1 JAN *"] {
            assert!(
                workflow_patch(json!({"trigger": {"type": "schedule", "cron": cron}})).is_ok(),
                "{cron}"
            );
        }
    }
}
