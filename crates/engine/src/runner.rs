//! The executor: runs a Run's steps in order (or as a graph, `needs`, in parallel),
//! records step-level results, and stops promptly on cancel.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use jiff::Timestamp;
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::actions;
use super::job;
use super::secrets;
use super::status_writer::StatusWriter;
use flowline_core::clock::now_ms;
use flowline_core::crd::{
    Action, ApprovalDecision, CallbackReceived, DEFAULT_PARALLELISM, EventKind, Executor,
    IterationRecord, MAX_FOR_EACH_ITEMS, MAX_ITERATION_RECORDS, MAX_PARALLELISM, MatchedEvent, Run,
    RunPhase, RunStatus, Step, StepPhase, StepRecord, WorkflowSnapshot,
};
use flowline_core::engine::expr;
use flowline_core::engine::graph::{self, Graph, State};
use flowline_core::engine::iterations;
use flowline_core::engine::lifecycle::{self, Event, Outcome, transition};
use flowline_core::engine::output;
use flowline_core::engine::redact::Redactor;
use flowline_core::engine::retry;
use flowline_core::engine::run_context;
use flowline_core::engine::template;
use flowline_telemetry::engine_metrics::{ActionLabel, StatusLabel};
use flowline_telemetry::traces;
use tracing::Instrument;

/// What the executor needs from the process.
#[derive(Clone)]
pub struct Engine {
    pub client: Client,
    pub http: flowline_egress::GuardedClient,
    pub telemetry: flowline_telemetry::engine_metrics::EngineTelemetry,
    /// Executor of workflows that do not choose one.
    pub default_executor: Executor,
    pub jobs: job::JobSettings,
    /// The public base URL of the API (`--public-url`): what `{{ callbacks.<id>.url }}`
    /// renders under.
    pub public_url: String,
    /// The bound on step attempts executing at once in this process, every run's
    /// together (`--max-step-attempts`).
    pub attempts: AttemptBound,
}

/// How many step attempts execute at once in this process, all runs and accounts
/// together: without it, one run's `parallelism` × `forEachConcurrency` (5,000) could
/// each hold a task and a connection. An attempt waits for a place before it is
/// recorded as started and gives it back when it ends, not through a retry's backoff.
/// Unbounded until [`AttemptBound::set_limit`].
#[derive(Clone, Default)]
pub struct AttemptBound(Arc<std::sync::RwLock<Option<Arc<tokio::sync::Semaphore>>>>);

impl AttemptBound {
    /// At most `limit` attempts at once (0: no bound). Set before runs execute.
    pub fn set_limit(&self, limit: usize) {
        let bound = (limit > 0).then(|| Arc::new(tokio::sync::Semaphore::new(limit)));
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = bound;
    }

    /// A place for one attempt, in the order asked (`None`: unbounded).
    async fn enter(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let bound = self.0.read().unwrap_or_else(|p| p.into_inner()).clone();
        match bound {
            Some(semaphore) => semaphore.acquire_owned().await.ok(),
            None => None,
        }
    }
}

fn millis_between(a: Timestamp, b: Timestamp) -> u64 {
    (b.as_millisecond() - a.as_millisecond()).max(0) as u64
}

/// The status a run starts from: what is recorded, or fresh records of the workflow
/// version it executes (pending, or kept from the run it retries).
pub fn initial_status(run: &Run, wf: &WorkflowSnapshot) -> RunStatus {
    let mut status = run.status.clone().unwrap_or_default();
    if status.steps.is_empty() {
        status.steps =
            flowline_core::engine::reuse::initial_records(&wf.steps, &run.spec.reused_steps);
    }
    // A run that may wait (concurrency, rate limit, debounce) starts when it is
    // admitted, maybe long after its creation: its run timeout counts from then, and a
    // rate limit counts it then.
    let admitted =
        status.phase == RunPhase::Queued || (run.status.is_none() && wf.holds_runs_back());
    status.phase = RunPhase::Running;
    status.queued_for = None;
    // Executing again: no longer parked (a parked run's execution writes it again).
    status.parked = false;
    status
        .started_at
        .get_or_insert_with(|| if admitted { now_ms() } else { run.started_at() });
    status.workflow_generation = Some(wf.generation);
    status
}

/// Ends a run: final phase, times, and every unfinished step marked `as_step`.
pub fn finish(status: &mut RunStatus, phase: RunPhase, error: Option<String>, as_step: StepPhase) {
    let at = now_ms();
    for step in status.steps.iter_mut() {
        if matches!(step.status, StepPhase::Pending | StepPhase::Running) {
            step.status = as_step;
            if step.started_at.is_some() {
                step.finished_at = Some(at);
            }
        }
        // A step still waiting for its time or a decision never gets it.
        if step.status == StepPhase::Waiting {
            step.status = StepPhase::Cancelled;
            step.wake_at = None;
            step.finished_at = Some(at);
        }
    }
    status.parked = false;
    status.phase = phase;
    status.error = error;
    status.finished_at = Some(at);
    status.duration_ms = status.started_at.map(|s| millis_between(s, at));
    output::enforce_run_budget(&mut status.steps);
}

/// The `{{ … }}` context of step `index`: trigger payload, run, workflow and the
/// finished steps it may read (`visible`: the steps before it, or its ancestors in a
/// graph). The step's task adds `secrets`.
fn context(
    run: &Run,
    wf: &WorkflowSnapshot,
    status: &RunStatus,
    visible: &[bool],
    public_url: &str,
) -> Value {
    let callbacks: Map<String, Value> = status
        .callback_tokens
        .iter()
        .map(|t| {
            let url = flowline_core::engine::callback::url(public_url, &t.token);
            (t.step_id.clone(), json!({"url": url}))
        })
        .collect();
    let steps = run_context::finished_steps(status, |i| visible.get(i) == Some(&true));
    json!({
        "trigger": run_context::trigger(run),
        "run": {"id": run.name_any()},
        "workflow": {"id": run.spec.workflow_ref, "name": wf.name},
        "steps": steps,
        "secrets": {},
        "callbacks": callbacks,
    })
}

/// Why a cancelled run was cancelled (`spec.cancelReason`, set with `spec.cancel` by an
/// event's `cancelOn`), read afresh: the run this execution started with predates the
/// cancel. A failed read is logged and leaves the error unset, as for a cancel without a
/// reason; the cancel itself stands either way.
async fn cancel_reason(api: &Api<Run>, run: &Run) -> Option<String> {
    let fresh = match api.get_opt(&run.name_any()).await {
        Ok(fresh) => fresh,
        Err(err) => {
            tracing::warn!(run = %run.name_any(), error = %err, "cannot read why the run was cancelled");
            None
        }
    };
    fresh
        .as_ref()
        .unwrap_or(run)
        .spec
        .cancel_reason
        .clone()
        .map(flowline_core::limits::cap_error)
}

/// The output of a run whose steps all ended well: the workflow version's `output`
/// rendered with the run's whole context (every step that succeeded or was skipped;
/// no secrets), capped as a step output is ([`output::cap`]), with whether it was
/// truncated. None without an `output`; an error naming `output` when it cannot be
/// rendered (a missing path, a truncated step output): the run then fails.
fn run_output(
    run: &Run,
    wf: &WorkflowSnapshot,
    status: &RunStatus,
) -> Result<Option<(Value, bool)>, String> {
    let Some(template) = &wf.output else {
        return Ok(None);
    };
    // No callback URL in the output: anyone who may read runs reads it.
    let ctx = context(run, wf, status, &vec![true; status.steps.len()], "");
    // Errors are located from `output`: `output failed: output.total: template path …`.
    template::render_in(template, &ctx, "output")
        .map(|rendered| Some(output::cap(rendered)))
        .map_err(|e| format!("output failed: {e}"))
}

/// What from outside a run can end its waiting steps, as the controller's watch sees it
/// while the run executes: decisions on its approvals (`spec.approvals`), and which of
/// the child runs its `workflow` steps wait for have ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outside {
    pub approvals: Vec<ApprovalDecision>,
    pub callbacks: Vec<CallbackReceived>,
    pub events: Vec<MatchedEvent>,
    pub ended_children: BTreeSet<String>,
}

impl Outside {
    /// What `run` shows: its decisions; no child known to have ended.
    pub fn of(run: &Run) -> Self {
        Outside {
            approvals: run.spec.approvals.clone(),
            callbacks: run.spec.callbacks.clone(),
            events: run.spec.matched_events.clone(),
            ended_children: BTreeSet::new(),
        }
    }
}

/// What the step tasks of one run share.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) run: Arc<Run>,
    /// The run's `spec.approvals` as last seen: from the Run, then as the controller
    /// passes on the changes its watch sees while the run executes.
    approvals: Arc<Vec<ApprovalDecision>>,
    /// The run's `spec.callbacks` and `spec.matchedEvents`, passed on like its
    /// approvals.
    callbacks: Arc<Vec<CallbackReceived>>,
    events: Arc<Vec<MatchedEvent>>,
    wf: Arc<WorkflowSnapshot>,
    pub(crate) namespace: String,
}

/// What a step task tells the run's task, which alone owns the status (and so needs
/// no lock around it). A message, not a state: progress, then the step's
/// [`Outcome`] at its end.
enum Report {
    /// The step's record changed.
    Record(usize, StepRecord),
    /// Secret values the step read: redacted from every output recorded after it.
    Secrets(Vec<String>),
    /// The step ended, with its final record.
    Ended(usize, StepRecord, Outcome),
}

/// Executes the remaining steps of `run` as its pinned workflow version
/// (`spec.workflow`) defines them, then writes its final status. Returns that status
/// once it has landed (None: the run is gone or another execution owns it); the
/// caller frees the run's concurrency slot, then [`report`]s it. A parked run's status
/// (phase `running`, `parked: true`) is returned too: it keeps its slot, and is neither
/// finished nor reported. The run controller executes only pinned runs.
pub async fn execute(
    engine: Engine,
    run: Run,
    cancel: CancellationToken,
    outside: watch::Receiver<Outside>,
) -> Option<RunStatus> {
    let span = run_span(&run);
    let landed = execute_steps(engine, run, cancel, outside)
        .instrument(span.clone())
        .await;
    if let Some(status) = &landed {
        span.record("flowline.run.phase", status.phase.as_str());
        if status.phase == RunPhase::Failed {
            span.record("otel.status_code", "error");
        }
    }
    landed
}

/// With traces on, the span of one execution of `run`, in the run's trace
/// (`telemetry::traces::run_context`); off, none.
fn run_span(run: &Run) -> tracing::Span {
    if !traces::enabled() {
        return tracing::Span::none();
    }
    let uid = run.uid().unwrap_or_else(|| run.name_any());
    let span = tracing::info_span!(
        "run",
        otel.status_code = tracing::field::Empty,
        flowline.namespace = run.namespace().unwrap_or_default(),
        flowline.run = run.name_any(),
        flowline.run.uid = uid,
        flowline.workflow = run.spec.workflow_ref,
        flowline.run.phase = tracing::field::Empty,
    );
    traces::join_run(&span, &uid);
    span
}

/// With traces on, the span of one step attempt (a child of the run's); off, none.
fn attempt_span(step: &Step, attempt: u32, in_job: bool) -> tracing::Span {
    if !traces::enabled() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        "step.attempt",
        otel.name = %format_args!("step {}", step.id),
        otel.status_code = tracing::field::Empty,
        flowline.step = step.id,
        flowline.action = step.action.as_str(),
        flowline.attempt = attempt,
        flowline.executor = if in_job { "job" } else { "inline" },
        flowline.step.outcome = tracing::field::Empty,
        error.message = tracing::field::Empty,
    )
}

async fn execute_steps(
    engine: Engine,
    run: Run,
    cancel: CancellationToken,
    mut outside: watch::Receiver<Outside>,
) -> Option<RunStatus> {
    let Some(wf) = run.spec.workflow.clone() else {
        tracing::error!(run = %run.name_any(), "not executed: the run is not pinned to a workflow version");
        return None;
    };
    let namespace = run.namespace().unwrap_or_default();
    let api: Api<Run> = Api::namespaced(engine.client.clone(), &namespace);
    let mut status = initial_status(&run, &wf);
    // This execution's fencing token (see `RunStatus::execution_id`).
    status.execution_id = Some(flowline_core::ids::new_id("exec"));
    // Callback URLs may be handed out by any step: their tokens are stored first.
    let run = match super::callback::ensure_tokens(&api, run, &wf, &mut status).await {
        Some(run) => run,
        None => return None,
    };
    flowline_core::engine::events::record(&mut status, EventKind::RunStarted, &run, &wf.name);
    // Fenced (another execution wrote the status): stop as a cancel does; the final
    // write is then skipped.
    let reason_reader = api.clone();
    let writer = StatusWriter::start(api, &run, RunStatus::default(), &cancel);
    writer.update(&status);

    // The run timeout stops the steps the way a cancel does; `timed_out` tells the two
    // apart at the end.
    let stop = cancel.child_token();
    let timed_out = CancellationToken::new();
    let left = flowline_core::engine::deadline::remaining(
        status.started_at.unwrap_or_else(now_ms),
        wf.timeout_ms,
        now_ms(),
    );
    match left {
        // Resumed past its deadline (a parked run woken by it): stopped before anything
        // starts, so it can never park again.
        Some(left) if left.is_zero() => {
            timed_out.cancel();
            stop.cancel();
        }
        Some(left) => {
            tokio::spawn(stop_at_deadline(left, stop.clone(), timed_out.clone()));
        }
        None => {}
    }

    let shared = Shared {
        engine,
        approvals: Arc::new(run.spec.approvals.clone()),
        callbacks: Arc::new(run.spec.callbacks.clone()),
        events: Arc::new(run.spec.matched_events.clone()),
        run: Arc::new(run),
        wf: Arc::new(wf),
        namespace,
    };
    let outcome = match Graph::of(&shared.wf.steps) {
        Ok(graph) => schedule(&shared, &graph, &mut status, &writer, &stop, &mut outside).await,
        // Needs that name unknown steps or form a cycle (a Run written with kubectl):
        // no step can be ordered, none runs.
        Err(error) => Outcome::Failed(error),
    };
    let (run, wf) = (&*shared.run, &*shared.wf);
    // Ends the deadline task of a run that finished in time.
    stop.cancel();
    let timed_out_after = timed_out
        .is_cancelled()
        .then(|| wf.timeout_ms.unwrap_or_default());
    let Some(end) = lifecycle::run_end(&outcome, timed_out_after) else {
        // Every step that can make progress waits (`wait`, `approval`): parked.
        status.parked = true;
        output::enforce_run_budget(&mut status.steps);
        if !writer.finish(&status).await {
            tracing::info!(run = %run.name_any(), "execution stopped: the run is gone or executed elsewhere");
            return None;
        }
        tracing::info!(run = %run.name_any(), "run parked: its steps wait for a time, a decision, a child run, a callback or an event");
        return Some(status);
    };
    let (phase, error) = match (end.phase, run_output(run, wf, &status)) {
        (RunPhase::Succeeded, Err(error)) => (RunPhase::Failed, Some(error)),
        (RunPhase::Succeeded, Ok(Some((out, truncated)))) => {
            status.output = Some(out);
            status.output_truncated = truncated;
            (RunPhase::Succeeded, end.error)
        }
        (RunPhase::Cancelled, _) => (
            RunPhase::Cancelled,
            cancel_reason(&reason_reader, run).await.or(end.error),
        ),
        _ => (end.phase, end.error),
    };
    finish(&mut status, phase, error, end.unfinished_steps);
    let all = status.phase == RunPhase::Cancelled || timed_out_after.is_some();
    super::call::cancel_children(&shared.engine.client, run, &status, all).await;
    if let Some(kind) = flowline_core::engine::events::final_kind(status.phase) {
        flowline_core::engine::events::record(&mut status, kind, run, &wf.name);
    }
    if !writer.finish(&status).await {
        tracing::info!(run = %run.name_any(), "execution stopped: the run is gone or executed elsewhere");
        return None;
    }
    Some(status)
}

/// Runs the steps as [`graph::decide`] says: each step in a task of its own that
/// reports its record back, at most `parallelism` at once (one at a time in a chain).
/// The first failure cancels the running steps and starts nothing new; so does `stop`.
/// Returns how the steps ended ([`lifecycle::of_run`]).
async fn schedule(
    shared: &Shared,
    graph: &Graph,
    status: &mut RunStatus,
    writer: &StatusWriter,
    stop: &CancellationToken,
    outside: &mut watch::Receiver<Outside>,
) -> Outcome {
    let mut shared = shared.clone();
    let steps = &shared.wf.steps.clone();
    let mut outside_open = true;
    // Finished before a restart (or kept from the run this one retries): not run again.
    // A step without a record (a status written by hand) is not run, as before graphs.
    let mut states: Vec<State> = (0..steps.len())
        .map(|i| match status.steps.get(i).map(|r| r.status) {
            Some(StepPhase::Succeeded | StepPhase::Skipped) | None => State::Done,
            Some(_) => State::Waiting,
        })
        .collect();
    let parallelism = if graph.parallel {
        shared
            .wf
            .parallelism
            .unwrap_or(DEFAULT_PARALLELISM)
            .clamp(1, MAX_PARALLELISM) as usize
    } else {
        1
    };
    // Cancelled on the first failure, and with `stop`.
    let branches = stop.child_token();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    let mut task_steps = HashMap::new();
    // Every secret value read for this run, replaced by `[redacted]` wherever a step's
    // output or error enters the status (and so Events and webhook payloads).
    let mut redactor = Redactor::default();
    let mut failure: Option<String> = None;
    let mut stop_seen = false;
    // Set while the run lingers before parking on calls (see CALL_LINGER).
    let mut linger_until: Option<tokio::time::Instant> = None;
    loop {
        let decision = graph::decide(graph, &states, parallelism, stop.is_cancelled());
        if !decision.start.is_empty() {
            linger_until = None;
        }
        if decision.cancel_running {
            branches.cancel();
        }
        for index in decision.start {
            states[index] = transition(states[index], &Event::Started);
            let ctx = context(
                &shared.run,
                &shared.wf,
                status,
                &graph.ancestors(index),
                &shared.engine.public_url,
            );
            let task = step_task(
                shared.clone(),
                index,
                status.steps[index].clone(),
                ctx,
                redactor.clone(),
                tx.clone(),
                branches.clone(),
            );
            // In the run's span (traces): a step attempt's span is a child of it.
            let handle = tasks.spawn(task.instrument(tracing::Span::current()));
            task_steps.insert(handle.id(), index);
        }
        if let Some(verdict) = decision.outcome {
            let lingers = verdict == graph::Outcome::Parked
                && outside_open
                && !stop.is_cancelled()
                && parked_on_calls_only(&states, steps);
            let until =
                *linger_until.get_or_insert_with(|| tokio::time::Instant::now() + CALL_LINGER);
            if !lingers || tokio::time::Instant::now() >= until {
                return lifecycle::of_run(verdict, failure, |i| steps[i].id.as_str());
            }
        }
        let next_wake = earliest_wake(&states, status, linger_until.is_some());
        tokio::select! {
            Some(report) = rx.recv() => {
                match report {
                    Report::Record(index, record) => status.steps[index] = record,
                    Report::Secrets(values) => {
                        redactor.extend(values);
                        continue;
                    }
                    Report::Ended(index, record, outcome) => {
                        status.steps[index] = record;
                        states[index] = transition(states[index], &Event::Ended(&outcome));
                        if let Outcome::Failed(error) = outcome {
                            failure.get_or_insert(error);
                        }
                    }
                }
                output::enforce_run_budget(&mut status.steps);
                writer.update(status);
            }
            Some(joined) = tasks.join_next_with_id() => {
                // A task that ended without its `Ended` report panicked.
                if let Err(e) = joined
                    && let Some(&index) = task_steps.get(&e.id())
                    && states[index] == State::Running
                {
                    let error = format!("step {} failed: its task ended unexpectedly", steps[index].id);
                    tracing::error!(run = %shared.run.name_any(), %error, "{e}");
                    let record = &mut status.steps[index];
                    record.status = StepPhase::Failed;
                    record.finished_at = Some(now_ms());
                    failure.get_or_insert(error);
                    states[index] = transition(states[index], &Event::TaskLost);
                    writer.update(status);
                }
            }
            _ = stop.cancelled(), if !stop_seen => stop_seen = true,
            // A decision or a child's end arrives while other steps still run: settle
            // the step waiting for it here.
            changed = outside.changed(), if outside_open => {
                if changed.is_err() {
                    outside_open = false;
                    continue;
                }
                let latest = outside.borrow_and_update().clone();
                for (i, state) in states.iter_mut().enumerate() {
                    let decided = flowline_core::engine::waiting::decision_for(&latest.approvals, &steps[i].id).is_some()
                        || latest.callbacks.iter().any(|c| c.step_id == steps[i].id)
                        || latest.events.iter().any(|e| e.step_id == steps[i].id);
                    let child_ended = flowline_core::engine::subworkflow::calls_of(&status.steps[i])
                        .iter()
                        .any(|c| c.child.as_ref().is_some_and(|c| latest.ended_children.contains(c)));
                    if decided || (steps[i].action == Action::Workflow && child_ended) {
                        *state = transition(*state, &Event::Due);
                    }
                }
                shared.approvals = Arc::new(latest.approvals);
                shared.callbacks = Arc::new(latest.callbacks);
                shared.events = Arc::new(latest.events);
            }
            // The linger before parking on calls is over: park (the loop decides again).
            _ = tokio::time::sleep_until(linger_until.unwrap_or_else(tokio::time::Instant::now)), if linger_until.is_some() && tasks.is_empty() => {}
            // A parked step's time comes while other steps still run: resume it here.
            _ = sleep_until(next_wake), if next_wake.is_some() => {
                let now = now_ms();
                for (i, state) in states.iter_mut().enumerate() {
                    if status.steps[i].wake_at.is_some_and(|t| t <= now) {
                        *state = transition(*state, &Event::Due);
                    }
                }
            }
        }
    }
}

/// How long a run whose only waiting steps are `workflow` calls stays in its task
/// before parking: a child that ends within it is settled without the park's status
/// write and the resume's reads (sequential calls of short children run at the speed of
/// the children), while a long call holds no task after it.
const CALL_LINGER: Duration = Duration::from_secs(2);

/// Whether every parked step is a `workflow` call (none waits for a time, a decision
/// or a callback).
fn parked_on_calls_only(states: &[State], steps: &[Step]) -> bool {
    states
        .iter()
        .zip(steps)
        .filter(|(s, _)| **s == State::Parked)
        .all(|(_, step)| step.action == Action::Workflow)
}

/// The earliest wake time of the parked steps (only while others still run, or the
/// run lingers before parking: once it parks, the controller wakes it).
fn earliest_wake(states: &[State], status: &RunStatus, lingering: bool) -> Option<Timestamp> {
    if !lingering && !states.contains(&State::Running) {
        return None;
    }
    states
        .iter()
        .zip(&status.steps)
        .filter(|(s, _)| **s == State::Parked)
        .filter_map(|(_, r)| r.wake_at)
        .min()
}

async fn sleep_until(at: Option<Timestamp>) {
    if let Some(at) = at {
        tokio::time::sleep(Duration::from_millis(millis_between(now_ms(), at))).await;
    }
}

/// One step in its task: runs it, reporting its record as it changes, then its end.
async fn step_task(
    shared: Shared,
    index: usize,
    mut record: StepRecord,
    mut ctx: Value,
    redactor: Redactor,
    tx: mpsc::UnboundedSender<Report>,
    cancel: CancellationToken,
) {
    let outcome = run_step(
        &shared,
        index,
        &mut record,
        &mut ctx,
        redactor,
        &tx,
        &cancel,
    )
    .await;
    let _ = tx.send(Report::Ended(index, record, outcome));
}

/// The Kubernetes Event a run that ended in `phase` records, as (reason, warning):
/// a failure or a cancel, which someone may have to look into. A succeeded run
/// records none: its status, condition, label and `run.succeeded` webhook event say
/// so already, and an Event per successful run would cost every run one more write
/// to the API server (a quarter of a fast run's writes). Pure.
pub fn kubernetes_event(phase: RunPhase) -> Option<(&'static str, bool)> {
    match phase {
        RunPhase::Failed => Some(("RunFailed", true)),
        RunPhase::Cancelled => Some(("RunCancelled", false)),
        _ => None,
    }
}

/// Counts a run whose final status landed and records its Kubernetes Event, if any:
/// after the hand-over of its slot, so the Event write never delays the next queued
/// run.
pub async fn report(engine: &Engine, run: &Run, status: &RunStatus) {
    let phase = status.phase.as_str();
    tracing::info!(run = %run.name_any(), phase, "run finished");
    let telemetry = &engine.telemetry;
    telemetry
        .runs_finished
        .get_or_create(&StatusLabel { status: phase })
        .inc();
    let Some((reason, warning)) = kubernetes_event(status.phase) else {
        return;
    };
    let note = status
        .error
        .clone()
        .unwrap_or_else(|| format!("run {phase}"));
    telemetry.event(run, warning, reason, note).await;
}

/// Stops a run's steps (`stop`) once `left` has passed, marking it `timed_out`; ends
/// early when the run stops for another reason.
async fn stop_at_deadline(left: Duration, stop: CancellationToken, timed_out: CancellationToken) {
    tokio::select! {
        _ = tokio::time::sleep(left) => {
            timed_out.cancel();
            stop.cancel();
        }
        _ = stop.cancelled() => {}
    }
}

/// Marks `record` failed with `reason` (which holds no secret value: already redacted,
/// or none read) and returns the run's error naming the step.
pub(crate) fn fail_record(record: &mut StepRecord, step: &Step, reason: String) -> Outcome {
    let at = now_ms();
    record.status = StepPhase::Failed;
    record.finished_at = Some(at);
    record.duration_ms = record.started_at.map(|s| millis_between(s, at));
    record.error = Some(reason.clone());
    iterations::forget_progress(record);
    Outcome::Failed(format!(
        "step {} ({}) failed: {reason}",
        step.id,
        step.action.as_str()
    ))
}

/// Marks `record` cancelled (by a cancel, the run timeout or a failure elsewhere).
fn cancel_record(record: &mut StepRecord) -> Outcome {
    record.status = StepPhase::Cancelled;
    record.next_attempt_at = None;
    iterations::forget_progress(record);
    if record.started_at.is_some() {
        record.finished_at = Some(now_ms());
    }
    Outcome::Cancelled
}

async fn run_step(
    shared: &Shared,
    index: usize,
    record: &mut StepRecord,
    ctx: &mut Value,
    mut redactor: Redactor,
    tx: &mpsc::UnboundedSender<Report>,
    cancel: &CancellationToken,
) -> Outcome {
    let step = &shared.wf.steps[index];
    let update = |record: &StepRecord| {
        let _ = tx.send(Report::Record(index, record.clone()));
    };
    // Waiting for its time or a decision (since an earlier execution): what is it now?
    // Its `when` was evaluated when it started waiting.
    if record.status == StepPhase::Waiting {
        if step.action == Action::Workflow {
            return super::call::settle(shared, step, record, ctx).await;
        }
        return settle_waiting(shared, step, record);
    }
    // Cancelled by a failure elsewhere just before a crash: the attempt it had in
    // flight was interrupted, not the user's failure.
    if record.status == StepPhase::Cancelled && record.attempts > 0 {
        record.status = StepPhase::Running;
        record.finished_at = None;
    }
    // Before any I/O: no Secret can make a payload that is too deep runnable.
    if let Err(reason) = super::nesting::check_payload(&shared.run) {
        return fail_record(record, step, reason);
    }
    // The one path that reads Secrets, for `with` and `when` alike. A `workflow` step
    // reads none: its payload is stored in the child run.
    let step_secrets = if step.action == Action::Workflow {
        Ok(secrets::StepSecrets::default())
    } else {
        secrets::read_for_step(&shared.engine.client, &shared.namespace, step).await
    };
    if let Ok(read) = &step_secrets {
        let values: Vec<String> = read.values().map(str::to_owned).collect();
        if !values.is_empty() {
            redactor.extend(&values);
            let _ = tx.send(Report::Secrets(values));
        }
    }
    let redactor = &redactor;
    let step_secrets = match step_secrets {
        Ok(read) => read,
        Err(e) => return fail_record(record, step, redactor.text(&e.to_string())),
    };
    ctx["secrets"] = step_secrets.context();
    if let Some(when) = &step.when {
        match expr::evaluate(when, ctx) {
            Ok(true) => {}
            Ok(false) => {
                record.status = StepPhase::Skipped;
                return Outcome::Done;
            }
            Err(e) => {
                let reason = format!("`when` could not be evaluated: {e}");
                return fail_record(record, step, redactor.text(&reason));
            }
        }
    }
    if step.for_each.is_none() {
        (record.input, record.input_truncated) = shown_input(step, ctx, &step_secrets, redactor)
            .map_or((None, false), |(v, cut)| (Some(v), cut));
    }
    if step.action.is_waiting_kind() {
        return start_waiting(shared, step, record, ctx, redactor);
    }
    if step.action == Action::Workflow {
        return super::call::start(shared, step, record, ctx).await;
    }
    let attempt = Attempts {
        shared,
        step,
        secrets: &step_secrets,
        redactor,
        cancel,
    };
    let result = match &step.for_each {
        Some(template) => for_each(&attempt, template, record, ctx, &update).await,
        None => attempt.run(&step.id, record, ctx, &update).await,
    };
    match result {
        Ok(out) => {
            succeed(record, out);
            Outcome::Done
        }
        Err(Outcome::Failed(reason)) => fail_record(record, step, reason),
        // Attempts end cancelled, never done without an output nor parked.
        Err(Outcome::Cancelled | Outcome::Done | Outcome::Parked) => cancel_record(record),
    }
}

/// A `wait` or `approval` step starts waiting: its inputs rendered, its wake time
/// recorded (so a restart never moves it), then settled at once (a wait of 0 ms, a
/// decision already listed). Never a Job, never an attempt of the retry policy.
fn start_waiting(
    shared: &Shared,
    step: &Step,
    record: &mut StepRecord,
    ctx: &Value,
    redactor: &Redactor,
) -> Outcome {
    if step.for_each.is_some() {
        let reason = format!("forEach is not supported on {} steps", step.action.as_str());
        return fail_record(record, step, reason);
    }
    let no_inputs = json!({});
    let with = match template::render(step.with.as_ref().unwrap_or(&no_inputs), ctx) {
        Ok(with) => with,
        Err(e) => return fail_record(record, step, redactor.text(&e.to_string())),
    };
    let now = now_ms();
    match flowline_core::engine::waiting::wake_at(step.action, &with, now) {
        Ok(wake) => {
            record.status = StepPhase::Waiting;
            record.attempts = 1;
            record.started_at = Some(now);
            record.wake_at = wake;
            record.error = None;
            record.next_attempt_at = None;
            settle_waiting(shared, step, record)
        }
        Err(reason) => fail_record(record, step, redactor.text(&reason)),
    }
}

/// Records that the step succeeded now with `out` (capped as every stored output).
pub(crate) fn succeed(record: &mut StepRecord, out: Value) {
    let (stored, truncated) = output::cap(out);
    let at = now_ms();
    record.status = StepPhase::Succeeded;
    record.output = Some(stored);
    record.output_truncated = truncated;
    record.items_done = Vec::new();
    record.error = None;
    record.wake_at = None;
    record.finished_at = Some(at);
    record.duration_ms = record.started_at.map(|s| millis_between(s, at));
}

/// What a waiting step is now ([`flowline_core::engine::waiting::resume`]), applied to its record.
fn settle_waiting(shared: &Shared, step: &Step, record: &mut StepRecord) -> Outcome {
    use flowline_core::engine::waiting::Resumed;
    let inbox = flowline_core::engine::waiting::Inbox {
        approvals: &shared.approvals,
        callbacks: &shared.callbacks,
        events: &shared.events,
    };
    match flowline_core::engine::waiting::resume(step, record, inbox, now_ms()) {
        Resumed::Waiting(_) => Outcome::Parked,
        Resumed::Succeeded(out) => {
            succeed(record, out);
            Outcome::Done
        }
        Resumed::Failed(reason) => {
            record.wake_at = None;
            fail_record(record, step, reason)
        }
    }
}

/// What executing the attempts of one step (or one iteration of it) needs.
struct Attempts<'a> {
    shared: &'a Shared,
    step: &'a Step,
    secrets: &'a secrets::StepSecrets,
    redactor: &'a Redactor,
    cancel: &'a CancellationToken,
}

impl Attempts<'_> {
    /// Executes attempts until one succeeds (its output, redacted) or the retry policy
    /// is spent (Err: [`Outcome::Failed`] with the reason, redacted, or
    /// [`Outcome::Cancelled`]), recording each in `record`. `key` names the attempt's
    /// Job and `Idempotency-Key` (the step id, or the step id and the iteration).
    async fn run(
        &self,
        key: &str,
        record: &mut StepRecord,
        ctx: &mut Value,
        update: &(dyn Fn(&StepRecord) + Sync),
    ) -> Result<Value, Outcome> {
        let (shared, step, redactor, cancel) = (self.shared, self.step, self.redactor, self.cancel);
        let engine = &shared.engine;
        let policy = step.retry.clone().unwrap_or_default();
        let in_job = step.action == Action::Container
            || shared.wf.executor.unwrap_or(engine.default_executor) == Executor::Job;
        let step_timeout = step.timeout_ms.map(Duration::from_millis);
        loop {
            let attempt = match retry::next_attempt(record, &policy, in_job) {
                retry::NextAttempt::Run {
                    number,
                    interrupted,
                } => {
                    record.interruptions += u32::from(interrupted);
                    number
                }
                retry::NextAttempt::Reattach { number } => number,
                retry::NextAttempt::Exhausted => {
                    // Redacted when it was recorded.
                    return Err(Outcome::Failed(
                        record
                            .error
                            .clone()
                            .unwrap_or_else(|| "the retry policy allows no attempt".into()),
                    ));
                }
                retry::NextAttempt::TooManyInterruptions => {
                    let times = record.interruptions + 1;
                    return Err(Outcome::Failed(retry::interrupted_error(times)));
                }
            };
            let place = tokio::select! {
                _ = cancel.cancelled() => return Err(Outcome::Cancelled),
                place = engine.attempts.enter() => place,
            };
            record.attempts = attempt;
            record.status = StepPhase::Running;
            record.started_at.get_or_insert_with(now_ms);
            record.next_attempt_at = None;
            update(record);
            let prepared = match prepare(
                engine,
                &shared.run,
                step,
                key,
                attempt,
                in_job,
                ctx,
                self.secrets,
            ) {
                Ok(prepared) => prepared,
                // Rendering and building are deterministic: retrying cannot help.
                Err(e) => return Err(Outcome::Failed(redactor.text(&e))),
            };
            // A Job's own deadline (`activeDeadlineSeconds`) stops its pod; the engine
            // waits a little longer, so the step's error says the deadline stopped it
            // rather than that the engine gave up watching.
            let timeout = step_timeout.unwrap_or(Duration::from_secs(24 * 3600))
                + if in_job {
                    job::DEADLINE_GRACE
                } else {
                    Duration::ZERO
                };
            let attempt_started = std::time::Instant::now();
            let span = attempt_span(step, attempt, in_job);
            let work = async {
                match prepared {
                    Prepared::Job(spec) => {
                        job::run_attempt(&engine.client, &shared.namespace, *spec)
                            .await
                            .map_err(actions::ActionError)
                    }
                    Prepared::Inline(inputs) => {
                        actions::execute(step.action, &inputs, &engine.http, step_timeout).await
                    }
                }
            };
            let result = tokio::select! {
                _ = cancel.cancelled() => {
                    span.record("flowline.step.outcome", "cancelled");
                    if in_job {
                        job::delete_run_jobs(&engine.client, &shared.namespace, &shared.run.name_any()).await;
                    }
                    return Err(Outcome::Cancelled);
                }
                r = tokio::time::timeout(timeout, work.instrument(span.clone())) => r,
            };
            engine
                .telemetry
                .step_duration
                .get_or_create(&ActionLabel {
                    action: step.action.as_str(),
                })
                .observe(attempt_started.elapsed().as_secs_f64());
            let result = result.map(|r| r.and_then(super::nesting::check_result));
            let error = match result {
                Ok(Ok(out)) => {
                    record.error = None;
                    span.record("flowline.step.outcome", "succeeded");
                    return Ok(redactor.value(out));
                }
                Ok(Err(e)) => e.0,
                Err(_) => format!("attempt timed out after {} ms", timeout.as_millis()),
            };
            let error = redactor.text(&error);
            span.record("flowline.step.outcome", "failed");
            span.record("otel.status_code", "error");
            span.record("error.message", error.as_str());
            // Ends the attempt's span before the wait for the next attempt.
            drop(span);
            let Some(delay) = retry::delay_before(&policy, attempt + 1, rand::random()) else {
                return Err(Outcome::Failed(error));
            };
            record.error = Some(error);
            record.next_attempt_at = Timestamp::now().checked_add(delay).ok();
            update(record);
            drop(place);
            tokio::select! {
                _ = cancel.cancelled() => return Err(Outcome::Cancelled),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }
}

/// A `forEach` step: renders its array, runs one iteration per element (each with the
/// step's retry policy, at most `forEachConcurrency` at once), and returns their
/// outputs in input order. The first iteration that fails for good fails the step and
/// cancels the others.
async fn for_each(
    attempts: &Attempts<'_>,
    template: &str,
    record: &mut StepRecord,
    ctx: &Value,
    update: &(dyn Fn(&StepRecord) + Sync),
) -> Result<Value, Outcome> {
    let step = attempts.step;
    let items = render_items(template, ctx, attempts.redactor).map_err(Outcome::Failed)?;
    let count = items.len();
    let at = now_ms();
    let graph = Graph::independent(count);
    let mut states = vec![State::Waiting; count];
    let mut outputs: Vec<Value> = vec![Value::Null; count];
    // What an earlier execution finished (a restart): kept, not run again.
    let kept = iterations::resumable(record, count);
    let mut done: Vec<u32> = Vec::with_capacity(count);
    let earlier = std::mem::take(&mut record.iterations);
    record.iterations = (0..count.min(MAX_ITERATION_RECORDS))
        .map(|i| IterationRecord {
            index: i as u32,
            ..Default::default()
        })
        .collect();
    for (index, out) in kept {
        states[index] = transition(
            transition(State::Waiting, &Event::Started),
            &Event::Ended(&Outcome::Done),
        );
        outputs[index] = out;
        done.push(index as u32);
        if let (Some(it), Some(before)) = (record.iterations.get_mut(index), earlier.get(index)) {
            *it = before.clone();
        }
    }
    record.status = StepPhase::Running;
    record.started_at.get_or_insert(at);
    record.items = Some(count as u32);
    iterations::record_progress(record, &outputs, &done);
    update(record);
    let concurrency = step.iterations_at_once();
    let mut failure: Option<String> = None;
    let siblings = attempts.cancel.child_token();
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, StepRecord)>();
    let mut running = FuturesUnordered::new();
    let mut cancel_seen = false;
    let iteration = |index: usize, item: Value| {
        let tx = tx.clone();
        let siblings = siblings.clone();
        let mut ctx = ctx.clone();
        ctx["item"] = item;
        ctx["index"] = json!(index);
        let key = flowline_core::engine::step_pod::attempt_key(&step.id, Some(index));
        async move {
            let this = Attempts {
                cancel: &siblings,
                ..*attempts
            };
            let mut record = StepRecord::default();
            let report = |r: &StepRecord| {
                let _ = tx.send((index, r.clone()));
            };
            let result = this.run(&key, &mut record, &mut ctx, &report).await;
            (index, record, result)
        }
    };
    let mut items: Vec<Option<Value>> = items.into_iter().map(Some).collect();
    loop {
        let decision = graph::decide(&graph, &states, concurrency, attempts.cancel.is_cancelled());
        if decision.cancel_running {
            siblings.cancel();
        }
        for index in decision.start {
            states[index] = transition(states[index], &Event::Started);
            let item = items[index].take().unwrap_or(Value::Null);
            running.push(iteration(index, item));
        }
        // Iterations are independent and never park: the step succeeds with every
        // output, fails with the first failure, or was stopped.
        match decision.outcome {
            None => {}
            Some(graph::Outcome::Succeeded) => return Ok(Value::Array(outputs)),
            Some(graph::Outcome::Failed) => {
                return Err(Outcome::Failed(failure.unwrap_or_default()));
            }
            Some(graph::Outcome::Stopped | graph::Outcome::Stuck(_) | graph::Outcome::Parked) => {
                return Err(Outcome::Cancelled);
            }
        }
        tokio::select! {
            Some((index, progress)) = rx.recv() => {
                if let Some(it) = record.iterations.get_mut(index) {
                    copy_iteration(it, &progress);
                    update(record);
                }
            }
            Some((index, mut finished, result)) = running.next() => {
                // Progress it reported before it ended comes first.
                while let Ok((i, progress)) = rx.try_recv() {
                    if let Some(it) = record.iterations.get_mut(i) {
                        copy_iteration(it, &progress);
                    }
                }
                let at = now_ms();
                finished.finished_at = Some(at);
                let outcome = match result {
                    Ok(out) => {
                        finished.status = StepPhase::Succeeded;
                        outputs[index] = out;
                        let at = done.partition_point(|&d| d < index as u32);
                        done.insert(at, index as u32);
                        iterations::record_progress(record, &outputs, &done);
                        Outcome::Done
                    }
                    Err(Outcome::Failed(reason)) => {
                        finished.status = StepPhase::Failed;
                        finished.error = Some(reason.clone());
                        failure.get_or_insert(format!("iteration {index}: {reason}"));
                        Outcome::Failed(reason)
                    }
                    // Attempts end cancelled, never done without an output nor parked.
                    Err(Outcome::Cancelled | Outcome::Done | Outcome::Parked) => {
                        finished.status = StepPhase::Cancelled;
                        Outcome::Cancelled
                    }
                };
                states[index] = transition(states[index], &Event::Ended(&outcome));
                if let Some(it) = record.iterations.get_mut(index) {
                    copy_iteration(it, &finished);
                }
                record.attempts = record.attempts.max(finished.attempts);
                update(record);
            }
            _ = attempts.cancel.cancelled(), if !cancel_seen => cancel_seen = true,
        }
    }
}

/// The elements a `forEach` template renders to in `ctx`: a JSON array of at most
/// [`MAX_FOR_EACH_ITEMS`]. Err: why the step fails (`redactor` applied).
pub(crate) fn render_items(
    template: &str,
    ctx: &Value,
    redactor: &Redactor,
) -> Result<Vec<Value>, String> {
    let items = match template::render(&Value::String(template.to_owned()), ctx) {
        Ok(Value::Array(items)) => items,
        Ok(other) => {
            return Err(format!(
                "forEach must render to a JSON array; it rendered to {}",
                json_type(&other)
            ));
        }
        Err(e) => return Err(redactor.text(&format!("forEach: {e}"))),
    };
    if items.len() > MAX_FOR_EACH_ITEMS {
        return Err(format!(
            "forEach rendered {} elements; the limit is {MAX_FOR_EACH_ITEMS}",
            items.len()
        ));
    }
    Ok(items)
}

/// What an iteration's record shows of its attempts.
fn copy_iteration(to: &mut IterationRecord, from: &StepRecord) {
    to.status = from.status;
    to.attempts = from.attempts;
    to.started_at = from.started_at;
    to.finished_at = from.finished_at;
    to.error = from.error.clone();
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A step's `with` as people read it in its record: rendered with the run's context,
/// each secret value shown as `[redacted]` (and any that an earlier output carried
/// redacted too), capped. None when it has no `with` or it cannot be rendered (the
/// attempt then fails with the reason).
fn shown_input(
    step: &Step,
    ctx: &mut Value,
    step_secrets: &secrets::StepSecrets,
    redactor: &Redactor,
) -> Option<(Value, bool)> {
    let with = step.with.as_ref()?;
    let values = std::mem::replace(&mut ctx["secrets"], step_secrets.redacted_context());
    let rendered = template::render(with, ctx);
    ctx["secrets"] = values;
    Some(output::cap_input(redactor.value(rendered.ok()?)))
}

/// What one attempt runs: its input, not a state or an outcome of the step.
enum Prepared {
    /// Rendered inputs, secret values included, for the inline executor.
    Inline(Value),
    /// A Job whose inputs hold fresh placeholders instead of secret values; its Pod spec
    /// maps them to `secretKeyRef`s.
    Job(Box<k8s_openapi::api::batch::v1::Job>),
}

/// Renders a step's inputs for one attempt (and builds its Job when it runs in one).
#[allow(clippy::too_many_arguments)]
fn prepare(
    engine: &Engine,
    run: &Run,
    step: &Step,
    key: &str,
    attempt: u32,
    in_job: bool,
    ctx: &mut Value,
    step_secrets: &secrets::StepSecrets,
) -> Result<Prepared, String> {
    let no_inputs = json!({});
    let with = step.with.as_ref().unwrap_or(&no_inputs);
    let run_uid = run.uid().unwrap_or_else(|| run.name_any());
    let keyed = |mut inputs: Value| {
        actions::add_idempotency_key(step.action, &mut inputs, &run_uid, key, attempt);
        inputs
    };
    if !in_job {
        return template::render(with, ctx)
            .map(|inputs| Prepared::Inline(keyed(inputs)))
            .map_err(|e| e.to_string());
    }
    let placeholders = step_secrets.placeholders();
    // This attempt's placeholders replace the values (`when`, which needs the values, has
    // been evaluated already).
    ctx["secrets"] = placeholders.context().clone();
    let inputs = keyed(template::render(with, ctx).map_err(|e| e.to_string())?);
    let timeout = step.timeout_ms.map(Duration::from_millis);
    job::build(
        run,
        step,
        key,
        attempt,
        &inputs,
        timeout,
        &placeholders,
        &engine.jobs,
    )
    .map(|spec| Prepared::Job(Box::new(spec)))
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failed_and_cancelled_runs_record_a_kubernetes_event() {
        assert_eq!(
            kubernetes_event(RunPhase::Failed),
            Some(("RunFailed", true))
        );
        assert_eq!(
            kubernetes_event(RunPhase::Cancelled),
            Some(("RunCancelled", false))
        );
        assert_eq!(kubernetes_event(RunPhase::Succeeded), None);
        assert_eq!(kubernetes_event(RunPhase::Running), None);
    }

    fn finished(output: Value, steps: Value) -> (Run, RunStatus) {
        let r: Run = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "run-1", "namespace": "n"},
            "spec": {"workflowRef": "wf-1", "payload": {"order": "A-7"},
                     "workflow": {"generation": 1, "name": "W", "output": output,
                                  "steps": [{"id": "sum", "action": "transform"},
                                            {"id": "maybe", "action": "fail"}]}},
        }))
        .unwrap();
        let status = RunStatus {
            steps: serde_json::from_value(steps).unwrap(),
            ..Default::default()
        };
        (r, status)
    }

    fn output_of(output: Value, steps: Value) -> Result<Option<(Value, bool)>, String> {
        let (r, status) = finished(output, steps);
        run_output(&r, r.spec.workflow.as_ref().unwrap(), &status)
    }

    fn done_steps() -> Value {
        json!([{"stepId": "sum", "name": "sum", "status": "succeeded", "output": 12},
               {"stepId": "maybe", "name": "maybe", "status": "skipped"}])
    }

    #[test]
    fn the_output_is_rendered_with_the_runs_whole_context() {
        let out = output_of(
            json!({"total": "{{ steps.sum.output }}", "order": "{{ trigger.payload.order }}",
                   "skipped": "{{ steps.maybe.status }}", "ids": "{{ run.id }}/{{ workflow.id }}"}),
            done_steps(),
        );
        assert_eq!(
            out,
            Ok(Some((
                json!({"total": 12, "order": "A-7", "skipped": "skipped", "ids": "run-1/wf-1"}),
                false
            )))
        );
        // A workflow without output (`null` is none): the run has none either.
        assert_eq!(output_of(Value::Null, done_steps()), Ok(None));
    }

    #[test]
    fn an_output_that_cannot_be_rendered_is_an_error_naming_output() {
        assert_eq!(
            output_of(json!({"x": "{{ trigger.payload.missing }}"}), done_steps()),
            Err(
                r#"output failed: output.x: template path "trigger.payload.missing" not found"#
                    .into()
            )
        );
        assert_eq!(
            output_of(json!("{{ secrets.s.k }}"), done_steps()),
            Err(r#"output failed: output: template path "secrets.s.k" not found"#.into())
        );
        let truncated = json!([{"stepId": "sum", "name": "sum", "status": "succeeded",
                                "output": "{\"big", "outputTruncated": true}]);
        assert!(
            output_of(json!("{{ steps.sum.output }}"), truncated)
                .unwrap_err()
                .contains("was truncated")
        );
    }

    #[test]
    fn a_large_output_is_stored_truncated_like_a_step_output() {
        let steps = json!([{"stepId": "sum", "name": "sum", "status": "succeeded",
                            "output": "x".repeat(40 * 1024)}]);
        let (out, truncated) = output_of(
            json!(["{{ steps.sum.output }}", "{{ steps.sum.output }}"]),
            steps,
        )
        .unwrap()
        .unwrap();
        assert!(truncated);
        assert!(out.as_str().is_some_and(|s| s.len() <= 1024));
    }

    fn run(status: Value, concurrency: Value) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"workflowRef": "wf", "workflow": {"generation": 1, "name": "W",
                     "steps": [{"id": "a", "action": "delay"}], "concurrency": concurrency}},
            "status": status,
        }))
        .unwrap()
    }

    fn start_of(r: &Run) -> Timestamp {
        let wf = r.spec.workflow.as_ref().unwrap();
        initial_status(r, wf).started_at.unwrap()
    }

    #[test]
    fn a_run_without_a_limit_started_when_it_was_created() {
        let created: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(start_of(&run(Value::Null, Value::Null)), created);
    }

    #[test]
    fn an_admitted_run_starts_now_not_when_it_was_created() {
        let created: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let limit = json!({"limit": 1});
        assert!(start_of(&run(Value::Null, limit.clone())) > created);
        assert!(start_of(&run(json!({"phase": "queued"}), limit.clone())) > created);
        // A resumed run keeps the start it recorded: its deadline does not move.
        let recorded = json!({"phase": "running", "startedAt": "2026-01-01T00:00:05Z"});
        assert_eq!(
            start_of(&run(recorded, limit)),
            "2026-01-01T00:00:05Z".parse::<Timestamp>().unwrap()
        );
    }
}
