//! Inbound events (`POST /v1/events`, kind `FlowlineEvent`): every decision about them,
//! pure. The API names an event ([`object_name_for`]) and decides what a repeated
//! client id means ([`repeat`]); the event controller decides which workflows get a run
//! ([`plan`]), what each run is called ([`run_name`]), what the event's status says
//! when done ([`done_status`]) and when it is deleted ([`expires_at`]).
//!
//! Exactly one run per (event, workflow): the run's name is derived from the event
//! object's uid and the workflow's uid, so a fan-out repeated after a crash (or by a
//! second replica) meets `AlreadyExists` and moves on. The uid, not the event id: an
//! event id a client reuses after the 24 h window names a new object (a new uid), whose
//! runs must not collide with the old one's.

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::crd::{
    CancelOn, EventPhase, FlowlineEvent, FlowlineEventStatus, Run, TriggerType, Workflow,
    WorkflowState,
};
use crate::engine::expr;

/// The roots of a trigger's `filter`: `event.payload`, `event.name`, `event.id`.
pub const FILTER_ROOTS: [&str; 1] = ["event"];

/// The roots of a `cancelOn` entry's `match`: the event, and the run's trigger.
pub const MATCH_ROOTS: [&str; 2] = ["event", "trigger"];

/// The roots of a `wait_for_event` step's `match`: the event, the run's trigger and
/// the outputs of the run's finished steps.
pub const WAIT_MATCH_ROOTS: [&str; 3] = ["event", "trigger", "steps"];

/// Most runs one event cancels. Bounds one fan-out's writes and the size of the
/// event's status (`cancelled`); the status says `truncated` when more matched.
pub const MAX_CANCELS_PER_EVENT: usize = 1000;

/// How long a client id names the same event: a repeat within it answers the first
/// event; after it, the id names a new event.
pub const DEDUPE_WINDOW: SignedDuration = SignedDuration::from_hours(24);

/// How long the operator keeps an event by default (`--event-retention`).
pub const DEFAULT_RETENTION: SignedDuration = SignedDuration::from_hours(7 * 24);

/// Most workflows one event starts runs of. Bounds one fan-out's writes and the size
/// of the event's status (`runs`); the subscribed workflows beyond it (by name) get no
/// run and the status says `truncated`.
pub const MAX_WORKFLOWS_PER_EVENT: usize = 1000;

/// Most problems an event's status lists.
pub const MAX_PROBLEMS: usize = 20;

/// The object name of a new event: random, or with a client `id`, derived from it
/// (`evt-` and 32 hex digits of its SHA-256), so two posts of one id race for one name
/// and only one of them can create it.
pub fn object_name_for(client_id: Option<&str>) -> String {
    match client_id {
        None => crate::ids::new_id("evt"),
        Some(id) => {
            let digest = Sha256::digest(id.as_bytes());
            format!("evt-{}", hex::encode(&digest[..16]))
        }
    }
}

/// What a post with a client id whose name is taken by `existing` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// The same event, within the window: answer it, start nothing.
    Same,
    /// The window has passed: the old event makes room for the new one.
    Replace,
}

/// What a repeated client id means `now`, given the event already holding its name.
pub fn repeat(existing: &FlowlineEvent, now: Timestamp) -> Repeat {
    if now < existing.spec.received_at + DEDUPE_WINDOW {
        Repeat::Same
    } else {
        Repeat::Replace
    }
}

/// When the operator deletes `event` under `retention`.
pub fn expires_at(event: &FlowlineEvent, retention: SignedDuration) -> Timestamp {
    event.spec.received_at + retention
}

/// Whether `event` is due for deletion `now`: its retention has passed and its fan-out
/// is done (a pending event is never deleted: it is not fanned out yet).
pub fn expired(event: &FlowlineEvent, retention: SignedDuration, now: Timestamp) -> bool {
    event.phase() == EventPhase::Done && now >= expires_at(event, retention)
}

/// The expression context of an event: `event.id`, `event.name`, `event.payload`.
pub fn context(event: &FlowlineEvent) -> Value {
    json!({"event": {
        "id": event.id(),
        "name": event.spec.name,
        "payload": event.spec.payload.clone().unwrap_or_else(|| json!({})),
    }})
}

/// The run `event` starts of the workflow `workflow` (uid `workflow_uid`); the event's
/// object uid is `event_uid`. A valid object name; the prefix is for people reading
/// `kubectl get runs`.
pub fn run_name(workflow: &str, workflow_uid: &str, event_uid: &str) -> String {
    crate::ids::derived_run_name(workflow, &[event_uid.as_bytes(), workflow_uid.as_bytes()])
}

/// Whether `wf` starts runs on events named `name`: active, with an event trigger of
/// that name.
pub fn subscribed(wf: &Workflow, name: &str) -> bool {
    wf.spec.state == WorkflowState::Active
        && wf.spec.trigger.type_ == TriggerType::Event
        && wf.spec.trigger.event.as_deref() == Some(name)
}

/// Which workflows an event starts runs of.
#[derive(Debug, Default, PartialEq)]
pub struct FanOut {
    /// Indexes into the workflows given to [`plan`], in name order.
    pub start: Vec<usize>,
    /// Subscribed workflows looked at (at most [`MAX_WORKFLOWS_PER_EVENT`]).
    pub observed: u32,
    /// More were subscribed than one event may start.
    pub truncated: bool,
    /// Subscribed workflows whose filter could not be evaluated, with why.
    pub problems: Vec<String>,
}

/// Decides which of `workflows` (those of the event's namespace) get a run: the
/// subscribed ones ([`subscribed`]), the first [`MAX_WORKFLOWS_PER_EVENT`] by name,
/// whose `filter` (if any) is true over [`context`]. A filter that fails (a missing
/// path, mismatched types, one that does not parse) counts as false and is listed in
/// `problems`.
pub fn plan(event: &FlowlineEvent, workflows: &[Workflow]) -> FanOut {
    let mut candidates: Vec<usize> = (0..workflows.len())
        .filter(|&i| subscribed(&workflows[i], &event.spec.name))
        .collect();
    candidates.sort_by(|&a, &b| workflows[a].metadata.name.cmp(&workflows[b].metadata.name));
    let truncated = candidates.len() > MAX_WORKFLOWS_PER_EVENT;
    candidates.truncate(MAX_WORKFLOWS_PER_EVENT);
    let ctx = context(event);
    let mut fan = FanOut {
        observed: candidates.len() as u32,
        truncated,
        ..Default::default()
    };
    for i in candidates {
        let wf = &workflows[i];
        let holds = match wf.spec.trigger.filter.as_deref() {
            None => Ok(true),
            Some(filter) => expr::evaluate_over(filter, &ctx, &FILTER_ROOTS),
        };
        match holds {
            Ok(true) => fan.start.push(i),
            Ok(false) => {}
            Err(e) => fan.problem(format!(
                "workflow {}: filter failed: {e}",
                wf.metadata.name.as_deref().unwrap_or_default()
            )),
        }
    }
    fan
}

impl FanOut {
    /// Records a problem, up to [`MAX_PROBLEMS`].
    pub fn problem(&mut self, message: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(crate::limits::cap_to(
                message,
                crate::limits::MAX_EVENT_NOTE_BYTES,
            ));
        }
    }
}

/// The `cancelOn` entries of `wf` that name `event`'s name (any state: a paused
/// workflow's runs may still be running).
pub fn cancel_entries<'a>(event: &FlowlineEvent, wf: &'a Workflow) -> Vec<&'a CancelOn> {
    wf.spec
        .cancel_on
        .iter()
        .filter(|c| c.event == event.spec.name)
        .collect()
}

/// The error of a run `event` cancels.
pub fn cancel_reason(event: &FlowlineEvent) -> String {
    format!("cancelled by event {}", event.id())
}

/// What `event` does to one run of a workflow whose `cancelOn` entries naming it are
/// `entries`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancel {
    /// Leave it: finished, started by this very event, cancelled for another reason
    /// already, or no entry's `match` holds.
    Keep,
    /// Cancel it (set `spec.cancel` and the reason).
    Cancel,
    /// This event cancelled it already (an earlier try of this fan-out): record it.
    Cancelled,
    /// A `match` could not be evaluated: keep the run, report why.
    Problem(String),
}

/// The expression context of a `match`: the event, and the run's trigger (`payload`,
/// `event` when an event started it, `headers`).
pub fn match_context(event: &FlowlineEvent, run: &Run) -> Value {
    let mut ctx = context(event);
    ctx["trigger"] = crate::engine::run_context::trigger(run);
    ctx
}

/// The `wait_for_event` steps of `run` that `event` completes, as (step id, whether
/// this event completed it already): steps waiting for an event of its name since
/// before it was received, whose `match` (over `event.*`, `trigger.*` and `steps.*`)
/// holds. A step another event completed is left alone; a `match` that cannot be
/// evaluated is a problem, named like a cancel's.
pub fn resumes(event: &FlowlineEvent, run: &Run) -> (Vec<(String, bool)>, Vec<String>) {
    use crate::crd::{Action, StepPhase};
    let (mut found, mut problems) = (Vec::new(), Vec::new());
    let (Some(wf), Some(status)) = (run.spec.workflow.as_ref(), run.status.as_ref()) else {
        return (found, problems);
    };
    if run.phase().is_finished() {
        return (found, problems);
    }
    let mut ctx = Value::Null;
    for (step, record) in wf.steps.iter().zip(&status.steps) {
        if step.action != Action::WaitForEvent {
            continue;
        }
        let with = step.with.as_ref();
        if with.and_then(|w| w.get("event")).and_then(Value::as_str) != Some(&event.spec.name) {
            continue;
        }
        match run
            .spec
            .matched_events
            .iter()
            .find(|m| m.step_id == step.id)
        {
            Some(m) if m.event_id == event.id() => {
                found.push((step.id.clone(), true));
                continue;
            }
            Some(_) => continue,
            None => {}
        }
        let waiting_since = record
            .started_at
            .filter(|_| record.status == StepPhase::Waiting);
        if waiting_since.is_none_or(|since| since >= event.spec.received_at) {
            continue;
        }
        let holds = match with.and_then(|w| w.get("match")).and_then(Value::as_str) {
            None => Ok(true),
            Some(m) => {
                if ctx.is_null() {
                    ctx = match_context(event, run);
                    ctx["steps"] = crate::engine::run_context::finished_steps(status, |_| true);
                }
                expr::evaluate_over(m, &ctx, &WAIT_MATCH_ROOTS)
            }
        };
        match holds {
            Ok(true) => found.push((step.id.clone(), false)),
            Ok(false) => {}
            Err(e) => problems.push(format!(
                "run {} step {}: match failed: {e}",
                run.metadata.name.as_deref().unwrap_or_default(),
                step.id
            )),
        }
    }
    (found, problems)
}

/// A `wait_for_event` step of an unfinished run that waits and has no event yet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OpenWait {
    pub step_id: String,
    /// The event name it waits for.
    pub event: String,
    /// When it started waiting: events received after it may complete it.
    pub since: Timestamp,
}

/// The `wait_for_event` steps of `run` still open (see [`OpenWait`]).
///
/// An event whose fan-out listed the runs before the status showing such a step as
/// waiting had landed did not see it, although it was received after the step started:
/// the run controller catches those up once it sees that status, by listing the events
/// of the name received since and deciding each with [`resumes`].
pub fn open_waits(run: &Run) -> Vec<OpenWait> {
    use crate::crd::{Action, StepPhase};
    let (Some(wf), Some(status)) = (run.spec.workflow.as_ref(), run.status.as_ref()) else {
        return Vec::new();
    };
    if run.phase().is_finished() {
        return Vec::new();
    }
    wf.steps
        .iter()
        .zip(&status.steps)
        .filter(|(step, record)| {
            step.action == Action::WaitForEvent
                && record.status == StepPhase::Waiting
                && !run.spec.matched_events.iter().any(|m| m.step_id == step.id)
        })
        .filter_map(|(step, record)| {
            let event = step.with.as_ref()?.get("event")?.as_str()?;
            Some(OpenWait {
                step_id: step.id.clone(),
                event: event.to_string(),
                since: record.started_at?,
            })
        })
        .collect()
}

/// Decides what `event` does to `run` under `entries` (see [`Cancel`]). An entry
/// without `match` matches every run; several entries match when any does.
pub fn cancel(event: &FlowlineEvent, entries: &[&CancelOn], run: &Run) -> Cancel {
    let reason = cancel_reason(event);
    if run.spec.cancel {
        return if run.spec.cancel_reason.as_deref() == Some(reason.as_str()) {
            Cancel::Cancelled
        } else {
            Cancel::Keep
        };
    }
    let started_by_this = run.spec.event.as_ref().is_some_and(|e| e.id == event.id());
    if entries.is_empty() || run.phase().is_finished() || started_by_this {
        return Cancel::Keep;
    }
    let ctx = match_context(event, run);
    let mut problem = None;
    for entry in entries {
        match entry.match_.as_deref() {
            None => return Cancel::Cancel,
            Some(m) => match expr::evaluate_over(m, &ctx, &MATCH_ROOTS) {
                Ok(true) => return Cancel::Cancel,
                Ok(false) => {}
                Err(e) => problem = Some(format!("match failed: {e}")),
            },
        }
    }
    problem.map_or(Cancel::Keep, |why| {
        Cancel::Problem(format!(
            "run {}: {why}",
            run.metadata.name.as_deref().unwrap_or_default()
        ))
    })
}

/// The status of a fanned-out event: `done`, the runs started (by name, sorted), and
/// what [`plan`] found; what an earlier status recorded (`resumed`, `cancelled`) kept.
pub fn done_status(
    previous: Option<&FlowlineEventStatus>,
    fan: &FanOut,
    mut runs: Vec<String>,
    mut cancelled: Vec<String>,
    now: Timestamp,
) -> FlowlineEventStatus {
    runs.sort();
    runs.dedup();
    cancelled.sort();
    cancelled.dedup();
    let previous = previous.cloned().unwrap_or_default();
    FlowlineEventStatus {
        phase: EventPhase::Done,
        runs,
        cancelled,
        observed_workflows: fan.observed,
        truncated: fan.truncated,
        problems: fan.problems.clone(),
        done_at: Some(now),
        ..previous
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, payload: Value, received: &str) -> FlowlineEvent {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "FlowlineEvent",
            "metadata": {"name": "evt-abc", "namespace": "team", "uid": "e-uid"},
            "spec": {"name": name, "payload": payload, "receivedAt": received},
        }))
        .unwrap()
    }

    /// A run whose step `w` waits (since `since`) for `order.shipped` with `match`, after
    /// a step `a` whose output is `{"order": 7}`; `matched` is its spec.matchedEvents.
    fn waiting_run(since: &str, m: Option<&str>, phase: &str, matched: Value) -> Run {
        let mut with = json!({"event": "order.shipped"});
        if let Some(m) = m {
            with["match"] = json!(m);
        }
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "team"},
            "spec": {"workflowRef": "wf", "payload": {"order": 7}, "matchedEvents": matched,
                "workflow": {"generation": 1, "name": "W", "steps": [
                    {"id": "a", "action": "transform", "with": {"value": {"order": 7}}},
                    {"id": "w", "action": "wait_for_event", "with": with}]}},
            "status": {"phase": phase, "steps": [
                {"stepId": "a", "name": "a", "status": "succeeded", "output": {"order": 7}},
                {"stepId": "w", "name": "w", "status": "waiting", "startedAt": since}]}
        }))
        .unwrap()
    }

    #[test]
    fn an_event_completes_the_steps_waiting_for_it_since_before_it_whose_match_holds() {
        let at = "2026-01-01T00:00:10Z";
        let before = "2026-01-01T00:00:05Z";
        let after = "2026-01-01T00:00:20Z";
        let shipped = |order: i64| event("order.shipped", json!({"order": order}), at);
        let mine = json!([{"stepId": "w", "eventId": "evt_abc", "payload": {}}]);
        let others = json!([{"stepId": "w", "eventId": "evt_zzz", "payload": {}}]);
        let done = |ids: &[(&str, bool)]| -> Vec<(String, bool)> {
            ids.iter().map(|(s, d)| (s.to_string(), *d)).collect()
        };
        type Row<'a> = (&'a str, FlowlineEvent, Run, Vec<(String, bool)>);
        let rows: Vec<Row> = vec![
            (
                "no match: any event of the name",
                shipped(1),
                waiting_run(before, None, "running", json!([])),
                done(&[("w", false)]),
            ),
            (
                "a match over event, trigger and steps that holds",
                shipped(7),
                waiting_run(
                    before,
                    Some(
                        "event.payload.order == trigger.payload.order && steps.a.output.order == 7",
                    ),
                    "running",
                    json!([]),
                ),
                done(&[("w", false)]),
            ),
            (
                "a match that does not hold",
                shipped(8),
                waiting_run(
                    before,
                    Some("event.payload.order == trigger.payload.order"),
                    "running",
                    json!([]),
                ),
                vec![],
            ),
            (
                "waiting only since after the event",
                shipped(1),
                waiting_run(after, None, "running", json!([])),
                vec![],
            ),
            (
                "another name",
                event("order.paid", json!({}), at),
                waiting_run(before, None, "running", json!([])),
                vec![],
            ),
            (
                "already completed by this event (a repeated fan-out)",
                shipped(1),
                waiting_run(before, None, "running", mine),
                done(&[("w", true)]),
            ),
            (
                "already completed by another event",
                shipped(1),
                waiting_run(before, None, "running", others),
                vec![],
            ),
            (
                "a finished run",
                shipped(1),
                waiting_run(before, None, "failed", json!([])),
                vec![],
            ),
        ];
        for (name, ev, run, want) in rows {
            let (found, problems) = resumes(&ev, &run);
            assert_eq!(found, want, "{name}");
            assert!(problems.is_empty(), "{name}: {problems:?}");
        }
        let (found, problems) = resumes(
            &shipped(1),
            &waiting_run(
                before,
                Some("event.payload.nope.x > 1"),
                "running",
                json!([]),
            ),
        );
        assert!(found.is_empty());
        assert_eq!(
            problems.len(),
            1,
            "a match that cannot be evaluated is a problem"
        );
    }

    #[test]
    fn open_waits_are_waiting_steps_of_unfinished_runs_without_an_event() {
        let since = "2026-01-01T00:00:05Z";
        let open = vec![OpenWait {
            step_id: "w".into(),
            event: "order.shipped".into(),
            since: since.parse().unwrap(),
        }];
        let matched = json!([{"stepId": "w", "eventId": "evt_abc", "payload": {}}]);
        let mut not_started = waiting_run(since, None, "running", json!([]));
        not_started.status.as_mut().unwrap().steps[1].status = crate::crd::StepPhase::Pending;
        let rows: Vec<(&str, Run, Vec<OpenWait>)> = vec![
            (
                "waiting, no event yet",
                waiting_run(since, None, "running", json!([])),
                open.clone(),
            ),
            (
                "an event already matched",
                waiting_run(since, None, "running", matched),
                vec![],
            ),
            (
                "a finished run",
                waiting_run(since, None, "cancelled", json!([])),
                vec![],
            ),
            ("a step not waiting yet", not_started, vec![]),
        ];
        for (name, run, want) in rows {
            assert_eq!(open_waits(&run), want, "{name}");
        }
    }

    fn workflow(name: &str, state: &str, trigger: Value) -> Workflow {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}")},
            "spec": {"name": name, "state": state, "trigger": trigger},
        }))
        .unwrap()
    }

    fn started(fan: &FanOut, wfs: &[Workflow]) -> Vec<String> {
        fan.start
            .iter()
            .map(|&i| wfs[i].metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn only_active_subscribers_whose_filter_holds_get_a_run() {
        let ev = event(
            "order.created",
            json!({"total": 120, "region": "eu"}),
            "2026-01-01T00:00:00Z",
        );
        let on = |filter: Option<&str>| match filter {
            Some(f) => json!({"type": "event", "event": "order.created", "filter": f}),
            None => json!({"type": "event", "event": "order.created"}),
        };
        let wfs = vec![
            workflow("z-plain", "active", on(None)),
            workflow("a-big", "active", on(Some("event.payload.total > 100"))),
            workflow("small", "active", on(Some("event.payload.total < 100"))),
            workflow("paused", "paused", on(None)),
            workflow("draft", "draft", on(None)),
            workflow(
                "other-name",
                "active",
                json!({"type": "event", "event": "order.paid"}),
            ),
            workflow("manual", "active", json!({"type": "manual"})),
            workflow(
                "by-id",
                "active",
                on(Some(
                    "event.id == 'evt_abc' && event.name == 'order.created'",
                )),
            ),
            workflow("broken", "active", on(Some("event.payload.nope == 1"))),
            workflow("mismatch", "active", on(Some("event.payload.region > 3"))),
        ];
        let fan = plan(&ev, &wfs);
        assert_eq!(started(&fan, &wfs), ["a-big", "by-id", "z-plain"]);
        assert_eq!(fan.observed, 6);
        assert!(!fan.truncated);
        assert_eq!(fan.problems.len(), 2, "{:?}", fan.problems);
        assert!(fan.problems[0].starts_with("workflow broken: filter failed: path"));
        assert!(fan.problems[1].starts_with("workflow mismatch: filter failed"));
    }

    #[test]
    fn a_fan_out_starts_at_most_the_bound_first_by_name() {
        let ev = event("tick", json!({}), "2026-01-01T00:00:00Z");
        let wfs: Vec<Workflow> = (0..MAX_WORKFLOWS_PER_EVENT + 5)
            .rev()
            .map(|i| {
                workflow(
                    &format!("wf-{i:05}"),
                    "active",
                    json!({"type": "event", "event": "tick"}),
                )
            })
            .collect();
        let fan = plan(&ev, &wfs);
        assert!(fan.truncated);
        assert_eq!(fan.start.len(), MAX_WORKFLOWS_PER_EVENT);
        let names = started(&fan, &wfs);
        assert_eq!(names.first().map(String::as_str), Some("wf-00000"));
        assert_eq!(names.last().map(String::as_str), Some("wf-00999"));
    }

    #[test]
    fn problems_are_capped() {
        let mut fan = FanOut::default();
        for i in 0..50 {
            fan.problem(format!("p{i} {}", "x".repeat(5000)));
        }
        assert_eq!(fan.problems.len(), MAX_PROBLEMS);
        assert!(fan.problems[0].len() <= crate::limits::MAX_EVENT_NOTE_BYTES);
    }

    #[test]
    fn a_hostile_filter_costs_at_most_one_parse_and_a_bounded_walk() {
        // The longest filter allowed, over a payload of 1 MiB: refused at save time
        // when it does not parse; when it does, its evaluation stops at the budget and
        // its workflow gets no run, with the reason among the event's problems.
        let too_long = "event.payload.a == 1 && ".repeat(60);
        assert!(expr::check_over(&too_long, &FILTER_ROOTS).is_err());
        let deep = format!("{}true{}", "(".repeat(100), ")".repeat(100));
        assert!(expr::check_over(&deep, &FILTER_ROOTS).is_err());
        let filter = "event.payload.blob == event.payload.blob && ".repeat(20) + "true";
        assert!(filter.len() <= expr::MAX_LEN);
        let trigger = |filter: &str| json!({"type": "event", "event": "tick", "filter": filter});
        let wfs = vec![
            workflow("w", "active", trigger(&filter)),
            workflow("x", "active", trigger("event.payload.n == 1")),
        ];
        let many: serde_json::Map<String, Value> = (0..40_000)
            .map(|i| (format!("k{i:05}"), json!(i)))
            .collect();
        for blob in [json!("x".repeat(1 << 20)), Value::Object(many)] {
            let ev = event(
                "tick",
                json!({"blob": blob, "n": 1}),
                "2026-01-01T00:00:00Z",
            );
            let fan = plan(&ev, &wfs);
            assert_eq!(started(&fan, &wfs), ["x"]);
            assert!(
                fan.problems
                    .iter()
                    .any(|p| p.contains("compares too much data")),
                "{:?}",
                fan.problems
            );
        }
        // Paths outside `event` do not parse as a filter.
        assert!(expr::check_over("trigger.payload.a == 1", &FILTER_ROOTS).is_err());
        assert!(expr::check_over("steps.a.output == 1", &FILTER_ROOTS).is_err());
    }

    #[test]
    fn run_names_are_valid_and_per_event_object_and_workflow() {
        let a = run_name("orders", "wf-uid-1", "ev-uid-1");
        assert_eq!(a, run_name("orders", "wf-uid-1", "ev-uid-1"));
        assert_ne!(a, run_name("orders", "wf-uid-2", "ev-uid-1"));
        assert_ne!(a, run_name("orders", "wf-uid-1", "ev-uid-2"));
        assert!(a.starts_with("orders-") && a.len() == "orders-".len() + 16);
        let long = run_name(&format!("{}-.x", "a".repeat(39)), "u", "e");
        assert!(long.len() <= 63 && !long.contains("--"), "{long}");
    }

    #[test]
    fn client_ids_name_one_object_each() {
        let a = object_name_for(Some("order-42"));
        assert_eq!(a, object_name_for(Some("order-42")));
        assert_ne!(a, object_name_for(Some("order-43")));
        assert_eq!(a.len(), "evt-".len() + 32);
        assert!(crate::crd::event_object_name(&crate::crd::event_id(&a)) == Some(a));
        let random = object_name_for(None);
        assert_ne!(random, object_name_for(None));
        assert!(random.starts_with("evt-"));
    }

    #[test]
    fn a_repeat_within_a_day_is_the_same_event_then_a_new_one() {
        let ev = event("tick", json!({}), "2026-01-01T00:00:00Z");
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        for (now, expected) in [
            ("2026-01-01T00:00:00Z", Repeat::Same),
            ("2026-01-01T23:59:59.999Z", Repeat::Same),
            ("2026-01-02T00:00:00Z", Repeat::Replace),
            ("2026-03-01T00:00:00Z", Repeat::Replace),
        ] {
            assert_eq!(repeat(&ev, at(now)), expected, "{now}");
        }
    }

    #[test]
    fn only_done_events_past_their_retention_expire() {
        let mut ev = event("tick", json!({}), "2026-01-01T00:00:00Z");
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let week = DEFAULT_RETENTION;
        assert!(!expired(&ev, week, at("2026-02-01T00:00:00Z")), "pending");
        ev.status = Some(done_status(
            None,
            &FanOut::default(),
            vec![],
            vec![],
            at("2026-01-01T00:00:01Z"),
        ));
        for (now, expected) in [
            ("2026-01-07T23:59:59Z", false),
            ("2026-01-08T00:00:00Z", true),
            ("2026-02-01T00:00:00Z", true),
        ] {
            assert_eq!(expired(&ev, week, at(now)), expected, "{now}");
        }
        assert_eq!(expires_at(&ev, week), at("2026-01-08T00:00:00Z"));
    }

    #[test]
    fn the_done_status_lists_runs_once_and_keeps_what_was_recorded() {
        let previous = FlowlineEventStatus {
            resumed: vec!["r-x".into()],
            ..Default::default()
        };
        let fan = FanOut {
            observed: 3,
            truncated: true,
            ..Default::default()
        };
        let status = done_status(
            Some(&previous),
            &fan,
            vec!["b".into(), "a".into(), "b".into()],
            vec!["c".into(), "c".into()],
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(status.phase, EventPhase::Done);
        assert_eq!(status.runs, ["a", "b"]);
        assert_eq!(status.cancelled, ["c"]);
        assert_eq!(status.resumed, ["r-x"]);
        assert_eq!((status.observed_workflows, status.truncated), (3, true));
    }

    fn run(name: &str, phase: Option<&str>, spec: Value) -> Run {
        let mut full = json!({"workflowRef": "w"});
        full.as_object_mut()
            .unwrap()
            .extend(spec.as_object().cloned().unwrap_or_default());
        let mut object = json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": name, "namespace": "team"},
            "spec": full,
        });
        if let Some(phase) = phase {
            object["status"] = json!({"phase": phase});
        }
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn cancel_on_cancels_unfinished_matching_runs_once() {
        let ev = event(
            "order.cancelled",
            json!({"order": "A-1"}),
            "2026-01-01T00:00:00Z",
        );
        let wf = workflow("w", "active", json!({"type": "manual"}));
        let mut wf = wf;
        wf.spec.cancel_on = serde_json::from_value(json!([
            {"event": "order.cancelled", "match": "trigger.payload.order == event.payload.order"},
            {"event": "order.refunded"},
        ]))
        .unwrap();
        let entries = cancel_entries(&ev, &wf);
        assert_eq!(entries.len(), 1);
        let reason = cancel_reason(&ev);
        assert_eq!(reason, "cancelled by event evt_abc");
        let rows = [
            (
                "running, matching",
                run("r1", None, json!({"payload": {"order": "A-1"}})),
                Cancel::Cancel,
            ),
            (
                "queued, matching",
                run("r2", Some("queued"), json!({"payload": {"order": "A-1"}})),
                Cancel::Cancel,
            ),
            (
                "another order",
                run("r3", Some("running"), json!({"payload": {"order": "B-2"}})),
                Cancel::Keep,
            ),
            (
                "finished",
                run(
                    "r4",
                    Some("succeeded"),
                    json!({"payload": {"order": "A-1"}}),
                ),
                Cancel::Keep,
            ),
            (
                "cancelled by a user",
                run(
                    "r5",
                    None,
                    json!({"payload": {"order": "A-1"}, "cancel": true}),
                ),
                Cancel::Keep,
            ),
            (
                "cancelled by this event before",
                run(
                    "r6",
                    None,
                    json!({"payload": {"order": "A-1"}, "cancel": true, "cancelReason": reason}),
                ),
                Cancel::Cancelled,
            ),
            (
                "started by this event",
                run(
                    "r7",
                    None,
                    json!({"payload": {"order": "A-1"}, "event": {"id": "evt_abc", "name": "order.cancelled"}}),
                ),
                Cancel::Keep,
            ),
        ];
        for (name, r, expected) in rows {
            assert_eq!(cancel(&ev, &entries, &r), expected, "{name}");
        }
        // No payload path: a problem, the run kept.
        let r = run("r8", None, json!({}));
        assert!(
            matches!(cancel(&ev, &entries, &r), Cancel::Problem(p) if p.starts_with("run r8: match failed"))
        );
        // Without `match`, every unfinished run; no entry, none.
        let all = CancelOn {
            event: "order.cancelled".into(),
            match_: None,
        };
        assert_eq!(cancel(&ev, &[&all], &r), Cancel::Cancel);
        assert_eq!(cancel(&ev, &[], &r), Cancel::Keep);
        // The run's own event is readable as trigger.event.
        let by_event = CancelOn {
            event: "order.cancelled".into(),
            match_: Some("trigger.event.name == 'order.created'".into()),
        };
        let started = run(
            "r9",
            None,
            json!({"event": {"id": "evt_x", "name": "order.created"}}),
        );
        assert_eq!(cancel(&ev, &[&by_event], &started), Cancel::Cancel);
    }
}
