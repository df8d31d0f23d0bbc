//! JSON shapes of the API (CONTRACT §2), built from the custom resources.
//! The CRDs use Kubernetes' camelCase; the API uses the contract's snake_case.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use serde::{Serialize, Serializer};
use serde_json::{Value, json};

use super::auth::KeyRecord;
use crate::crd::{Run, RunPhase, StepPhase, StepRecord, Webhook, Workflow};

/// Annotation with the millisecond creation time the API records (Kubernetes'
/// `creationTimestamp` has only seconds).
pub const CREATED_AT_ANNOTATION: &str = "flowline.io/created-at";
/// Annotation with the time of the API's last spec write.
pub const UPDATED_AT_ANNOTATION: &str = "flowline.io/updated-at";

/// Timestamps as the contract wants them: RFC 3339, UTC, `Z`, milliseconds.
pub fn format_ts(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

pub fn now_ms() -> Timestamp {
    Timestamp::from_millisecond(Timestamp::now().as_millisecond())
        .unwrap_or_else(|_| Timestamp::now())
}

fn ser_ts<S: Serializer>(ts: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_ts(*ts))
}

fn ser_opt_ts<S: Serializer>(ts: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
    match ts {
        Some(ts) => ser_ts(ts, s),
        None => s.serialize_none(),
    }
}

fn k8s_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Timestamp {
    t.0
}

/// When the object was created, to the millisecond where the API recorded it.
pub fn created_at(meta: &ObjectMeta) -> Timestamp {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(CREATED_AT_ANNOTATION))
        .and_then(|v| v.parse().ok())
        .or_else(|| meta.creation_timestamp.as_ref().map(k8s_time))
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// When the spec last changed, whoever changed it: the API's annotation, or the
/// newest non-status managedFields entry (kubectl, GitOps), whichever is later.
pub fn updated_at(meta: &ObjectMeta) -> Timestamp {
    let annotated: Option<Timestamp> = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(UPDATED_AT_ANNOTATION))
        .and_then(|v| v.parse().ok());
    let managed = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref() != Some("status"))
        .filter_map(|f| f.time.as_ref().map(k8s_time))
        .max();
    let newest = match (annotated, managed) {
        // managedFields have second precision: prefer the precise annotation when
        // both fall in the same second.
        (Some(a), Some(m)) if m.as_second() > a.as_second() => m,
        (Some(a), _) => a,
        (None, Some(m)) => m,
        (None, None) => created_at(meta),
    };
    newest.max(created_at(meta))
}

#[derive(Serialize)]
pub struct WorkflowListItem {
    pub id: String,
    pub name: String,
    pub state: &'static str,
    #[serde(serialize_with = "ser_ts")]
    pub created_at: Timestamp,
    #[serde(serialize_with = "ser_ts")]
    pub updated_at: Timestamp,
}

impl From<&Workflow> for WorkflowListItem {
    fn from(wf: &Workflow) -> Self {
        WorkflowListItem {
            id: wf.name_any(),
            name: wf.spec.name.clone(),
            state: wf.spec.state.as_str(),
            created_at: created_at(&wf.metadata),
            updated_at: updated_at(&wf.metadata),
        }
    }
}

/// The full workflow definition.
pub fn workflow(wf: &Workflow) -> Value {
    let trigger = match wf.spec.trigger.type_ {
        crate::crd::TriggerType::Manual => json!({"type": "manual"}),
        crate::crd::TriggerType::Schedule => json!({
            "type": "schedule",
            "cron": wf.spec.trigger.cron,
            "timezone": wf.spec.trigger.timezone.as_deref().unwrap_or("UTC"),
        }),
    };
    let steps: Vec<Value> = wf
        .spec
        .steps
        .iter()
        .map(|s| {
            json!({
                "id": s.id,
                "name": s.display_name(),
                "action": s.action.as_str(),
                "with": s.with.clone().unwrap_or_else(|| json!({})),
                "retry": s.retry.as_ref().map(|r| json!({
                    "max_attempts": r.max_attempts,
                    "backoff_ms": r.backoff_ms,
                    "backoff_factor": r.backoff_factor,
                })),
                "timeout_ms": s.timeout_ms,
                "when": s.when,
            })
        })
        .collect();
    json!({
        "id": wf.name_any(),
        "name": wf.spec.name,
        "description": wf.spec.description,
        "state": wf.spec.state.as_str(),
        "trigger": trigger,
        "executor": wf.spec.executor,
        "steps": steps,
        "created_at": format_ts(created_at(&wf.metadata)),
        "updated_at": format_ts(updated_at(&wf.metadata)),
    })
}

/// The status clients see: a Run without status has been accepted and is running.
pub fn run_phase(run: &Run) -> RunPhase {
    run.status
        .as_ref()
        .map(|s| s.phase)
        .unwrap_or(RunPhase::Running)
}

pub fn run_started_at(run: &Run) -> Timestamp {
    run.status
        .as_ref()
        .and_then(|s| s.started_at)
        .unwrap_or_else(|| created_at(&run.metadata))
}

#[derive(Serialize)]
pub struct RunListItem {
    pub id: String,
    pub workflow_id: String,
    pub status: &'static str,
    #[serde(serialize_with = "ser_ts")]
    pub started_at: Timestamp,
    #[serde(serialize_with = "ser_opt_ts")]
    pub finished_at: Option<Timestamp>,
    pub duration_ms: Option<u64>,
}

impl From<&Run> for RunListItem {
    fn from(run: &Run) -> Self {
        let status = run.status.as_ref();
        RunListItem {
            id: run.name_any(),
            workflow_id: run.spec.workflow_ref.clone(),
            status: run_phase(run).as_str(),
            started_at: run_started_at(run),
            finished_at: status.and_then(|s| s.finished_at),
            duration_ms: status.and_then(|s| s.duration_ms),
        }
    }
}

fn step_phase(p: StepPhase) -> &'static str {
    match p {
        StepPhase::Pending => "pending",
        StepPhase::Running => "running",
        StepPhase::Succeeded => "succeeded",
        StepPhase::Failed => "failed",
        StepPhase::Skipped => "skipped",
        StepPhase::Cancelled => "cancelled",
    }
}

fn step_record(r: &StepRecord) -> Value {
    json!({
        "step_id": r.step_id,
        "name": r.name,
        "action": r.action.map(|a| a.as_str()),
        "status": step_phase(r.status),
        "attempts": r.attempts,
        "started_at": r.started_at.map(format_ts),
        "finished_at": r.finished_at.map(format_ts),
        "duration_ms": r.duration_ms,
        "output": r.output,
        "output_truncated": r.output_truncated,
        "error": r.error,
    })
}

/// The full run. Before the engine has recorded steps, they are listed from the
/// workflow as `pending`: nothing has happened to them yet.
pub fn run(run: &Run, workflow: Option<&Workflow>) -> Value {
    let item = RunListItem::from(run);
    let status = run.status.as_ref();
    let steps: Vec<Value> = match status.filter(|s| !s.steps.is_empty()) {
        Some(s) => s.steps.iter().map(step_record).collect(),
        None => workflow
            .map(|wf| {
                wf.spec
                    .steps
                    .iter()
                    .map(|s| {
                        step_record(&StepRecord {
                            step_id: s.id.clone(),
                            name: s.display_name().to_string(),
                            action: Some(s.action),
                            ..Default::default()
                        })
                    })
                    .collect()
            })
            .unwrap_or_default(),
    };
    json!({
        "id": item.id,
        "workflow_id": item.workflow_id,
        "status": item.status,
        "trigger": run.spec.trigger,
        "payload": run.spec.payload.clone().unwrap_or_else(|| json!({})),
        "cancel_requested": run.spec.cancel,
        "error": status.and_then(|s| s.error.clone()),
        "started_at": format_ts(item.started_at),
        "finished_at": item.finished_at.map(format_ts),
        "duration_ms": item.duration_ms,
        "steps": steps,
    })
}

/// A webhook; the signing secret is shown only in the create response.
pub fn webhook(hook: &Webhook, secret: Option<&str>) -> Value {
    let mut v = json!({
        "id": hook.name_any(),
        "url": hook.spec.url,
        "events": hook.spec.events,
        "workflow_id": hook.spec.workflow_ref,
        "enabled": hook.status.as_ref().map(|s| s.enabled).unwrap_or(true),
        "created_at": format_ts(created_at(&hook.metadata)),
    });
    if let Some(secret) = secret {
        v["secret"] = json!(secret);
    }
    v
}

/// An API key; its value is shown only in the create response.
pub fn api_key(record: &KeyRecord, value: Option<&str>) -> Value {
    let mut v = json!({
        "id": record.id,
        "name": record.name,
        "scopes": record.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "created_at": record.created_at.map(format_ts),
    });
    if let Some(value) = value {
        v["key"] = json!(value);
    }
    v
}

/// Annotations every object created by the API carries.
pub fn creation_annotations(at: Timestamp) -> BTreeMap<String, String> {
    let t = format_ts(at);
    BTreeMap::from([
        (CREATED_AT_ANNOTATION.to_string(), t.clone()),
        (UPDATED_AT_ANNOTATION.to_string(), t),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_have_milliseconds_and_z() {
        let ts: Timestamp = "2026-01-02T03:04:05.123456789Z".parse().unwrap();
        assert_eq!(format_ts(ts), "2026-01-02T03:04:05.123Z");
        let whole: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        assert_eq!(format_ts(whole), "2026-01-02T03:04:05.000Z");
    }

    #[test]
    fn updated_at_prefers_the_newest_writer() {
        let meta: ObjectMeta = serde_json::from_value(json!({
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {CREATED_AT_ANNOTATION: "2026-01-01T00:00:00.250Z", UPDATED_AT_ANNOTATION: "2026-01-01T00:00:10.500Z"},
            "managedFields": [
                {"manager": "kubectl", "operation": "Apply", "time": "2026-01-01T00:00:30Z"},
                {"manager": "flowline-controller", "operation": "Update", "subresource": "status", "time": "2026-01-01T00:05:00Z"}
            ]
        }))
        .unwrap();
        assert_eq!(format_ts(created_at(&meta)), "2026-01-01T00:00:00.250Z");
        assert_eq!(
            format_ts(updated_at(&meta)),
            "2026-01-01T00:00:30.000Z",
            "status writes do not count"
        );
    }

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
        let v = run(&r, Some(&wf));
        assert_eq!(v["status"], "running");
        assert_eq!(v["finished_at"], Value::Null);
        assert_eq!(v["duration_ms"], Value::Null);
        assert_eq!(v["steps"][0]["status"], "pending");
        assert_eq!(v["steps"][0]["attempts"], 0);
    }
}
