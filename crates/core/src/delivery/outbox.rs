//! Reading the outbox: the events Runs and Workflows hold in their status, the
//! payload each is delivered as, and which webhooks it is for. Pure.

use bytes::Bytes;
use jiff::Timestamp;
use kube::ResourceExt;
use serde_json::json;

use crate::clock::format_ts;
use crate::crd::{EventKind, PendingEvent, Run, Webhook, Workflow};

/// An event ready to be delivered: its identity and the exact bytes every attempt
/// sends (the signatures cover these bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: String,
    pub kind: EventKind,
    pub timestamp: Timestamp,
    /// Name of the workflow the event concerns (for `workflowRef` filters).
    pub workflow: String,
    pub body: Bytes,
    /// The uid of the Run that holds the event (none for a Workflow's): its
    /// deliveries join the run's trace (`telemetry::traces::run_context`).
    pub run_uid: Option<String>,
}

impl Event {
    pub fn new(pending: &PendingEvent, workflow: &str) -> Self {
        let body = json!({
            "id": pending.id,
            "event": pending.kind.as_str(),
            "timestamp": format_ts(pending.timestamp),
            "data": pending.data,
        });
        Event {
            id: pending.id.clone(),
            kind: pending.kind,
            timestamp: pending.timestamp,
            workflow: workflow.to_string(),
            body: Bytes::from(body.to_string()),
            run_uid: None,
        }
    }

    /// The event as held by the Run with this uid.
    pub fn of_run_uid(mut self, run_uid: Option<String>) -> Self {
        self.run_uid = run_uid;
        self
    }
}

/// The pending events of a Run, with the workflow they concern.
pub fn of_run(run: &Run) -> (&str, &[PendingEvent]) {
    let events = run
        .status
        .as_ref()
        .map(|s| s.pending_events.as_slice())
        .unwrap_or_default();
    (run.spec.workflow_ref.as_str(), events)
}

/// The pending events of a Workflow (state changes).
pub fn of_workflow(wf: &Workflow) -> (String, &[PendingEvent]) {
    let events = wf
        .status
        .as_ref()
        .map(|s| s.pending_events.as_slice())
        .unwrap_or_default();
    (wf.name_any(), events)
}

/// The stored event `id` among these Runs and Workflows (callers pass one namespace's).
pub fn find<'a>(
    runs: impl IntoIterator<Item = &'a Run>,
    workflows: impl IntoIterator<Item = &'a Workflow>,
    id: &str,
) -> Option<Event> {
    let held = |workflow: &str, events: &[PendingEvent]| {
        events
            .iter()
            .find(|e| e.id == id)
            .map(|e| Event::new(e, workflow))
    };
    runs.into_iter()
        .find_map(|r| {
            let (workflow, events) = of_run(r);
            held(workflow, events).map(|e| e.of_run_uid(r.uid()))
        })
        .or_else(|| {
            workflows.into_iter().find_map(|w| {
                let (workflow, events) = of_workflow(w);
                held(&workflow, events)
            })
        })
}

/// Whether the webhook subscribes to an event of `kind` about `workflow` (callers
/// only pair webhooks and events of the same namespace).
pub fn subscribes(hook: &Webhook, kind: EventKind, workflow: &str) -> bool {
    hook.spec.events.contains(&kind)
        && hook
            .spec
            .workflow_ref
            .as_deref()
            .is_none_or(|wanted| wanted == workflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(events: &[&str], workflow: Option<&str>) -> Webhook {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Webhook",
            "metadata": {"name": "wh", "namespace": "n"},
            "spec": {"url": "https://example.com", "events": events, "workflowRef": workflow}
        }))
        .unwrap()
    }

    #[test]
    fn the_body_is_the_contract_payload() {
        let pending = PendingEvent {
            id: "evt_abc".into(),
            kind: EventKind::RunFailed,
            timestamp: "2026-01-02T03:04:05.678Z".parse().unwrap(),
            data: json!({"run_id": "r", "error": "step a failed"}),
        };
        let event = Event::new(&pending, "wf");
        let body: serde_json::Value = serde_json::from_slice(&event.body).unwrap();
        assert_eq!(
            body,
            json!({"id": "evt_abc", "event": "run.failed", "timestamp": "2026-01-02T03:04:05.678Z",
                   "data": {"run_id": "r", "error": "step a failed"}})
        );
    }

    #[test]
    fn a_stored_event_is_found_in_runs_then_workflows() {
        let pending = |id: &str| json!([{"id": id, "kind": "run.started", "timestamp": "2026-01-01T00:00:00Z", "data": {}}]);
        let run: Run = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n"},
            "spec": {"workflowRef": "wf-a"},
            "status": {"pendingEvents": pending("evt_run")}
        }))
        .unwrap();
        let wf: Workflow = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "wf-b", "namespace": "n"},
            "spec": {"name": "B"},
            "status": {"pendingEvents": pending("evt_wf")}
        }))
        .unwrap();
        let found = |id| find([&run], [&wf], id).map(|e| e.workflow);
        assert_eq!(found("evt_run").as_deref(), Some("wf-a"));
        assert_eq!(found("evt_wf").as_deref(), Some("wf-b"));
        assert_eq!(found("evt_gone"), None);
    }

    #[test]
    fn subscription_is_by_kind_and_optional_workflow() {
        let all = hook(&["run.started", "workflow.paused"], None);
        assert!(subscribes(&all, EventKind::RunStarted, "a"));
        assert!(subscribes(&all, EventKind::WorkflowPaused, "b"));
        assert!(!subscribes(&all, EventKind::RunFailed, "a"));
        let one = hook(&["run.started"], Some("a"));
        assert!(subscribes(&one, EventKind::RunStarted, "a"));
        assert!(!subscribes(&one, EventKind::RunStarted, "b"));
    }
}
