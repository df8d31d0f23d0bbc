//! Results a retry keeps from the run it retries (`spec.reusedSteps`): which ones a
//! retry may keep, and the step records a run starts from. Pure.

use crate::crd::{ReusedStep, RunStatus, Step, StepPhase, StepRecord};

fn finished(phase: StepPhase) -> bool {
    matches!(phase, StepPhase::Succeeded | StepPhase::Skipped)
}

/// Which of `steps` keep a result: those `finished(i)` says finished whose every
/// step they wait for (their `needs`; the previous step in a sequential workflow)
/// keeps one too. In a sequential workflow that is the leading run of finished steps;
/// in a graph, every finished step none of whose ancestors runs again, so a kept
/// result never rests on a result that is computed anew. Steps in a cycle (a graph
/// that never validated) keep nothing.
fn kept(steps: &[Step], finished: impl Fn(usize) -> bool) -> Vec<bool> {
    let deps = super::graph::Graph::lenient(steps).deps;
    let mut kept = vec![false; steps.len()];
    // Each pass keeps at least one more step or ends: at most one pass per step.
    loop {
        let mut more = false;
        for i in 0..steps.len() {
            if !kept[i] && finished(i) && deps[i].iter().all(|&d| kept[d]) {
                kept[i] = true;
                more = true;
            }
        }
        if !more {
            return kept;
        }
    }
}

/// The results of `status` (a run of `steps`) a retry from the first failed step
/// keeps: the steps that succeeded (or were skipped by their `when`) and whose every
/// ancestor keeps its result too ([`kept`]). Everything else runs again.
pub fn reusable(status: Option<&RunStatus>, steps: &[Step]) -> Vec<ReusedStep> {
    let records = status.map(|s| s.steps.as_slice()).unwrap_or_default();
    let record = |i: usize| {
        records
            .get(i)
            .filter(|r| steps.get(i).is_some_and(|s| s.id == r.step_id))
    };
    let kept = kept(steps, |i| record(i).is_some_and(|r| finished(r.status)));
    (0..steps.len())
        .filter(|&i| kept[i])
        .filter_map(record)
        .map(|r| ReusedStep {
            step_id: r.step_id.clone(),
            status: r.status,
            output: r.output.clone(),
            output_truncated: r.output_truncated,
        })
        .collect()
}

/// The records a run of `steps` starts from: the steps `reused` gives a finished result
/// for (matched by id), whose every ancestor is given one too ([`kept`]), finished with
/// their kept result and `reused: true`; every other step pending. A run never skips a
/// step it was not given the result of, nor one whose inputs run again.
pub fn initial_records(steps: &[Step], reused: &[ReusedStep]) -> Vec<StepRecord> {
    let given = |i: usize| reused.iter().find(|r| r.step_id == steps[i].id);
    let kept = kept(steps, |i| given(i).is_some_and(|r| finished(r.status)));
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
            if let Some(r) = given(i).filter(|_| kept[i]) {
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
        let kept = reusable(Some(&s), &steps(&["a", "b", "c", "d"]));
        let ids: Vec<_> = kept.iter().map(|r| r.step_id.as_str()).collect();
        assert_eq!(ids, ["a", "b"], "nothing after the failed step");
        assert_eq!(kept[0].output, Some(json!({"n": 1})));
        assert_eq!(kept[1].status, StepPhase::Skipped);
        let cancelled = status(json!([
            {"stepId": "a", "name": "a", "status": "cancelled"},
            {"stepId": "b", "name": "b", "status": "succeeded"},
        ]));
        assert!(reusable(Some(&cancelled), &steps(&["a", "b"])).is_empty());
        assert!(reusable(None, &steps(&["a"])).is_empty());
    }

    #[test]
    fn a_run_starts_from_its_kept_results_then_pending_steps() {
        let kept = reusable(
            Some(&status(json!([
                {"stepId": "a", "name": "a", "status": "succeeded", "output": "A", "outputTruncated": true},
                {"stepId": "b", "name": "b", "status": "failed"},
            ]))),
            &steps(&["a", "b", "c"]),
        );
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
    fn reuse_stops_at_the_first_step_not_given_a_finished_result() {
        let entry = |id: &str, status: StepPhase| ReusedStep {
            step_id: id.into(),
            status,
            output: Some(json!(id)),
            output_truncated: false,
        };
        // b without a: b would skip a step whose result it follows, so nothing is kept.
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

    fn graph_steps(spec: serde_json::Value) -> Vec<Step> {
        serde_json::from_value(spec).unwrap()
    }

    /// In a graph, a retry keeps every finished step none of whose ancestors runs
    /// again, whatever the declared order: here `c` (declared before the failed `b`,
    /// needing only `a`) is kept, `d` (after `b`) runs again.
    #[test]
    fn a_graph_retry_keeps_the_finished_steps_whose_ancestors_are_kept() {
        let diamond = graph_steps(json!([
            {"id": "a", "action": "transform"},
            {"id": "c", "action": "transform", "needs": ["a"]},
            {"id": "b", "action": "transform", "needs": ["a"]},
            {"id": "d", "action": "transform", "needs": ["b", "c"]},
        ]));
        let s = status(json!([
            {"stepId": "a", "name": "a", "status": "succeeded", "output": 1},
            {"stepId": "c", "name": "c", "status": "succeeded", "output": 3},
            {"stepId": "b", "name": "b", "status": "failed", "error": "boom"},
            {"stepId": "d", "name": "d", "status": "pending"},
        ]));
        let kept = reusable(Some(&s), &diamond);
        let ids: Vec<_> = kept.iter().map(|r| r.step_id.as_str()).collect();
        assert_eq!(ids, ["a", "c"]);
        let records = initial_records(&diamond, &kept);
        let reused: Vec<bool> = records.iter().map(|r| r.reused).collect();
        assert_eq!(reused, [true, true, false, false]);
        // A step that succeeded after a step that runs again is not kept: `e` needs
        // `b`, which failed; declared first, it still must run again.
        let late = graph_steps(json!([
            {"id": "e", "action": "transform", "needs": ["b"]},
            {"id": "b", "action": "transform"},
        ]));
        let s = status(json!([
            {"stepId": "e", "name": "e", "status": "succeeded", "output": 5},
            {"stepId": "b", "name": "b", "status": "cancelled"},
        ]));
        assert!(reusable(Some(&s), &late).is_empty());
        // Given by hand for a step whose ancestor is not given: not kept.
        let given = [ReusedStep {
            step_id: "e".into(),
            status: StepPhase::Succeeded,
            output: Some(json!(5)),
            output_truncated: false,
        }];
        assert!(initial_records(&late, &given).iter().all(|r| !r.reused));
    }
}
