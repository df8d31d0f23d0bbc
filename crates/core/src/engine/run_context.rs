//! The parts of a run's template and expression context that come from the Run itself:
//! what started it (`trigger.*`) and what its finished steps produced (`steps.*`). The
//! engine builds each step's context from them, the event fan-out each `match`'s. Pure.

use serde_json::{Map, Value, json};

use crate::crd::{Run, RunStatus, StepPhase};

/// `trigger.payload`, `trigger.headers` and, for a run an event started,
/// `trigger.event.{id,name}`.
pub fn trigger(run: &Run) -> Value {
    let mut trigger = json!({
        "payload": run.spec.payload.clone().unwrap_or_else(|| json!({})),
        "headers": run.spec.headers.clone().unwrap_or_default(),
    });
    if let Some(event) = &run.spec.event {
        trigger["event"] = json!({"id": event.id, "name": event.name});
    }
    if let Some(tick) = run.scheduled_for() {
        trigger["scheduled_at"] = json!(crate::clock::format_ts(tick));
    }
    trigger
}

/// `steps.<id>.output`, `.output_truncated` and `.status` of the steps that succeeded or
/// were skipped, among those `visible` says (by position) may be read.
pub fn finished_steps(status: &RunStatus, visible: impl Fn(usize) -> bool) -> Value {
    let steps: Map<String, Value> = status
        .steps
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            visible(*i) && matches!(r.status, StepPhase::Succeeded | StepPhase::Skipped)
        })
        .map(|(_, r)| {
            let step = json!({"output": r.output, "output_truncated": r.output_truncated, "status": r.status});
            (r.step_id.clone(), step)
        })
        .collect();
    Value::Object(steps)
}
