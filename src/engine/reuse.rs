//! Results a retry keeps from the run it retries (`spec.reusedSteps`): which ones a
//! retry may keep, and the step records a run starts from. Pure.

use crate::crd::{ReusedStep, RunStatus, Step, StepPhase, StepRecord};

fn finished(phase: StepPhase) -> bool {
    matches!(phase, StepPhase::Succeeded | StepPhase::Skipped)
}

/// The results of `status` a retry from the first failed step keeps: the leading steps
/// that succeeded (or were skipped by their `when`), up to the first step that did not.
/// Everything from there on runs again.
pub fn reusable(status: Option<&RunStatus>) -> Vec<ReusedStep> {
    status
        .into_iter()
        .flat_map(|s| &s.steps)
        .take_while(|r| finished(r.status))
        .map(|r| ReusedStep {
            step_id: r.step_id.clone(),
            status: r.status,
            output: r.output.clone(),
            output_truncated: r.output_truncated,
        })
        .collect()
}

/// The records a run of `steps` starts from: the leading steps `reused` lists (by
/// position and id) finished with their kept result and `reused: true`, every other step
/// pending. An entry that does not match its step, or is not a finished result, ends
/// the reuse there: a run never skips a step it was not given the result of.
pub fn initial_records(steps: &[Step], reused: &[ReusedStep]) -> Vec<StepRecord> {
    let kept = steps
        .iter()
        .zip(reused)
        .take_while(|(step, r)| step.id == r.step_id && finished(r.status))
        .count();
    steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut record = StepRecord {
                step_id: s.id.clone(),
                name: s.display_name().to_string(),
                action: Some(s.action),
                ..Default::default()
            };
            if let Some(r) = reused.get(i).filter(|_| i < kept) {
                record.status = r.status;
                record.output = r.output.clone();
                record.output_truncated = r.output_truncated;
                record.reused = true;
            }
            record
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn steps(ids: &[&str]) -> Vec<Step> {
        ids.iter()
            .map(|id| serde_json::from_value(json!({"id": id, "action": "transform"})).unwrap())
            .collect()
    }

    fn status(records: serde_json::Value) -> RunStatus {
        serde_json::from_value(json!({"phase": "failed", "steps": records})).unwrap()
    }

    #[test]
    fn a_retry_keeps_the_finished_steps_before_the_first_that_did_not_finish() {
        let s = status(json!([
            {"stepId": "a", "name": "a", "status": "succeeded", "output": {"n": 1}},
            {"stepId": "b", "name": "b", "status": "skipped"},
            {"stepId": "c", "name": "c", "status": "failed", "error": "boom"},
            {"stepId": "d", "name": "d", "status": "succeeded", "output": 4},
        ]));
        let kept = reusable(Some(&s));
        let ids: Vec<_> = kept.iter().map(|r| r.step_id.as_str()).collect();
        assert_eq!(ids, ["a", "b"], "nothing after the failed step");
        assert_eq!(kept[0].output, Some(json!({"n": 1})));
        assert_eq!(kept[1].status, StepPhase::Skipped);
        let cancelled = status(json!([
            {"stepId": "a", "name": "a", "status": "cancelled"},
            {"stepId": "b", "name": "b", "status": "succeeded"},
        ]));
        assert!(reusable(Some(&cancelled)).is_empty());
        assert!(reusable(None).is_empty());
    }

    #[test]
    fn a_run_starts_from_its_kept_results_then_pending_steps() {
        let kept = reusable(Some(&status(json!([
            {"stepId": "a", "name": "a", "status": "succeeded", "output": "A", "outputTruncated": true},
            {"stepId": "b", "name": "b", "status": "failed"},
        ]))));
        let records = initial_records(&steps(&["a", "b", "c"]), &kept);
        assert_eq!(records.len(), 3);
        assert_eq!(
            (records[0].status, records[0].reused, records[0].attempts),
            (StepPhase::Succeeded, true, 0)
        );
        assert_eq!(records[0].output, Some(json!("A")));
        assert!(records[0].output_truncated);
        for r in &records[1..] {
            assert_eq!(
                (r.status, r.reused, &r.output),
                (StepPhase::Pending, false, &None)
            );
        }
        assert!(
            initial_records(&steps(&["a"]), &[])
                .iter()
                .all(|r| !r.reused)
        );
    }

    #[test]
    fn reuse_stops_at_the_first_entry_that_does_not_match_its_step() {
        let entry = |id: &str, status: StepPhase| ReusedStep {
            step_id: id.into(),
            status,
            output: Some(json!(id)),
            output_truncated: false,
        };
        // Out of order: b is not the first step, so nothing is kept.
        let records = initial_records(&steps(&["a", "b"]), &[entry("b", StepPhase::Succeeded)]);
        assert!(records.iter().all(|r| r.status == StepPhase::Pending));
        // A result that is not finished (written by hand) ends the reuse.
        let records = initial_records(
            &steps(&["a", "b", "c"]),
            &[
                entry("a", StepPhase::Succeeded),
                entry("b", StepPhase::Failed),
                entry("c", StepPhase::Succeeded),
            ],
        );
        let reused: Vec<bool> = records.iter().map(|r| r.reused).collect();
        assert_eq!(reused, [true, false, false]);
        // More entries than steps: the extra ones are ignored.
        let records = initial_records(
            &steps(&["a"]),
            &[
                entry("a", StepPhase::Succeeded),
                entry("z", StepPhase::Succeeded),
            ],
        );
        assert_eq!(records.len(), 1);
    }
}
