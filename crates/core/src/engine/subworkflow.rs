//! `workflow` steps: a child run of another workflow of the same account. Pure.
//!
//! A `workflow` step makes one *call* (or, under `forEach`, one per element). A call
//! starts a child run named after the parent, the step, the element and the attempt
//! ([`child_name`]), so executing the step again after a crash finds the child it
//! already created instead of starting a second one. With `wait`, the step then waits
//! like an approval: the run parks, holding no task and writing nothing, and the
//! child's end wakes it ([`call_next`] says what each call is then). A failed child
//! fails its call; the step's retry policy may start a new child, after its backoff.

use jiff::Timestamp;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use std::collections::BTreeSet;

use crate::crd::{RetryPolicy, Run, RunPhase, RunStatus, StepPhase, StepRecord};
use crate::engine::retry;

/// Deepest chain of calls: a run at this depth cannot start a child.
pub const MAX_CALL_DEPTH: u32 = 10;

/// Most child runs one `workflow` step may start (the elements of its `forEach`).
pub const MAX_CHILDREN_PER_STEP: usize = 100;

/// Longest error of a child kept in its parent's step error: a chain of failed calls
/// nests each child's error in its parent's, so each level is cut.
const MAX_CHILD_ERROR: usize = 1000;

/// The rendered inputs of a `workflow` step.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    /// The workflow id (its name in the parent's namespace).
    pub workflow: String,
    /// The child's trigger payload (an object; `{}` when absent).
    pub payload: Value,
    /// Whether the step waits for the child's end.
    pub wait: bool,
}

/// Reads the rendered `with` of a `workflow` step. Err: a deterministic failure of the
/// step, naming the input.
pub fn inputs(with: &Value) -> Result<Inputs, String> {
    let workflow = match with.get("workflow") {
        Some(Value::String(id)) if !id.trim().is_empty() => id.clone(),
        _ => return Err("workflow: `workflow` must be a workflow id".into()),
    };
    let payload = match with.get("payload") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => return Err("workflow: `payload` must be an object".into()),
    };
    let wait = match with.get("wait") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("workflow: `wait` must be true or false".into()),
    };
    Ok(Inputs {
        workflow,
        payload,
        wait,
    })
}

/// The depth of a child of `parent`. Err: the call would go deeper than
/// [`MAX_CALL_DEPTH`] (a workflow that calls itself, directly or through others).
pub fn child_depth(parent: &Run) -> Result<u32, String> {
    let depth = parent.spec.parent.as_ref().map_or(0, |p| p.depth) + 1;
    if depth > MAX_CALL_DEPTH {
        return Err(format!("workflow call depth exceeds {MAX_CALL_DEPTH}"));
    }
    Ok(depth)
}

/// The name of the child run that attempt `attempt` of a call starts: `run-` and ten
/// characters of a hash of the parent's uid, the step, the element and the attempt. The
/// same call always gets the same name, so creating it again finds it.
pub fn child_name(parent_uid: &str, step_id: &str, iteration: Option<u32>, attempt: u32) -> String {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let element = iteration.map_or_else(|| "-".to_string(), |i| i.to_string());
    let digest = Sha256::digest(format!("{parent_uid}/{step_id}/{element}/{attempt}"));
    let tail: String = digest
        .iter()
        .take(crate::ids::TAIL_LEN)
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect();
    format!("run-{tail}")
}

/// What a parent knows of one child run.
#[derive(Debug, Clone, PartialEq)]
pub enum Child {
    /// Queued or running.
    Unfinished,
    /// Ended: its phase, output and error.
    Ended {
        phase: RunPhase,
        output: Option<Value>,
        error: Option<String>,
    },
    /// Not found (deleted by someone).
    Gone,
}

/// One call of a `workflow` step, as its record keeps it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Call {
    /// The child its latest attempt started.
    pub child: Option<String>,
    /// Attempts made (children started).
    pub attempts: u32,
    /// When the next attempt starts a new child (after a failed one).
    pub retry_at: Option<Timestamp>,
}

/// What happens next to a call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallNext {
    /// Its child runs, or its retry is not due: wait (until this time, if any).
    Wait(Option<Timestamp>),
    /// Start attempt `n`: a new child.
    Start(u32),
    /// Retry after a failed child: no child until `at`.
    RetryAt {
        attempt_failed: String,
        at: Timestamp,
    },
    /// Its child succeeded: the call's output.
    Done(Value),
    /// Failed for good (no attempt left).
    Failed(String),
}

/// What `call` does next, its child being `child` (None: it has none), at `now`, under
/// `policy`; `jitter` in [0, 1) spreads retry delays.
pub fn call_next(
    call: &Call,
    child: Option<&Child>,
    policy: &RetryPolicy,
    now: Timestamp,
    jitter: f64,
) -> CallNext {
    let (Some(id), Some(child)) = (&call.child, child) else {
        return match call.retry_at {
            Some(at) if at > now => CallNext::Wait(Some(at)),
            _ => CallNext::Start(call.attempts + 1),
        };
    };
    let failure = match child {
        Child::Unfinished => return CallNext::Wait(None),
        Child::Ended {
            phase: RunPhase::Succeeded,
            output,
            ..
        } => {
            return CallNext::Done(json!({
                "run_id": id,
                "status": RunPhase::Succeeded.as_str(),
                "output": output,
            }));
        }
        Child::Ended { phase, error, .. } => {
            let verb = if *phase == RunPhase::Cancelled {
                "was cancelled"
            } else {
                "failed"
            };
            match error {
                Some(e) => format!("child run {id} {verb}: {}", cut(e)),
                None => format!("child run {id} {verb}"),
            }
        }
        Child::Gone => format!("child run {id} was deleted before it finished"),
    };
    match retry::delay_before(policy, call.attempts + 1, jitter) {
        Some(delay) => CallNext::RetryAt {
            attempt_failed: failure,
            at: Timestamp::from_millisecond(
                now.as_millisecond()
                    .saturating_add(delay.as_millis().min(i64::MAX as u128) as i64),
            )
            .unwrap_or(now),
        },
        None => CallNext::Failed(failure),
    }
}

fn cut(error: &str) -> String {
    if error.len() <= MAX_CHILD_ERROR {
        return error.to_string();
    }
    let mut end = MAX_CHILD_ERROR;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &error[..end])
}

/// The calls a waiting `workflow` step's record keeps: its iterations' under `forEach`,
/// else its own.
pub fn calls_of(record: &StepRecord) -> Vec<Call> {
    if record.items.is_some() {
        return record
            .iterations
            .iter()
            .map(|i| Call {
                child: i.child_run_id.clone(),
                attempts: i.attempts,
                retry_at: i.next_attempt_at,
            })
            .collect();
    }
    vec![Call {
        child: record.child_run_id.clone(),
        attempts: record.attempts,
        retry_at: record.next_attempt_at,
    }]
}

/// Whether a parked `workflow` step has something to do at `now`: a child of one of
/// its calls ended (`ended` says so from the caller's cache), or a call may start a
/// child (a call not started yet, or whose retry is due) while fewer than `limit`
/// ([`crate::crd::Step::iterations_at_once`]) children run. Some(earliest retry time) while it only waits; None
/// when it is due.
pub fn still_waiting(
    record: &StepRecord,
    limit: usize,
    ended: &dyn Fn(&str) -> bool,
    now: Timestamp,
) -> Option<Option<Timestamp>> {
    if record.status != StepPhase::Waiting {
        return None;
    }
    let calls = calls_of(record);
    let mut running = 0;
    for child in calls.iter().filter_map(|c| c.child.as_deref()) {
        if ended(child) {
            return None;
        }
        running += 1;
    }
    let mut earliest: Option<Timestamp> = None;
    for call in calls.iter().filter(|c| c.child.is_none()) {
        match call.retry_at {
            Some(at) if at > now => earliest = Some(earliest.map_or(at, |e| e.min(at))),
            _ if running < limit => return None,
            // Started once a running child ends, which wakes the step.
            _ => {}
        }
    }
    Some(earliest)
}

/// The names of the ended children among those `status`'s waiting steps wait for, as
/// `ended` tells from a cache: what wakes a step waiting on them while other steps of
/// its run execute.
pub fn ended_children(status: &RunStatus, ended: impl Fn(&str) -> bool) -> BTreeSet<String> {
    status
        .steps
        .iter()
        .filter(|s| s.status == StepPhase::Waiting)
        .flat_map(|s| calls_of(s).into_iter().filter_map(|c| c.child))
        .filter(|child| ended(child))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::IterationRecord;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn policy(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            backoff_ms: 1000,
            backoff_factor: 2.0,
        }
    }

    #[test]
    fn inputs_default_to_waiting_with_an_empty_payload_and_name_what_is_wrong() {
        assert_eq!(
            inputs(&json!({"workflow": "wf-a"})),
            Ok(Inputs {
                workflow: "wf-a".into(),
                payload: json!({}),
                wait: true
            })
        );
        assert_eq!(
            inputs(&json!({"workflow": "wf-a", "payload": {"n": 1}, "wait": false})),
            Ok(Inputs {
                workflow: "wf-a".into(),
                payload: json!({"n": 1}),
                wait: false
            })
        );
        let rows = [
            (json!({}), "`workflow`"),
            (json!({"workflow": " "}), "`workflow`"),
            (json!({"workflow": 3}), "`workflow`"),
            (json!({"workflow": "w", "payload": [1]}), "`payload`"),
            (json!({"workflow": "w", "wait": "yes"}), "`wait`"),
        ];
        for (with, names) in rows {
            let e = inputs(&with).unwrap_err();
            assert!(e.contains(names), "{with}: {e}");
        }
    }

    #[test]
    fn depth_counts_from_the_top_run_and_stops_past_the_bound() {
        let run = |depth: Option<u32>| -> Run {
            serde_json::from_value(json!({
                "apiVersion": "flowline.io/v1", "kind": "Run",
                "metadata": {"name": "r", "namespace": "n"},
                "spec": {"workflowRef": "wf", "parent": depth.map(|d| json!({
                    "runId": "p", "stepId": "s", "depth": d}))}
            }))
            .unwrap()
        };
        assert_eq!(child_depth(&run(None)), Ok(1));
        assert_eq!(child_depth(&run(Some(9))), Ok(10));
        assert_eq!(
            child_depth(&run(Some(10))),
            Err("workflow call depth exceeds 10".into())
        );
    }

    #[test]
    fn child_names_are_stable_valid_and_differ_per_call_and_attempt() {
        let a = child_name("uid-1", "call", None, 1);
        assert_eq!(a, child_name("uid-1", "call", None, 1));
        assert!(a.starts_with("run-") && a.len() == 14, "{a}");
        assert!(
            a[4..]
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        );
        let others = [
            child_name("uid-2", "call", None, 1),
            child_name("uid-1", "other", None, 1),
            child_name("uid-1", "call", Some(0), 1),
            child_name("uid-1", "call", Some(1), 1),
            child_name("uid-1", "call", None, 2),
        ];
        for other in &others {
            assert_ne!(&a, other);
        }
    }

    #[test]
    fn what_a_call_does_next() {
        let now = at(100);
        let started = |child: &str, attempts| Call {
            child: Some(child.into()),
            attempts,
            retry_at: None,
        };
        let ended = |phase, error: Option<&str>| Child::Ended {
            phase,
            output: Some(json!({"n": 1})),
            error: error.map(String::from),
        };
        let rows: Vec<(&str, Call, Option<Child>, RetryPolicy, CallNext)> = vec![
            (
                "no child yet: the first attempt",
                Call::default(),
                None,
                policy(1),
                CallNext::Start(1),
            ),
            (
                "a retry not due yet waits",
                Call {
                    child: None,
                    attempts: 1,
                    retry_at: Some(at(105)),
                },
                None,
                policy(3),
                CallNext::Wait(Some(at(105))),
            ),
            (
                "a retry due starts the next attempt",
                Call {
                    child: None,
                    attempts: 1,
                    retry_at: Some(at(100)),
                },
                None,
                policy(3),
                CallNext::Start(2),
            ),
            (
                "a running child is waited for",
                started("run-c", 1),
                Some(Child::Unfinished),
                policy(1),
                CallNext::Wait(None),
            ),
            (
                "a child that succeeded gives its output",
                started("run-c", 1),
                Some(ended(RunPhase::Succeeded, None)),
                policy(1),
                CallNext::Done(
                    json!({"run_id": "run-c", "status": "succeeded", "output": {"n": 1}}),
                ),
            ),
            (
                "a failed child fails the call without retries",
                started("run-c", 1),
                Some(ended(RunPhase::Failed, Some("step x failed"))),
                policy(1),
                CallNext::Failed("child run run-c failed: step x failed".into()),
            ),
            (
                "a cancelled child says so",
                started("run-c", 2),
                Some(ended(RunPhase::Cancelled, None)),
                policy(2),
                CallNext::Failed("child run run-c was cancelled".into()),
            ),
            (
                "a deleted child fails the call",
                started("run-c", 1),
                Some(Child::Gone),
                policy(1),
                CallNext::Failed("child run run-c was deleted before it finished".into()),
            ),
            (
                "a failed child with attempts left retries after the backoff",
                started("run-c", 1),
                Some(ended(RunPhase::Failed, Some("boom"))),
                policy(2),
                CallNext::RetryAt {
                    attempt_failed: "child run run-c failed: boom".into(),
                    at: Timestamp::from_millisecond(100_000 + 1000).unwrap(),
                },
            ),
        ];
        for (name, call, child, policy, want) in rows {
            assert_eq!(
                call_next(&call, child.as_ref(), &policy, now, 0.5),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn a_long_child_error_is_cut() {
        let call = Call {
            child: Some("run-c".into()),
            attempts: 1,
            retry_at: None,
        };
        let child = Child::Ended {
            phase: RunPhase::Failed,
            output: None,
            error: Some("é".repeat(2000)),
        };
        let CallNext::Failed(e) = call_next(&call, Some(&child), &policy(1), at(1), 0.5) else {
            panic!()
        };
        assert!(e.len() < 1100 && e.ends_with('…'), "{}", e.len());
    }

    #[test]
    fn a_parked_call_is_due_when_its_child_ends_or_its_retry_comes() {
        let now = at(100);
        let waiting = |child: Option<&str>, retry: Option<i64>| StepRecord {
            status: StepPhase::Waiting,
            attempts: 1,
            child_run_id: child.map(String::from),
            next_attempt_at: retry.map(at),
            ..Default::default()
        };
        let none_ended = |_: &str| false;
        let c_ended = |c: &str| c == "run-c";
        assert_eq!(
            still_waiting(&waiting(Some("run-c"), None), 1, &none_ended, now),
            Some(None)
        );
        assert_eq!(
            still_waiting(&waiting(Some("run-c"), None), 1, &c_ended, now),
            None
        );
        assert_eq!(
            still_waiting(&waiting(None, Some(110)), 1, &none_ended, now),
            Some(Some(at(110)))
        );
        assert_eq!(
            still_waiting(&waiting(None, Some(100)), 1, &none_ended, now),
            None
        );
        // Under forEach: the iterations' calls.
        let mut fan_out = waiting(None, None);
        fan_out.items = Some(2);
        fan_out.iterations = vec![
            IterationRecord {
                index: 0,
                child_run_id: Some("run-a".into()),
                ..Default::default()
            },
            IterationRecord {
                index: 1,
                child_run_id: Some("run-c".into()),
                ..Default::default()
            },
        ];
        assert_eq!(still_waiting(&fan_out, 4, &none_ended, now), Some(None));
        assert_eq!(still_waiting(&fan_out, 4, &c_ended, now), None);
        // A call not started yet: due while a slot is free, else when a child ends.
        fan_out.items = Some(3);
        fan_out.iterations.push(IterationRecord {
            index: 2,
            ..Default::default()
        });
        assert_eq!(still_waiting(&fan_out, 3, &none_ended, now), None);
        assert_eq!(still_waiting(&fan_out, 2, &none_ended, now), Some(None));
        assert_eq!(still_waiting(&fan_out, 2, &c_ended, now), None);
        // A due retry waits for a slot like a call not started.
        fan_out.iterations[2].next_attempt_at = Some(at(90));
        assert_eq!(still_waiting(&fan_out, 2, &none_ended, now), Some(None));
        fan_out.iterations[2].next_attempt_at = Some(at(120));
        assert_eq!(
            still_waiting(&fan_out, 3, &none_ended, now),
            Some(Some(at(120)))
        );
    }

    #[test]
    fn a_fan_out_of_calls_runs_for_each_concurrency_children_at_once() {
        let step = |extra: Value| -> crate::crd::Step {
            let mut s = json!({"id": "call", "action": "workflow", "with": {"workflow": "w"}});
            s.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            serde_json::from_value(s).unwrap()
        };
        assert_eq!(step(json!({})).iterations_at_once(), 4);
        assert_eq!(
            step(json!({"forEach": "{{ trigger.payload.xs }}", "forEachConcurrency": 2}))
                .iterations_at_once(),
            2
        );
        assert_eq!(
            step(json!({"forEach": "{{ trigger.payload.xs }}", "forEachConcurrency": 500}))
                .iterations_at_once(),
            50
        );
    }
}
