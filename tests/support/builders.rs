//! Fluent builders for the fixtures of the cluster tests: a Workflow or a Run, as the
//! /v1 API takes it (`.json()`) or as a Kubernetes object (`.object()`, `.manifest()`).
//!
//! Steps are JSON as a test writes them, in either spelling: the API's (`timeout_ms`,
//! `for_each`, `for_each_concurrency`, `retry.max_attempts`…) or the CRD's
//! (`timeoutMs`, `forEach`, `retry.maxAttempts`…). Each form respells the keys it
//! needs; what a step has under `with` is left alone. A manifest is built as plain JSON
//! (never through the typed object), so a test can also send what the API server must
//! refuse; `.object()` is for specs the CRD types accept.
#![allow(dead_code)]

use flowline_core::crd::{Run, Workflow};
use serde_json::{Map, Value, json};

pub const API_VERSION: &str = "flowline.io/v1";

/// Step fields spelled differently by the API (first) and the CRD (second).
const STEP_KEYS: [(&str, &str); 3] = [
    ("timeout_ms", "timeoutMs"),
    ("for_each", "forEach"),
    ("for_each_concurrency", "forEachConcurrency"),
];
/// The same for the fields of a step's `retry`.
const RETRY_KEYS: [(&str, &str); 3] = [
    ("max_attempts", "maxAttempts"),
    ("backoff_ms", "backoffMs"),
    ("backoff_factor", "backoffFactor"),
];

#[derive(Clone, Copy, PartialEq)]
enum Spelling {
    Api,
    Crd,
}

fn rename(keys: &[(&str, &str)], key: &str, to: Spelling) -> String {
    keys.iter()
        .find_map(|(api, crd)| match to {
            Spelling::Crd => (key == *api).then_some(*crd),
            Spelling::Api => (key == *crd).then_some(*api),
        })
        .unwrap_or(key)
        .to_string()
}

/// `step` with its keys (and its `retry`'s) in the spelling `to`.
fn respell(step: &Value, to: Spelling) -> Value {
    let Value::Object(fields) = step else {
        return step.clone();
    };
    let fields: Map<String, Value> = fields
        .iter()
        .map(|(key, value)| {
            let value = match (key.as_str(), value) {
                ("retry", Value::Object(retry)) => Value::Object(
                    retry
                        .iter()
                        .map(|(k, v)| (rename(&RETRY_KEYS, k, to), v.clone()))
                        .collect(),
                ),
                _ => value.clone(),
            };
            (rename(&STEP_KEYS, key, to), value)
        })
        .collect();
    Value::Object(fields)
}

fn metadata(name: &str, labels: &Map<String, Value>, annotations: &Map<String, Value>) -> Value {
    let mut meta = json!({ "name": name });
    if !labels.is_empty() {
        meta["labels"] = Value::Object(labels.clone());
    }
    if !annotations.is_empty() {
        meta["annotations"] = Value::Object(annotations.clone());
    }
    meta
}

/// A Workflow. `new(name)` names the Kubernetes object; the display name (`spec.name`,
/// the API's `name`) is the same unless [`WorkflowBuilder::display_name`] says otherwise.
/// Unset fields are left out, so the defaults of the CRD or the API apply.
#[derive(Clone, Debug)]
pub struct WorkflowBuilder {
    name: String,
    display_name: Option<String>,
    description: Option<String>,
    state: Option<String>,
    trigger: Option<Value>,
    executor: Option<String>,
    steps: Vec<Value>,
    timeout_ms: Option<u64>,
    concurrency: Option<Value>,
    parallelism: Option<u32>,
    history: Option<Value>,
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
}

impl WorkflowBuilder {
    pub fn new(name: impl Into<String>) -> Self {
        WorkflowBuilder {
            name: name.into(),
            display_name: None,
            description: None,
            state: None,
            trigger: None,
            executor: None,
            steps: Vec::new(),
            timeout_ms: None,
            concurrency: None,
            parallelism: None,
            history: None,
            labels: Map::new(),
            annotations: Map::new(),
        }
    }

    /// The object's name (`metadata.name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `spec.name` (the API's `name`) when it differs from the object's name.
    pub fn display_name(mut self, name: impl Into<String>) -> Self {
        self.display_name = Some(name.into());
        self
    }

    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// `draft`, `active` or `paused` (or anything else, for a test of refusals).
    pub fn state(mut self, state: impl Into<String>) -> Self {
        self.state = Some(state.into());
        self
    }

    pub fn active(self) -> Self {
        self.state("active")
    }

    /// The whole `trigger` object, e.g. `{"type": "webhook"}`.
    pub fn trigger(mut self, trigger: Value) -> Self {
        self.trigger = Some(trigger);
        self
    }

    /// A `schedule` trigger.
    pub fn schedule(self, cron: &str, timezone: &str) -> Self {
        self.trigger(json!({"type": "schedule", "cron": cron, "timezone": timezone}))
    }

    /// `inline` or `job`.
    pub fn executor(mut self, executor: impl Into<String>) -> Self {
        self.executor = Some(executor.into());
        self
    }

    /// Appends one step.
    pub fn step(mut self, step: Value) -> Self {
        self.steps.push(step);
        self
    }

    /// Appends the steps of a JSON array (or one step, when `steps` is an object).
    pub fn steps(mut self, steps: Value) -> Self {
        match steps {
            Value::Array(steps) => self.steps.extend(steps),
            step => self.steps.push(step),
        }
        self
    }

    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// At most `limit` runs at once, in one group per workflow (policy `queue`).
    pub fn concurrency(mut self, limit: u32) -> Self {
        self.concurrency = Some(json!({ "limit": limit }));
        self
    }

    /// The whole `concurrency` object (`limit`, `key`, `policy`).
    pub fn concurrency_with(mut self, concurrency: Value) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    pub fn parallelism(mut self, steps: u32) -> Self {
        self.parallelism = Some(steps);
        self
    }

    /// Finished runs kept (a CRD field: the API has no such setting).
    pub fn history(mut self, succeeded: u32, failed: u32) -> Self {
        self.history = Some(json!({"succeeded": succeeded, "failed": failed}));
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    fn shown_name(&self) -> &str {
        self.display_name.as_deref().unwrap_or(&self.name)
    }

    /// The body the API takes: every field set, in the API's spelling (what `PATCH
    /// /v1/workflows/{id}` accepts; `POST` takes [`WorkflowBuilder::create_json`]).
    pub fn json(&self) -> Value {
        assert!(
            self.history.is_none(),
            "history is a CRD field; the API has none (use .object() or .manifest())"
        );
        let mut body = self.create_json();
        if let Some(rest) = self.patch_json() {
            body.as_object_mut()
                .unwrap()
                .extend(rest.as_object().unwrap().clone());
        }
        body
    }

    /// The body of `POST /v1/workflows`: the fields it takes (name, description, trigger).
    pub fn create_json(&self) -> Value {
        let mut body = json!({ "name": self.shown_name() });
        if let Some(description) = &self.description {
            body["description"] = json!(description);
        }
        if let Some(trigger) = &self.trigger {
            body["trigger"] = trigger.clone();
        }
        body
    }

    /// The fields `POST /v1/workflows` does not take, as a `PATCH` body; None when
    /// there is none.
    pub fn patch_json(&self) -> Option<Value> {
        let mut body = Map::new();
        if let Some(state) = &self.state {
            body.insert("state".into(), json!(state));
        }
        if let Some(executor) = &self.executor {
            body.insert("executor".into(), json!(executor));
        }
        if !self.steps.is_empty() {
            let steps = self.steps.iter().map(|s| respell(s, Spelling::Api));
            body.insert("steps".into(), Value::Array(steps.collect()));
        }
        if let Some(ms) = self.timeout_ms {
            body.insert("timeout_ms".into(), json!(ms));
        }
        if let Some(concurrency) = &self.concurrency {
            body.insert("concurrency".into(), concurrency.clone());
        }
        if let Some(parallelism) = self.parallelism {
            body.insert("parallelism".into(), json!(parallelism));
        }
        (!body.is_empty()).then_some(Value::Object(body))
    }

    /// `spec` of the Workflow object, in the CRD's spelling.
    pub fn spec(&self) -> Value {
        let mut spec = json!({ "name": self.shown_name() });
        let set = |spec: &mut Value, key: &str, value: Value| spec[key] = value;
        if let Some(description) = &self.description {
            set(&mut spec, "description", json!(description));
        }
        if let Some(state) = &self.state {
            set(&mut spec, "state", json!(state));
        }
        if let Some(trigger) = &self.trigger {
            set(&mut spec, "trigger", trigger.clone());
        }
        if let Some(executor) = &self.executor {
            set(&mut spec, "executor", json!(executor));
        }
        if !self.steps.is_empty() {
            let steps = self.steps.iter().map(|s| respell(s, Spelling::Crd));
            set(&mut spec, "steps", Value::Array(steps.collect()));
        }
        if let Some(history) = &self.history {
            set(&mut spec, "history", history.clone());
        }
        if let Some(ms) = self.timeout_ms {
            set(&mut spec, "timeoutMs", json!(ms));
        }
        if let Some(concurrency) = &self.concurrency {
            set(&mut spec, "concurrency", concurrency.clone());
        }
        if let Some(parallelism) = self.parallelism {
            set(&mut spec, "parallelism", json!(parallelism));
        }
        spec
    }

    /// The whole Workflow object as JSON.
    pub fn manifest_value(&self) -> Value {
        json!({
            "apiVersion": API_VERSION,
            "kind": "Workflow",
            "metadata": metadata(&self.name, &self.labels, &self.annotations),
            "spec": self.spec(),
        })
    }

    /// The object as text for `kubectl apply -f -` (JSON, which is YAML too).
    pub fn manifest(&self) -> String {
        serde_json::to_string_pretty(&self.manifest_value()).unwrap()
    }

    /// The typed object; fails the test when the CRD types refuse the spec.
    pub fn object(&self) -> Workflow {
        serde_json::from_value(self.manifest_value())
            .unwrap_or_else(|e| panic!("workflow {}: {e}", self.name))
    }
}

/// What names the workflow of a run: its object name (the API's id), or the workflow
/// itself.
pub trait WorkflowRef {
    fn workflow_ref(self) -> String;
}

impl WorkflowRef for &str {
    fn workflow_ref(self) -> String {
        self.to_string()
    }
}

impl WorkflowRef for String {
    fn workflow_ref(self) -> String {
        self
    }
}

impl WorkflowRef for &String {
    fn workflow_ref(self) -> String {
        self.clone()
    }
}

impl WorkflowRef for &Workflow {
    fn workflow_ref(self) -> String {
        self.metadata
            .name
            .clone()
            .expect("a stored workflow has a name")
    }
}

impl WorkflowRef for &WorkflowBuilder {
    fn workflow_ref(self) -> String {
        self.name.clone()
    }
}

/// A Run of the workflow `of(workflow)`. Through the API only its payload counts
/// (`.json()`); a Run object also needs a name.
#[derive(Clone, Debug)]
pub struct RunBuilder {
    workflow: String,
    name: Option<String>,
    payload: Option<Value>,
    idempotency_key: Option<String>,
    trigger: Option<String>,
    cancel: bool,
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
}

impl RunBuilder {
    /// A run of `workflow`: its object name (the API's id), or the workflow itself.
    pub fn of(workflow: impl WorkflowRef) -> Self {
        RunBuilder {
            workflow: workflow.workflow_ref(),
            name: None,
            payload: None,
            idempotency_key: None,
            trigger: None,
            cancel: false,
            labels: Map::new(),
            annotations: Map::new(),
        }
    }

    /// The object's name (`metadata.name`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The name given, if any.
    pub fn run_name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// What the steps read as `trigger.payload`.
    pub fn payload(mut self, payload: Value) -> Self {
        self.payload = Some(payload);
        self
    }

    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// `spec.trigger` (`manual`, `schedule` or `webhook`).
    pub fn trigger(mut self, trigger: impl Into<String>) -> Self {
        self.trigger = Some(trigger.into());
        self
    }

    /// Created already asked to stop (`spec.cancel`).
    pub fn cancelled(mut self) -> Self {
        self.cancel = true;
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// The body of `POST /v1/workflows/{id}/runs`.
    pub fn json(&self) -> Value {
        match &self.payload {
            Some(payload) => json!({ "payload": payload }),
            None => json!({}),
        }
    }

    /// `spec` of the Run object.
    pub fn spec(&self) -> Value {
        let mut spec = json!({ "workflowRef": self.workflow });
        if let Some(payload) = &self.payload {
            spec["payload"] = payload.clone();
        }
        if let Some(key) = &self.idempotency_key {
            spec["idempotencyKey"] = json!(key);
        }
        if let Some(trigger) = &self.trigger {
            spec["trigger"] = json!(trigger);
        }
        if self.cancel {
            spec["cancel"] = json!(true);
        }
        spec
    }

    /// The whole Run object as JSON.
    pub fn manifest_value(&self) -> Value {
        let name = self
            .name
            .as_deref()
            .expect("a Run object needs a name: RunBuilder::name");
        json!({
            "apiVersion": API_VERSION,
            "kind": "Run",
            "metadata": metadata(name, &self.labels, &self.annotations),
            "spec": self.spec(),
        })
    }

    /// The object as text for `kubectl apply -f -` (JSON, which is YAML too).
    pub fn manifest(&self) -> String {
        serde_json::to_string_pretty(&self.manifest_value()).unwrap()
    }

    /// The typed object; fails the test when the CRD types refuse it.
    pub fn object(&self) -> Run {
        serde_json::from_value(self.manifest_value())
            .unwrap_or_else(|e| panic!("run of {}: {e}", self.workflow))
    }
}

/// Steps as JSON, for [`WorkflowBuilder::step`] and [`WorkflowBuilder::steps`].
pub mod step {
    use serde_json::{Value, json};

    /// `transform` to `value`.
    pub fn transform(id: &str, value: Value) -> Value {
        json!({"id": id, "action": "transform", "with": {"value": value}})
    }

    /// `delay` of `ms` (a number, or a template such as `"{{ trigger.payload.ms }}"`).
    pub fn delay(id: &str, ms: impl Into<Value>) -> Value {
        json!({"id": id, "action": "delay", "with": {"ms": ms.into()}})
    }

    /// `fail` saying `message`.
    pub fn fail(id: &str, message: &str) -> Value {
        json!({"id": id, "action": "fail", "with": {"message": message}})
    }

    /// `http.request` of `method` to `url`.
    pub fn http(id: &str, method: &str, url: &str) -> Value {
        json!({"id": id, "action": "http.request", "with": {"method": method, "url": url}})
    }

    /// `approval`, with a `timeout_ms` when given.
    pub fn approval(id: &str, timeout_ms: Option<u64>) -> Value {
        match timeout_ms {
            Some(ms) => json!({"id": id, "action": "approval", "with": {"timeout_ms": ms}}),
            None => json!({"id": id, "action": "approval"}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workflow_is_the_same_through_the_api_and_as_an_object() {
        let wf = WorkflowBuilder::new("orders")
            .display_name("Order sync")
            .active()
            .executor("inline")
            .timeout_ms(5000)
            .concurrency(2)
            .parallelism(3)
            .step(json!({"id": "a", "action": "delay", "timeout_ms": 9,
                         "retry": {"max_attempts": 2}, "with": {"timeout_ms": 1}}))
            .step(step::transform("b", json!(1)));
        let api = wf.json();
        assert_eq!(api["name"], "Order sync");
        assert_eq!(api["timeout_ms"], 5000);
        assert_eq!(api["steps"][0]["retry"]["max_attempts"], 2);
        assert_eq!(wf.create_json(), json!({"name": "Order sync"}));
        let object = wf.object();
        assert_eq!(object.metadata.name.as_deref(), Some("orders"));
        assert_eq!(object.spec.name, "Order sync");
        assert_eq!(object.spec.timeout_ms, Some(5000));
        assert_eq!(object.spec.concurrency.as_ref().unwrap().limit, 2);
        assert_eq!(object.spec.steps[0].timeout_ms, Some(9));
        assert_eq!(object.spec.steps[0].retry.as_ref().unwrap().max_attempts, 2);
        // What a step has under `with` is its own: never respelled.
        assert_eq!(object.spec.steps[0].with, Some(json!({"timeout_ms": 1})));
        let manifest: Value = serde_json::from_str(&wf.manifest()).unwrap();
        assert_eq!(manifest["spec"]["steps"][0]["timeoutMs"], 9);
        // CRD spelling in, API spelling out.
        let crd = WorkflowBuilder::new("x")
            .step(json!({"id": "a", "action": "delay", "forEach": "{{ x }}"}));
        assert_eq!(crd.json()["steps"][0]["for_each"], "{{ x }}");
    }

    #[test]
    fn a_run_is_the_same_through_the_api_and_as_an_object() {
        let run = RunBuilder::of("orders")
            .name("orders-1")
            .payload(json!({"n": 1}))
            .idempotency_key("k")
            .label("team", "a");
        assert_eq!(run.json(), json!({"payload": {"n": 1}}));
        let object = run.object();
        assert_eq!(object.spec.workflow_ref, "orders");
        assert_eq!(object.spec.payload, Some(json!({"n": 1})));
        assert_eq!(object.spec.idempotency_key.as_deref(), Some("k"));
        assert_eq!(object.metadata.labels.unwrap()["team"], "a");
        assert_eq!(RunBuilder::of("orders").json(), json!({}));
    }
}
