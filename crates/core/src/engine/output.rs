//! What a run may store, and how its status is made to fit. Pure.
//!
//! Two budgets, for two readers:
//! - Later steps read earlier outputs through templates: a step output over
//!   [`MAX_STEP_OUTPUT`] is kept as a [`PREVIEW`]-byte preview (`outputTruncated: true`),
//!   and the outputs of one run stay under [`MAX_RUN_OUTPUTS`] together, oldest large
//!   outputs cut first ([`cap`], [`enforce_run_budget`]).
//! - The API server stores the whole Run object — metadata, spec (with a payload that a
//!   kubectl user may have made large) and status — and refuses one over its limit
//!   (1.5 MiB by default). Every status written is first passed through [`bound`]:
//!   errors are capped ([`crate::limits::cap_error`]) and the status is degraded in
//!   stages until the object fits [`RUN_OBJECT_BUDGET`]. A write refused as too large
//!   is retried with half the size ([`shrunk_budget`]), down to the least status a run
//!   can have.

use serde_json::Value;

use crate::crd::{Run, RunStatus, StepRecord};
use crate::limits::{cap_error, cap_to};

pub const MAX_STEP_OUTPUT: usize = 64 * 1024;
/// The most of a step's rendered input its record keeps whole (it is for people to
/// read: the step itself gets all of it).
pub const MAX_STEP_INPUT: usize = 4 * 1024;
pub const MAX_RUN_OUTPUTS: usize = 512 * 1024;
/// What the engine aims the whole Run object (metadata, spec and status) at: well
/// under the API server's limit, so a payload, a few errors and the outputs fit together.
pub const RUN_OBJECT_BUDGET: usize = 768 * 1024;
/// What is kept of a truncated output: the start of its JSON text, for humans.
const PREVIEW: usize = 1024;
/// What is kept of a step's error when even previews of outputs did not make the
/// status fit (the run's own error keeps its full [`crate::limits::MAX_ERROR_BYTES`]).
const ERROR_PREVIEW: usize = 256;
/// Writes refused as too large halve the size this many times, then write the least status.
pub const MAX_SHRINK: u32 = 4;

/// The bytes of `v` as JSON.
pub fn size(v: &impl serde::Serialize) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX)
}

/// The start of a value's JSON text, at most [`PREVIEW`] bytes, cut on a character
/// boundary (no marker: `outputTruncated` says it).
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
    cap_at(output, MAX_STEP_OUTPUT)
}

/// Caps a step's rendered input for its record: returns what to store and whether it
/// was truncated.
pub fn cap_input(input: Value) -> (Value, bool) {
    cap_at(input, MAX_STEP_INPUT)
}

fn cap_at(value: Value, limit: usize) -> (Value, bool) {
    if size(&value) > limit {
        (preview(&value), true)
    } else {
        (value, false)
    }
}

/// Shrinks records oldest first with `shrink_one` (which returns the bytes it saved)
/// until at least `excess` bytes are saved; returns the bytes saved.
fn shrink_oldest_first(
    steps: &mut [StepRecord],
    excess: usize,
    mut shrink_one: impl FnMut(&mut StepRecord) -> usize,
) -> usize {
    let mut saved = 0;
    for step in steps.iter_mut() {
        if saved >= excess {
            break;
        }
        saved += shrink_one(step);
    }
    saved
}

/// Sets `outputTruncated`; returns the bytes that costs (the key appears when set).
fn mark_truncated(step: &mut StepRecord) -> usize {
    set_flag(&mut step.output_truncated, r#","outputTruncated":true"#)
}

/// Sets a flag that is serialized only when true; returns the bytes of its `key` that
/// setting it adds.
fn set_flag(flag: &mut bool, key: &str) -> usize {
    let cost = if *flag { 0 } else { key.len() };
    *flag = true;
    cost
}

/// Replaces a large output by its preview.
fn output_to_preview(step: &mut StepRecord) -> usize {
    let Some(out) = step.output.as_ref() else {
        return 0;
    };
    let before = size(out);
    let cut = preview(out);
    let after = size(&cut);
    // Escaping can make a preview of a small output longer than the output.
    if after >= before {
        return 0;
    }
    step.output = Some(cut);
    (before - after).saturating_sub(mark_truncated(step))
}

/// Drops an output, leaving `outputTruncated: true`. (Its key goes too: the bytes
/// saved are a little more than counted.)
fn drop_output(step: &mut StepRecord) -> usize {
    match step.output.take() {
        Some(out) => size(&out).saturating_sub(mark_truncated(step)),
        None => 0,
    }
}

/// Drops a step's recorded input (it is for display only; `inputTruncated` says it
/// went).
fn drop_input(step: &mut StepRecord) -> usize {
    match step.input.take() {
        Some(input) => size(&input).saturating_sub(set_flag(
            &mut step.input_truncated,
            r#","inputTruncated":true"#,
        )),
        None => 0,
    }
}

/// Cuts a step's error to a short preview that still ends with the marker.
fn shorten_error(step: &mut StepRecord) -> usize {
    let Some(error) = step.error.take() else {
        return 0;
    };
    let before = error.len();
    let short = cap_to(error, ERROR_PREVIEW);
    let saved = before - short.len();
    step.error = Some(short);
    saved
}

/// Drops the iteration records of a `forEach` step (`items` still says how many there
/// were; the outputs are in `output`), and which iterations a running one finished (an
/// execution after a restart then runs them all again).
fn drop_iterations(step: &mut StepRecord) -> usize {
    let mut saved = 0;
    if !step.iterations.is_empty() {
        saved += size(&std::mem::take(&mut step.iterations));
    }
    if !step.items_done.is_empty() {
        saved += size(&std::mem::take(&mut step.items_done));
    }
    saved
}

/// Keeps the run's outputs under [`MAX_RUN_OUTPUTS`] by truncating the oldest large
/// outputs first.
pub fn enforce_run_budget(steps: &mut [StepRecord]) {
    let total: usize = steps
        .iter()
        .filter_map(|s| s.output.as_ref())
        .map(size)
        .sum();
    if let Some(excess) = total.checked_sub(MAX_RUN_OUTPUTS).filter(|e| *e > 0) {
        shrink_oldest_first(steps, excess, output_to_preview);
    }
}

/// The bytes the status of `run` may take: [`RUN_OBJECT_BUDGET`] less everything
/// else the object carries (metadata, spec and its payload).
pub fn status_budget(run: &Run) -> usize {
    let rest = Run {
        metadata: run.metadata.clone(),
        spec: run.spec.clone(),
        status: None,
    };
    RUN_OBJECT_BUDGET.saturating_sub(size(&rest))
}

/// The budget for the next write after a status of `refused` bytes was refused as too
/// large, at shrink `level` (1, 2, …): half of what was refused, and zero — the least
/// status — from [`MAX_SHRINK`] on.
pub fn shrunk_budget(refused: usize, level: u32) -> usize {
    if level >= MAX_SHRINK { 0 } else { refused / 2 }
}

/// Bytes `status` takes in a write.
pub fn status_size(status: &RunStatus) -> usize {
    size(status)
}

/// The status to write: every error capped, then degraded in stages — recorded inputs
/// dropped (they are for display only), outputs to previews, outputs dropped, step errors shortened, each oldest first — until it
/// serializes to at most `budget` bytes or nothing more can go (last: the iteration
/// records of `forEach` steps). Phase, times, step
/// states and events are never touched, so the final phase always gets written.
pub fn bound(status: RunStatus, budget: usize) -> RunStatus {
    let mut bounded = status;
    bounded.error = bounded.error.map(cap_error);
    for step in bounded.steps.iter_mut() {
        step.error = step.error.take().map(cap_error);
        // An iteration's error is a preview: a `forEach` step has up to 100 of them.
        for iteration in step.iterations.iter_mut() {
            iteration.error = iteration.error.take().map(|e| cap_to(e, ERROR_PREVIEW));
        }
    }
    // `current` only ever overestimates: every stage counts at most what it saved.
    let mut current = size(&bounded);
    let stages: [fn(&mut StepRecord) -> usize; 5] = [
        drop_input,
        output_to_preview,
        drop_output,
        shorten_error,
        drop_iterations,
    ];
    for stage in stages {
        let Some(excess) = current.checked_sub(budget).filter(|e| *e > 0) else {
            break;
        };
        current -= shrink_oldest_first(&mut bounded.steps, excess, stage);
    }
    bounded
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{EventKind, PendingEvent, RunPhase, StepPhase};
    use crate::limits::{MAX_ERROR_BYTES, TRUNCATED_MARKER};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use serde_json::json;

    fn run_with_payload(payload: Value) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r".repeat(253), "namespace": "n".repeat(63)},
            "spec": {"workflowRef": "w".repeat(253), "payload": payload}
        }))
        .unwrap()
    }

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

    #[test]
    fn errors_are_capped_in_every_written_status() {
        let huge = "e".repeat(600_000);
        let status = RunStatus {
            phase: RunPhase::Failed,
            error: Some(format!("step a (fail) failed: {huge}")),
            steps: vec![StepRecord {
                step_id: "a".into(),
                status: StepPhase::Failed,
                error: Some(huge),
                ..Default::default()
            }],
            ..Default::default()
        };
        let bounded = bound(status.clone(), RUN_OBJECT_BUDGET);
        for error in [&bounded.error, &bounded.steps[0].error] {
            let error = error.as_deref().unwrap();
            assert!(error.len() <= MAX_ERROR_BYTES, "{}", error.len());
            assert!(error.ends_with(TRUNCATED_MARKER));
        }
        assert!(
            bounded
                .error
                .unwrap()
                .starts_with("step a (fail) failed: eee")
        );
    }

    #[test]
    fn a_status_within_budget_is_written_as_it_is() {
        let status = RunStatus {
            steps: vec![StepRecord {
                step_id: "a".into(),
                output: Some(json!({"x": "y".repeat(50_000)})),
                error: Some("a short error".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(bound(status.clone(), RUN_OBJECT_BUDGET), status);
    }

    #[test]
    fn each_stage_goes_only_as_far_as_needed() {
        let steps = (0..4)
            .map(|i| StepRecord {
                step_id: format!("s{i}"),
                output: Some(json!("o".repeat(10_000))),
                error: Some("e".repeat(MAX_ERROR_BYTES)),
                ..Default::default()
            })
            .collect();
        let status = RunStatus {
            steps,
            ..Default::default()
        };
        let full = size(&status);
        // Room for all but one output: the oldest becomes a preview, the rest stay.
        let one_preview = bound(status.clone(), full - 5_000);
        assert!(one_preview.steps[0].output_truncated);
        assert!(one_preview.steps[1..].iter().all(|s| !s.output_truncated));
        // Room for no output at all: previews go too, errors stay whole.
        let mut without_outputs = status.clone();
        for step in without_outputs.steps.iter_mut() {
            (step.output, step.output_truncated) = (None, true);
        }
        let no_outputs = bound(status.clone(), size(&without_outputs) + 100);
        assert!(no_outputs.steps.iter().all(|s| s.output.is_none()));
        assert!(no_outputs.steps[3].error.as_ref().unwrap().len() == MAX_ERROR_BYTES);
        // No room: the least status, with short errors that still say they were cut.
        let least = bound(status.clone(), 0);
        for step in &least.steps {
            let error = step.error.as_deref().unwrap();
            assert!(error.len() <= ERROR_PREVIEW && error.ends_with(TRUNCATED_MARKER));
        }
    }

    #[test]
    fn inputs_are_capped_to_a_preview_and_dropped_before_any_output() {
        let (kept, cut) = cap_input(json!({"url": "https://example.test/a"}));
        assert_eq!(
            (kept, cut),
            (json!({"url": "https://example.test/a"}), false)
        );
        let (preview, cut) = cap_input(json!({"body": "b".repeat(MAX_STEP_INPUT)}));
        assert!(cut && preview.as_str().is_some_and(|p| p.len() <= PREVIEW));
        let steps = (0..3)
            .map(|i| StepRecord {
                step_id: format!("s{i}"),
                input: Some(json!("i".repeat(3_000))),
                output: Some(json!("o".repeat(10_000))),
                ..Default::default()
            })
            .collect();
        let status = RunStatus {
            steps,
            ..Default::default()
        };
        // Room for everything but one input: the oldest input goes, every output stays.
        let bounded = bound(status.clone(), size(&status) - 2_000);
        assert!(bounded.steps[0].input.is_none() && bounded.steps[0].input_truncated);
        assert!(bounded.steps[1..].iter().all(|s| s.input.is_some()));
        assert!(bounded.steps.iter().all(|s| !s.output_truncated));
    }

    #[test]
    fn refused_writes_halve_the_size_then_ask_for_the_least_status() {
        assert_eq!(shrunk_budget(1000, 1), 500);
        assert_eq!(shrunk_budget(500, MAX_SHRINK - 1), 250);
        assert_eq!(shrunk_budget(250, MAX_SHRINK), 0);
        assert_eq!(shrunk_budget(usize::MAX, u32::MAX), 0);
    }

    #[test]
    fn the_payload_counts_against_the_status_budget() {
        let small = status_budget(&run_with_payload(json!({})));
        let big = status_budget(&run_with_payload(json!({"p": "x".repeat(500_000)})));
        assert!(small > RUN_OBJECT_BUDGET - 2_000, "{small}");
        assert!(small - big >= 500_000, "{small} {big}");
        assert_eq!(
            status_budget(&run_with_payload(json!({"p": "x".repeat(1 << 20)}))),
            0
        );
    }

    /// The biggest a status can be once nothing more can go: per step its skeleton
    /// (id ≤ 63, name ≤ 200, times) and a short error; the run's error; its events.
    const LEAST_STATUS_BOUND: usize = crate::crd::MAX_STEPS * (600 + ERROR_PREVIEW)
        + MAX_ERROR_BYTES
        + EventKind::ALL.len() * 1024
        + MAX_ERROR_BYTES;

    fn random_text(rng: &mut StdRng, max: usize) -> String {
        let len = rng.random_range(0..=max);
        // Multi-byte characters too, so cuts must respect character boundaries.
        let unit = if rng.random_bool(0.5) { "é" } else { "x" };
        unit.repeat(len / unit.len())
    }

    fn random_value(rng: &mut StdRng, max: usize) -> Value {
        match rng.random_range(0..3) {
            0 => json!(random_text(rng, max)),
            1 => json!({"body": random_text(rng, max), "status": 200}),
            _ => json!(
                (0..rng.random_range(0..200))
                    .map(|i| json!({"i": i, "s": random_text(rng, max / 200)}))
                    .collect::<Vec<_>>()
            ),
        }
    }

    fn random_step(rng: &mut StdRng, i: usize) -> StepRecord {
        let now = jiff::Timestamp::now();
        StepRecord {
            step_id: format!("{i:0>63}"),
            name: "n".repeat(200),
            action: Some(crate::crd::Action::Transform),
            status: StepPhase::Succeeded,
            attempts: rng.random(),
            interruptions: rng.random(),
            started_at: Some(now),
            finished_at: Some(now),
            duration_ms: Some(rng.random()),
            input: rng.random_bool(0.8).then(|| random_value(rng, 20_000)),
            input_truncated: false,
            // Outputs beyond the per-step cap too: `bound` must not rely on `cap`.
            output: rng.random_bool(0.8).then(|| random_value(rng, 200_000)),
            output_truncated: false,
            error: rng.random_bool(0.3).then(|| random_text(rng, 700_000)),
            next_attempt_at: Some(now),
            wake_at: Some(now),
            reused: rng.random_bool(0.5),
            items: Some(100),
            items_done: (0..rng.random_range(0..=crate::crd::MAX_FOR_EACH_ITEMS as u32)).collect(),
            child_run_id: Some("run-0123456789".into()),
            iterations: (0..rng.random_range(0..=crate::crd::MAX_ITERATION_RECORDS as u32))
                .map(|index| crate::crd::IterationRecord {
                    index,
                    status: StepPhase::Failed,
                    attempts: rng.random(),
                    started_at: Some(now),
                    finished_at: Some(now),
                    error: rng.random_bool(0.3).then(|| random_text(rng, 10_000)),
                    child_run_id: Some(format!("run-{index:0>10}")),
                    next_attempt_at: Some(now),
                })
                .collect(),
        }
    }

    /// Property: whatever the engine holds in memory — up to 100 steps, outputs and
    /// errors of any size, any payload the API server could store, every kind of event
    /// — the status written stays within its budget (so well under 1 MiB), and the Run
    /// object within [`RUN_OBJECT_BUDGET`] unless its spec alone leaves no room, in
    /// which case it is the spec plus the least status. Phase, step states and events
    /// are written unchanged.
    #[test]
    fn the_largest_run_object_stays_within_the_budget() {
        let seed: u64 = rand::random();
        let mut rng = StdRng::seed_from_u64(seed);
        for case in 0..150 {
            let payload = match rng.random_range(0..4) {
                0 => json!({}),
                1 => json!({"big": random_text(&mut rng, 300_000)}),
                2 => random_value(&mut rng, 700_000),
                _ => json!({"huge": random_text(&mut rng, 1_400_000)}),
            };
            let mut run = run_with_payload(payload);
            let steps = (0..rng.random_range(1..=crate::crd::MAX_STEPS))
                .map(|i| random_step(&mut rng, i))
                .collect();
            let mut status = RunStatus {
                phase: RunPhase::Failed,
                error: Some(random_text(&mut rng, 900_000)),
                started_at: Some(jiff::Timestamp::now()),
                steps,
                ..Default::default()
            };
            for kind in EventKind::ALL {
                // Events are built by `events::data`, which caps their error.
                status.pending_events.push(PendingEvent {
                    id: "evt_0123456789".into(),
                    kind,
                    timestamp: jiff::Timestamp::now(),
                    data: crate::engine::events::data(kind, &run, &"w".repeat(200), &status),
                });
            }
            let budget = status_budget(&run);
            let bounded = bound(status.clone(), budget);
            let status_size = size(&bounded);
            run.status = Some(bounded.clone());
            let object = size(&run);
            let context = format!(
                "seed {seed} case {case}: status {status_size}, object {object}, budget {budget}"
            );
            assert!(status_size <= budget.max(LEAST_STATUS_BOUND), "{context}");
            assert!(status_size <= RUN_OBJECT_BUDGET, "{context}");
            let rest = object - status_size;
            assert!(
                object <= RUN_OBJECT_BUDGET.max(rest + LEAST_STATUS_BOUND),
                "{context}"
            );
            assert_eq!(bounded.phase, status.phase);
            assert_eq!(bounded.pending_events, status.pending_events);
            assert_eq!(
                bounded.steps.iter().map(|s| s.status).collect::<Vec<_>>(),
                status.steps.iter().map(|s| s.status).collect::<Vec<_>>()
            );
            let errors = bounded.steps.iter().filter_map(|s| s.error.as_deref());
            for error in errors.chain(bounded.error.as_deref()) {
                assert!(error.len() <= MAX_ERROR_BYTES, "{context}");
            }
        }
    }
}
