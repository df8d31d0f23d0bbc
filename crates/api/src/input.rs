//! Request bodies. Each body is a type that serde reads (`deny_unknown_fields`, so an
//! unknown field is refused) and utoipa documents: the type the handlers deserialize is
//! the schema in `/v1/openapi.json`. A shape problem (unknown field, wrong type, unknown
//! enum value) is a `validation_error` naming the field's path (`steps[1].action`); then
//! the rules a schema cannot say (cron, time zones, DNS labels, an action's inputs,
//! duplicates) are checked, every problem reported with its path.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::auth::Scope;
use super::error::{ApiError, FieldError};
use flowline_core::crd::{
    Action, Concurrency, ConcurrencyPolicy, EventKind, Executor, MAX_CONCURRENCY_KEY,
    MAX_CONCURRENCY_LIMIT, MAX_FOR_EACH, MAX_FOR_EACH_CONCURRENCY, MAX_PARALLELISM,
    MAX_RUN_TIMEOUT_MS, MAX_STEPS, RetryPolicy, Step, Trigger, TriggerType, WorkflowState,
};
use flowline_core::cron::Schedule;

pub const MAX_NAME: usize = 200;
pub const MAX_DESCRIPTION: usize = 2000;
pub const MAX_WHEN: usize = 1000;
pub const MAX_WEBHOOK_URL: usize = 2048;
pub const MAX_STEP_TIMEOUT_MS: u64 = 86_400_000;
pub const MAX_ATTEMPTS: u32 = 20;
pub const MAX_BACKOFF_MS: u64 = 3_600_000;
const _: () = assert!(
    MAX_NAME == 200
        && MAX_DESCRIPTION == 2000
        && MAX_WHEN == 1000
        && MAX_WEBHOOK_URL == 2048
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
    /// Most steps of one run executing at once when the steps form a graph (some step
    /// has `needs`); `null` returns to the default, 10.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 100)]
    pub parallelism: Option<Option<u32>>,
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
    /// `expect_status`. `transform`: `value` (required). `delay`: `ms` (required).
    /// `fail`: `message`. `container`: `image` (required), `command`, `args`, `env`.
    #[schema(value_type = Option<Object>)]
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

/// Optional body of `POST /v1/workflows/{id}/runs`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"payload": {"order_id": 42}})))]
pub struct RunCreate {
    /// Readable by the steps as `trigger.payload`.
    #[schema(value_type = Option<Object>)]
    pub payload: Option<Map<String, Value>>,
}

/// Optional body of `POST /v1/runs/{id}/retry`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"from": "failed"})))]
pub struct RetryCreate {
    /// Default `failed`.
    pub from: Option<RetryFrom>,
}

/// Optional body of `POST /v1/runs/{id}/steps/{step_id}/approve` and `/reject`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"comment": "checked the diff; ship it"})))]
pub struct DecisionCreate {
    /// Why; at most 1000 characters. Recorded with the decision.
    #[schema(max_length = 1000)]
    pub comment: Option<String>,
}

/// The most characters a decision's comment may have.
pub const MAX_DECISION_COMMENT: usize = 1000;

/// The optional body of a decision on an approval step: its comment, if any; a JSON
/// `null` is no body.
pub fn decision_request(body: Option<Value>) -> Result<Option<String>, ApiError> {
    let Some(body) = body.filter(|b| !b.is_null()) else {
        return Ok(None);
    };
    let body: DecisionCreate = shaped(body)?;
    match body.comment {
        Some(c) if c.chars().count() > MAX_DECISION_COMMENT => Err(ApiError::field(
            "comment",
            format!("must be at most {MAX_DECISION_COMMENT} characters"),
        )),
        other => Ok(other),
    }
}

/// Where a retry starts (`POST /v1/runs/{id}/retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = RetryStart)]
pub enum RetryFrom {
    /// At the first step that did not succeed; the steps before it keep their results.
    Failed,
    /// At the first step: everything runs again.
    Start,
}

/// Body of `POST /v1/webhooks`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"url": "https://hooks.example/flowline", "events": ["run.failed", "run.succeeded"]})))]
pub struct WebhookCreate {
    /// `https://` address that receives the events.
    #[schema(format = "uri", max_length = 2048)]
    pub url: String,
    /// Event kinds to deliver, each at most once.
    #[schema(min_items = 1, max_items = 6)]
    pub events: Vec<EventKind>,
    /// Only this workflow's events; omit for all workflows.
    #[schema(min_length = 1, max_length = 253)]
    pub workflow_id: Option<String>,
}

/// Body of `POST /v1/api-keys`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"name": "ci", "scopes": ["read", "execute"]})))]
pub struct ApiKeyCreate {
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: String,
    #[schema(min_items = 1)]
    pub scopes: Vec<Scope>,
}

/// A field that may be absent but not `null` (`#[serde(default)]` gives `None` when
/// absent; `null` is refused by `T`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A field where `null` means something (`Some(None)`): absent is `None`.
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Reads `body` as `T`. The first shape problem is a `validation_error` on its path.
/// serde quotes what it got (an unknown field's name, an unknown value), so path and
/// message are capped like every error string sent.
fn shaped<T: DeserializeOwned>(body: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(body).map_err(|err| {
        let path = err.path().to_string();
        let message = flowline_core::limits::cap_error(err.into_inner().to_string());
        ApiError::field(
            flowline_core::limits::cap_error(field_of(&path, &message)),
            message,
        )
    })
}

/// The path a shape error is about. serde_path_to_error's path ends at the offending
/// field, but for a missing one it is the object's, and serde names the field only in
/// its message.
fn field_of(path: &str, message: &str) -> String {
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    match (path, missing) {
        (".", Some(name)) => name.to_string(),
        (".", None) => "body".to_string(),
        (path, Some(name)) => format!("{path}.{name}"),
        (path, None) => path.to_string(),
    }
}

/// Collects field problems while a body is checked.
#[derive(Default)]
struct Problems(Vec<FieldError>);

impl Problems {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(field, message));
    }

    fn has(&self, field: &str) -> bool {
        self.0.iter().any(|e| e.field == field)
    }

    fn finish<T>(self, value: T) -> Result<T, ApiError> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ApiError::fields(self.0))
        }
    }
}

/// Checks a text's length (in characters) and, when `required`, that it is not blank.
fn text(s: &str, field: &str, max: usize, required: bool, p: &mut Problems) {
    if required && s.trim().is_empty() {
        p.add(field, "must not be empty");
    } else if s.chars().count() > max {
        p.add(field, format!("must be at most {max} characters"));
    }
}

pub struct CreateWorkflow {
    pub name: String,
    pub description: Option<String>,
    /// Absent: `manual`.
    pub trigger: Option<Trigger>,
}

pub fn create_workflow(body: Value) -> Result<CreateWorkflow, ApiError> {
    let body: WorkflowCreate = shaped(body)?;
    let mut p = Problems::default();
    text(&body.name, "name", MAX_NAME, true, &mut p);
    if let Some(d) = &body.description {
        text(d, "description", MAX_DESCRIPTION, false, &mut p);
    }
    let trigger = body.trigger.map(|t| trigger(t, &mut p));
    p.finish(CreateWorkflow {
        name: body.name,
        description: body.description,
        trigger,
    })
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
    /// `Some(None)` returns to the default parallelism.
    pub parallelism: Option<Option<u32>>,
}

pub fn workflow_patch(body: Value) -> Result<WorkflowPatch, ApiError> {
    if body.as_object().is_some_and(Map::is_empty) {
        return Err(ApiError::field(
            "body",
            "give at least one of: name, description, state, trigger, executor, steps, \
             timeout_ms, concurrency, parallelism",
        ));
    }
    let body: WorkflowPatchBody = shaped(body)?;
    let mut p = Problems::default();
    if let Some(name) = &body.name {
        text(name, "name", MAX_NAME, true, &mut p);
    }
    if let Some(Some(d)) = &body.description {
        text(d, "description", MAX_DESCRIPTION, false, &mut p);
    }
    if let Some(Some(n)) = body.parallelism
        && !(1..=MAX_PARALLELISM).contains(&n)
    {
        p.add(
            "parallelism",
            format!("must be an integer from 1 to {MAX_PARALLELISM}, or null for the default"),
        );
    }
    if let Some(Some(ms)) = body.timeout_ms
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
    let patch = WorkflowPatch {
        name: body.name,
        description: body.description,
        state: body.state,
        trigger: body.trigger.map(|t| trigger(t, &mut p)),
        executor: body.executor,
        steps: body.steps.map(|s| steps(s, &mut p)),
        timeout_ms: body.timeout_ms,
        concurrency: body.concurrency.map(|c| c.map(|c| concurrency(c, &mut p))),
        parallelism: body.parallelism,
    };
    p.finish(patch)
}

fn trigger(t: TriggerInput, p: &mut Problems) -> Trigger {
    if t.type_ != TriggerType::Schedule {
        for (extra, given) in [
            ("cron", t.cron.is_some()),
            ("timezone", t.timezone.is_some()),
        ] {
            if given {
                p.add(
                    format!("trigger.{extra}"),
                    "is only allowed when trigger.type is schedule",
                );
            }
        }
        return Trigger {
            type_: t.type_,
            cron: None,
            timezone: None,
        };
    }
    let cron = match t.cron {
        Some(c) if is_cron(&c) => Some(c.trim().to_string()),
        Some(c) => {
            let why = match Schedule::parse(c.trim(), None) {
                Err(e) => format!(": {e}"),
                Ok(_) => String::new(),
            };
            p.add(
                "trigger.cron",
                format!("must be a 5-field cron expression, e.g. */5 * * * *{why}"),
            );
            None
        }
        None => {
            p.add("trigger.cron", "is required when trigger.type is schedule");
            None
        }
    };
    if let Some(tz) = &t.timezone
        && jiff::tz::db().get(tz).is_err()
    {
        p.add(
            "trigger.timezone",
            "must be an IANA time zone, e.g. Europe/Paris",
        );
    }
    Trigger {
        type_: TriggerType::Schedule,
        cron,
        timezone: t.timezone,
    }
}

/// Whether `expr` is a standard 5-field cron expression the schedule controller
/// accepts: the same parser decides both, so nothing accepted here fails later.
pub fn is_cron(expr: &str) -> bool {
    expr.split_whitespace().count() == 5 && Schedule::parse(expr.trim(), None).is_ok()
}

fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

fn steps(items: Vec<StepInput>, p: &mut Problems) -> Vec<Step> {
    if items.len() > MAX_STEPS {
        p.add("steps", format!("at most {MAX_STEPS} steps"));
        return Vec::new();
    }
    let mut out: Vec<Step> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("steps[{i}]");
        if out.iter().any(|s| s.id == item.id) {
            p.add(
                format!("{at}.id"),
                format!("duplicate step id {:?}", item.id),
            );
        }
        out.push(step(item, &at, p));
    }
    // What would fail every run (`when` and templates that do not parse, reads of steps
    // that do not run before): the engine's own check, on fields not already refused.
    let found = flowline_core::engine::spec_check::steps(&out);
    let fresh: Vec<bool> = found.iter().map(|f| !p.has(&f.path)).collect();
    for (problem, fresh) in found.into_iter().zip(fresh) {
        if fresh {
            p.add(problem.path, problem.message);
        }
    }
    out
}

fn step(s: StepInput, at: &str, p: &mut Problems) -> Step {
    if !is_dns_label(&s.id) {
        p.add(
            format!("{at}.id"),
            "must be a DNS label (lowercase letters, digits, '-')",
        );
    }
    if let Some(name) = &s.name {
        text(name, &format!("{at}.name"), MAX_NAME, false, p);
    }
    let with = s.with.map(Value::Object);
    check_action_inputs(s.action, with.as_ref(), &format!("{at}.with"), p);
    if let Some(ms) = s.timeout_ms
        && !(1..=MAX_STEP_TIMEOUT_MS).contains(&ms)
    {
        p.add(
            format!("{at}.timeout_ms"),
            format!("must be an integer from 1 to {MAX_STEP_TIMEOUT_MS}"),
        );
    }
    if let Some(when) = &s.when {
        text(when, &format!("{at}.when"), MAX_WHEN, true, p);
    }
    let needs: Vec<String> = s
        .needs
        .unwrap_or_default()
        .into_iter()
        .map(|n| n.0)
        .collect();
    for (j, need) in needs.iter().enumerate() {
        if !is_dns_label(need) {
            p.add(format!("{at}.needs[{j}]"), "must be a step id");
        }
    }
    if let Some(f) = &s.for_each {
        text(f, &format!("{at}.for_each"), MAX_FOR_EACH, true, p);
    }
    if let Some(n) = s.for_each_concurrency
        && !(1..=MAX_FOR_EACH_CONCURRENCY).contains(&n)
    {
        p.add(
            format!("{at}.for_each_concurrency"),
            format!("must be an integer from 1 to {MAX_FOR_EACH_CONCURRENCY}"),
        );
    }
    Step {
        id: s.id,
        name: s.name,
        action: s.action,
        with,
        retry: s.retry.map(|r| retry(r, &format!("{at}.retry"), p)),
        timeout_ms: s.timeout_ms,
        when: s.when,
        needs,
        for_each: s.for_each,
        for_each_concurrency: s.for_each_concurrency,
    }
}

/// Inputs each action cannot do without. Values may be templates, so only
/// presence and, for literals, the type is checked here.
const MAX_WAIT_MS: u64 = flowline_core::engine::waiting::MAX_WAIT_MS;

fn check_action_inputs(action: Action, with: Option<&Value>, at: &str, p: &mut Problems) {
    let get = |k: &str| with.and_then(|w| w.get(k));
    let is_template = |v: &Value| v.as_str().is_some_and(|s| s.contains("{{"));
    match action {
        Action::HttpRequest => {
            match get("url") {
                Some(Value::String(u)) if is_template(&Value::String(u.clone())) => {}
                Some(Value::String(u))
                    if url::Url::parse(u).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) => {
                }
                _ => p.add(
                    format!("{at}.url"),
                    "is required and must be an http(s) URL",
                ),
            }
            if let Some(m) = get("method") {
                let ok = m.as_str().is_some_and(|m| {
                    ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
                        .contains(&m.to_ascii_uppercase().as_str())
                });
                if !ok && !is_template(m) {
                    p.add(format!("{at}.method"), "must be an HTTP method");
                }
            }
        }
        Action::Transform => {
            if get("value").is_none() {
                p.add(format!("{at}.value"), "is required");
            }
        }
        Action::Delay => match get("ms") {
            Some(v) if v.as_u64().is_some() || is_template(v) => {}
            _ => p.add(
                format!("{at}.ms"),
                "is required and must be a non-negative integer",
            ),
        },
        Action::Fail => {}
        Action::Container => match get("image") {
            Some(Value::String(s)) if !s.trim().is_empty() => {}
            _ => p.add(format!("{at}.image"), "is required"),
        },
        Action::Wait => match (get("ms"), get("until")) {
            (Some(v), None) if v.as_u64().is_some_and(|ms| ms <= MAX_WAIT_MS) || is_template(v) => {
            }
            (Some(_), None) => p.add(
                format!("{at}.ms"),
                format!("must be an integer from 0 to {MAX_WAIT_MS} (a year)"),
            ),
            (None, Some(Value::String(u)))
                if u.contains("{{") || u.parse::<jiff::Timestamp>().is_ok() => {}
            (None, Some(_)) => p.add(
                format!("{at}.until"),
                "must be an RFC 3339 time (2026-01-01T09:00:00Z) or a template",
            ),
            _ => p.add(at.to_string(), "wait needs exactly one of `ms` and `until`"),
        },
        Action::Approval => match get("timeout_ms") {
            None | Some(Value::Null) => {}
            Some(v)
                if v.as_u64().is_some_and(|ms| (1..=MAX_WAIT_MS).contains(&ms))
                    || is_template(v) => {}
            Some(_) => p.add(
                format!("{at}.timeout_ms"),
                format!("must be an integer from 1 to {MAX_WAIT_MS} (a year)"),
            ),
        },
    }
}

fn retry(r: RetryInput, at: &str, p: &mut Problems) -> RetryPolicy {
    let mut policy = RetryPolicy::default();
    if let Some(n) = r.max_attempts {
        if (1..=MAX_ATTEMPTS).contains(&n) {
            policy.max_attempts = n;
        } else {
            p.add(
                format!("{at}.max_attempts"),
                format!("must be an integer from 1 to {MAX_ATTEMPTS}"),
            );
        }
    }
    if let Some(ms) = r.backoff_ms {
        if ms <= MAX_BACKOFF_MS {
            policy.backoff_ms = ms;
        } else {
            p.add(
                format!("{at}.backoff_ms"),
                format!("must be an integer from 0 to {MAX_BACKOFF_MS}"),
            );
        }
    }
    if let Some(f) = r.backoff_factor {
        if (1.0..=10.0).contains(&f) {
            policy.backoff_factor = f;
        } else {
            p.add(
                format!("{at}.backoff_factor"),
                "must be a number from 1 to 10",
            );
        }
    }
    policy
}

/// A workflow's `concurrency`.
fn concurrency(c: ConcurrencyInput, p: &mut Problems) -> Concurrency {
    if !(1..=MAX_CONCURRENCY_LIMIT).contains(&c.limit) {
        p.add(
            "concurrency.limit",
            format!("must be an integer from 1 to {MAX_CONCURRENCY_LIMIT}"),
        );
    }
    if let Some(key) = &c.key {
        text(key, "concurrency.key", MAX_CONCURRENCY_KEY, true, p);
        if let Err(reason) = flowline_core::engine::concurrency_key::check(key) {
            p.add("concurrency.key", reason);
        }
    }
    Concurrency {
        limit: c.limit,
        key: c.key,
        policy: c.policy.unwrap_or_default(),
    }
}

/// The optional body of `POST /v1/workflows/{id}/runs`: its payload. A JSON `null`
/// is no body, as the document says (generated clients send it for "no body").
pub fn run_request(body: Option<Value>) -> Result<Option<Value>, ApiError> {
    let Some(body) = body.filter(|b| !b.is_null()) else {
        return Ok(None);
    };
    let body: RunCreate = shaped(body)?;
    Ok(body.payload.map(Value::Object))
}

/// The optional body of `POST /v1/runs/{id}/retry`: `{"from": "failed" | "start"}`;
/// a JSON `null` is no body.
pub fn retry_request(body: Option<Value>) -> Result<RetryFrom, ApiError> {
    let Some(body) = body.filter(|b| !b.is_null()) else {
        return Ok(RetryFrom::Failed);
    };
    let body: RetryCreate = shaped(body)?;
    Ok(body.from.unwrap_or(RetryFrom::Failed))
}

/// A webhook to create; the URL normalized.
pub fn create_webhook(body: Value, allow_http: bool) -> Result<WebhookCreate, ApiError> {
    let mut body: WebhookCreate = shaped(body)?;
    let mut p = Problems::default();
    match url::Url::parse(&body.url) {
        Ok(u)
            if u.host().is_some()
                && (u.scheme() == "https" || (allow_http && u.scheme() == "http")) =>
        {
            body.url = u.to_string();
        }
        Ok(_) => p.add("url", "must be an https:// URL"),
        Err(_) => p.add("url", "must be an absolute https:// URL"),
    }
    if body.url.len() > MAX_WEBHOOK_URL {
        p.add(
            "url",
            format!("must be at most {MAX_WEBHOOK_URL} characters"),
        );
    }
    if body.events.is_empty() {
        p.add("events", "must be a non-empty array of event kinds");
    }
    for (i, kind) in body.events.iter().enumerate() {
        if body.events[..i].contains(kind) {
            p.add(format!("events[{i}]"), "is listed twice");
        }
    }
    if let Some(wf) = &body.workflow_id
        && (wf.is_empty() || wf.len() > 253)
    {
        p.add("workflow_id", "must be a workflow id");
    }
    p.finish(body)
}

/// An API key to create; repeated scopes counted once.
pub fn create_api_key(body: Value) -> Result<ApiKeyCreate, ApiError> {
    let mut body: ApiKeyCreate = shaped(body)?;
    let mut p = Problems::default();
    text(&body.name, "name", MAX_NAME, true, &mut p);
    if body.scopes.is_empty() {
        p.add(
            "scopes",
            "must be a non-empty array of read, write, execute, admin",
        );
    }
    let mut seen = Vec::new();
    body.scopes.retain(|s| {
        let first = !seen.contains(s);
        seen.push(*s);
        first
    });
    p.finish(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn webhooks_need_https_and_known_events() {
        let ok = create_webhook(
            json!({"url": "https://h.test/x", "events": ["run.failed"]}),
            false,
        )
        .unwrap();
        assert_eq!(ok.events, [EventKind::RunFailed]);
        let http = json!({"url": "http://h.test/x", "events": ["run.failed"]});
        assert_eq!(
            fields(create_webhook(http.clone(), false).err().unwrap()),
            ["url"]
        );
        assert!(
            create_webhook(http, true).is_ok(),
            "the development flag allows http"
        );
        let err = create_webhook(
            json!({"url": "https://h.test", "events": ["run.boom", "run.failed"]}),
            false,
        );
        assert_eq!(fields(err.err().unwrap()), ["events[0]"]);
        let err = create_webhook(
            json!({"url": "https://h.test", "events": ["run.failed", "run.started", "run.failed"]}),
            false,
        );
        assert_eq!(fields(err.err().unwrap()), ["events[2]"]);
        for body in [
            json!({"url": "ftp://h.test", "events": ["run.failed"]}),
            json!({"url": "not a url", "events": ["run.failed"]}),
            json!({"url": "https://h.test", "events": ["run.failed"], "secret": "mine"}),
        ] {
            let field = if body.get("secret").is_some() {
                "secret"
            } else {
                "url"
            };
            assert_eq!(fields(create_webhook(body, false).err().unwrap()), [field]);
        }
        assert_eq!(
            fields(
                create_webhook(json!({"url": "https://h.test", "events": []}), false)
                    .err()
                    .unwrap()
            ),
            ["events"]
        );
    }

    #[test]
    fn run_payload_must_be_an_object() {
        assert_eq!(run_request(None).unwrap(), None);
        assert_eq!(run_request(Some(Value::Null)).unwrap(), None);
        assert_eq!(
            run_request(Some(json!({"payload": {"a": 1}}))).unwrap(),
            Some(json!({"a": 1}))
        );
        assert_eq!(
            fields(run_request(Some(json!({"payload": [1]}))).err().unwrap()),
            ["payload"]
        );
    }

    #[test]
    fn a_retry_starts_at_the_failed_step_unless_told_to_start_over() {
        assert_eq!(retry_request(None).unwrap(), RetryFrom::Failed);
        assert_eq!(retry_request(Some(Value::Null)).unwrap(), RetryFrom::Failed);
        assert_eq!(retry_request(Some(json!({}))).unwrap(), RetryFrom::Failed);
        assert_eq!(
            retry_request(Some(json!({"from": "failed"}))).unwrap(),
            RetryFrom::Failed
        );
        assert_eq!(
            retry_request(Some(json!({"from": "start"}))).unwrap(),
            RetryFrom::Start
        );
        for bad in [
            json!({"from": "middle"}),
            json!({"from": 1}),
            json!({"to": "start"}),
        ] {
            let field = if bad.get("to").is_some() {
                "to"
            } else {
                "from"
            };
            assert_eq!(fields(retry_request(Some(bad)).err().unwrap()), [field]);
        }
        assert!(retry_request(Some(json!([]))).is_err());
    }

    #[test]
    fn api_keys_need_a_name_and_known_scopes() {
        let ok = create_api_key(json!({"name": "ci", "scopes": ["read", "execute"]})).unwrap();
        assert_eq!(ok.scopes, [Scope::Read, Scope::Execute]);
        assert_eq!(
            fields(
                create_api_key(json!({"name": "ci", "scopes": ["root"]}))
                    .err()
                    .unwrap()
            ),
            ["scopes[0]"]
        );
        assert_eq!(
            fields(create_api_key(json!({"scopes": ["read"]})).err().unwrap()),
            ["name"]
        );
        let deduped = create_api_key(json!({"name": "ci", "scopes": ["read", "read"]})).unwrap();
        assert_eq!(deduped.scopes, [Scope::Read]);
        assert_eq!(
            fields(
                create_api_key(json!({"name": "ci", "scopes": []}))
                    .err()
                    .unwrap()
            ),
            ["scopes"]
        );
    }
}
