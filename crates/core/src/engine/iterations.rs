//! A `forEach` step's progress across executions. Pure.
//!
//! While the step runs, its record keeps the outputs of the iterations that succeeded
//! (`output`, an array with `null` for the others) and which ones those are
//! (`itemsDone`), as long as they fit in a step output. An execution after a restart
//! takes them from the record ([`resumable`]) and runs only the other elements, so a
//! crash costs the iterations in flight, not the whole fan-out.

use serde_json::Value;

use super::output::{MAX_STEP_OUTPUT, size};
use crate::crd::StepRecord;

/// The outputs an earlier execution of this step recorded for elements of an array of
/// `count` (the same array: the step's inputs are the run's, which do not change), by
/// index. Nothing when the record is of another array, or its outputs were cut.
pub fn resumable(record: &StepRecord, count: usize) -> Vec<(usize, Value)> {
    let Some(Value::Array(outputs)) = record.output.as_ref() else {
        return Vec::new();
    };
    if record.items != Some(count as u32) || record.output_truncated || outputs.len() != count {
        return Vec::new();
    }
    record
        .items_done
        .iter()
        .map(|&i| i as usize)
        .filter(|&i| i < count)
        .map(|i| (i, outputs[i].clone()))
        .collect()
}

/// Records in `record` that the elements `done` (sorted) succeeded with `outputs`
/// (`null` for the others), or, when those outputs are larger than a step output may
/// be, nothing: an execution after a restart then runs every element again.
pub fn record_progress(record: &mut StepRecord, outputs: &[Value], done: &[u32]) {
    let so_far = Value::Array(outputs.to_vec());
    if done.is_empty() || size(&so_far) > MAX_STEP_OUTPUT {
        forget_progress(record);
        return;
    }
    record.output = Some(so_far);
    record.output_truncated = false;
    record.items_done = done.to_vec();
}

/// Drops the progress of a step that ended without succeeding: its output was only
/// the outputs so far.
pub fn forget_progress(record: &mut StepRecord) {
    if !record.items_done.is_empty() {
        record.output = None;
        record.items_done = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(items: u32, output: Value, done: &[u32], truncated: bool) -> StepRecord {
        StepRecord {
            items: Some(items),
            output: Some(output),
            items_done: done.to_vec(),
            output_truncated: truncated,
            ..Default::default()
        }
    }

    #[test]
    fn an_execution_resumes_from_the_recorded_iterations_of_the_same_array() {
        let so_far = json!([{"n": 0}, null, {"n": 2}]);
        type Row<'a> = (&'a str, StepRecord, usize, Vec<(usize, Value)>);
        let rows: Vec<Row> = vec![
            (
                "two of three done",
                record(3, so_far.clone(), &[0, 2], false),
                3,
                vec![(0, json!({"n": 0})), (2, json!({"n": 2}))],
            ),
            (
                "an array of another length",
                record(3, so_far.clone(), &[0, 2], false),
                4,
                vec![],
            ),
            (
                "outputs cut by the run's budget",
                record(3, so_far.clone(), &[0, 2], true),
                3,
                vec![],
            ),
            (
                "an index beyond the array is ignored",
                record(3, so_far, &[0, 7], false),
                3,
                vec![(0, json!({"n": 0}))],
            ),
            ("nothing recorded", StepRecord::default(), 3, vec![]),
        ];
        for (name, r, count, want) in rows {
            assert_eq!(resumable(&r, count), want, "{name}");
        }
    }

    #[test]
    fn progress_is_recorded_while_it_fits_in_a_step_output() {
        let mut r = StepRecord::default();
        record_progress(&mut r, &[Value::Null, Value::Null], &[]);
        assert_eq!(r.output, None, "nothing done yet");
        record_progress(&mut r, &[json!(1), Value::Null], &[0]);
        assert_eq!(r.output, Some(json!([1, null])));
        assert_eq!(r.items_done, [0]);
        let big = json!("x".repeat(MAX_STEP_OUTPUT));
        record_progress(&mut r, &[json!(1), big], &[0, 1]);
        assert_eq!(r.output, None, "too large to keep: nothing to resume from");
        assert!(r.items_done.is_empty());
        record_progress(&mut r, &[json!(1), Value::Null], &[0]);
        forget_progress(&mut r);
        assert_eq!(
            (r.output, r.items_done),
            (None, vec![]),
            "ended unsucceeded"
        );
    }
}
