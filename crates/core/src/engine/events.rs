//! Run events, recorded in the Run's status in the same write that
//! records the transition, so they survive a crash until they are delivered. Pure,
//! but for registering each new event as unseen with the delivery worker.

use kube::ResourceExt;
use serde_json::{Value, json};

use crate::clock::format_ts;
use crate::crd::{EventKind, PendingEvent, Run, RunPhase, RunStatus};
use crate::delivery::unseen;
use crate::limits::cap_error;

/// A fresh event id: `evt_` and 10 lowercase alphanumerics.
pub fn new_event_id() -> String {
    crate::ids::new_token_id("evt")
}

/// The event kind a final phase fires.
pub fn final_kind(phase: RunPhase) -> Option<EventKind> {
    match phase {
        RunPhase::Running | RunPhase::Queued => None,
        RunPhase::Succeeded => Some(EventKind::RunSucceeded),
        RunPhase::Failed => Some(EventKind::RunFailed),
        RunPhase::Cancelled => Some(EventKind::RunCancelled),
    }
}

/// The `data` of a run event, with the contract's fields for its kind.
pub fn data(kind: EventKind, run: &Run, workflow_name: &str, status: &RunStatus) -> Value {
    let ts = |t: Option<jiff::Timestamp>| t.map(format_ts);
    let mut data = json!({
        "run_id": run.metadata.name,
        "workflow_id": run.spec.workflow_ref,
        "workflow_name": workflow_name,
        "started_at": ts(status.started_at),
    });
    match kind {
        EventKind::RunStarted => data["trigger"] = json!(run.spec.trigger),
        EventKind::RunSucceeded | EventKind::RunFailed | EventKind::RunCancelled => {
            data["finished_at"] = json!(ts(status.finished_at));
            data["duration_ms"] = json!(status.duration_ms);
            if kind == EventKind::RunFailed {
                // Sent to every receiver and kept in the status until then: capped.
                data["error"] = json!(status.error.clone().map(cap_error));
            }
        }
        _ => {}
    }
    data
}

/// Records `kind` in the status unless it is already there (a resumed run does not
/// fire `run.started` twice).
pub fn record(status: &mut RunStatus, kind: EventKind, run: &Run, workflow_name: &str) {
    if status.pending_events.iter().any(|e| e.kind == kind) {
        return;
    }
    let data = data(kind, run, workflow_name, status);
    let id = new_event_id();
    // Registered before the write that records it; the registry stamps it.
    let timestamp = unseen::created(
        &run.namespace().unwrap_or_default(),
        &unseen::Holder::new(unseen::HolderKind::Run, &run.metadata),
        &id,
    );
    status.pending_events.push(PendingEvent {
        id,
        kind,
        timestamp,
        data,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "run-1", "namespace": "n"},
            "spec": {"workflowRef": "wf-1", "trigger": "schedule"}
        }))
        .unwrap()
    }

    #[test]
    fn each_kind_carries_the_contract_fields() {
        let status: RunStatus = serde_json::from_value(json!({
            "phase": "failed", "error": "step a (fail) failed: no",
            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01.5Z", "durationMs": 1500
        }))
        .unwrap();
        let started = data(EventKind::RunStarted, &run(), "Nightly", &status);
        assert_eq!(started["trigger"], "schedule");
        assert_eq!(started["started_at"], "2026-01-01T00:00:00.000Z");
        let failed = data(EventKind::RunFailed, &run(), "Nightly", &status);
        assert_eq!(
            (
                failed["run_id"].as_str(),
                failed["workflow_id"].as_str(),
                failed["workflow_name"].as_str()
            ),
            (Some("run-1"), Some("wf-1"), Some("Nightly"))
        );
        assert_eq!(
            (failed["error"].as_str(), failed["duration_ms"].as_u64()),
            (Some("step a (fail) failed: no"), Some(1500))
        );
        let cancelled = data(EventKind::RunCancelled, &run(), "Nightly", &status);
        assert!(
            cancelled.get("error").is_none(),
            "run.cancelled is run.failed without error"
        );
    }

    #[test]
    fn a_huge_error_is_sent_capped() {
        let status = RunStatus {
            phase: RunPhase::Failed,
            error: Some("x".repeat(600_000)),
            ..Default::default()
        };
        let failed = data(EventKind::RunFailed, &run(), "N", &status);
        let error = failed["error"].as_str().unwrap();
        assert!(
            error.len() <= crate::limits::MAX_ERROR_BYTES,
            "{}",
            error.len()
        );
        assert!(error.ends_with(crate::limits::TRUNCATED_MARKER));
    }

    #[test]
    fn an_event_is_recorded_once_with_a_fresh_id() {
        let mut status = RunStatus::default();
        record(&mut status, EventKind::RunStarted, &run(), "N");
        record(&mut status, EventKind::RunStarted, &run(), "N");
        assert_eq!(status.pending_events.len(), 1);
        assert!(status.pending_events[0].id.starts_with("evt_"));
        assert_eq!(
            final_kind(RunPhase::Succeeded),
            Some(EventKind::RunSucceeded)
        );
        assert_eq!(final_kind(RunPhase::Running), None);
    }
}
