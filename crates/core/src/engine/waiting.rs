//! `wait` and `approval` steps: when one starts waiting, and what a waiting step
//! becomes when the run is looked at again. Pure.
//!
//! A waiting step holds no task: its record says `waiting` and, in `wakeAt`, when its
//! wait ends (or its approval times out). When every step of a run that can make
//! progress waits, the run is *parked* (`status.parked`): its execution ends, the run
//! controller requeues it at the earliest `wakeAt`, and a watch event (a decision in
//! `spec.approvals`, a cancel) wakes it at once. [`resume`] then says what each waiting
//! step became.

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::crd::{
    Action, ApprovalDecision, CallbackReceived, MatchedEvent, Run, RunStatus, Step, StepPhase,
    StepRecord, Verdict,
};

/// Longest wait for an event: 30 days.
pub const MAX_EVENT_WAIT_MS: u64 = 30 * 24 * 3600 * 1000;

/// Longest `wait` (`ms`, or `until` from the step's start) and approval timeout: a year.
pub const MAX_WAIT_MS: u64 = 366 * 24 * 3600 * 1000;

/// When a `wait` or `approval` step that starts waiting at `now` wakes (None: an
/// approval without a timeout), from its rendered inputs. Err: the inputs are invalid
/// (a deterministic failure of the step).
pub fn wake_at(action: Action, with: &Value, now: Timestamp) -> Result<Option<Timestamp>, String> {
    let after = |ms: u64, what: &str| -> Result<Option<Timestamp>, String> {
        if ms > MAX_WAIT_MS {
            return Err(format!("{what} must be at most {MAX_WAIT_MS} (a year)"));
        }
        Ok(Some(
            Timestamp::from_millisecond(now.as_millisecond().saturating_add(ms as i64))
                .map_err(|e| e.to_string())?,
        ))
    };
    match action {
        Action::Wait => match (with.get("ms"), with.get("until")) {
            (Some(ms), None) => {
                let ms = ms
                    .as_u64()
                    .ok_or("wait: `ms` must be a non-negative integer")?;
                after(ms, "wait: `ms`")
            }
            (None, Some(until)) => {
                let text = until
                    .as_str()
                    .ok_or("wait: `until` must be an RFC 3339 time")?;
                let at: Timestamp = text.parse().map_err(|_| {
                    format!("wait: `until` must be an RFC 3339 time; it is \"{text}\"")
                })?;
                if at.as_millisecond().saturating_sub(now.as_millisecond()) > MAX_WAIT_MS as i64 {
                    return Err("wait: `until` is more than a year away".into());
                }
                Ok(Some(at))
            }
            _ => Err("wait needs exactly one of `ms` and `until`".into()),
        },
        Action::WaitForEvent => match with.get("timeout_ms") {
            None | Some(Value::Null) => Ok(None),
            Some(ms) => {
                let ms = ms
                    .as_u64()
                    .filter(|ms| (1..=MAX_EVENT_WAIT_MS).contains(ms))
                    .ok_or("wait_for_event: `timeout_ms` must be an integer from 1 to 30 days")?;
                after(ms, "wait_for_event: `timeout_ms`")
            }
        },
        Action::Approval | Action::Callback => match with.get("timeout_ms") {
            None | Some(Value::Null) => Ok(None),
            Some(ms) => {
                let name = action.as_str();
                let ms = ms
                    .as_u64()
                    .filter(|ms| *ms > 0)
                    .ok_or_else(|| format!("{name}: `timeout_ms` must be a positive integer"))?;
                after(ms, &format!("{name}: `timeout_ms`"))
            }
        },
        other => Err(format!("{} is not a waiting action", other.as_str())),
    }
}

/// What from outside the run ends its waiting steps: decisions on approvals, and bodies
/// received by callbacks (the Run's `spec.approvals` and `spec.callbacks`).
#[derive(Debug, Clone, Copy)]
pub struct Inbox<'a> {
    pub approvals: &'a [ApprovalDecision],
    pub callbacks: &'a [CallbackReceived],
    pub events: &'a [MatchedEvent],
}

impl<'a> Inbox<'a> {
    /// What `run`'s spec holds.
    pub fn of(run: &'a Run) -> Self {
        Inbox {
            approvals: &run.spec.approvals,
            callbacks: &run.spec.callbacks,
            events: &run.spec.matched_events,
        }
    }
}

/// What a waiting step is now.
#[derive(Debug, Clone, PartialEq)]
pub enum Resumed {
    /// Still waiting, until this time (None: until a decision).
    Waiting(Option<Timestamp>),
    /// Done, with this output.
    Succeeded(Value),
    /// Failed, for this reason.
    Failed(String),
}

/// The decision `approvals` hold for `step_id`: the first one listed.
pub fn decision_for<'a>(
    approvals: &'a [ApprovalDecision],
    step_id: &str,
) -> Option<&'a ApprovalDecision> {
    approvals.iter().find(|d| d.step_id == step_id)
}

/// What the waiting `step` (its record `record`) is at `now`, given what the run
/// received (`inbox`). A decision or a callback made before the timeout wins over it,
/// even when it is read later; one without a time counts as made now.
pub fn resume(step: &Step, record: &StepRecord, inbox: Inbox<'_>, now: Timestamp) -> Resumed {
    let due = |at: Timestamp| at <= now;
    match step.action {
        Action::WaitForEvent => {
            if let Some(e) = inbox.events.iter().find(|e| e.step_id == step.id)
                && record.wake_at.is_none_or(|t| e.at.unwrap_or(now) < t)
            {
                return Resumed::Succeeded(json!({"event_id": e.event_id, "payload": e.payload}));
            }
            match record.wake_at {
                Some(t) if due(t) => {
                    let name = step
                        .with
                        .as_ref()
                        .and_then(|w| w.get("event"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    Resumed::Failed(format!("timed out waiting for event {name}"))
                }
                other => Resumed::Waiting(other),
            }
        }
        Action::Callback => {
            let timeout_at = record.wake_at;
            if let Some(c) = inbox.callbacks.iter().find(|c| c.step_id == step.id)
                && timeout_at.is_none_or(|t| c.at.unwrap_or(now) < t)
            {
                return Resumed::Succeeded(c.body.clone());
            }
            match timeout_at {
                Some(t) if due(t) => Resumed::Failed(format!(
                    "callback timed out after {} ms",
                    waited_ms(step, record, t)
                )),
                other => Resumed::Waiting(other),
            }
        }
        Action::Approval => {
            let timeout_at = record.wake_at;
            if let Some(d) = decision_for(inbox.approvals, &step.id) {
                let at = d.at.unwrap_or(now);
                if timeout_at.is_none_or(|t| at < t) {
                    return decided(d, at);
                }
            }
            match timeout_at {
                Some(t) if due(t) => Resumed::Failed(format!(
                    "approval timed out after {} ms",
                    waited_ms(step, record, t)
                )),
                other => Resumed::Waiting(other),
            }
        }
        Action::Wait => match record.wake_at {
            Some(t) if due(t) => Resumed::Succeeded(json!({"waited_until": t.to_string()})),
            // A waiting `wait` always records its time; without one it ends now.
            None => Resumed::Succeeded(json!({"waited_until": now.to_string()})),
            other => Resumed::Waiting(other),
        },
        other => Resumed::Failed(format!("{} is not a waiting action", other.as_str())),
    }
}

/// How long a step that timed out at `t` waited: its `timeout_ms`, or (inputs that are
/// templates) the time from its start to `t`.
fn waited_ms(step: &Step, record: &StepRecord, t: Timestamp) -> u64 {
    let from_inputs = step
        .with
        .as_ref()
        .and_then(|w| w.get("timeout_ms")?.as_u64());
    from_inputs.unwrap_or_else(|| {
        let start = record.started_at.unwrap_or(t);
        (t.as_millisecond() - start.as_millisecond()).max(0) as u64
    })
}

fn decided(d: &ApprovalDecision, at: Timestamp) -> Resumed {
    let by = d.by.clone().unwrap_or_else(|| "unknown".into());
    match d.decision {
        Verdict::Approve => Resumed::Succeeded(json!({
            "approved": true,
            "comment": d.comment,
            "by": by,
            "at": at.to_string(),
        })),
        Verdict::Reject => Resumed::Failed(match &d.comment {
            Some(c) if !c.is_empty() => format!("rejected by {by} at {at}: {c}"),
            _ => format!("rejected by {by} at {at}"),
        }),
    }
}

/// Whether `run` is parked with nothing to do at `now`: Some(the earliest time one of
/// its waiting steps, or its run timeout, is due; None: only a decision, a child's end
/// or a cancel can wake it). None: it is not parked, or something is due (a decision, a
/// time, a child run that ended, as `child_ended` says), so it must be executed.
pub fn still_parked(
    run: &Run,
    now: Timestamp,
    child_ended: &dyn Fn(&str) -> bool,
) -> Option<Option<Timestamp>> {
    let status: &RunStatus = run.status.as_ref()?;
    let wf = run.spec.workflow.as_ref()?;
    if !status.parked || run.spec.cancel || status.phase.is_finished() {
        return None;
    }
    // Parked with no step waiting: the flag outlived the park (a process killed after
    // it resumed the run, before it wrote again), so the run must be executed.
    if !status.steps.iter().any(|r| r.status == StepPhase::Waiting) {
        return None;
    }
    let mut earliest: Option<Timestamp> = None;
    let mut earlier = |t: Timestamp| {
        earliest = Some(earliest.map_or(t, |e: Timestamp| e.min(t)));
    };
    if let (Some(start), Some(ms)) = (status.started_at, wf.timeout_ms) {
        let deadline = Timestamp::from_millisecond(
            start
                .as_millisecond()
                .saturating_add(ms.min(i64::MAX as u64) as i64),
        )
        .ok()?;
        if deadline <= now {
            return None;
        }
        earlier(deadline);
    }
    for (step, record) in wf.steps.iter().zip(&status.steps) {
        if record.status != StepPhase::Waiting {
            continue;
        }
        if step.action == Action::Workflow {
            let limit = step.iterations_at_once();
            match super::subworkflow::still_waiting(record, limit, child_ended, now) {
                Some(Some(t)) => earlier(t),
                Some(None) => {}
                None => return None,
            }
            continue;
        }
        match resume(step, record, Inbox::of(run), now) {
            Resumed::Waiting(Some(t)) => earlier(t),
            Resumed::Waiting(None) => {}
            Resumed::Succeeded(_) | Resumed::Failed(_) => return None,
        }
    }
    Some(earliest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn step(action: &str, with: Value) -> Step {
        serde_json::from_value(json!({"id": "ok", "action": action, "with": with})).unwrap()
    }

    fn waiting(started: i64, wake: Option<i64>) -> StepRecord {
        StepRecord {
            step_id: "ok".into(),
            status: StepPhase::Waiting,
            started_at: Some(at(started)),
            wake_at: wake.map(at),
            ..Default::default()
        }
    }

    fn approvals(approvals: &[ApprovalDecision]) -> Inbox<'_> {
        Inbox {
            approvals,
            callbacks: &[],
            events: &[],
        }
    }

    #[test]
    fn a_callback_waits_for_its_body_until_its_timeout() {
        let s = step("callback", json!({"timeout_ms": 5000}));
        let r = waiting(100, Some(105));
        let received = |when: Option<i64>| CallbackReceived {
            step_id: "ok".into(),
            body: json!({"paid": true}),
            at: when.map(at),
        };
        let inbox = |c: &[CallbackReceived]| -> Resumed {
            let callbacks = c.to_vec();
            resume(
                &s,
                &r,
                Inbox {
                    approvals: &[],
                    callbacks: &callbacks,
                    events: &[],
                },
                at(104),
            )
        };
        assert_eq!(inbox(&[]), Resumed::Waiting(Some(at(105))));
        assert_eq!(
            inbox(&[received(Some(103))]),
            Resumed::Succeeded(json!({"paid": true}))
        );
        // Another step's body does not count.
        let mut other = received(Some(103));
        other.step_id = "other".into();
        assert_eq!(inbox(&[other]), Resumed::Waiting(Some(at(105))));
        let late = [received(Some(106))];
        assert_eq!(
            resume(
                &s,
                &r,
                Inbox {
                    approvals: &[],
                    callbacks: &late,
                    events: &[],
                },
                at(106)
            ),
            Resumed::Failed("callback timed out after 5000 ms".into())
        );
    }

    fn decision(v: Verdict, when: Option<i64>, comment: Option<&str>) -> ApprovalDecision {
        ApprovalDecision {
            step_id: "ok".into(),
            decision: v,
            comment: comment.map(String::from),
            by: Some("key_1".into()),
            at: when.map(at),
        }
    }

    #[test]
    fn wake_times_come_from_the_inputs() {
        let now = at(100);
        assert_eq!(
            wake_at(Action::Wait, &json!({"ms": 2000}), now),
            Ok(Some(at(102)))
        );
        assert_eq!(
            wake_at(Action::Wait, &json!({"until": "1970-01-01T00:03:00Z"}), now),
            Ok(Some(at(180)))
        );
        assert_eq!(
            wake_at(Action::Approval, &json!({"timeout_ms": 5000}), now),
            Ok(Some(at(105)))
        );
        assert_eq!(wake_at(Action::Approval, &json!({}), now), Ok(None));
        for bad in [
            json!({}),
            json!({"ms": 1, "until": "1970-01-01T00:03:00Z"}),
            json!({"ms": -1}),
            json!({"until": "tomorrow"}),
            json!({"ms": MAX_WAIT_MS + 1}),
        ] {
            assert!(wake_at(Action::Wait, &bad, now).is_err(), "{bad}");
        }
        assert!(wake_at(Action::Approval, &json!({"timeout_ms": 0}), now).is_err());
        assert!(wake_at(Action::Approval, &json!({"timeout_ms": "x"}), now).is_err());
    }

    #[test]
    fn a_wait_waits_until_its_time_then_succeeds() {
        let s = step("wait", json!({"ms": 2000}));
        let r = waiting(100, Some(102));
        assert_eq!(
            resume(&s, &r, approvals(&[]), at(101)),
            Resumed::Waiting(Some(at(102)))
        );
        assert_eq!(
            resume(&s, &r, approvals(&[]), at(102)),
            Resumed::Succeeded(json!({"waited_until": at(102).to_string()}))
        );
    }

    #[test]
    fn an_approval_waits_for_its_decision() {
        let s = step("approval", json!({}));
        let r = waiting(100, None);
        assert_eq!(
            resume(&s, &r, approvals(&[]), at(5000)),
            Resumed::Waiting(None)
        );
        let yes = decision(Verdict::Approve, Some(200), Some("ship it"));
        assert_eq!(
            resume(&s, &r, approvals(std::slice::from_ref(&yes)), at(300)),
            Resumed::Succeeded(
                json!({"approved": true, "comment": "ship it", "by": "key_1",
                "at": at(200).to_string()})
            )
        );
        let no = decision(Verdict::Reject, Some(200), Some("not now"));
        match resume(&s, &r, approvals(&[no.clone(), yes.clone()]), at(300)) {
            Resumed::Failed(e) => assert!(
                e.starts_with("rejected by key_1") && e.ends_with("not now"),
                "{e}"
            ),
            other => panic!("{other:?}"),
        }
        // Decisions for other steps do not count.
        let other = ApprovalDecision {
            step_id: "other".into(),
            ..yes
        };
        assert_eq!(
            resume(&s, &r, approvals(&[other]), at(300)),
            Resumed::Waiting(None)
        );
    }

    #[test]
    fn an_approval_times_out_unless_decided_in_time() {
        let s = step("approval", json!({"timeout_ms": 5000}));
        let r = waiting(100, Some(105));
        assert_eq!(
            resume(&s, &r, approvals(&[]), at(104)),
            Resumed::Waiting(Some(at(105)))
        );
        assert_eq!(
            resume(&s, &r, approvals(&[]), at(105)),
            Resumed::Failed("approval timed out after 5000 ms".into())
        );
        // Decided before the timeout, read after it: the decision counts.
        let in_time = decision(Verdict::Approve, Some(104), None);
        assert!(matches!(
            resume(&s, &r, approvals(&[in_time]), at(110)),
            Resumed::Succeeded(_)
        ));
        let late = decision(Verdict::Approve, Some(106), None);
        assert!(matches!(
            resume(&s, &r, approvals(&[late]), at(110)),
            Resumed::Failed(_)
        ));
        // A decision without a time (kubectl) counts as made when it is read.
        let untimed = decision(Verdict::Approve, None, None);
        assert!(matches!(
            resume(&s, &r, approvals(std::slice::from_ref(&untimed)), at(104)),
            Resumed::Succeeded(_)
        ));
        assert!(matches!(
            resume(&s, &r, approvals(&[untimed]), at(106)),
            Resumed::Failed(_)
        ));
    }

    fn parked_run(status: Value, approvals: Value, cancel: bool, timeout: Option<u64>) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n"},
            "spec": {"workflowRef": "wf", "cancel": cancel, "approvals": approvals,
                "workflow": {"generation": 1, "name": "W", "timeoutMs": timeout, "steps": [
                    {"id": "ok", "action": "approval"},
                    {"id": "nap", "action": "wait", "with": {"ms": 1000}}]}},
            "status": status,
        }))
        .unwrap()
    }

    fn nothing_ended(_: &str) -> bool {
        false
    }

    #[test]
    fn a_parked_run_sleeps_until_its_earliest_wake_time() {
        let status = json!({"phase": "running", "parked": true, "startedAt": at(100).to_string(),
            "steps": [{"stepId": "ok", "name": "ok", "status": "waiting"},
                      {"stepId": "nap", "name": "nap", "status": "waiting", "wakeAt": at(110).to_string()}]});
        let r = parked_run(status.clone(), json!([]), false, None);
        assert_eq!(
            still_parked(&r, at(105), &nothing_ended),
            Some(Some(at(110)))
        );
        assert_eq!(
            still_parked(&r, at(110), &nothing_ended),
            None,
            "the wait is due"
        );
        // Its run timeout wakes it too.
        let r = parked_run(status.clone(), json!([]), false, Some(3000));
        assert_eq!(
            still_parked(&r, at(101), &nothing_ended),
            Some(Some(at(103)))
        );
        assert_eq!(still_parked(&r, at(104), &nothing_ended), None);
        // A decision or a cancel wakes it at once.
        let r = parked_run(
            status.clone(),
            json!([{"stepId": "ok", "decision": "approve"}]),
            false,
            None,
        );
        assert_eq!(still_parked(&r, at(105), &nothing_ended), None);
        assert_eq!(
            still_parked(
                &parked_run(status.clone(), json!([]), true, None),
                at(105),
                &nothing_ended
            ),
            None
        );
        // A run that is not parked is executed.
        let mut unparked = status.clone();
        unparked["parked"] = json!(false);
        assert_eq!(
            still_parked(
                &parked_run(unparked, json!([]), false, None),
                at(105),
                &nothing_ended
            ),
            None
        );
        // ...and so is one whose flag outlived its park: no step waits any more (it
        // was resumed, then its process was killed before it wrote again).
        let mut resumed = status;
        resumed["steps"] = json!([{"stepId": "ok", "name": "ok", "status": "succeeded"},
                                  {"stepId": "nap", "name": "nap", "status": "pending"}]);
        assert_eq!(
            still_parked(
                &parked_run(resumed, json!([]), false, None),
                at(105),
                &nothing_ended
            ),
            None,
            "a stale parked flag"
        );
    }

    /// Statuses are merge patches: an unparked status must say so, or the stored
    /// `parked: true` of the park before stays.
    #[test]
    fn an_unparked_status_clears_the_flag_in_a_merge_patch() {
        let status = crate::crd::RunStatus::default();
        let written = serde_json::to_value(&status).unwrap();
        assert_eq!(written["parked"], json!(false));
    }
}
