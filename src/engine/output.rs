//! Output size caps (CONTRACT §6): a step output over 64 KiB is stored truncated,
//! and the outputs of one run stay under 512 KiB together, so a Run object never
//! approaches Kubernetes' 1.5 MiB limit. Pure.

use serde_json::Value;

use crate::crd::StepRecord;

pub const MAX_STEP_OUTPUT: usize = 64 * 1024;
pub const MAX_RUN_OUTPUTS: usize = 512 * 1024;
/// What is kept of a truncated output: the start of its JSON text, for humans.
const PREVIEW: usize = 1024;

fn size(v: &Value) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX)
}

fn preview(v: &Value) -> Value {
    let text = v.to_string();
    let mut end = PREVIEW.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Value::String(text[..end].to_string())
}

/// Caps one output: returns what to store and whether it was truncated.
pub fn cap(output: Value) -> (Value, bool) {
    if size(&output) > MAX_STEP_OUTPUT {
        (preview(&output), true)
    } else {
        (output, false)
    }
}

/// Keeps the run's outputs under the total budget by truncating the oldest large
/// outputs first.
pub fn enforce_run_budget(steps: &mut [StepRecord]) {
    let total = |steps: &[StepRecord]| -> usize {
        steps
            .iter()
            .filter_map(|s| s.output.as_ref())
            .map(size)
            .sum()
    };
    let mut current = total(steps);
    for step in steps.iter_mut() {
        if current <= MAX_RUN_OUTPUTS {
            return;
        }
        let Some(out) = step.output.as_ref() else {
            continue;
        };
        let before = size(out);
        if before <= PREVIEW + 2 {
            continue;
        }
        let cut = preview(out);
        current = current - before + size(&cut);
        step.output = Some(cut);
        step.output_truncated = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn small_outputs_are_kept_whole() {
        assert_eq!(cap(json!({"a": 1})), (json!({"a": 1}), false));
    }

    #[test]
    fn large_outputs_are_truncated_to_a_preview() {
        let (stored, truncated) = cap(json!({"blob": "x".repeat(70 * 1024)}));
        assert!(truncated);
        assert!(
            stored.as_str().is_some_and(|s| s.len() <= PREVIEW),
            "a string preview of the JSON text"
        );
    }

    #[test]
    fn the_run_budget_truncates_oldest_first() {
        let big = || Some(json!("y".repeat(60 * 1024)));
        let mut steps: Vec<StepRecord> = (0..10)
            .map(|i| StepRecord {
                step_id: format!("s{i}"),
                output: big(),
                ..Default::default()
            })
            .collect();
        enforce_run_budget(&mut steps);
        let total: usize = steps
            .iter()
            .filter_map(|s| s.output.as_ref())
            .map(size)
            .sum();
        assert!(total <= MAX_RUN_OUTPUTS, "{total}");
        assert!(steps[0].output_truncated && !steps[9].output_truncated);
    }
}
