//! The standard conditions of a Run's status, derived from its phase: `Succeeded`
//! (`Unknown` while queued or running, then `True`, or `False` with the reason
//! `Failed` or `Cancelled`), as Tekton's runs carry, so `kubectl wait
//! --for=condition=Succeeded` and generic tooling understand a Run. Pure.

use jiff::Timestamp;

use crate::crd::{Condition, ConditionStatus, RunPhase, RunStatus, set_condition};

/// The type of the condition.
pub const SUCCEEDED: &str = "Succeeded";

/// The most a condition's message repeats of the run's error (the whole error is in
/// `status.error`).
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// The `Succeeded` condition a status in `phase` (failed with `error`) carries.
fn succeeded(status: &RunStatus) -> (ConditionStatus, &'static str, String) {
    let error =
        || crate::limits::cap_to(status.error.clone().unwrap_or_default(), MAX_MESSAGE_BYTES);
    match status.phase {
        RunPhase::Queued => (
            ConditionStatus::Unknown,
            "Queued",
            status
                .queued_for
                .unwrap_or(crate::crd::QueuedFor::Concurrency)
                .describe()
                .into(),
        ),
        RunPhase::Running if status.parked => {
            let waiting: Vec<&str> = status
                .steps
                .iter()
                .filter(|s| s.status == crate::crd::StepPhase::Waiting)
                .map(|s| s.step_id.as_str())
                .collect();
            (
                ConditionStatus::Unknown,
                "Waiting",
                crate::limits::cap_to(
                    format!("steps waiting: {}", waiting.join(", ")),
                    MAX_MESSAGE_BYTES,
                ),
            )
        }
        RunPhase::Running => (ConditionStatus::Unknown, "Running", String::new()),
        RunPhase::Succeeded => (ConditionStatus::True, "Succeeded", String::new()),
        RunPhase::Failed => (ConditionStatus::False, "Failed", error()),
        RunPhase::Cancelled => (ConditionStatus::False, "Cancelled", error()),
    }
}

/// Brings `status`'s conditions and observed generation up to date for a write made
/// now, for the Run at `generation`.
pub fn apply(status: &mut RunStatus, generation: Option<i64>, now: Timestamp) {
    let (condition_status, reason, message) = succeeded(status);
    set_condition(
        &mut status.conditions,
        Condition::new(
            SUCCEEDED,
            condition_status,
            reason,
            message,
            generation,
            now,
        ),
    );
    status.observed_generation = generation;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn with_phase(phase: RunPhase, error: Option<&str>) -> RunStatus {
        RunStatus {
            phase,
            error: error.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn a_parked_run_is_waiting() {
        let mut status = with_phase(RunPhase::Running, None);
        status.parked = true;
        status.steps = vec![crate::crd::StepRecord {
            step_id: "ok".into(),
            status: crate::crd::StepPhase::Waiting,
            ..Default::default()
        }];
        let (s, reason, message) = succeeded(&status);
        assert_eq!((s, reason), (ConditionStatus::Unknown, "Waiting"));
        assert!(message.ends_with(": ok"), "{message}");
    }

    #[test]
    fn each_phase_has_its_succeeded_condition() {
        let cases = [
            (RunPhase::Queued, None, ConditionStatus::Unknown, "Queued"),
            (RunPhase::Running, None, ConditionStatus::Unknown, "Running"),
            (
                RunPhase::Succeeded,
                None,
                ConditionStatus::True,
                "Succeeded",
            ),
            (
                RunPhase::Failed,
                Some("step a (fail) failed: boom"),
                ConditionStatus::False,
                "Failed",
            ),
            (
                RunPhase::Cancelled,
                None,
                ConditionStatus::False,
                "Cancelled",
            ),
        ];
        for (phase, error, expected, reason) in cases {
            let mut status = with_phase(phase, error);
            apply(&mut status, Some(4), at(10));
            assert_eq!(status.conditions.len(), 1, "{phase:?}");
            let c = &status.conditions[0];
            assert_eq!(
                (c.type_.as_str(), c.status, c.reason.as_str()),
                (SUCCEEDED, expected, reason)
            );
            if phase == RunPhase::Queued {
                assert!(c.message.contains("concurrency limit"), "{}", c.message);
            } else {
                assert_eq!(c.message, error.unwrap_or_default());
            }
            assert_eq!(c.observed_generation, Some(4));
            assert_eq!(status.observed_generation, Some(4));
        }
    }

    #[test]
    fn a_huge_error_is_repeated_in_the_condition_only_in_part() {
        let mut status = with_phase(RunPhase::Failed, Some(&"x".repeat(600_000)));
        apply(&mut status, None, at(1));
        let message = &status.conditions[0].message;
        assert!(message.len() <= MAX_MESSAGE_BYTES, "{}", message.len());
        assert!(message.ends_with("[truncated]"));
    }

    #[test]
    fn the_transition_time_is_when_the_outcome_became_known() {
        let mut status = with_phase(RunPhase::Queued, None);
        apply(&mut status, Some(1), at(10));
        status.phase = RunPhase::Running;
        apply(&mut status, Some(1), at(20));
        assert_eq!(status.conditions[0].reason, "Running");
        assert_eq!(
            status.conditions[0].last_transition_time,
            at(10),
            "still Unknown"
        );
        status.phase = RunPhase::Succeeded;
        apply(&mut status, Some(2), at(30));
        assert_eq!(status.conditions[0].last_transition_time, at(30));
        assert_eq!(status.conditions.len(), 1);
    }
}
