//! Request bodies: parsed from JSON by hand so every problem is reported with the
//! exact field (`steps[1].action`) instead of a serde message.

use serde_json::{Map, Value};

use super::auth::Scope;
use super::error::{ApiError, FieldError};
use crate::controller::schedule::Schedule;
use crate::crd::{
    Action, Concurrency, ConcurrencyPolicy, EventKind, Executor, MAX_CONCURRENCY_KEY,
    MAX_CONCURRENCY_LIMIT, MAX_RUN_TIMEOUT_MS, RetryPolicy, Step, Trigger, TriggerType,
    WorkflowState,
};

const MAX_NAME: usize = 200;
const MAX_DESCRIPTION: usize = 2000;
const MAX_STEPS: usize = crate::crd::MAX_STEPS;

/// Collects field problems while a body is read.
#[derive(Default)]
struct Problems(Vec<FieldError>);

impl Problems {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(field, message));
    }

    fn finish<T>(self, value: T) -> Result<T, ApiError> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ApiError::fields(self.0))
        }
    }
}

fn object(body: Value) -> Result<Map<String, Value>, ApiError> {
    match body {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::field("body", "must be a JSON object")),
    }
}

fn reject_unknown(map: &Map<String, Value>, known: &[&str], prefix: &str, p: &mut Problems) {
    for key in map.keys().filter(|k| !known.contains(&k.as_str())) {
        p.add(
            format!("{prefix}{key}"),
            format!("unknown field; allowed: {}", known.join(", ")),
        );
    }
}

fn text(v: &Value, field: &str, max: usize, required: bool, p: &mut Problems) -> Option<String> {
    match v {
        Value::String(s) if required && s.trim().is_empty() => p.add(field, "must not be empty"),
        Value::String(s) if s.chars().count() > max => {
            p.add(field, format!("must be at most {max} characters"))
        }
        Value::String(s) => return Some(s.clone()),
        _ => p.add(field, "must be a string"),
    }
    None
}

pub struct CreateWorkflow {
    pub name: String,
    pub description: Option<String>,
    /// Absent: `manual`.
    pub trigger: Option<Trigger>,
}

pub fn create_workflow(body: Value) -> Result<CreateWorkflow, ApiError> {
    let map = object(body)?;
    let mut p = Problems::default();
    reject_unknown(&map, &["name", "description", "trigger"], "", &mut p);
    let trigger = match map.get("trigger") {
        None | Some(Value::Null) => None,
        Some(v) => trigger(v, &mut p),
    };
    let name = match map.get("name") {
        None | Some(Value::Null) => {
            p.add("name", "is required");
            None
        }
        Some(v) => text(v, "name", MAX_NAME, true, &mut p),
    };
    let description = match map.get("description") {
        None | Some(Value::Null) => None,
        Some(v) => text(v, "description", MAX_DESCRIPTION, false, &mut p),
    };
    p.finish(())?;
    Ok(CreateWorkflow {
        name: name.unwrap_or_default(),
        description,
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
}

pub fn workflow_patch(body: Value) -> Result<WorkflowPatch, ApiError> {
    let map = object(body)?;
    let mut p = Problems::default();
    reject_unknown(
        &map,
        &[
            "name",
            "description",
            "state",
            "trigger",
            "executor",
            "steps",
            "timeout_ms",
            "concurrency",
        ],
        "",
        &mut p,
    );
    let mut patch = WorkflowPatch::default();
    if let Some(v) = map.get("name") {
        patch.name = text(v, "name", MAX_NAME, true, &mut p);
    }
    if let Some(v) = map.get("description") {
        patch.description = Some(match v {
            Value::Null => None,
            v => text(v, "description", MAX_DESCRIPTION, false, &mut p),
        });
    }
    if let Some(v) = map.get("state") {
        patch.state = match v.as_str() {
            Some("draft") => Some(WorkflowState::Draft),
            Some("active") => Some(WorkflowState::Active),
            Some("paused") => Some(WorkflowState::Paused),
            _ => {
                p.add("state", "must be one of: draft, active, paused");
                None
            }
        };
    }
    if let Some(v) = map.get("trigger") {
        patch.trigger = trigger(v, &mut p);
    }
    if let Some(v) = map.get("executor") {
        patch.executor = match v {
            Value::Null => Some(None),
            Value::String(s) if s == "inline" => Some(Some(Executor::Inline)),
            Value::String(s) if s == "job" => Some(Some(Executor::Job)),
            _ => {
                p.add(
                    "executor",
                    "must be one of: inline, job (or null for the operator default)",
                );
                None
            }
        };
    }
    if let Some(v) = map.get("steps") {
        patch.steps = steps(v, &mut p);
    }
    if let Some(v) = map.get("timeout_ms") {
        patch.timeout_ms = run_timeout(v, &mut p);
    }
    if let Some(v) = map.get("concurrency") {
        patch.concurrency = concurrency(v, &mut p);
    }
    if map.is_empty() {
        p.add(
            "body",
            "give at least one of: name, description, state, trigger, executor, steps, \
             timeout_ms, concurrency",
        );
    }
    p.finish(patch)
}

fn trigger(v: &Value, p: &mut Problems) -> Option<Trigger> {
    let Value::Object(map) = v else {
        p.add("trigger", "must be an object");
        return None;
    };
    reject_unknown(map, &["type", "cron", "timezone"], "trigger.", p);
    let without_schedule = |type_: TriggerType, p: &mut Problems| {
        for extra in ["cron", "timezone"] {
            if map.get(extra).is_some_and(|v| !v.is_null()) {
                p.add(
                    format!("trigger.{extra}"),
                    "is only allowed when trigger.type is schedule",
                );
            }
        }
        Some(Trigger {
            type_,
            cron: None,
            timezone: None,
        })
    };
    match map.get("type").and_then(Value::as_str) {
        Some("manual") => without_schedule(TriggerType::Manual, p),
        Some("webhook") => without_schedule(TriggerType::Webhook, p),
        Some("schedule") => {
            let cron = match map.get("cron") {
                Some(Value::String(c)) if is_cron(c) => Some(c.trim().to_string()),
                Some(Value::String(c)) => {
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
                _ => {
                    p.add("trigger.cron", "is required when trigger.type is schedule");
                    None
                }
            };
            let timezone = match map.get("timezone") {
                None | Some(Value::Null) => None,
                Some(Value::String(tz)) if jiff::tz::db().get(tz).is_ok() => Some(tz.clone()),
                Some(_) => {
                    p.add(
                        "trigger.timezone",
                        "must be an IANA time zone, e.g. Europe/Paris",
                    );
                    None
                }
            };
            Some(Trigger {
                type_: TriggerType::Schedule,
                cron,
                timezone,
            })
        }
        _ => {
            p.add("trigger.type", "must be one of: manual, schedule, webhook");
            None
        }
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

fn action(s: &str) -> Option<Action> {
    [
        Action::HttpRequest,
        Action::Transform,
        Action::Delay,
        Action::Fail,
        Action::Container,
    ]
    .into_iter()
    .find(|a| a.as_str() == s)
}

fn steps(v: &Value, p: &mut Problems) -> Option<Vec<Step>> {
    let Value::Array(items) = v else {
        p.add("steps", "must be an array");
        return None;
    };
    if items.len() > MAX_STEPS {
        p.add("steps", format!("at most {MAX_STEPS} steps"));
        return None;
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("steps[{i}]");
        if let Some(step) = step(item, &at, p) {
            if out.iter().any(|s: &Step| s.id == step.id) {
                p.add(
                    format!("{at}.id"),
                    format!("duplicate step id {:?}", step.id),
                );
            }
            out.push(step);
        }
    }
    Some(out)
}

fn step(v: &Value, at: &str, p: &mut Problems) -> Option<Step> {
    let Value::Object(map) = v else {
        p.add(at, "must be an object");
        return None;
    };
    let before = p.0.len();
    reject_unknown(
        map,
        &[
            "id",
            "name",
            "action",
            "with",
            "retry",
            "timeout_ms",
            "when",
        ],
        &format!("{at}."),
        p,
    );
    let id = match map.get("id").and_then(Value::as_str) {
        Some(id) if is_dns_label(id) => id.to_string(),
        _ => {
            p.add(
                format!("{at}.id"),
                "is required and must be a DNS label (lowercase letters, digits, '-')",
            );
            String::new()
        }
    };
    let name = match map.get("name") {
        None | Some(Value::Null) => None,
        Some(v) => text(v, &format!("{at}.name"), MAX_NAME, false, p),
    };
    let action = match map.get("action").and_then(Value::as_str).and_then(action) {
        Some(a) => a,
        None => {
            p.add(
                format!("{at}.action"),
                "must be one of: http.request, transform, delay, fail, container",
            );
            Action::Fail
        }
    };
    let with = match map.get("with") {
        None | Some(Value::Null) => None,
        Some(Value::Object(w)) => Some(Value::Object(w.clone())),
        Some(_) => {
            p.add(format!("{at}.with"), "must be an object");
            None
        }
    };
    check_action_inputs(action, with.as_ref(), &format!("{at}.with"), p);
    let retry = match map.get("retry") {
        None | Some(Value::Null) => None,
        Some(v) => retry(v, &format!("{at}.retry"), p),
    };
    let timeout_ms = match map.get("timeout_ms") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(ms) if (1..=86_400_000).contains(&ms) => Some(ms),
            _ => {
                p.add(
                    format!("{at}.timeout_ms"),
                    "must be an integer from 1 to 86400000",
                );
                None
            }
        },
    };
    let when = match map.get("when") {
        None | Some(Value::Null) => None,
        Some(v) => text(v, &format!("{at}.when"), 1000, true, p),
    };
    (p.0.len() == before).then_some(Step {
        id,
        name,
        action,
        with,
        retry,
        timeout_ms,
        when,
    })
}

/// Inputs each action cannot do without. Values may be templates, so only
/// presence and, for literals, the type is checked here.
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
    }
}

fn retry(v: &Value, at: &str, p: &mut Problems) -> Option<RetryPolicy> {
    let Value::Object(map) = v else {
        p.add(at, "must be an object");
        return None;
    };
    reject_unknown(
        map,
        &["max_attempts", "backoff_ms", "backoff_factor"],
        &format!("{at}."),
        p,
    );
    let mut policy = RetryPolicy::default();
    if let Some(v) = map.get("max_attempts") {
        match v.as_u64() {
            Some(n) if (1..=20).contains(&n) => policy.max_attempts = n as u32,
            _ => p.add(
                format!("{at}.max_attempts"),
                "must be an integer from 1 to 20",
            ),
        }
    }
    if let Some(v) = map.get("backoff_ms") {
        match v.as_u64() {
            Some(n) if n <= 3_600_000 => policy.backoff_ms = n,
            _ => p.add(
                format!("{at}.backoff_ms"),
                "must be an integer from 0 to 3600000",
            ),
        }
    }
    if let Some(v) = map.get("backoff_factor") {
        match v.as_f64() {
            Some(f) if (1.0..=10.0).contains(&f) => policy.backoff_factor = f,
            _ => p.add(
                format!("{at}.backoff_factor"),
                "must be a number from 1 to 10",
            ),
        }
    }
    Some(policy)
}

/// A workflow's `timeout_ms`: `Some(None)` for null (no timeout).
fn run_timeout(v: &Value, p: &mut Problems) -> Option<Option<u64>> {
    match v {
        Value::Null => Some(None),
        v => match v.as_u64() {
            Some(ms) if (1..=MAX_RUN_TIMEOUT_MS).contains(&ms) => Some(Some(ms)),
            _ => {
                p.add(
                    "timeout_ms",
                    format!(
                        "must be an integer from 1 to {MAX_RUN_TIMEOUT_MS} (7 days), or null \
                         for no run timeout"
                    ),
                );
                None
            }
        },
    }
}

/// A workflow's `concurrency`: `Some(None)` for null (no limit).
fn concurrency(v: &Value, p: &mut Problems) -> Option<Option<Concurrency>> {
    let map = match v {
        Value::Null => return Some(None),
        Value::Object(map) => map,
        _ => {
            p.add("concurrency", "must be an object, or null for no limit");
            return None;
        }
    };
    let before = p.0.len();
    reject_unknown(map, &["limit", "key", "policy"], "concurrency.", p);
    let limit = match map.get("limit").map(Value::as_u64) {
        Some(Some(n)) if (1..=u64::from(MAX_CONCURRENCY_LIMIT)).contains(&n) => n as u32,
        _ => {
            p.add(
                "concurrency.limit",
                format!("is required: an integer from 1 to {MAX_CONCURRENCY_LIMIT}"),
            );
            0
        }
    };
    let key = match map.get("key") {
        None | Some(Value::Null) => None,
        Some(v) => text(v, "concurrency.key", MAX_CONCURRENCY_KEY, true, p),
    };
    if let Some(Err(reason)) = key.as_deref().map(crate::engine::concurrency_key::check) {
        p.add("concurrency.key", reason);
    }
    let policy = match map.get("policy") {
        None | Some(Value::Null) => ConcurrencyPolicy::Queue,
        Some(v) => match serde_json::from_value(v.clone()) {
            Ok(policy) => policy,
            Err(_) => {
                p.add(
                    "concurrency.policy",
                    "must be one of: queue, cancel_in_progress, cancel_newest",
                );
                ConcurrencyPolicy::Queue
            }
        },
    };
    (p.0.len() == before).then_some(Some(Concurrency { limit, key, policy }))
}

/// The optional body of `POST /v1/workflows/{id}/runs`.
pub fn run_request(body: Option<Value>) -> Result<Option<Value>, ApiError> {
    let Some(body) = body else { return Ok(None) };
    let map = object(body)?;
    let mut p = Problems::default();
    reject_unknown(&map, &["payload"], "", &mut p);
    let payload = match map.get("payload") {
        None | Some(Value::Null) => None,
        Some(Value::Object(o)) => Some(Value::Object(o.clone())),
        Some(_) => {
            p.add("payload", "must be an object");
            None
        }
    };
    p.finish(payload)
}

/// Where a retry starts (`POST /v1/runs/{id}/retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryFrom {
    /// At the first step that did not succeed; the steps before it keep their results.
    Failed,
    /// At the first step: everything runs again.
    Start,
}

/// The optional body of `POST /v1/runs/{id}/retry`: `{"from": "failed" | "start"}`.
pub fn retry_request(body: Option<Value>) -> Result<RetryFrom, ApiError> {
    let Some(body) = body else {
        return Ok(RetryFrom::Failed);
    };
    let map = object(body)?;
    let mut p = Problems::default();
    reject_unknown(&map, &["from"], "", &mut p);
    let from = match map.get("from") {
        None | Some(Value::Null) => RetryFrom::Failed,
        Some(v) if v == "failed" => RetryFrom::Failed,
        Some(v) if v == "start" => RetryFrom::Start,
        Some(_) => {
            p.add("from", "must be one of: failed, start");
            RetryFrom::Failed
        }
    };
    p.finish(from)
}

pub struct CreateWebhook {
    pub url: String,
    pub events: Vec<EventKind>,
    pub workflow_id: Option<String>,
}

pub fn create_webhook(body: Value, allow_http: bool) -> Result<CreateWebhook, ApiError> {
    let map = object(body)?;
    let mut p = Problems::default();
    reject_unknown(&map, &["url", "events", "workflow_id"], "", &mut p);
    let url = match map.get("url").and_then(Value::as_str).map(url::Url::parse) {
        Some(Ok(u)) if u.scheme() == "https" && u.host().is_some() => u.to_string(),
        Some(Ok(u)) if allow_http && u.scheme() == "http" && u.host().is_some() => u.to_string(),
        Some(Ok(_)) => {
            p.add("url", "must be an https:// URL");
            String::new()
        }
        _ => {
            p.add("url", "is required and must be an absolute https:// URL");
            String::new()
        }
    };
    if url.len() > 2048 {
        p.add("url", "must be at most 2048 characters");
    }
    let mut events = Vec::new();
    match map.get("events") {
        Some(Value::Array(items)) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                match item.as_str().and_then(EventKind::parse) {
                    Some(kind) if !events.contains(&kind) => events.push(kind),
                    Some(_) => p.add(format!("events[{i}]"), "is listed twice"),
                    None => p.add(
                        format!("events[{i}]"),
                        format!(
                            "unknown event kind; known: {}",
                            EventKind::ALL.map(|k| k.as_str()).join(", ")
                        ),
                    ),
                }
            }
        }
        _ => p.add(
            "events",
            "is required and must be a non-empty array of event kinds",
        ),
    }
    let workflow_id = match map.get("workflow_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 253 => Some(s.clone()),
        Some(_) => {
            p.add("workflow_id", "must be a workflow id");
            None
        }
    };
    p.finish(CreateWebhook {
        url,
        events,
        workflow_id,
    })
}

pub struct CreateApiKey {
    pub name: String,
    pub scopes: Vec<Scope>,
}

pub fn create_api_key(body: Value) -> Result<CreateApiKey, ApiError> {
    let map = object(body)?;
    let mut p = Problems::default();
    reject_unknown(&map, &["name", "scopes"], "", &mut p);
    let name = match map.get("name") {
        Some(v) => text(v, "name", MAX_NAME, true, &mut p).unwrap_or_default(),
        None => {
            p.add("name", "is required");
            String::new()
        }
    };
    let scopes = match map.get("scopes") {
        Some(Value::Array(items)) if !items.is_empty() => parse_scopes(items, &mut p),
        _ => {
            p.add(
                "scopes",
                "is required: a non-empty array of read, write, execute, admin",
            );
            Vec::new()
        }
    };
    p.finish(CreateApiKey { name, scopes })
}

fn parse_scopes(items: &[Value], p: &mut Problems) -> Vec<Scope> {
    let mut scopes = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item.as_str().and_then(Scope::parse) {
            Some(s) if !scopes.contains(&s) => scopes.push(s),
            Some(_) => {}
            None => p.add(
                format!("scopes[{i}]"),
                "must be one of: read, write, execute, admin",
            ),
        }
    }
    scopes
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
    fn patch_reports_each_bad_field_with_its_path() {
        let err = workflow_patch(json!({
            "state": "archived",
            "executor": "lambda",
            "trigger": {"type": "schedule"},
            "steps": [
                {"id": "ok", "action": "delay", "with": {"ms": 5}},
                {"id": "Bad Id", "action": "launch"},
                {"id": "ok", "action": "transform"},
                {"id": "r", "action": "fail", "retry": {"max_attempts": 0}, "timeout_ms": -1}
            ]
        }))
        .err()
        .unwrap();
        let got = fields(err);
        for want in [
            "state",
            "executor",
            "trigger.cron",
            "steps[1].id",
            "steps[1].action",
            "steps[2].with.value",
            "steps[3].retry.max_attempts",
            "steps[3].timeout_ms",
        ] {
            assert!(got.iter().any(|f| f == want), "{want} missing from {got:?}");
        }
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
            json!({"url": "https://h.test", "events": ["run.boom", "run.failed", "run.failed"]}),
            false,
        );
        assert_eq!(fields(err.err().unwrap()), ["events[0]", "events[2]"]);
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
    }
}
