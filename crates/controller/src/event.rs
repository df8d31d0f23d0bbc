//! The event controller: fans each posted event (`FlowlineEvent`) out to the workflows
//! subscribed to its name, cancels the unfinished runs of workflows whose `cancelOn`
//! names it, records both, and deletes events once the retention has passed. [`flowline_core::fanout`] decides (which workflows, the run
//! names, the status, the expiry); `reconcile` applies and returns every error, so a
//! failed write retries the whole fan-out, whose run names make it idempotent.
//!
//! One process at a time runs it (the holder of shard 0, like schedules): a second
//! one would only meet `AlreadyExists` on each run, but need not try.
//!
//! The workflows are listed from the API server for each pending event, not read from a
//! watch cache: a workflow created (or activated) before the event was posted is seen
//! for certain, whatever a cache would have lagged.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use flowline_core::crd::{
    EventPhase, EventRef, FlowlineEvent, MatchedEvent, Run, RunTrigger, Workflow, labels,
};
use flowline_core::fanout::{self, Cancel, FanOut};
use flowline_engine::status_writer::FIELD_MANAGER;
use flowline_kube::lenient::{self, Lenient};
use flowline_telemetry::engine_metrics::{ActionLabel, ControllerLabel, EngineTelemetry};

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("evaluating the filters failed: {0}")]
    Plan(#[from] tokio::task::JoinError),
}

/// The field selector of unfinished runs.
const UNFINISHED: &str = "status.phase!=succeeded,status.phase!=failed,status.phase!=cancelled";

/// Runs one fan-out creates at once.
const CREATES_IN_FLIGHT: usize = 32;

pub struct Context {
    pub client: Client,
    /// How long an event is kept after it was received (`--event-retention`).
    pub retention: SignedDuration,
    pub telemetry: EngineTelemetry,
    /// Each event's series of failed reconciles, ended by a success.
    pub backoff: super::backoff::ReconcileBackoff,
}

/// What creating one run of the fan-out came to.
#[derive(Debug, PartialEq)]
pub enum Created {
    /// The run exists (created now, or by an earlier try of this fan-out).
    Run(String),
    /// The workflow gets no run, for this reason.
    Skipped(String),
}

/// The run `event` starts of `wf`: owned by the workflow, pinned to its version,
/// trigger `event`, the event's payload and identity.
pub fn run_of(event: &FlowlineEvent, wf: &Workflow, now: Timestamp) -> Run {
    let name = fanout::run_name(
        &wf.name_any(),
        &wf.uid().unwrap_or_default(),
        &event.uid().unwrap_or_default(),
    );
    let mut run = Run::of_workflow(
        wf,
        &name,
        RunTrigger::Event,
        event.spec.payload.clone(),
        now,
    );
    run.spec.event = Some(EventRef {
        id: event.id(),
        name: event.spec.name.clone(),
    });
    run
}

/// Creates `run` of the workflow with uid `workflow_uid`. A name conflict is this
/// fan-out's earlier try when the Run is that workflow's; a Run the API server refuses
/// as invalid (too large, say) is skipped with the reason, not retried forever; any
/// other error is returned.
async fn create(api: &Api<Run>, run: &Run, workflow_uid: &str) -> Result<Created, kube::Error> {
    let name = run.name_any();
    let spec_bytes = serde_json::to_vec(&run.spec).map_or(usize::MAX, |b| b.len());
    if spec_bytes > flowline_core::limits::MAX_RUN_SPEC_BYTES {
        return Ok(Created::Skipped(format!(
            "workflow {}: the payload and the workflow's steps take {spec_bytes} bytes; a run \
             holds at most 1 MiB of them",
            run.spec.workflow_ref
        )));
    }
    match api.create(&PostParams::default(), run).await {
        Ok(_) => Ok(Created::Run(name)),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = api.get_metadata_opt(&name).await?;
            let ours = existing
                .as_ref()
                .is_some_and(|r| r.owner_references().iter().any(|o| o.uid == workflow_uid));
            Ok(match (existing, ours) {
                (_, true) => Created::Run(name),
                // Deleted between the conflict and the read (retention): it existed.
                (None, _) => Created::Run(name),
                (Some(_), false) => Created::Skipped(format!(
                    "workflow {}: the run name {name} is taken by another Run",
                    run.spec.workflow_ref
                )),
            })
        }
        Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => {
            Ok(Created::Skipped(format!(
                "workflow {}: run refused: {}",
                run.spec.workflow_ref, s.message
            )))
        }
        Err(e) => Err(e),
    }
}

/// Cancels the unfinished runs `event` cancels (`cancelOn` of `workflows`, decided by
/// [`fanout::cancel`]), at most [`fanout::MAX_CANCELS_PER_EVENT`] (beyond: `truncated`);
/// returns their names, those an earlier try of this fan-out cancelled included.
async fn cancel_runs(
    client: &Client,
    event: &FlowlineEvent,
    workflows: &[Workflow],
    fan: &mut FanOut,
) -> Result<Vec<String>, kube::Error> {
    let ns = event.namespace().unwrap_or_default();
    let runs: Api<Lenient<Run>> = Api::namespaced(client.clone(), &ns);
    let writes: Api<Run> = Api::namespaced(client.clone(), &ns);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let reason = fanout::cancel_reason(event);
    let mut cancelled = Vec::new();
    for wf in workflows {
        let entries = fanout::cancel_entries(event, wf);
        if entries.is_empty() {
            continue;
        }
        let selector = format!("{}={}", labels::WORKFLOW, wf.name_any());
        let listed = runs.list(&ListParams::default().labels(&selector)).await?;
        let owned = listed.items.iter().filter_map(|r| r.decoded());
        for run in owned.filter(|r| r.spec.workflow_ref == wf.name_any()) {
            let name = run.name_any();
            match fanout::cancel(event, &entries, run) {
                Cancel::Keep => {}
                Cancel::Problem(why) => fan.problem(why),
                Cancel::Cancelled => cancelled.push(name),
                Cancel::Cancel if cancelled.len() >= fanout::MAX_CANCELS_PER_EVENT => {
                    fan.truncated = true;
                    return Ok(cancelled);
                }
                Cancel::Cancel => {
                    let patch = json!({"spec": {"cancel": true, "cancelReason": reason}});
                    match writes.patch(&name, &params, &Patch::Merge(patch)).await {
                        Ok(_) => cancelled.push(name),
                        // Deleted meanwhile (retention): nothing left to cancel.
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    Ok(cancelled)
}

/// Completes the `wait_for_event` steps `event` matches ([`fanout::resumes`]) in the
/// namespace's unfinished runs: the event is appended to the Run's
/// `spec.matchedEvents` with a write conditional on the Run as read (a run that changed
/// meanwhile is read again). Returns the runs it completed a step of, those an earlier
/// try of this fan-out completed included.
async fn resume_runs(
    client: &Client,
    event: &FlowlineEvent,
    fan: &mut FanOut,
) -> Result<Vec<String>, kube::Error> {
    let ns = event.namespace().unwrap_or_default();
    let runs: Api<Lenient<Run>> = Api::namespaced(client.clone(), &ns);
    let writes: Api<Run> = Api::namespaced(client.clone(), &ns);
    let mut resumed = Vec::new();
    // Only unfinished runs with `wait_for_event` steps can wait: the label and the
    // phase (a selectable field) leave out the history and other workflows' runs.
    let listed = runs
        .list(
            &ListParams::default()
                .labels(&format!(
                    "{}=true",
                    flowline_core::crd::labels::WAITS_FOR_EVENTS
                ))
                .fields(UNFINISHED),
        )
        .await?;
    for run in listed.items.iter().filter_map(|r| r.decoded()) {
        if complete_waits(&writes, event, run, &mut |why| fan.problem(why)).await? {
            resumed.push(run.name_any());
        }
    }
    Ok(resumed)
}

/// Completes the `wait_for_event` steps of `run` that `event` matches
/// ([`fanout::resumes`]): appends the event to the Run's `spec.matchedEvents` with a
/// write conditional on the Run as read (a run that changed meanwhile is read again and
/// decided anew). True when the event completes a step of the run, now or by an earlier
/// try; `problem` hears of matches that could not be evaluated.
pub(crate) async fn complete_waits(
    writes: &Api<Run>,
    event: &FlowlineEvent,
    run: &Run,
    problem: &mut (dyn FnMut(String) + Send),
) -> Result<bool, kube::Error> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let name = run.name_any();
    let mut current = run.clone();
    for _ in 0..3 {
        let (steps, problems) = fanout::resumes(event, &current);
        for why in problems {
            problem(why);
        }
        if steps.is_empty() {
            return Ok(false);
        }
        if steps.iter().all(|(_, done)| *done) {
            return Ok(true);
        }
        let mut matched = current.spec.matched_events.clone();
        for (step_id, done) in steps {
            if !done {
                matched.push(MatchedEvent {
                    step_id,
                    event_id: event.id(),
                    payload: event.spec.payload.clone().unwrap_or_else(|| json!({})),
                    at: Some(event.spec.received_at),
                });
            }
        }
        let patch = json!({
            "metadata": {"resourceVersion": current.resource_version()},
            "spec": {"matchedEvents": matched},
        });
        match writes.patch(&name, &params, &Patch::Merge(patch)).await {
            Ok(_) => return Ok(true),
            // Changed meanwhile: decide again on the Run as it is now.
            Err(kube::Error::Api(s)) if s.code == 409 => match writes.get_opt(&name).await? {
                Some(fresh) => current = fresh,
                None => return Ok(false),
            },
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

async fn reconcile(
    object: Arc<Lenient<FlowlineEvent>>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let Some(event) = object.decoded() else {
        return Ok(Action::await_change());
    };
    let ns = event.namespace().unwrap_or_default();
    let name = event.name_any();
    let events: Api<FlowlineEvent> = Api::namespaced(ctx.client.clone(), &ns);
    let now = Timestamp::now();
    if event.phase() == EventPhase::Done {
        if fanout::expired(event, ctx.retention, now) {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: event.uid(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match events.delete(&name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(Action::await_change());
        }
        return Ok(wake_at(fanout::expires_at(event, ctx.retention)));
    }
    // The watch keeps a pending event's payload up to `KEPT_PAYLOAD_BYTES`; a larger
    // one is read whole. Fanning out from the cached event is safe even when the
    // cache is behind: every step of a fan-out is idempotent (runs are named after the
    // event and the workflow, cancels and resumes are decided on the runs as they
    // are), so a fan-out done twice ends as one.
    let read;
    let event = if payload_dropped(event) {
        let whole: Api<Lenient<FlowlineEvent>> = Api::namespaced(ctx.client.clone(), &ns);
        let Some(Lenient::Decoded(fresh)) = whole.get_opt(&name).await? else {
            return Ok(Action::await_change());
        };
        if fresh.phase() == EventPhase::Done || fresh.uid() != object.uid() {
            // Done meanwhile, or replaced: its own watch event brings it back.
            return Ok(Action::await_change());
        }
        read = fresh;
        &*read
    } else {
        &**event
    };

    let workflows: Api<Lenient<Workflow>> = Api::namespaced(ctx.client.clone(), &ns);
    let listed: Vec<Workflow> = workflows
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|w| w.decoded().map(|w| Workflow::clone(w)))
        .collect();
    // Filters are evaluated off the async runtime: a thousand of the costliest over a
    // 1 MiB payload take seconds of CPU, which must not hold up lease renewals.
    let (mut fan, listed) = {
        let event = event.clone();
        tokio::task::spawn_blocking(move || (fanout::plan(&event, &listed), listed)).await?
    };
    let runs: Api<Run> = Api::namespaced(ctx.client.clone(), &ns);
    // Several creates in flight: a fan-out to many workflows is as fast as the same
    // runs created by as many clients.
    let creates: Vec<_> = fan
        .start
        .iter()
        .map(|&i| {
            let (runs, wf) = (runs.clone(), &listed[i]);
            let (run, uid) = (run_of(event, wf, now), wf.uid().unwrap_or_default());
            async move { create(&runs, &run, &uid).await }
        })
        .collect();
    let created: Vec<Created> = futures::stream::iter(creates)
        .buffered(CREATES_IN_FLIGHT)
        .try_collect()
        .await?;
    let mut started = Vec::with_capacity(created.len());
    for outcome in created {
        match outcome {
            Created::Run(name) => started.push(name),
            Created::Skipped(why) => fan.problem(why),
        }
    }
    let cancelled = cancel_runs(&ctx.client, event, &listed, &mut fan).await?;
    let resumed = resume_runs(&ctx.client, event, &mut fan).await?;
    let mut status = fanout::done_status(event.status.as_ref(), &fan, started, cancelled, now);
    status.resumed = resumed;
    status.resumed.sort();
    status.resumed.dedup();
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    events
        .patch_status(&name, &params, &Patch::Merge(json!({"status": status})))
        .await?;
    ctx.telemetry.events_fanned_out.inc();
    for (action, count) in [
        ("started", status.runs.len()),
        ("cancelled", status.cancelled.len()),
        ("resumed", status.resumed.len()),
    ] {
        ctx.telemetry
            .event_runs
            .get_or_create(&ActionLabel { action })
            .inc_by(count as u64);
    }
    tracing::info!(
        event = %event.id(),
        name = %event.spec.name,
        runs = status.runs.len(),
        truncated = status.truncated,
        "event fanned out"
    );
    if fan.truncated {
        ctx.telemetry
            .event(
                event,
                true,
                "FanOutTruncated",
                format!(
                    "more than {} workflows subscribe to {}; the others got no run",
                    fanout::MAX_WORKFLOWS_PER_EVENT,
                    event.spec.name
                ),
            )
            .await;
    }
    Ok(wake_at(fanout::expires_at(event, ctx.retention)))
}

/// Look again at `at` (capped to a day, so a clock jump does not leave an event for
/// a week without a look).
fn wake_at(at: Timestamp) -> Action {
    let wait = at.duration_since(Timestamp::now());
    let wait = wait.clamp(SignedDuration::ZERO, SignedDuration::from_hours(24));
    Action::requeue(Duration::from_millis(wait.as_millis() as u64 + 5))
}

/// A failed reconcile is tried again after the event's own backoff.
fn error_policy(
    event: Arc<Lenient<FlowlineEvent>>,
    err: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    ctx.telemetry
        .reconcile_errors
        .get_or_create(&ControllerLabel {
            controller: "event",
        })
        .inc();
    let key = super::backoff::object_key(event.namespace().as_deref(), &event.name_any());
    let retry_in = ctx.backoff.failed(&key, std::time::Instant::now());
    tracing::warn!(event = %key, error = %err, ?retry_in, "event reconcile failed; retrying");
    Action::requeue(retry_in)
}

/// The controller over the events of `namespace` (None: every namespace) until
/// `shutdown`.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    retention: SignedDuration,
    telemetry: EngineTelemetry,
    shutdown: CancellationToken,
) {
    let events: Api<Lenient<FlowlineEvent>> =
        flowline_kube::scoped_api(&client, namespace.as_deref());
    let ctx = Arc::new(Context {
        client,
        retention,
        telemetry,
        backoff: Default::default(),
    });
    // The watch keeps no payload of a done event (up to 1 MiB each, for the whole
    // retention), nor a large one of a pending event: that one is read whole when it
    // is fanned out.
    let (store, writer) = kube::runtime::reflector::store();
    let watch = lenient::compact_watch(events, watcher::Config::default(), drop_payload);
    let applied = kube::runtime::reflector(writer, watch)
        .default_backoff()
        .applied_objects();
    Controller::for_stream(applied, store)
        .with_config(kube::runtime::controller::Config::default().concurrency(8))
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(
            |event, ctx| async move {
                let key =
                    super::backoff::object_key(event.namespace().as_deref(), &event.name_any());
                let timer = ctx.telemetry.reconcile_timer("event");
                ctx.backoff
                    .track(&key, timer.time(reconcile(event, ctx.clone())))
                    .await
            },
            error_policy,
            ctx,
        )
        .for_each(|result| {
            if let Err(err) = result {
                tracing::debug!(error = %err, "event reconcile error");
            }
            futures::future::ready(())
        })
        .await;
}

/// The largest payload of a pending event the watch keeps: most events' (a fan-out
/// then needs no read of its event), and little memory, since an event is pending
/// only until it is fanned out.
const KEPT_PAYLOAD_BYTES: usize = 16 * 1024;

/// Marks a cached event whose payload the watch dropped. Set only in memory; a
/// user's own value is dropped first, so an event can never pass for one kept whole.
const PAYLOAD_DROPPED: &str = "flowline.io/payload-dropped";

/// What the controller's watch keeps of an event: everything, but the payload of a
/// done event or a large one.
fn drop_payload(event: &mut FlowlineEvent) {
    event.annotations_mut().remove(PAYLOAD_DROPPED);
    let Some(payload) = event.spec.payload.as_ref() else {
        return;
    };
    let small = || serde_json::to_vec(payload).is_ok_and(|b| b.len() <= KEPT_PAYLOAD_BYTES);
    if event.phase() == EventPhase::Done || !small() {
        event.spec.payload = None;
        event
            .annotations_mut()
            .insert(PAYLOAD_DROPPED.into(), "true".into());
    }
}

/// Whether the watch dropped `event`'s payload ([`drop_payload`]).
fn payload_dropped(event: &FlowlineEvent) -> bool {
    event.annotations().contains_key(PAYLOAD_DROPPED)
}

/// How long events are kept (`--event-retention`).
pub type Retention = SignedDuration;

/// Parses `--event-retention`: a whole number and a unit, `s`, `m`, `h` or `d`
/// (`7d`, `36h`), from 1 minute to 365 days.
pub fn parse_retention(text: &str) -> Result<SignedDuration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: i64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: expected a number and a unit, e.g. 7d or 36h"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86_400),
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d")),
    };
    if !(60..=365 * 86_400).contains(&seconds) {
        return Err(format!("{text:?}: must be from 1 minute to 365 days"));
    }
    Ok(SignedDuration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::Value;

    #[test]
    fn retention_reads_a_number_and_a_unit_within_bounds() {
        for (text, secs) in [
            ("7d", 604_800),
            ("36h", 129_600),
            ("90m", 5400),
            ("60s", 60),
        ] {
            assert_eq!(
                parse_retention(text),
                Ok(SignedDuration::from_secs(secs)),
                "{text}"
            );
        }
        assert_eq!(
            parse_retention("7d").unwrap(),
            fanout::DEFAULT_RETENTION,
            "the flag's default is the documented one"
        );
        for bad in [
            "",
            "7",
            "d",
            "7w",
            "-1d",
            "59s",
            "366d",
            "1.5h",
            "99999999999999999999d",
        ] {
            assert!(parse_retention(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_run_of_an_event_is_owned_pinned_and_names_its_event() {
        let event: FlowlineEvent = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "FlowlineEvent",
            "metadata": {"name": "evt-abc", "namespace": "team", "uid": "e-1"},
            "spec": {"name": "order.created", "payload": {"n": 1},
                     "receivedAt": "2026-01-01T00:00:00Z"},
        }))
        .unwrap();
        let wf: Workflow = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "orders", "namespace": "team", "uid": "w-1", "generation": 4},
            "spec": {"name": "Orders", "state": "active",
                     "trigger": {"type": "event", "event": "order.created"}},
        }))
        .unwrap();
        let run = run_of(&event, &wf, Timestamp::UNIX_EPOCH);
        assert_eq!(run.name_any(), fanout::run_name("orders", "w-1", "e-1"));
        assert_eq!(run.spec.trigger, RunTrigger::Event);
        assert_eq!(run.spec.payload, Some(json!({"n": 1})));
        assert_eq!(
            run.spec.event,
            Some(EventRef {
                id: "evt_abc".into(),
                name: "order.created".into()
            })
        );
        assert_eq!(run.spec.workflow.as_ref().map(|w| w.generation), Some(4));
        let owner = &run.meta().owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("w-1", Some(true)));
    }

    #[test]
    fn the_watch_keeps_the_payload_of_a_small_pending_event_only() {
        let (event, _) = fixtures();
        let with = |payload: Value, phase: Option<&str>, forged: bool| {
            let mut e = event.clone();
            e.spec.payload = Some(payload);
            if let Some(phase) = phase {
                e.status = serde_json::from_value(json!({"phase": phase})).unwrap();
            }
            if forged {
                e.annotations_mut()
                    .insert(PAYLOAD_DROPPED.into(), "true".into());
            }
            drop_payload(&mut e);
            (e.spec.payload.is_some(), payload_dropped(&e))
        };
        let big = json!({"blob": "x".repeat(KEPT_PAYLOAD_BYTES)});
        // (what, payload, phase, a forged marker, (payload kept, marked dropped))
        let rows = [
            (
                "small and pending",
                json!({"order": 1}),
                None,
                false,
                (true, false),
            ),
            ("large and pending", big.clone(), None, false, (false, true)),
            (
                "small and done",
                json!({"order": 1}),
                Some("done"),
                false,
                (false, true),
            ),
            (
                "a marker set by its author",
                json!({"order": 1}),
                None,
                true,
                (true, false),
            ),
        ];
        for (what, payload, phase, forged, expected) in rows {
            assert_eq!(with(payload, phase, forged), expected, "{what}");
        }
        let mut none = event.clone();
        drop_payload(&mut none);
        assert!(
            !payload_dropped(&none),
            "an event without a payload needs no read"
        );
    }

    fn fixtures() -> (FlowlineEvent, Workflow) {
        let event: FlowlineEvent = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "FlowlineEvent",
            "metadata": {"name": "evt-abc", "namespace": "team", "uid": "e-1"},
            "spec": {"name": "tick", "receivedAt": "2026-01-01T00:00:00Z"},
        }))
        .unwrap();
        let wf: Workflow = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "w", "namespace": "team", "uid": "w-1"},
            "spec": {"name": "W", "state": "active", "trigger": {"type": "event", "event": "tick"}},
        }))
        .unwrap();
        (event, wf)
    }

    /// What `create` makes of each answer of the API server to the run's POST (and,
    /// after a conflict, to the read of the run holding the name).
    #[tokio::test]
    async fn creating_a_run_is_idempotent_skips_refusals_and_surfaces_failures() {
        use flowline_kube::mock_api;
        let (event, wf) = fixtures();
        let run = run_of(&event, &wf, Timestamp::UNIX_EPOCH);
        let name = run.name_any();
        let holder = |owner: &str| {
            json!({"apiVersion": "flowline.io/v1", "kind": "Run",
                   "metadata": {"name": name, "namespace": "team",
                   "ownerReferences": [{"apiVersion": "flowline.io/v1", "kind": "Workflow",
                                        "name": "w", "uid": owner, "controller": true}]}})
        };
        /// What, the POST's answer, the Run holding the name, what `create` returns.
        type Row<'a> = (&'a str, u16, Option<Value>, Result<Created, u16>);
        let rows: Vec<Row> = vec![
            ("created", 201, None, Ok(Created::Run(name.clone()))),
            (
                "made by an earlier try",
                409,
                Some(holder("w-1")),
                Ok(Created::Run(name.clone())),
            ),
            (
                "another workflow's",
                409,
                Some(holder("w-2")),
                Ok(Created::Skipped(format!(
                    "workflow w: the run name {name} is taken by another Run"
                ))),
            ),
            (
                "refused",
                422,
                None,
                Ok(Created::Skipped(
                    "workflow w: run refused: mocked 422".into(),
                )),
            ),
            ("server error", 500, None, Err(500)),
        ];
        for (what, code, existing, expected) in rows {
            let created = serde_json::to_value(&run).unwrap();
            let (client, log) = mock_api::client(move |seen| match seen.method.as_str() {
                "POST" if code == 201 => (201, created.clone()),
                "POST" => (code, mock_api::status(code)),
                _ => match &existing {
                    Some(run) => (200, run.clone()),
                    None => (404, mock_api::status(404)),
                },
            });
            let api: Api<Run> = Api::namespaced(client, "team");
            let got = create(&api, &run, "w-1").await.map_err(|e| match e {
                kube::Error::Api(s) => s.code,
                _ => 0,
            });
            assert_eq!(got, expected, "{what}");
            assert_eq!(mock_api::seen(&log)[0].method, "POST", "{what}");
        }
        // A run too large is skipped before any request.
        let mut big = run.clone();
        big.spec.payload =
            Some(json!({"x": "x".repeat(flowline_core::limits::MAX_RUN_SPEC_BYTES)}));
        let (client, log) = mock_api::client(|_| (500, mock_api::status(500)));
        let got = create(&Api::namespaced(client, "team"), &big, "w-1")
            .await
            .unwrap();
        assert!(matches!(got, Created::Skipped(why) if why.contains("at most 1 MiB")));
        assert!(mock_api::seen(&log).is_empty());
    }
}
