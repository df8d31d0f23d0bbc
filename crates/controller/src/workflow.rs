//! The Workflow controller: status (observed generation and state, run counts, last
//! run), state-transition events for delivery, the schedule trigger, and retention
//! of finished runs. `plan()` decides; `reconcile` applies. Both the event cap and
//! retention wait for deliveries to settle (`flowline_core::delivery::undelivered`).

use std::cell::LazyCell;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::run_cache::RunCache;
use flowline_core::admission::unrecorded::{Unrecorded, may_wait_unrecorded};
use flowline_core::crd::{
    Concurrency, ConcurrencyPolicy, Condition, ConditionStatus, EventKind, Overlap, PendingEvent,
    Run, RunPhase, RunTrigger, TriggerType, Webhook, Workflow, WorkflowState, WorkflowStatus,
    set_condition,
};
use flowline_core::cron::{self, Schedule};
use flowline_core::delivery::settled::Outstanding;
use flowline_core::delivery::undelivered;
use flowline_core::delivery::{outbox, unseen};
use flowline_core::engine::spec_check;
use flowline_core::sealed::SealKey;
use flowline_engine::status_writer::FIELD_MANAGER;
use flowline_kube::lenient::{self, DecodedStore, Lenient};
use flowline_kube::name_index::SharedNameIndex;
use flowline_telemetry::engine_metrics::{ControllerLabel, EngineTelemetry};
use flowline_telemetry::undecodable;

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("the scheduled run name {0} is taken by a Run of another workflow")]
    RunNameTaken(String),
}

/// What a workflow needs now.
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub status: WorkflowStatus,
    /// Finished runs beyond the retention limits whose events are settled, oldest
    /// first.
    pub delete: Vec<String>,
    /// The id of the event this plan records, if any.
    pub new_event: Option<String>,
    /// Settled events the cap evicted.
    pub evicted: Vec<String>,
    /// Start a scheduled run for each of these ticks, oldest first.
    pub start_for_ticks: Vec<Timestamp>,
    /// Those runs wait for the workflow's unfinished runs (`overlap: queue`).
    pub queue_ticks: bool,
    /// Cancel these unfinished runs first (`overlap: cancel_previous`).
    pub cancel_previous: Vec<String>,
    /// When to look again without a change (the next cron tick).
    pub wake_at: Option<Timestamp>,
}

/// Decides status, retention and schedule from the workflow, its runs, the webhooks
/// of its namespace and the time. `new_event_id` names events that this plan records.
/// Pure.
pub fn plan(
    wf: &Workflow,
    runs: &[Arc<Run>],
    hooks: &[Arc<Webhook>],
    now: Timestamp,
    parent_unfinished: &dyn Fn(&str) -> bool,
    new_event_id: &mut dyn FnMut() -> String,
) -> Plan {
    let previous = wf.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    status.observed_generation = wf.metadata.generation;
    // Read only when needed: most reconciles neither cap events nor delete runs.
    let delivery = LazyCell::new(|| Outstanding::new(hooks.iter().cloned()));
    // Something waits for deliveries to settle: look again later.
    let mut waiting = false;

    // State transitions, whoever made them.
    let state = wf.spec.state;
    let kind = match (previous.observed_state, state) {
        (observed, _) if observed == Some(state) => None,
        (_, WorkflowState::Active) => Some(EventKind::WorkflowActivated),
        (Some(_), WorkflowState::Paused) => Some(EventKind::WorkflowPaused),
        _ => None,
    };
    let workflow = wf.name_any();
    let evicted = undelivered::evict_settled(
        &mut status.pending_events,
        usize::from(kind.is_some()),
        |e| delivery.settled(&workflow, e),
    );
    let mut new_event = None;
    match kind {
        Some(_) if !undelivered::room_for_one(&status.pending_events) => waiting = true,
        Some(kind) => {
            let id = new_event_id();
            status.pending_events.push(PendingEvent {
                id: id.clone(),
                kind,
                timestamp: now,
                data: json!({
                    "workflow_id": workflow,
                    "workflow_name": wf.spec.name,
                    "previous_state": previous.observed_state.map(|s| s.as_str()),
                    "state": state.as_str(),
                }),
            });
            new_event = Some(id);
            status.observed_state = Some(state);
        }
        None => status.observed_state = Some(state),
    }

    // Counts, last run, retention.
    let mut counts = flowline_core::crd::RunCounts::default();
    let mut finished: Vec<(&Arc<Run>, RunPhase)> = Vec::new();
    // A run whose wait is not recorded yet counts as queued, as `/v1` shows it.
    let unrecorded = (runs.iter().any(|r| may_wait_unrecorded(r)))
        .then(|| Unrecorded::of(runs.iter().map(|r| &**r)));
    for run in runs {
        let unrecorded_wait = (unrecorded.as_ref()).and_then(|u| u.waits_for(run, now));
        let phase = match unrecorded_wait {
            Some(_) => RunPhase::Queued,
            None => run.phase(),
        };
        match phase {
            RunPhase::Running => counts.running += 1,
            RunPhase::Queued => counts.queued += 1,
            RunPhase::Succeeded => counts.succeeded += 1,
            RunPhase::Failed => counts.failed += 1,
            RunPhase::Cancelled => counts.cancelled += 1,
        }
        if phase.is_finished() {
            finished.push((run, phase));
        }
    }
    status.last_run_at = runs
        .iter()
        .map(|r| r.started_at())
        .max()
        .or(previous.last_run_at);
    finished.sort_by_key(|(r, _)| std::cmp::Reverse(r.started_at()));
    let (mut kept_ok, mut kept_failed) = (0u32, 0u32);
    let mut delete = Vec::new();
    // The earliest time a run held for its webhook-id may go.
    let mut held_until = None;
    for (run, phase) in finished {
        let (kept, limit) = if phase == RunPhase::Failed {
            (&mut kept_failed, wf.spec.history.failed)
        } else {
            (&mut kept_ok, wf.spec.history.succeeded)
        };
        if *kept < limit {
            *kept += 1;
        } else if let Some(until) = idempotency_hold(run).filter(|until| now < *until) {
            held_until = Some(held_until.map_or(until, |at: Timestamp| at.min(until)));
        } else if !settled_events(&delivery, run) {
            waiting = true;
        } else if run
            .spec
            .parent
            .as_ref()
            .is_some_and(|p| parent_unfinished(&p.run_id))
        {
            // A child whose parent has not settled its call yet: the parent reads
            // the child's outcome and output from it.
            waiting = true;
        } else {
            delete.push(run.name_any());
            match phase {
                RunPhase::Failed => counts.failed -= 1,
                RunPhase::Cancelled => counts.cancelled -= 1,
                _ => counts.succeeded -= 1,
            }
        }
    }
    delete.reverse();
    status.run_counts = counts;

    // Schedule.
    let mut start_for_ticks = Vec::new();
    let mut cancel_previous = Vec::new();
    let overlap = wf.spec.trigger.overlap.unwrap_or_default();
    let mut wake_at = None;
    let mut ready = (
        ConditionStatus::True,
        "Reconciled".to_string(),
        String::new(),
    );
    if wf.spec.trigger.type_ == TriggerType::Schedule && state == WorkflowState::Active {
        let cron = wf.spec.trigger.cron.as_deref().unwrap_or_default();
        match Schedule::parse(cron, wf.spec.trigger.timezone.as_deref()) {
            Ok(sched) => {
                let window = SignedDuration::from_millis(
                    i64::try_from(wf.spec.trigger.catchup_window_ms.unwrap_or(0)).unwrap_or(0),
                );
                let due = cron::due(&sched, previous.last_schedule_time, now, window);
                // Only a due tick under skip or cancel_previous looks at the runs.
                let unfinished: Vec<String> = match overlap {
                    Overlap::Skip | Overlap::CancelPrevious if !due.run_for.is_empty() => runs
                        .iter()
                        .filter(|r| !r.phase().is_finished())
                        .map(|r| r.name_any())
                        .collect(),
                    _ => Vec::new(),
                };
                (start_for_ticks, cancel_previous) = overlapping(overlap, due.run_for, &unfinished);
                status.last_schedule_time = Some(due.last);
                wake_at = sched.next(now);
            }
            Err(e) => ready = (ConditionStatus::False, "InvalidSchedule".into(), e),
        }
    } else {
        // Ticks while not active never run: start counting afresh on activation.
        status.last_schedule_time = None;
    }
    // What would fail every run, as the API refuses it; a workflow written with kubectl
    // gets it here. Its runs are not held back: they start (by hand, schedule or hook)
    // and fail naming the problem, as before.
    let problems = spec_check::workflow(&wf.spec);
    if !problems.is_empty() {
        let listed = spec_check::summary(&problems);
        ready = match ready {
            (ConditionStatus::False, reason, schedule) => (
                ConditionStatus::False,
                reason,
                flowline_core::limits::cap_error(format!("{schedule}; {listed}")),
            ),
            _ => (ConditionStatus::False, "InvalidSpec".into(), listed),
        };
    }
    let (ready_status, reason, message) = ready;
    set_condition(
        &mut status.conditions,
        Condition::new(
            "Ready",
            ready_status,
            reason,
            message,
            wf.metadata.generation,
            now,
        ),
    );
    if waiting {
        let recheck =
            now + jiff::SignedDuration::try_from(undelivered::RECHECK).unwrap_or_default();
        wake_at = Some(wake_at.map_or(recheck, |at| at.min(recheck)));
    }
    if let Some(until) = held_until {
        wake_at = Some(wake_at.map_or(until, |at: Timestamp| at.min(until)));
    }
    Plan {
        status,
        delete,
        new_event,
        evicted,
        start_for_ticks,
        queue_ticks: overlap == Overlap::Queue,
        cancel_previous,
        wake_at,
    }
}

/// What the due `ticks` of a schedule start under `overlap`, given the workflow's
/// `unfinished` runs (by name), and which of those to cancel first. `skip` and
/// `cancel_previous` start at most one run, for the latest tick: the older ones
/// would overlap it. Pure.
fn overlapping(
    overlap: Overlap,
    ticks: Vec<Timestamp>,
    unfinished: &[String],
) -> (Vec<Timestamp>, Vec<String>) {
    let latest: Vec<Timestamp> = ticks.last().copied().into_iter().collect();
    match overlap {
        Overlap::Allow | Overlap::Queue => (ticks, Vec::new()),
        Overlap::Skip if unfinished.is_empty() => (latest, Vec::new()),
        Overlap::Skip => (Vec::new(), Vec::new()),
        Overlap::CancelPrevious if latest.is_empty() => (latest, Vec::new()),
        Overlap::CancelPrevious => (latest, unfinished.to_vec()),
    }
}

/// How long retention keeps a run started by an inbound hook, whatever `history`
/// says: the run's name is the idempotency record of its `webhook-id`, and a delivery
/// of the same id within this time must find it (docs/api.md, "Inbound webhooks").
pub const HOOK_IDEMPOTENCY: jiff::SignedDuration = jiff::SignedDuration::from_hours(24);

/// Until when retention must keep `run` for its `webhook-id`; `None` for runs not
/// started by a hook.
fn idempotency_hold(run: &Run) -> Option<Timestamp> {
    (run.spec.trigger == RunTrigger::Webhook).then(|| run.started_at() + HOOK_IDEMPOTENCY)
}

/// Whether every event of the run is settled for the webhooks that subscribe to it.
fn settled_events(delivery: &Outstanding, run: &Run) -> bool {
    let (workflow, events) = outbox::of_run(run);
    delivery.all_settled(workflow, events)
}

pub struct Context {
    pub client: Client,
    pub runs: DecodedStore<Run>,
    /// `runs` by workflow: a reconcile reads its workflow's runs, not every run (with
    /// 100,000 runs, scanning them all per workflow starved the runtime's threads,
    /// lease renewals included).
    pub runs_by_workflow: SharedNameIndex<Run>,
    /// For whether events are settled (retention, the event cap).
    pub webhooks: DecodedStore<Webhook>,
    pub telemetry: EngineTelemetry,
    /// Each workflow's series of failed reconciles, ended by a success.
    pub backoff: super::backoff::ReconcileBackoff,
    /// Inbound hook secrets brought by Secrets, sealed into the status.
    pub hook_secrets: super::hook_secret::HookSecrets,
}

/// Creates the run of a schedule tick. A name conflict is swallowed only when the
/// existing Run is this workflow's (the tick already has its run); any other Run
/// holding the name is an error, never a silently lost tick.
async fn start_scheduled(
    api: &Api<Run>,
    wf: &Workflow,
    tick: Timestamp,
    created: Timestamp,
    queue: bool,
) -> Result<(), ReconcileError> {
    let name = wf.name_any();
    let uid = wf.uid().unwrap_or_default();
    let mut run = Run::of_schedule(wf, tick, created);
    if queue && let Some(version) = run.spec.workflow.as_mut() {
        // `overlap: queue`: one run of the workflow at a time, unless the workflow
        // bounds its runs itself. Every unfinished run of the workflow holds a slot of
        // its group, so this run waits `queued` for all of them.
        version.concurrency.get_or_insert(Concurrency {
            limit: 1,
            key: None,
            policy: ConcurrencyPolicy::Queue,
        });
    }
    let run_name = run.name_any();
    match api.create(&PostParams::default(), &run).await {
        Ok(_) => {
            tracing::info!(workflow = %name, tick = %tick, run = %run_name, "scheduled run started");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = api.get_metadata_opt(&run_name).await?;
            let ours = existing
                .as_ref()
                .is_some_and(|r| r.owner_references().iter().any(|o| o.uid == uid));
            if ours {
                Ok(())
            } else {
                Err(ReconcileError::RunNameTaken(run_name))
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Asks the unfinished run `name` to stop for a newer scheduled run (`overlap:
/// cancel_previous`); a run gone meanwhile needs nothing.
async fn cancel_for_schedule(api: &Api<Run>, name: &str) -> Result<(), ReconcileError> {
    let patch = json!({"spec": {"cancel": true, "cancelReason": "cancelled by the schedule's next run (overlap cancel_previous)"}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.patch(name, &params, &Patch::Merge(patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn reconcile(
    object: Arc<Lenient<Workflow>>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    // An undecodable workflow is reported by the watchers; it is left alone until it
    // changes.
    let Some(wf) = object.decoded() else {
        return Ok(Action::await_change());
    };
    let ns = wf.namespace().unwrap_or_default();
    let name = wf.name_any();
    let runs = ctx.runs_by_workflow.filed_under(&ns, &name, |run| {
        ctx.runs.get_by(&lenient::store_key(Some(&ns), run))
    });
    let hooks: Vec<Arc<Webhook>> = ctx
        .webhooks
        .state()
        .into_iter()
        .filter(|h| h.namespace().as_deref() == Some(ns.as_str()))
        .collect();
    let now = Timestamp::now();
    let parent_unfinished = |parent: &str| {
        ctx.runs
            .get_by(&lenient::store_key(Some(&ns), parent))
            .is_some_and(|p| !p.phase().is_finished())
    };
    let mut plan = plan(wf, &runs, &hooks, now, &parent_unfinished, &mut || {
        flowline_core::engine::events::new_event_id()
    });
    let hook_secret = ctx.hook_secrets.sealed(&ctx.client, wf).await;
    if let Some(sealed) = hook_secret.status {
        plan.status.hook_secret = sealed;
    }
    let run_api: Api<Run> = Api::namespaced(ctx.client.clone(), &ns);
    for victim in &plan.delete {
        match run_api.delete(victim, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    for victim in &plan.cancel_previous {
        cancel_for_schedule(&run_api, victim).await?;
    }
    for (i, tick) in plan.start_for_ticks.iter().enumerate() {
        // A millisecond apart: their creation order is the ticks' order.
        let created = now + SignedDuration::from_millis(i as i64);
        start_scheduled(&run_api, wf, *tick, created, plan.queue_ticks).await?;
    }
    let recorded = plan
        .new_event
        .as_ref()
        .and_then(|id| plan.status.pending_events.iter_mut().find(|e| &e.id == id));
    if let Some(new) = recorded {
        // Registered before the write that records it; the registry stamps it.
        let holder = unseen::Holder::new(unseen::HolderKind::Workflow, &wf.metadata);
        new.timestamp = unseen::created(&ns, &holder, &new.id);
        let reason = if new.kind == EventKind::WorkflowActivated {
            "Activated"
        } else {
            "Paused"
        };
        ctx.telemetry
            .event(
                &**wf,
                false,
                reason,
                format!("workflow is {}", wf.spec.state.as_str()),
            )
            .await;
    }
    if wf.status.as_ref() != Some(&plan.status) {
        let api: Api<Workflow> = Api::namespaced(ctx.client.clone(), &ns);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let written = api
            .patch_status(
                &name,
                &params,
                &Patch::Merge(json!({"status": plan.status})),
            )
            .await;
        if let Err(err) = written {
            // The next reconcile records the transition afresh, under a new id.
            if let Some(id) = &plan.new_event {
                unseen::write_failed(&ns, id);
            }
            return Err(err.into());
        }
        for id in &plan.evicted {
            unseen::forget(&ns, id);
        }
    }
    let until_wake = plan.wake_at.map(|at| {
        let wait = (at.as_millisecond() - Timestamp::now().as_millisecond()).max(0) as u64;
        Duration::from_millis(wait + 5)
    });
    Ok(
        match until_wake.into_iter().chain(hook_secret.again_in).min() {
            Some(wait) => Action::requeue(wait),
            None => Action::await_change(),
        },
    )
}

/// A failed reconcile is tried again after the workflow's own backoff
/// ([`super::backoff`]); a success ends the series.
fn error_policy(wf: Arc<Lenient<Workflow>>, err: &ReconcileError, ctx: Arc<Context>) -> Action {
    ctx.telemetry
        .reconcile_errors
        .get_or_create(&ControllerLabel {
            controller: "workflow",
        })
        .inc();
    let key = super::backoff::object_key(wf.namespace().as_deref(), &wf.name_any());
    let retry_in = ctx.backoff.failed(&key, std::time::Instant::now());
    tracing::warn!(workflow = %key, error = %err, ?retry_in, "workflow reconcile failed; retrying");
    Action::requeue(retry_in)
}

/// The controller until `shutdown`, reading the runs of its namespace from `runs` (the
/// operator's shared watch, `run_cache`; subscribed when called, so a watch not begun
/// yet lists once for it and the other components). Runs are owned by their workflow,
/// so a run's change wakes its workflow at once.
pub fn run(
    client: Client,
    namespace: Option<String>,
    runs: RunCache,
    telemetry: EngineTelemetry,
    seal: Arc<SealKey>,
    shutdown: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    // The runs of every workflow, for counts and retention. A run's change wakes its
    // workflow after the cache holds the change: a separate `owns` watch could wake the
    // workflow before the cache saw the run finish, and nothing would wake it again.
    let mut listed = false;
    let mut report = undecodable::WatchReport::new(Some(client.clone()));
    let woken = runs
        .watch
        .select(move |event| {
            report.observe(event);
            // The first listing wakes nothing: every workflow is reconciled when the
            // controller starts, after this cache is full. A later re-listing may carry
            // changes the watch missed, so it wakes their workflows.
            if matches!(event, Ok(watcher::Event::InitDone)) {
                listed = true;
            }
            listed.then(|| owning_workflows(event))
        })
        .flat_map(futures::stream::iter);
    control_loop(client, namespace, runs, woken, telemetry, seal, shutdown)
}

async fn control_loop(
    client: Client,
    namespace: Option<String>,
    runs: RunCache,
    woken: impl futures::Stream<Item = ObjectRef<Lenient<Workflow>>> + Send + 'static,
    telemetry: EngineTelemetry,
    seal: Arc<SealKey>,
    shutdown: CancellationToken,
) {
    let workflows: Api<Lenient<Workflow>> =
        flowline_kube::scoped_api(&client, namespace.as_deref());
    let reader = runs.watch.decoded();
    // The webhooks, for what their deliveries have settled.
    let hooks: Api<Lenient<Webhook>> = flowline_kube::scoped_api(&client, namespace.as_deref());
    let (webhooks, hook_events) = lenient::reflector(hooks, watcher::Config::default());
    undecodable::spawn_watch(hook_events, None, shutdown.clone(), |_| {});
    let ctx = Arc::new(Context {
        client,
        runs: reader.clone(),
        runs_by_workflow: runs.by_workflow,
        webhooks: webhooks.clone(),
        telemetry,
        backoff: Default::default(),
        hook_secrets: super::hook_secret::HookSecrets::new(seal),
    });
    // Bounded like the run controller's: unbounded, a start-up spawns one task per
    // workflow at once.
    let controller = Controller::new(workflows, watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(32))
        .reconcile_on(woken)
        .graceful_shutdown_on(shutdown.cancelled_owned());
    // Retention counts need every run, and what every webhook settled: start
    // reconciling once both caches are full.
    if reader.wait_until_ready().await.is_err() || webhooks.wait_until_ready().await.is_err() {
        return;
    }
    controller
        .run(
            |wf, ctx| async move {
                let key = super::backoff::object_key(wf.namespace().as_deref(), &wf.name_any());
                let timer = ctx.telemetry.reconcile_timer("workflow");
                ctx.backoff
                    .track(&key, timer.time(reconcile(wf, ctx.clone())))
                    .await
            },
            error_policy,
            ctx,
        )
        .for_each(|result| {
            if let Err(err) = result {
                tracing::debug!(error = %err, "workflow reconcile error");
            }
            futures::future::ready(())
        })
        .await;
}

/// The workflows owning the run of a watch event (by controller owner reference, as
/// `Controller::owns` maps them).
fn owning_workflows(
    event: &Result<watcher::Event<Lenient<Run>>, watcher::Error>,
) -> Vec<ObjectRef<Lenient<Workflow>>> {
    let run = match event {
        Ok(
            watcher::Event::Apply(run)
            | watcher::Event::InitApply(run)
            | watcher::Event::Delete(run),
        ) => run,
        _ => return Vec::new(),
    };
    let namespace = run.namespace();
    run.owner_references()
        .iter()
        .filter(|o| o.controller == Some(true) && o.kind == "Workflow")
        .map(|o| {
            let workflow = ObjectRef::new(&o.name);
            match &namespace {
                Some(ns) => workflow.within(ns),
                None => workflow,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowline_core::crd::scheduled_run_name;

    /// No run has an unfinished parent.
    fn no_parent(_: &str) -> bool {
        false
    }
    use flowline_core::delivery::settled::fixtures::hook;

    fn wf(state: &str, status: serde_json::Value, history: (u32, u32)) -> Workflow {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "wf", "namespace": "n", "generation": 3},
            "spec": {"name": "W", "state": state, "history": {"succeeded": history.0, "failed": history.1}},
            "status": status,
        }))
        .unwrap()
    }

    fn run(name: &str, phase: &str, started: &str) -> Arc<Run> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "flowline.io/v1", "kind": "Run",
                "metadata": {"name": name, "namespace": "n"},
                "spec": {"workflowRef": "wf"},
                "status": {"phase": phase, "startedAt": started},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_run_event_wakes_the_workflow_that_controls_the_run() {
        let owned: Lenient<Run> = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n", "ownerReferences": [
                {"apiVersion": "flowline.io/v1", "kind": "Workflow", "name": "wf", "uid": "u1", "controller": true},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "u2", "controller": false},
            ]},
            "spec": {"workflowRef": "wf"},
        }))
        .unwrap();
        let wake = |event| owning_workflows(&Ok(event));
        let expected = vec![ObjectRef::<Lenient<Workflow>>::new("wf").within("n")];
        assert_eq!(wake(watcher::Event::Apply(owned.clone())), expected);
        assert_eq!(wake(watcher::Event::Delete(owned.clone())), expected);
        assert_eq!(wake(watcher::Event::InitApply(owned)), expected);
        assert!(wake(watcher::Event::InitDone).is_empty());
        let orphan: Lenient<Run> = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "o", "namespace": "n"}, "spec": {"workflowRef": "wf"},
        }))
        .unwrap();
        assert!(wake(watcher::Event::Apply(orphan)).is_empty());
    }

    fn ids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("evt_{n}")
        }
    }

    #[test]
    fn activation_and_pause_are_recorded_once() {
        let now = Timestamp::now();
        let p = plan(
            &wf("active", json!({"observedState": "draft"}), (100, 100)),
            &[],
            &[],
            now,
            &no_parent,
            &mut ids(),
        );
        assert_eq!(p.status.pending_events.len(), 1);
        assert_eq!(
            p.status.pending_events[0].kind,
            EventKind::WorkflowActivated
        );
        assert_eq!(p.status.pending_events[0].data["previous_state"], "draft");
        assert_eq!(p.status.observed_state, Some(WorkflowState::Active));
        assert_eq!(p.status.observed_generation, Some(3));

        let again = wf(
            "active",
            serde_json::to_value(&p.status).unwrap(),
            (100, 100),
        );
        assert_eq!(
            plan(&again, &[], &[], now, &no_parent, &mut ids())
                .status
                .pending_events
                .len(),
            1,
            "no second event"
        );

        let paused = wf(
            "paused",
            serde_json::to_value(&p.status).unwrap(),
            (100, 100),
        );
        let p2 = plan(&paused, &[], &[], now, &no_parent, &mut ids());
        assert_eq!(
            p2.status.pending_events.last().unwrap().kind,
            EventKind::WorkflowPaused
        );
        let fresh_draft = plan(
            &wf("draft", json!(null), (100, 100)),
            &[],
            &[],
            now,
            &no_parent,
            &mut ids(),
        );
        assert!(
            fresh_draft.status.pending_events.is_empty(),
            "a new draft is not an event"
        );
    }

    #[test]
    fn retention_keeps_the_newest_finished_runs_per_outcome() {
        let runs = vec![
            run("s1", "succeeded", "2026-01-01T00:00:01Z"),
            run("s2", "succeeded", "2026-01-01T00:00:02Z"),
            run("s3", "cancelled", "2026-01-01T00:00:03Z"),
            run("f1", "failed", "2026-01-01T00:00:04Z"),
            run("f2", "failed", "2026-01-01T00:00:05Z"),
            run("r1", "running", "2026-01-01T00:00:00Z"),
        ];
        let p = plan(
            &wf("draft", json!(null), (2, 1)),
            &runs,
            &[],
            Timestamp::now(),
            &no_parent,
            &mut ids(),
        );
        assert_eq!(
            p.delete,
            ["s1", "f1"],
            "oldest first; running runs are never deleted"
        );
        let c = &p.status.run_counts;
        assert_eq!(
            (c.running, c.succeeded, c.cancelled, c.failed),
            (1, 1, 1, 1)
        );
        assert_eq!(
            p.status.last_run_at,
            Some("2026-01-01T00:00:05Z".parse().unwrap())
        );
    }

    #[test]
    fn retention_keeps_a_child_until_its_parent_has_finished() {
        let child = |name: &str, parent: &str, started: &str| {
            let mut r = (*run(name, "succeeded", started)).clone();
            r.spec.parent = Some(
                serde_json::from_value(json!({"runId": parent, "stepId": "call", "depth": 1}))
                    .unwrap(),
            );
            Arc::new(r)
        };
        let runs = vec![
            child("c1", "waiting-parent", "2026-01-01T00:00:01Z"),
            child("c2", "done-parent", "2026-01-01T00:00:02Z"),
            run("s3", "succeeded", "2026-01-01T00:00:03Z"),
        ];
        let now = Timestamp::now();
        let unfinished = |parent: &str| parent == "waiting-parent";
        let p = plan(
            &wf("active", json!(null), (1, 1)),
            &runs,
            &[],
            now,
            &unfinished,
            &mut ids(),
        );
        assert_eq!(p.delete, ["c2"], "c1 is held for its parent");
        assert!(
            p.wake_at.is_some_and(|at| at > now),
            "looked at again to delete it later"
        );
    }

    fn succeeded_with_event(name: &str, started: &str) -> Arc<Run> {
        let mut run = (*run(name, "succeeded", started)).clone();
        run.status.as_mut().unwrap().pending_events = vec![PendingEvent {
            id: format!("evt_{name}"),
            kind: EventKind::RunSucceeded,
            timestamp: started.parse().unwrap(),
            data: json!({}),
        }];
        Arc::new(run)
    }

    #[test]
    fn retention_waits_until_a_runs_events_are_settled() {
        let runs = vec![
            succeeded_with_event("s1", "2026-01-01T00:00:01Z"),
            succeeded_with_event("s2", "2026-01-01T00:00:02Z"),
        ];
        let now = Timestamp::now();
        let behind = hook(&["run.succeeded"], json!({"acknowledged": ["evt_s1"]}));
        let p = plan(
            &wf("draft", json!(null), (0, 0)),
            &runs,
            &[behind],
            now,
            &no_parent,
            &mut ids(),
        );
        assert_eq!(p.delete, ["s1"], "s2's run.succeeded is not delivered yet");
        assert_eq!(p.status.run_counts.succeeded, 1);
        let recheck = p.wake_at.expect("looks again while a run waits");
        assert!(recheck <= now + jiff::SignedDuration::try_from(undelivered::RECHECK).unwrap());

        let done = hook(
            &["run.succeeded"],
            json!({"deliveredThrough": "2026-01-01T00:00:02Z"}),
        );
        let unsubscribed = hook(&["run.failed"], json!(null));
        let p = plan(
            &wf("draft", json!(null), (0, 0)),
            &runs,
            &[done, unsubscribed],
            now,
            &no_parent,
            &mut ids(),
        );
        assert_eq!(p.delete, ["s1", "s2"]);
        assert_eq!(p.wake_at, None);
    }

    #[test]
    fn retention_keeps_a_hook_run_for_a_day_for_its_webhook_id() {
        let hook_run = |name: &str, started: &str| {
            let mut r = (*run(name, "succeeded", started)).clone();
            r.spec.trigger = RunTrigger::Webhook;
            Arc::new(r)
        };
        let runs = vec![
            hook_run("h-old", "2026-01-01T00:00:00Z"),
            hook_run("h-new", "2026-01-01T12:00:00Z"),
            run("manual", "succeeded", "2026-01-01T11:00:00Z"),
        ];
        let plan_at = |now: &str| {
            let now: Timestamp = now.parse().unwrap();
            plan(
                &wf("active", json!(null), (0, 0)),
                &runs,
                &[],
                now,
                &no_parent,
                &mut ids(),
            )
        };
        let p = plan_at("2026-01-02T06:00:00Z");
        assert_eq!(p.delete, ["h-old", "manual"], "h-new is not 24 h old yet");
        assert_eq!(p.status.run_counts.succeeded, 1);
        assert_eq!(
            p.wake_at,
            Some("2026-01-02T12:00:00Z".parse().unwrap()),
            "looks again when the hold ends"
        );
        let p = plan_at("2026-01-02T12:00:00Z");
        assert_eq!(p.delete, ["h-old", "manual", "h-new"], "oldest first");
        assert_eq!(p.wake_at, None);
    }

    /// A workflow paused with `n` earlier events in its status, now active.
    fn reactivated_with(n: usize) -> Workflow {
        let events: Vec<PendingEvent> = (0..n)
            .map(|i| PendingEvent {
                id: format!("old_{i}"),
                kind: EventKind::WorkflowPaused,
                timestamp: Timestamp::from_second(1_767_225_600 + 1 + i as i64).unwrap(),
                data: json!({}),
            })
            .collect();
        wf(
            "active",
            json!({"observedState": "paused", "pendingEvents": events}),
            (100, 100),
        )
    }

    #[test]
    fn the_event_cap_evicts_settled_events_only() {
        let now = Timestamp::now();
        let settled_all = hook(
            &["workflow.paused", "workflow.activated"],
            json!({"deliveredThrough": "2026-01-02T00:00:00Z"}),
        );
        let p = plan(
            &reactivated_with(undelivered::MAX_PENDING_EVENTS),
            &[],
            &[settled_all],
            now,
            &no_parent,
            &mut ids(),
        );
        assert_eq!(p.evicted, ["old_0"]);
        assert_eq!(p.new_event.as_deref(), Some("evt_1"));
        assert_eq!(
            p.status.pending_events.len(),
            undelivered::MAX_PENDING_EVENTS
        );
        assert_eq!(p.status.observed_state, Some(WorkflowState::Active));

        let owed = hook(&["workflow.paused"], json!(null));
        let p = plan(
            &reactivated_with(undelivered::MAX_PENDING_EVENTS + 10),
            &[],
            &[owed],
            now,
            &no_parent,
            &mut ids(),
        );
        assert!(p.evicted.is_empty(), "nothing is settled");
        assert_eq!(
            p.status.pending_events.len(),
            undelivered::MAX_PENDING_EVENTS + 11,
            "kept beyond the cap"
        );
    }

    #[test]
    fn a_state_change_waits_while_the_held_events_are_all_unsettled() {
        let now = Timestamp::now();
        let owed = hook(&["workflow.paused"], json!(null));
        let full = reactivated_with(undelivered::MAX_HELD_EVENTS);
        let p = plan(&full, &[], &[owed], now, &no_parent, &mut ids());
        assert_eq!(p.new_event, None);
        assert_eq!(
            p.status.observed_state,
            Some(WorkflowState::Paused),
            "recorded later, not dropped"
        );
        assert_eq!(p.status.pending_events, full.status.unwrap().pending_events);
        assert!(p.wake_at.is_some());
    }

    fn ready(p: &Plan) -> (ConditionStatus, &str, &str) {
        let c = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("a Ready condition");
        (c.status, c.reason.as_str(), c.message.as_str())
    }

    #[test]
    fn a_spec_that_would_fail_every_run_is_not_ready() {
        let now = Timestamp::now();
        let mut w = wf("active", json!({}), (100, 100));
        w.spec.steps = serde_json::from_value(json!([
            {"id": "a", "action": "transform", "with": {"value": "{{ steps.b.output }}"}},
            {"id": "b", "action": "fail", "when": "trigger.payload.n = 1"}
        ]))
        .unwrap();
        let p = plan(&w, &[], &[], now, &no_parent, &mut ids());
        assert_eq!(
            ready(&p),
            (
                ConditionStatus::False,
                "InvalidSpec",
                "steps[0].with.value: \"steps.b.output\" reads step \"b\", which runs later \
                 (steps[1]); a step reads only the steps before it; steps[1].when: syntax error at \
                 position 18: expected '==' to compare"
            )
        );
        // Runs are not held back, and the rest of the status is kept up to date.
        assert_eq!(p.status.observed_generation, Some(3));
        assert!(p.status.pending_events.len() == 1, "activation recorded");

        // Fixed: Ready again.
        w.spec.steps[1].when = Some("trigger.payload.n == 1".into());
        w.spec.steps.swap(0, 1);
        w.status = Some(p.status);
        let p = plan(&w, &[], &[], now, &no_parent, &mut ids());
        assert_eq!(ready(&p), (ConditionStatus::True, "Reconciled", ""));

        // A bad schedule keeps its reason; the spec's problems are listed after it.
        w.spec.trigger =
            serde_json::from_value(json!({"type": "schedule", "cron": "nope"})).unwrap();
        w.spec.steps[0].when = Some("(".into());
        let p = plan(&w, &[], &[], now, &no_parent, &mut ids());
        let (status, reason, message) = ready(&p);
        assert_eq!(
            (status, reason),
            (ConditionStatus::False, "InvalidSchedule")
        );
        assert!(
            message.ends_with(
                "; steps[0].when: syntax error at position 1: expected a value, found the end"
            ),
            "{message}"
        );
    }

    #[test]
    fn scheduled_run_names_are_valid_and_per_tick() {
        let tick: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
        let name = scheduled_run_name("nightly", "uid-1", tick);
        assert!(name.starts_with("nightly-"), "{name}");
        assert_eq!(name, scheduled_run_name("nightly", "uid-1", tick), "stable");
        let next = tick + jiff::SignedDuration::from_mins(5);
        assert_ne!(
            name,
            scheduled_run_name("nightly", "uid-1", next),
            "per tick"
        );
        // Long names that differ only past the prefix, or a workflow recreated under
        // the same name, never share a tick's run.
        let long_a = format!("{}-a", "x".repeat(60));
        let long_b = format!("{}-b", "x".repeat(60));
        assert_ne!(
            scheduled_run_name(&long_a, "uid-a", tick),
            scheduled_run_name(&long_b, "uid-b", tick)
        );
        assert_ne!(
            scheduled_run_name("nightly", "uid-1", tick),
            scheduled_run_name("nightly", "uid-2", tick)
        );
        let long = scheduled_run_name(&"x".repeat(250), "u", tick);
        assert!(long.len() <= 63 && long.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }

    #[test]
    fn overlap_decides_what_due_ticks_start_and_what_they_cancel() {
        let at = |m: i64| Timestamp::from_second(m * 60).unwrap();
        let (two, none) = (vec![at(1), at(2)], Vec::<Timestamp>::new());
        let busy = vec!["run-a".to_string()];
        let idle: Vec<String> = Vec::new();
        let check = |overlap, ticks: &Vec<Timestamp>, unfinished: &Vec<String>, start, cancel| {
            assert_eq!(
                overlapping(overlap, ticks.clone(), unfinished),
                (start, cancel),
                "{overlap:?} {ticks:?} {unfinished:?}"
            );
        };
        check(Overlap::Allow, &two, &busy, two.clone(), vec![]);
        check(Overlap::Queue, &two, &busy, two.clone(), vec![]);
        check(Overlap::Skip, &two, &busy, vec![], vec![]);
        check(Overlap::Skip, &two, &idle, vec![at(2)], vec![]);
        check(
            Overlap::CancelPrevious,
            &two,
            &busy,
            vec![at(2)],
            busy.clone(),
        );
        check(Overlap::CancelPrevious, &two, &idle, vec![at(2)], vec![]);
        // No tick due: nothing starts, nothing is cancelled.
        check(Overlap::CancelPrevious, &none, &busy, vec![], vec![]);
        check(Overlap::Skip, &none, &idle, vec![], vec![]);
        check(Overlap::Allow, &none, &busy, vec![], vec![]);
    }
}
