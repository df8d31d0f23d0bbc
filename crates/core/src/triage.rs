//! What the run controller does with a run, decided from what it observed. Pure.
//!
//! A reconcile learns about a run in steps, each costing more than the last: the
//! cached run and this process's own registry (free), whether the run must wait for a
//! slot (the queue's view of the cache, free but with side effects on the account
//! bound, so asked only when it matters), then the run and its workflow as the API
//! server has them (a round trip, made only for a run that will get a decision that
//! writes). [`triage`] is asked again after each step with what was learned
//! ([`Observed`]), and answers with the next step or the final [`Decision`]; the
//! controller (`flowline_controller::run`) only applies its answers.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;

use crate::admission::unrecorded;
use crate::crd::{QueuedFor, Run, StepPhase, Workflow, WorkflowState};
use crate::engine::waiting;

/// How often an unfinished run is reconciled without a watch event: the backstop that
/// picks up a run no process is executing (say, one whose only watch event was lost).
pub const RESYNC_UNFINISHED: Duration = Duration::from_secs(10);

/// What a reconcile has observed of a run so far.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The run as the watch cache holds it; None when it cannot be decoded.
    pub cached: Option<&'a Run>,
    /// Whether the run belongs to a shard this replica executes.
    pub in_shard: bool,
    /// Whether this process is executing the run (looked at just before each triage).
    pub executing: bool,
    /// The time of the look.
    pub now: Timestamp,
    /// Whether the [`Upkeep`] asked for was done.
    pub kept_up: bool,
    /// Whether the run must wait for a slot, judged from the cache alone: the answer
    /// to [`Decision::AskSlot`].
    pub waits_for_slot: Option<bool>,
    /// What it waits for, with that answer.
    pub queued_for: Option<QueuedFor>,
    /// When it must wait for a time (a rate limit's window, a debounce), the earliest
    /// time it may start: it is looked at again then, not at the next resync.
    pub slot_opens_at: Option<Timestamp>,
    /// The run and its workflow as the API server has them: the answer to
    /// [`Decision::Read`].
    pub read: Option<Read>,
    /// Whether the child run of this name ended, as far as the caller's cache knows:
    /// what wakes a run parked on a `workflow` step.
    pub child_ended: ChildEnded<'a>,
}

/// Whether a child run (by name) ended, as the caller's cache knows.
#[derive(Clone, Copy)]
pub struct ChildEnded<'a>(pub &'a (dyn Fn(&str) -> bool + Sync));

impl std::fmt::Debug for ChildEnded<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChildEnded")
    }
}

impl<'a> Observed<'a> {
    /// The first look at `cached` (None: undecodable): nothing learned, nothing done.
    pub fn first_look(
        cached: Option<&'a Run>,
        in_shard: bool,
        executing: bool,
        now: Timestamp,
    ) -> Self {
        Observed {
            cached,
            in_shard,
            executing,
            now,
            kept_up: false,
            waits_for_slot: None,
            queued_for: None,
            slot_opens_at: None,
            read: None,
            child_ended: ChildEnded(&|_| false),
        }
    }
}

/// A run and its workflow read from the API server.
#[derive(Debug, Clone)]
pub struct Read {
    /// The run now; None when it is gone or cannot be decoded any more (the watchers
    /// report that).
    pub run: Option<Arc<Run>>,
    pub workflow: WorkflowRead,
}

/// A run's workflow as read from the API server.
#[derive(Debug, Clone)]
pub enum WorkflowRead {
    Missing,
    Found(Arc<Workflow>),
    /// It exists but cannot be decoded: the reason.
    Undecodable(String),
}

impl WorkflowRead {
    pub fn found(&self) -> Option<&Arc<Workflow>> {
        match self {
            WorkflowRead::Found(wf) => Some(wf),
            WorkflowRead::Missing | WorkflowRead::Undecodable(_) => None,
        }
    }
}

/// What to do next with a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Leave it until it changes: it cannot be decoded, it belongs to another
    /// replica's shard (every run is looked at again if this one gains that shard), or
    /// it is gone (read afresh).
    LeaveAlone,
    /// Bring what follows from the cached run in line, then triage again with
    /// `kept_up`.
    Upkeep(Upkeep),
    /// Judge from the cache whether it must wait for a slot, then triage again with
    /// the answer.
    AskSlot,
    /// Read the run afresh and its workflow (together: one round trip), then triage
    /// again with them. The watch cache may still show a status this process has since
    /// replaced (a run that just finished here looks "running, not executing"), so a
    /// decision that writes is taken on a fresh read.
    Read,
    /// It waits for a slot, its status was never written and its wait has not
    /// settled ([`unrecorded`]): no write (`/v1` shows it queued from its caches); look
    /// again when the wait settles, or sooner when its gate opens. A freed slot wakes
    /// it as it wakes any waiting run.
    WaitUnrecorded(Duration),
    /// It waits for a slot, its wait has settled, and its status was never written:
    /// record it `queued`
    /// (without reading it again: one request, not three, when many runs arrive at
    /// once; the write is conditional on the cached version, so a stale cache costs a
    /// conflict and a fresh look, never a wrong status).
    MarkQueued,
    /// It waits for a slot and is recorded queued already: bring its labels in line
    /// (the periodic look at a queued run costs no other request).
    SyncQueuedLabels,
    /// Parked (its steps wait for a time, a decision, a child, a callback or an
    /// event) with nothing due: no request,
    /// no write; look again after this long (a decision or a cancel comes as a watch
    /// event).
    LookAgainAfter(Duration),
    /// Do what the run needs.
    Act(Need),
}

impl Decision {
    /// Whether the reconcile ends with this decision; the others learn something or
    /// bring something in line, then [`triage`] is asked again. Each of those sets the
    /// fact it was asked for, so a reconcile triages at most four times.
    pub fn is_final(&self) -> bool {
        !matches!(
            self,
            Decision::Upkeep(_) | Decision::AskSlot | Decision::Read
        )
    }
}

/// What the first look at a run brings in line before anything is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Upkeep {
    /// Write the labels it lacks (a Run applied with kubectl) or drop an old phase
    /// label that no longer says its phase (`run_labels` in the controller). Not for a
    /// run waiting for a slot: one about to start would pay that write on its way out
    /// of the queue ([`Decision::SyncQueuedLabels`] does it for one that stays).
    pub sync_labels: bool,
    /// It is finished (the cache shows it): its slot is free, the next queued runs may
    /// start.
    pub release_slot: bool,
    /// It executes here: pass its approval decisions on, so an approval decided while
    /// other branches still execute is settled at once.
    pub offer_approvals: bool,
}

/// What a run needs now. Decided from the run, its workflow and whether this process
/// is already executing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Finished, or in hand: nothing to do.
    Nothing,
    /// Stop the execution in progress.
    StopExecution,
    /// Record the cancellation: nothing is executing.
    MarkCancelled,
    /// It cannot run; fail it with this error.
    Fail(String),
    /// Record the workflow version it will execute: a Run created (with kubectl, say)
    /// without `spec.workflow`.
    Pin,
    /// Give it its workflow's controller owner reference, as the API gives the runs it
    /// creates: a Run created with kubectl or GitOps has none ([`ownership`]). Without
    /// it the workflow controller never hears of the run (its counts and last run stay
    /// behind) and deleting the workflow leaves the run behind. When `pin`, the same
    /// write records its workflow version (what [`Need::Pin`] does). Its watch event
    /// brings the adopted run back for the rest (execute, fail, mark cancelled).
    Adopt { pin: bool },
    /// Start (or resume) executing it, as concurrency control admits it.
    Execute,
}

/// When to look at a run again without a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookAgain {
    WhenChanged,
    After(Duration),
}

/// The next step for a run from what was `observed` of it.
pub fn triage(observed: &Observed) -> Decision {
    let Some(run) = observed.cached else {
        // Reported by the watchers.
        return Decision::LeaveAlone;
    };
    if !observed.in_shard {
        return Decision::LeaveAlone;
    }
    if let Some(read) = &observed.read {
        return after_read(read, observed.executing, observed.now, observed.child_ended);
    }
    let finished = run.phase().is_finished();
    let awaiting_slot = awaits_slot(run);
    if !observed.kept_up {
        return Decision::Upkeep(Upkeep {
            sync_labels: !awaiting_slot,
            release_slot: finished,
            offer_approvals: observed.executing,
        });
    }
    if !observed.executing && !run.spec.cancel && awaiting_slot {
        match observed.waits_for_slot {
            None => return Decision::AskSlot,
            Some(true) if run.status.is_none() => {
                let waits_for = observed.queued_for.unwrap_or(QueuedFor::Concurrency);
                let opens_at = observed.slot_opens_at;
                return match unrecorded::record_put_off(run, waits_for, opens_at, observed.now) {
                    None => Decision::MarkQueued,
                    Some(settles_in) => Decision::WaitUnrecorded(match observed.slot_opens_at {
                        Some(opens_at) => settles_in.min(gate_wait(opens_at, observed.now)),
                        None => settles_in,
                    }),
                };
            }
            Some(true) => return Decision::SyncQueuedLabels,
            Some(false) => {}
        }
    }
    if !observed.executing
        && let Some(wake) = waiting::still_parked(run, observed.now, observed.child_ended.0)
    {
        return Decision::LookAgainAfter(parked_wait(wake, observed.now));
    }
    // Neither finished nor executing here: such a run always gets a decision that
    // writes (execute, pin, mark cancelled, fail), taken on a fresh read.
    if finished || observed.executing {
        return Decision::Act(needs(run, None, observed.executing));
    }
    Decision::Read
}

/// The decision on a run read afresh (with its workflow).
fn after_read(
    read: &Read,
    executing: bool,
    now: Timestamp,
    child_ended: ChildEnded<'_>,
) -> Decision {
    let Some(fresh) = read.run.as_deref() else {
        // Gone, or changed into something undecodable (reported by the watchers).
        return Decision::LeaveAlone;
    };
    let need = needs_after_read(fresh, &read.workflow, executing);
    // The cache was behind: it parked meanwhile.
    if need == Need::Execute
        && let Some(wake) = waiting::still_parked(fresh, now, child_ended.0)
    {
        return Decision::LookAgainAfter(parked_wait(wake, now));
    }
    Decision::Act(need)
}

/// Whether `run` waits for a slot of its concurrency group (or has not been looked at
/// yet): no status, or `queued`.
fn awaits_slot(run: &Run) -> bool {
    !run.has_started()
}

/// When to look again at a run after `decision`, as `observed` shows it: an unfinished
/// run at least every [`RESYNC_UNFINISHED`] (a run waiting for a time when it is due,
/// if sooner), a finished one only when it changes.
pub fn look_again(decision: &Decision, observed: &Observed) -> LookAgain {
    let finished = observed.cached.is_none_or(|run| run.phase().is_finished());
    match decision {
        Decision::LeaveAlone => LookAgain::WhenChanged,
        Decision::LookAgainAfter(wait) | Decision::WaitUnrecorded(wait) => LookAgain::After(*wait),
        _ if finished => LookAgain::WhenChanged,
        Decision::MarkQueued | Decision::SyncQueuedLabels => match observed.slot_opens_at {
            Some(opens_at) => LookAgain::After(gate_wait(opens_at, observed.now)),
            None => LookAgain::After(RESYNC_UNFINISHED),
        },
        _ => LookAgain::After(RESYNC_UNFINISHED),
    }
}

/// How often a run waiting for a time (a rate limit's window, a debounce) is looked at
/// again at least. Far longer than [`RESYNC_UNFINISHED`]: the time it waits for is a
/// lower bound of its start, and what could let it start sooner wakes it (a run ahead
/// of it that leaves the queue without starting, a newer run of its debounce key, its
/// own cancel, a relist of the watch), so the look is only a backstop, and 10,000 such
/// runs cost 33 looks a second, not 1,000.
pub const GATE_RESYNC: Duration = Duration::from_secs(300);

/// How long until a run waiting for a time that comes at `opens_at` is looked at
/// again: [`crate::admission::timing::LEAD`] before it (it is read and held ready then),
/// at the latest after [`GATE_RESYNC`].
pub fn gate_wait(opens_at: Timestamp, now: Timestamp) -> Duration {
    let lead = crate::admission::timing::LEAD.as_millis() as i64;
    let until = (opens_at.as_millisecond() - lead - now.as_millisecond()).max(0) as u64;
    Duration::from_millis(until).min(GATE_RESYNC)
}

/// How long until a parked run is looked at again (`wake`: its earliest wake time), at
/// the latest after [`RESYNC_UNFINISHED`]. Looking costs no request:
/// [`waiting::still_parked`] decides from the cached run.
pub fn parked_wait(wake: Option<Timestamp>, now: Timestamp) -> Duration {
    let until = wake.map_or(RESYNC_UNFINISHED, |t| {
        Duration::from_millis((t.as_millisecond() - now.as_millisecond()).max(0) as u64)
    });
    // A few milliseconds late rather than early: the wake time is then due.
    until.min(RESYNC_UNFINISHED) + Duration::from_millis(5)
}

/// How a run stands to the workflow it names (as read from the API server).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// One of its owner references names the workflow's uid (the API and the
    /// scheduler create runs so), or the workflow has no uid to name (never one read
    /// from the API server).
    Owned,
    /// It has no controller at all: created with kubectl or GitOps. It is adopted.
    Orphan,
    /// Another controller owns it. Typically a workflow deleted and recreated under
    /// the same name: the run belongs to the deleted one (the garbage collector deletes
    /// it) and is not adopted by the new one; it is decided as if it were owned (a run
    /// pinned to the old version executes that version, as before adoption existed).
    Elsewhere,
}

/// How `run` stands to `wf`, from their owner reference and uid. Pure.
pub fn ownership(run: &Run, wf: &Workflow) -> Ownership {
    let Some(uid) = wf.metadata.uid.as_deref() else {
        return Ownership::Owned;
    };
    let owners = run.owner_references();
    if owners.iter().any(|o| o.uid == uid) {
        Ownership::Owned
    } else if owners.iter().any(|o| o.controller == Some(true)) {
        Ownership::Elsewhere
    } else {
        Ownership::Orphan
    }
}

/// What `run` needs, from its `workflow` (None: it does not exist) and whether this
/// process is `executing` it. An orphan ([`Ownership::Orphan`]) that would get a
/// decision that writes is adopted first ([`Need::Adopt`]).
pub fn needs(run: &Run, workflow: Option<&Workflow>, executing: bool) -> Need {
    let need = needs_if_owned(run, workflow, executing);
    let writes = matches!(
        need,
        Need::MarkCancelled | Need::Fail(_) | Need::Pin | Need::Execute
    );
    match workflow {
        Some(wf) if writes && ownership(run, wf) == Ownership::Orphan => Need::Adopt {
            pin: need == Need::Pin,
        },
        _ => need,
    }
}

/// [`needs`] of a run its workflow owns.
fn needs_if_owned(run: &Run, workflow: Option<&Workflow>, executing: bool) -> Need {
    let phase = run.status.as_ref().map(|s| s.phase).unwrap_or_default();
    if phase.is_finished() {
        return Need::Nothing;
    }
    if run.spec.cancel {
        return if executing {
            Need::StopExecution
        } else {
            Need::MarkCancelled
        };
    }
    if executing {
        return Need::Nothing;
    }
    let Some(wf) = workflow else {
        return Need::Fail(format!("workflow {} does not exist", run.spec.workflow_ref));
    };
    let never_started = !has_started(run);
    if wf.spec.state == WorkflowState::Paused && never_started {
        return Need::Fail(format!(
            "workflow {} is paused; runs cannot start",
            wf.name_any()
        ));
    }
    if run.spec.workflow.is_some() {
        return Need::Execute;
    }
    // Unpinned: a Run created without its workflow version, or one that started
    // before runs were pinned (it recorded the generation it started with).
    let started_with = run.status.as_ref().and_then(|s| s.workflow_generation);
    if never_started || started_with == wf.metadata.generation {
        return Need::Pin;
    }
    Need::Fail(format!(
        "workflow {} changed (generation {} to {}) while this run was in flight; it \
         started before runs recorded their workflow version and cannot resume safely",
        wf.name_any(),
        started_with.unwrap_or_default(),
        wf.metadata.generation.unwrap_or_default()
    ))
}

/// [`needs`] for a workflow read: one that cannot be decoded counts as missing, with
/// its reason (decoding is deterministic, so this version of it can never run).
pub fn needs_after_read(run: &Run, workflow: &WorkflowRead, executing: bool) -> Need {
    match workflow {
        WorkflowRead::Found(wf) => needs(run, Some(wf), executing),
        WorkflowRead::Missing => needs(run, None, executing),
        WorkflowRead::Undecodable(reason) => match needs(run, None, executing) {
            Need::Fail(_) => Need::Fail(reason.clone()),
            other => other,
        },
    }
}

/// Whether any step of `run` has started.
fn has_started(run: &Run) -> bool {
    run.status
        .as_ref()
        .is_some_and(|s| s.steps.iter().any(|r| r.status != StepPhase::Pending))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::WorkflowSnapshot;
    use serde_json::{Value, json};

    fn run(status: Value, cancel: bool) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n", "uid": "u"},
            "spec": {"workflowRef": "wf", "cancel": cancel},
            "status": status,
        }))
        .unwrap()
    }

    /// `r` pinned to `wf`'s version, as the API creates runs.
    fn pinned(mut r: Run, wf: &Workflow) -> Run {
        r.spec.workflow = Some(WorkflowSnapshot::of(wf));
        r
    }

    fn workflow(state: &str, executor: Option<&str>) -> Workflow {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "wf", "namespace": "n", "generation": 4},
            "spec": {"name": "W", "state": state, "executor": executor,
                     "steps": [{"id": "a", "action": "delay", "with": {"ms": 1}}]},
        }))
        .unwrap()
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    const NOW: i64 = 1_800_000_000;

    /// A pinned run parked on a `wait` step due at `wake` (seconds).
    fn parked(wake: i64) -> Run {
        let wf: Workflow = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "wf", "namespace": "n", "generation": 4},
            "spec": {"name": "W", "steps": [{"id": "w", "action": "wait", "with": {"ms": 60000}}]},
        }))
        .unwrap();
        let wake = at(wake).to_string();
        pinned(
            run(
                json!({"phase": "running", "parked": true,
                "steps": [{"stepId": "w", "name": "w", "status": "waiting", "attempts": 1,
                           "wakeAt": wake}]}),
                false,
            ),
            &wf,
        )
    }

    /// What a reconcile knows once its upkeep is done, the slot question answered
    /// `slot`.
    fn kept_up(run: &Run, executing: bool, slot: Option<bool>) -> Observed<'_> {
        Observed {
            kept_up: true,
            waits_for_slot: slot,
            ..Observed::first_look(Some(run), true, executing, at(NOW))
        }
    }

    /// What a reconcile knows once it read `fresh` and `workflow`.
    fn after_reading(
        cached: &Run,
        fresh: Option<Run>,
        workflow: WorkflowRead,
        executing: bool,
    ) -> Observed<'_> {
        Observed {
            read: Some(Read {
                run: fresh.map(Arc::new),
                workflow,
            }),
            ..kept_up(cached, executing, Some(false))
        }
    }

    #[test]
    fn triage_decides_each_step_of_a_reconcile() {
        let active = workflow("active", None);
        let new = run(Value::Null, false);
        let new_pinned = pinned(new.clone(), &active);
        let mut just_created = new_pinned.clone();
        just_created.annotations_mut().insert(
            crate::crd::timestamps::CREATED_AT_ANNOTATION.into(),
            at(NOW).to_string(),
        );
        let running = pinned(run(json!({"phase": "running"}), false), &active);
        let queued = pinned(run(json!({"phase": "queued"}), false), &active);
        let succeeded = run(json!({"phase": "succeeded"}), false);
        let cancelled_new = run(Value::Null, true);
        let running_cancelled = pinned(run(json!({"phase": "running"}), true), &active);
        let parked_soon = parked(NOW + 30);
        let parked_due = parked(NOW - 1);
        let found = || WorkflowRead::Found(Arc::new(active.clone()));
        let paused = || WorkflowRead::Found(Arc::new(workflow("paused", None)));
        let rows: Vec<(&str, Observed, Decision)> = vec![
            (
                "an undecodable run is left alone",
                Observed::first_look(None, true, false, at(NOW)),
                Decision::LeaveAlone,
            ),
            (
                "another replica's shard is left alone",
                Observed::first_look(Some(&running), false, false, at(NOW)),
                Decision::LeaveAlone,
            ),
            (
                "the first look at a running run syncs its labels",
                Observed::first_look(Some(&running), true, false, at(NOW)),
                Decision::Upkeep(Upkeep {
                    sync_labels: true,
                    ..Upkeep::default()
                }),
            ),
            (
                "the first look at a finished run releases its slot",
                Observed::first_look(Some(&succeeded), true, false, at(NOW)),
                Decision::Upkeep(Upkeep {
                    sync_labels: true,
                    release_slot: true,
                    offer_approvals: false,
                }),
            ),
            (
                "the first look at a run awaiting a slot writes no label",
                Observed::first_look(Some(&queued), true, false, at(NOW)),
                Decision::Upkeep(Upkeep::default()),
            ),
            (
                "the first look at a run executing here offers its approvals",
                Observed::first_look(Some(&running), true, true, at(NOW)),
                Decision::Upkeep(Upkeep {
                    sync_labels: true,
                    release_slot: false,
                    offer_approvals: true,
                }),
            ),
            (
                "a new run asks whether it must wait for a slot",
                kept_up(&new_pinned, false, None),
                Decision::AskSlot,
            ),
            (
                "a queued run asks whether it must still wait",
                kept_up(&queued, false, None),
                Decision::AskSlot,
            ),
            (
                "a new run whose wait has settled is marked queued",
                kept_up(&new_pinned, false, Some(true)),
                Decision::MarkQueued,
            ),
            (
                "a new run that must wait is not marked before its wait settles",
                Observed {
                    now: at(NOW) + Duration::from_secs(2),
                    ..kept_up(&just_created, false, Some(true))
                },
                Decision::WaitUnrecorded(Duration::from_secs(8)),
            ),
            (
                "...or before its gate opens, if sooner",
                Observed {
                    now: at(NOW) + Duration::from_secs(2),
                    slot_opens_at: Some(at(NOW) + Duration::from_secs(5)),
                    ..kept_up(&just_created, false, Some(true))
                },
                Decision::WaitUnrecorded(Duration::from_millis(2_750)),
            ),
            (
                "a new run waiting for its account's bound is marked at once",
                Observed {
                    queued_for: Some(QueuedFor::Account),
                    ..kept_up(&just_created, false, Some(true))
                },
                Decision::MarkQueued,
            ),
            (
                "a queued run that must still wait only has its labels synced",
                kept_up(&queued, false, Some(true)),
                Decision::SyncQueuedLabels,
            ),
            (
                "a new run with a free slot is read afresh",
                kept_up(&new_pinned, false, Some(false)),
                Decision::Read,
            ),
            (
                "a cancelled new run never asks for a slot: it is read afresh",
                kept_up(&cancelled_new, false, None),
                Decision::Read,
            ),
            (
                "a running run not executing here is read afresh (to resume it)",
                kept_up(&running, false, None),
                Decision::Read,
            ),
            (
                "a parked run with nothing due is looked at again when it is",
                kept_up(&parked_soon, false, None),
                Decision::LookAgainAfter(Duration::from_millis(10_005)),
            ),
            (
                "a parked run whose time came is read afresh (to resume it)",
                kept_up(&parked_due, false, None),
                Decision::Read,
            ),
            (
                "a finished run needs nothing",
                kept_up(&succeeded, false, None),
                Decision::Act(Need::Nothing),
            ),
            (
                "a run executing here needs nothing",
                kept_up(&running, true, None),
                Decision::Act(Need::Nothing),
            ),
            (
                "a cancelled run executing here is stopped",
                kept_up(&running_cancelled, true, None),
                Decision::Act(Need::StopExecution),
            ),
            (
                "a run gone when read is left alone",
                after_reading(&running, None, found(), false),
                Decision::LeaveAlone,
            ),
            (
                "a pinned run read afresh executes",
                after_reading(&new_pinned, Some(new_pinned.clone()), found(), false),
                Decision::Act(Need::Execute),
            ),
            (
                "a run the cache showed running but that parked meanwhile waits",
                after_reading(&running, Some(parked(NOW + 30)), found(), false),
                Decision::LookAgainAfter(Duration::from_millis(10_005)),
            ),
            (
                "an unpinned run read afresh is pinned",
                after_reading(&new, Some(new.clone()), found(), false),
                Decision::Act(Need::Pin),
            ),
            (
                "a cancelled run read afresh is marked cancelled",
                after_reading(&cancelled_new, Some(cancelled_new.clone()), found(), false),
                Decision::Act(Need::MarkCancelled),
            ),
            (
                "a run whose workflow is gone fails",
                after_reading(&new, Some(new.clone()), WorkflowRead::Missing, false),
                Decision::Act(Need::Fail("workflow wf does not exist".into())),
            ),
            (
                "a run whose workflow cannot be decoded fails with the reason",
                after_reading(
                    &new,
                    Some(new.clone()),
                    WorkflowRead::Undecodable("workflow wf cannot be decoded: too deep".into()),
                    false,
                ),
                Decision::Act(Need::Fail("workflow wf cannot be decoded: too deep".into())),
            ),
            (
                "a new run of a paused workflow fails",
                after_reading(&new_pinned, Some(new_pinned.clone()), paused(), false),
                Decision::Act(Need::Fail(
                    "workflow wf is paused; runs cannot start".into(),
                )),
            ),
            (
                "a run read afresh that executes here by now needs nothing",
                after_reading(&running, Some(running.clone()), found(), true),
                Decision::Act(Need::Nothing),
            ),
        ];
        for (name, observed, expected) in rows {
            assert_eq!(triage(&observed), expected, "{name}");
        }
    }

    /// Reconcile's loop, answering each question as `slot` and `fresh` say: the
    /// decisions in order, the last one final.
    fn walk(
        cached: &Run,
        executing: bool,
        slot: bool,
        fresh: Option<Run>,
        workflow: WorkflowRead,
    ) -> Vec<Decision> {
        let mut observed = Observed::first_look(Some(cached), true, executing, at(NOW));
        let mut seen = Vec::new();
        loop {
            let decision = triage(&observed);
            seen.push(decision.clone());
            match decision {
                Decision::Upkeep(_) => observed.kept_up = true,
                Decision::AskSlot => observed.waits_for_slot = Some(slot),
                Decision::Read => {
                    observed.read = Some(Read {
                        run: fresh.clone().map(Arc::new),
                        workflow: workflow.clone(),
                    });
                }
                last => {
                    assert!(last.is_final(), "{last:?}");
                    return seen;
                }
            }
            assert!(seen.len() < 4, "no final decision after {seen:?}");
        }
    }

    #[test]
    fn a_reconcile_reaches_a_final_decision_in_at_most_four_steps() {
        let active = workflow("active", None);
        let found = || WorkflowRead::Found(Arc::new(active.clone()));
        let new = pinned(run(Value::Null, false), &active);
        let running = pinned(run(json!({"phase": "running"}), false), &active);
        let upkeep = Decision::Upkeep(Upkeep::default());
        let labels = Decision::Upkeep(Upkeep {
            sync_labels: true,
            ..Upkeep::default()
        });
        let rows = [
            (
                "a new run with a free slot: upkeep, slot, read, execute",
                walk(&new, false, false, Some(new.clone()), found()),
                vec![
                    upkeep.clone(),
                    Decision::AskSlot,
                    Decision::Read,
                    Decision::Act(Need::Execute),
                ],
            ),
            (
                "a new run of a full group: upkeep, slot, marked queued",
                walk(&new, false, true, None, found()),
                vec![upkeep, Decision::AskSlot, Decision::MarkQueued],
            ),
            (
                "a run executing here: upkeep, nothing",
                walk(&running, true, false, None, found()),
                vec![
                    Decision::Upkeep(Upkeep {
                        sync_labels: true,
                        release_slot: false,
                        offer_approvals: true,
                    }),
                    Decision::Act(Need::Nothing),
                ],
            ),
            (
                "a running run deleted meanwhile: upkeep, read, left alone",
                walk(&running, false, false, None, found()),
                vec![labels, Decision::Read, Decision::LeaveAlone],
            ),
        ];
        for (name, walked, expected) in rows {
            assert_eq!(walked, expected, "{name}");
        }
    }

    #[test]
    fn look_again_follows_the_decision_and_the_cached_phase() {
        let running = run(json!({"phase": "running"}), false);
        let finished = run(json!({"phase": "failed"}), false);
        let wait = Duration::from_millis(1234);
        let rows = [
            (
                "left alone: only a change brings it back",
                Decision::LeaveAlone,
                &running,
                LookAgain::WhenChanged,
            ),
            (
                "parked: when its step is due",
                Decision::LookAgainAfter(wait),
                &running,
                LookAgain::After(wait),
            ),
            (
                "unfinished: the periodic resync",
                Decision::Act(Need::Execute),
                &running,
                LookAgain::After(RESYNC_UNFINISHED),
            ),
            (
                "queued: the periodic resync",
                Decision::SyncQueuedLabels,
                &running,
                LookAgain::After(RESYNC_UNFINISHED),
            ),
            (
                "finished: only a change brings it back",
                Decision::Act(Need::Nothing),
                &finished,
                LookAgain::WhenChanged,
            ),
        ];
        for (name, decision, cached, expected) in rows {
            let observed = Observed::first_look(Some(cached), true, false, at(NOW));
            assert_eq!(look_again(&decision, &observed), expected, "{name}");
        }
        // A run waiting for a rate limit's window: a moment before it opens (it is then
        // read and held ready), if before the resync.
        let queued = run(json!({"phase": "queued"}), false);
        for (opens_at, expected) in [(NOW + 2, 1_750), (NOW - 1, 0), (NOW + 3600, 300_000)] {
            let observed = Observed {
                waits_for_slot: Some(true),
                slot_opens_at: Some(at(opens_at)),
                ..Observed::first_look(Some(&queued), true, false, at(NOW))
            };
            assert_eq!(
                look_again(&Decision::SyncQueuedLabels, &observed),
                LookAgain::After(Duration::from_millis(expected))
            );
        }
    }

    #[test]
    fn a_parked_run_is_looked_at_when_due_and_at_least_every_resync() {
        let now = at(NOW);
        let rows = [
            ("due in 2 s", Some(at(NOW + 2)), 2_005),
            ("due long ago", Some(at(NOW - 60)), 5),
            (
                "due in an hour: the resync first",
                Some(at(NOW + 3600)),
                10_005,
            ),
            ("only a decision wakes it", None, 10_005),
        ];
        for (name, wake, ms) in rows {
            assert_eq!(parked_wait(wake, now), Duration::from_millis(ms), "{name}");
        }
    }

    #[test]
    fn needs_of_a_run() {
        let active = workflow("active", None);
        let job = workflow("active", Some("job"));
        let draft = workflow("draft", None);
        let paused = workflow("paused", None);
        let started = json!({"phase": "running", "workflowGeneration": 4,
            "steps": [{"stepId": "a", "name": "a", "status": "running", "attempts": 1}]});
        let mut edited = active.clone();
        edited.metadata.generation = Some(5);
        let mut emptied = active.clone();
        emptied.metadata.generation = Some(9);
        emptied.spec.steps.clear();
        let mut emptied_paused = emptied.clone();
        emptied_paused.spec.state = WorkflowState::Paused;
        let pinned_started = pinned(run(started.clone(), false), &active);
        let rows: Vec<(&str, Run, Option<&Workflow>, bool, Need)> = vec![
            (
                "a finished run needs nothing",
                run(json!({"phase": "succeeded"}), true),
                None,
                false,
                Need::Nothing,
            ),
            (
                "a cancel stops the execution in progress",
                run(Value::Null, true),
                Some(&active),
                true,
                Need::StopExecution,
            ),
            (
                "a cancel with nothing executing is recorded",
                run(Value::Null, true),
                Some(&active),
                false,
                Need::MarkCancelled,
            ),
            (
                "a run without its workflow fails",
                run(Value::Null, false),
                None,
                false,
                Need::Fail("workflow wf does not exist".into()),
            ),
            (
                "a new run of a paused workflow fails",
                run(Value::Null, false),
                Some(&paused),
                false,
                Need::Fail("workflow wf is paused; runs cannot start".into()),
            ),
            (
                "a pinned run executes (inline executor)",
                pinned(run(Value::Null, false), &active),
                Some(&active),
                false,
                Need::Execute,
            ),
            (
                "a pinned run executes (job executor)",
                pinned(run(Value::Null, false), &job),
                Some(&job),
                false,
                Need::Execute,
            ),
            (
                "a pinned run of a draft workflow executes",
                pinned(run(Value::Null, false), &draft),
                Some(&draft),
                false,
                Need::Execute,
            ),
            (
                "a run executing here needs nothing more",
                pinned(run(Value::Null, false), &draft),
                Some(&draft),
                true,
                Need::Nothing,
            ),
            (
                "a new unpinned run is pinned",
                run(Value::Null, false),
                Some(&active),
                false,
                Need::Pin,
            ),
            (
                "an unpinned run started under the current version is pinned",
                run(started.clone(), false),
                Some(&active),
                false,
                Need::Pin,
            ),
            (
                "a pinned run executes its version whatever the workflow is now",
                pinned_started.clone(),
                Some(&emptied),
                false,
                Need::Execute,
            ),
            (
                "pausing stops only runs that have not started",
                pinned_started,
                Some(&emptied_paused),
                false,
                Need::Execute,
            ),
        ];
        for (name, r, wf, executing, expected) in rows {
            assert_eq!(needs(&r, wf, executing), expected, "{name}");
        }
        // An unpinned run started under a version since edited cannot resume.
        match needs(&run(started, false), Some(&edited), false) {
            Need::Fail(e) => assert!(e.contains("generation 4 to 5"), "{e}"),
            other => panic!("expected Fail, got {other:?}"),
        }
    }

    /// `wf` as the API server stores it: with a uid.
    fn stored(mut wf: Workflow, uid: &str) -> Workflow {
        wf.metadata.uid = Some(uid.into());
        wf
    }

    /// `r` with the owner references `owners` (uid, controller).
    fn owned_by(mut r: Run, owners: &[(&str, &str, bool)]) -> Run {
        r.metadata.owner_references = Some(
            owners
                .iter()
                .map(|(kind, uid, controller)| {
                    serde_json::from_value(json!({
                        "apiVersion": "flowline.io/v1", "kind": kind, "name": "wf",
                        "uid": uid, "controller": controller,
                    }))
                    .unwrap()
                })
                .collect(),
        );
        r
    }

    #[test]
    fn ownership_of_a_run_by_its_workflow() {
        let wf = stored(workflow("active", None), "wf-uid");
        let new = run(Value::Null, false);
        let rows = [
            (
                "no owner references: an orphan",
                new.clone(),
                &wf,
                Ownership::Orphan,
            ),
            (
                "owned by the workflow (as the API creates runs)",
                owned_by(new.clone(), &[("Workflow", "wf-uid", true)]),
                &wf,
                Ownership::Owned,
            ),
            (
                "a plain (non-controller) reference to the workflow is enough",
                owned_by(new.clone(), &[("Workflow", "wf-uid", false)]),
                &wf,
                Ownership::Owned,
            ),
            (
                "owned by a deleted workflow of the same name: not adopted",
                owned_by(new.clone(), &[("Workflow", "old-uid", true)]),
                &wf,
                Ownership::Elsewhere,
            ),
            (
                "controlled by something else: not adopted",
                owned_by(new.clone(), &[("Application", "app-uid", true)]),
                &wf,
                Ownership::Elsewhere,
            ),
            (
                "only non-controller references to others: an orphan",
                owned_by(new.clone(), &[("ConfigMap", "cm-uid", false)]),
                &wf,
                Ownership::Orphan,
            ),
        ];
        for (name, r, wf, expected) in rows {
            assert_eq!(ownership(&r, wf), expected, "{name}");
        }
        let no_uid = workflow("active", None);
        assert_eq!(
            ownership(&new, &no_uid),
            Ownership::Owned,
            "a workflow without uid cannot be named: nothing to adopt"
        );
    }

    #[test]
    fn an_orphan_is_adopted_before_any_write_a_run_of_its_workflow_gets() {
        let active = stored(workflow("active", None), "wf-uid");
        let paused = stored(workflow("paused", None), "wf-uid");
        let new = run(Value::Null, false);
        let new_pinned = pinned(new.clone(), &active);
        let owned = owned_by(new_pinned.clone(), &[("Workflow", "wf-uid", true)]);
        let stale = owned_by(new_pinned.clone(), &[("Workflow", "old-uid", true)]);
        let stale_unpinned = owned_by(new.clone(), &[("Workflow", "old-uid", true)]);
        let rows: Vec<(&str, Run, Option<&Workflow>, bool, Need)> = vec![
            (
                "an unpinned orphan is pinned and adopted in one write",
                new.clone(),
                Some(&active),
                false,
                Need::Adopt { pin: true },
            ),
            (
                "a pinned orphan is adopted, then executes",
                new_pinned.clone(),
                Some(&active),
                false,
                Need::Adopt { pin: false },
            ),
            (
                "an orphan of a paused workflow is adopted, then fails",
                new.clone(),
                Some(&paused),
                false,
                Need::Adopt { pin: false },
            ),
            (
                "a cancelled orphan is adopted, then marked cancelled",
                run(Value::Null, true),
                Some(&active),
                false,
                Need::Adopt { pin: false },
            ),
            (
                "an owned run is not adopted again",
                owned,
                Some(&active),
                false,
                Need::Execute,
            ),
            (
                "a run owned by a deleted workflow of the same name executes its version",
                stale,
                Some(&active),
                false,
                Need::Execute,
            ),
            (
                "an unpinned run owned by a deleted workflow is pinned as before",
                stale_unpinned,
                Some(&active),
                false,
                Need::Pin,
            ),
            (
                "an orphan whose workflow is missing fails as before",
                new.clone(),
                None,
                false,
                Need::Fail("workflow wf does not exist".into()),
            ),
            (
                "a finished orphan is left as it is",
                run(json!({"phase": "succeeded"}), false),
                Some(&active),
                false,
                Need::Nothing,
            ),
            (
                "an orphan executing here is left to its execution",
                new_pinned.clone(),
                Some(&active),
                true,
                Need::Nothing,
            ),
        ];
        for (name, r, wf, executing, expected) in rows {
            assert_eq!(needs(&r, wf, executing), expected, "{name}");
        }
        // Through triage: an orphan read afresh with its workflow is adopted.
        let found = WorkflowRead::Found(Arc::new(active.clone()));
        assert_eq!(
            triage(&after_reading(&new, Some(new.clone()), found, false)),
            Decision::Act(Need::Adopt { pin: true })
        );
        let undecodable = WorkflowRead::Undecodable("workflow wf cannot be decoded".into());
        assert_eq!(
            needs_after_read(&new, &undecodable, false),
            Need::Fail("workflow wf cannot be decoded".into()),
            "an orphan of an undecodable workflow fails as before (no uid to name)"
        );
    }

    #[test]
    fn an_undecodable_workflow_fails_only_runs_that_would_fail_without_it() {
        let why = WorkflowRead::Undecodable("workflow wf cannot be decoded: too deep".into());
        let rows = [
            (
                "a run that would start fails with the reason",
                run(Value::Null, false),
                Need::Fail("workflow wf cannot be decoded: too deep".into()),
            ),
            (
                "a cancelled run is marked cancelled",
                run(Value::Null, true),
                Need::MarkCancelled,
            ),
            (
                "a finished run needs nothing",
                run(json!({"phase": "failed"}), false),
                Need::Nothing,
            ),
        ];
        for (name, r, expected) in rows {
            assert_eq!(needs_after_read(&r, &why, false), expected, "{name}");
        }
    }
}
