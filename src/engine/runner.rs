//! The inline executor: runs a Run's steps in order inside the operator, records
//! step-level results, and stops promptly on cancel.

use std::time::Duration;

use jiff::Timestamp;
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::actions;
use super::output;
use super::redact::Redactor;
use super::status_writer::StatusWriter;
use super::{expr, job, retry, secrets, template};
use crate::clock::now_ms;
use crate::crd::{
    Action, EventKind, Executor, Run, RunPhase, RunStatus, Step, StepPhase, WorkflowSnapshot,
};
use crate::telemetry::engine_metrics::{ActionLabel, StatusLabel};
use crate::telemetry::traces;
use tracing::Instrument;

/// What the executor needs from the process.
#[derive(Clone)]
pub struct Engine {
    pub client: Client,
    pub http: crate::egress::GuardedClient,
    pub telemetry: crate::telemetry::engine_metrics::EngineTelemetry,
    /// Executor of workflows that do not choose one.
    pub default_executor: Executor,
    pub jobs: job::JobSettings,
}

fn millis_between(a: Timestamp, b: Timestamp) -> u64 {
    (b.as_millisecond() - a.as_millisecond()).max(0) as u64
}

/// The status a run starts from: what is recorded, or fresh records of the workflow
/// version it executes (pending, or kept from the run it retries).
pub fn initial_status(run: &Run, wf: &WorkflowSnapshot) -> RunStatus {
    let mut status = run.status.clone().unwrap_or_default();
    if status.steps.is_empty() {
        status.steps = super::reuse::initial_records(&wf.steps, &run.spec.reused_steps);
    }
    // A run under a concurrency limit starts when it is admitted (it may have waited
    // since its creation): its run timeout counts from then.
    let admitted =
        status.phase == RunPhase::Queued || (run.status.is_none() && wf.concurrency.is_some());
    status.phase = RunPhase::Running;
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
    }
    status.phase = phase;
    status.error = error;
    status.finished_at = Some(at);
    status.duration_ms = status.started_at.map(|s| millis_between(s, at));
    output::enforce_run_budget(&mut status.steps);
}

/// The `{{ … }}` context: trigger payload, run, workflow, finished steps, secrets.
fn context(run: &Run, wf: &WorkflowSnapshot, status: &RunStatus, secrets: Value) -> Value {
    let mut steps = Map::new();
    for r in &status.steps {
        if matches!(r.status, StepPhase::Succeeded | StepPhase::Skipped) {
            steps.insert(
                r.step_id.clone(),
                json!({"output": r.output, "output_truncated": r.output_truncated, "status": r.status}),
            );
        }
    }
    json!({
        "trigger": {
            "payload": run.spec.payload.clone().unwrap_or_else(|| json!({})),
            "headers": run.spec.headers.clone().unwrap_or_default(),
        },
        "run": {"id": run.name_any()},
        "workflow": {"id": run.spec.workflow_ref, "name": wf.name},
        "steps": steps,
        "secrets": secrets,
    })
}

enum StepOutcome {
    Done,
    Failed(String),
    Cancelled,
}

/// Executes the remaining steps of `run` as its pinned workflow version
/// (`spec.workflow`) defines them, then writes its final status. Returns that status
/// once it has landed (None: the run is gone or another execution owns it); the
/// caller frees the run's concurrency slot, then [`report`]s it. The run controller
/// executes only pinned runs.
pub async fn execute(engine: Engine, run: Run, cancel: CancellationToken) -> Option<RunStatus> {
    let span = run_span(&run);
    let landed = execute_steps(engine, run, cancel)
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

async fn execute_steps(engine: Engine, run: Run, cancel: CancellationToken) -> Option<RunStatus> {
    let Some(wf) = run.spec.workflow.as_ref() else {
        tracing::error!(run = %run.name_any(), "not executed: the run is not pinned to a workflow version");
        return None;
    };
    let namespace = run.namespace().unwrap_or_default();
    let api: Api<Run> = Api::namespaced(engine.client.clone(), &namespace);
    let mut status = initial_status(&run, wf);
    // This execution's fencing token (see `RunStatus::execution_id`).
    status.execution_id = Some(crate::ids::new_id("exec"));
    super::events::record(&mut status, EventKind::RunStarted, &run, &wf.name);
    // Fenced (another execution wrote the status): stop as a cancel does; the final
    // write is then skipped.
    let writer = StatusWriter::start(api, &run, RunStatus::default(), &cancel);
    writer.update(&status);

    // The run timeout stops the steps the way a cancel does; `timed_out` tells the two
    // apart at the end.
    let stop = cancel.child_token();
    let timed_out = CancellationToken::new();
    let left = super::deadline::remaining(
        status.started_at.unwrap_or_else(now_ms),
        wf.timeout_ms,
        now_ms(),
    );
    if let Some(left) = left {
        tokio::spawn(stop_at_deadline(left, stop.clone(), timed_out.clone()));
    }
    let cancel = &stop;

    let mut failure = None;
    let mut cancelled = false;
    // Every secret value read for this run, replaced by `[redacted]` wherever a step's
    // output or error enters the status (and so Events and webhook payloads).
    let mut redactor = Redactor::default();
    for (index, step) in wf.steps.iter().enumerate() {
        let Some(record) = status.steps.get(index) else {
            break;
        };
        if matches!(record.status, StepPhase::Succeeded | StepPhase::Skipped) {
            continue; // finished before a restart
        }
        // Checked before each step: a run resumed past its deadline starts nothing.
        if cancel.is_cancelled() {
            cancelled = true;
            break;
        }
        match run_step(
            &engine,
            &run,
            wf,
            &namespace,
            step,
            index,
            &mut status,
            &writer,
            cancel,
            &mut redactor,
        )
        .await
        {
            StepOutcome::Done => {}
            StepOutcome::Failed(error) => {
                failure = Some(error);
                break;
            }
            StepOutcome::Cancelled => {
                cancelled = true;
                break;
            }
        }
    }
    // Ends the deadline task of a run that finished in time.
    cancel.cancel();
    match (cancelled, failure) {
        // Stopped by its timeout, not by a user: the run failed.
        (true, _) if timed_out.is_cancelled() => finish(
            &mut status,
            RunPhase::Failed,
            Some(super::deadline::timed_out_error(
                wf.timeout_ms.unwrap_or_default(),
            )),
            StepPhase::Cancelled,
        ),
        (true, _) => finish(&mut status, RunPhase::Cancelled, None, StepPhase::Cancelled),
        (false, Some(error)) => finish(
            &mut status,
            RunPhase::Failed,
            Some(error),
            StepPhase::Pending,
        ),
        (false, None) => finish(&mut status, RunPhase::Succeeded, None, StepPhase::Pending),
    }
    if let Some(kind) = super::events::final_kind(status.phase) {
        super::events::record(&mut status, kind, &run, &wf.name);
    }
    if !writer.finish(&status).await {
        tracing::info!(run = %run.name_any(), "execution stopped: the run is gone or executed elsewhere");
        return None;
    }
    Some(status)
}

/// Counts a run whose final status landed and records its Kubernetes Event: after the
/// hand-over of its slot, so the Event write never delays the next queued run.
pub async fn report(engine: &Engine, run: &Run, status: &RunStatus) {
    let phase = status.phase.as_str();
    tracing::info!(run = %run.name_any(), phase, "run finished");
    let telemetry = &engine.telemetry;
    telemetry
        .runs_finished
        .get_or_create(&StatusLabel { status: phase })
        .inc();
    let note = status
        .error
        .clone()
        .unwrap_or_else(|| format!("run {phase}"));
    let reason = match status.phase {
        RunPhase::Succeeded => "RunSucceeded",
        RunPhase::Failed => "RunFailed",
        _ => "RunCancelled",
    };
    telemetry
        .event(run, status.phase == RunPhase::Failed, reason, note)
        .await;
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

#[allow(clippy::too_many_arguments)]
async fn run_step(
    engine: &Engine,
    run: &Run,
    wf: &WorkflowSnapshot,
    namespace: &str,
    step: &Step,
    index: usize,
    status: &mut RunStatus,
    writer: &StatusWriter,
    cancel: &CancellationToken,
    redactor: &mut Redactor,
) -> StepOutcome {
    // Records the failure; `reason` holds no secret value (already redacted, or none read).
    let fail_redacted = |status: &mut RunStatus, reason: String| {
        let record = &mut status.steps[index];
        let at = now_ms();
        record.status = StepPhase::Failed;
        record.finished_at = Some(at);
        record.duration_ms = record.started_at.map(|s| millis_between(s, at));
        record.error = Some(reason.clone());
        StepOutcome::Failed(format!(
            "step {} ({}) failed: {reason}",
            step.id,
            step.action.as_str()
        ))
    };
    // Before any I/O: no Secret can make a payload that is too deep runnable.
    if let Err(reason) = super::nesting::check_payload(run) {
        return fail_redacted(status, reason);
    }
    // The one path that reads Secrets, for `with` and `when` alike.
    let step_secrets = secrets::read_for_step(&engine.client, namespace, step).await;
    if let Ok(read) = &step_secrets {
        redactor.extend(read.values());
    }
    let redactor = &*redactor;
    let fail_step =
        |status: &mut RunStatus, reason: String| fail_redacted(status, redactor.text(&reason));
    let step_secrets = match step_secrets {
        Ok(read) => read,
        Err(e) => return fail_step(status, e.to_string()),
    };
    let mut ctx = context(run, wf, status, step_secrets.context());
    if let Some(when) = &step.when {
        match expr::evaluate(when, &ctx) {
            Ok(true) => {}
            Ok(false) => {
                status.steps[index].status = StepPhase::Skipped;
                writer.update(status);
                return StepOutcome::Done;
            }
            Err(e) => return fail_step(status, format!("`when` could not be evaluated: {e}")),
        }
    }
    let policy = step.retry.clone().unwrap_or_default();
    let in_job = step.action == Action::Container
        || wf.executor.unwrap_or(engine.default_executor) == Executor::Job;
    let step_timeout = step.timeout_ms.map(Duration::from_millis);
    loop {
        let attempt = match retry::next_attempt(&status.steps[index], &policy, in_job) {
            retry::NextAttempt::Run {
                number,
                interrupted,
            } => {
                let record = &mut status.steps[index];
                record.interruptions += u32::from(interrupted);
                number
            }
            retry::NextAttempt::Reattach { number } => number,
            retry::NextAttempt::Exhausted => {
                let reason = status.steps[index]
                    .error
                    .clone()
                    .unwrap_or_else(|| "the retry policy allows no attempt".into());
                // Redacted when it was recorded.
                return fail_redacted(status, reason);
            }
            retry::NextAttempt::TooManyInterruptions => {
                let times = status.steps[index].interruptions + 1;
                return fail_step(status, retry::interrupted_error(times));
            }
        };
        {
            let record = &mut status.steps[index];
            record.attempts = attempt;
            record.status = StepPhase::Running;
            record.started_at.get_or_insert_with(now_ms);
            record.next_attempt_at = None;
        }
        writer.update(status);
        let prepared = match prepare(engine, run, step, attempt, in_job, &mut ctx, &step_secrets) {
            Ok(prepared) => prepared,
            // Rendering and building are deterministic: retrying cannot help.
            Err(e) => return fail_step(status, e),
        };
        let timeout = step_timeout.unwrap_or(Duration::from_secs(24 * 3600));
        let attempt_started = std::time::Instant::now();
        let span = attempt_span(step, attempt, in_job);
        let work = async {
            match prepared {
                Prepared::Job(spec) => job::run_attempt(&engine.client, namespace, *spec)
                    .await
                    .map_err(actions::ActionError),
                Prepared::Inline(inputs) => {
                    actions::execute(step.action, &inputs, &engine.http, step_timeout).await
                }
            }
        };
        let result = tokio::select! {
            _ = cancel.cancelled() => {
                span.record("flowline.step.outcome", "cancelled");
                if in_job {
                    job::delete_run_jobs(&engine.client, namespace, &run.name_any()).await;
                }
                return StepOutcome::Cancelled;
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
                let (stored, truncated) = output::cap(redactor.value(out));
                let at = now_ms();
                let record = &mut status.steps[index];
                record.status = StepPhase::Succeeded;
                record.output = Some(stored);
                record.output_truncated = truncated;
                record.error = None;
                record.finished_at = Some(at);
                record.duration_ms = record.started_at.map(|s| millis_between(s, at));
                output::enforce_run_budget(&mut status.steps);
                writer.update(status);
                span.record("flowline.step.outcome", "succeeded");
                return StepOutcome::Done;
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
            return fail_redacted(status, error);
        };
        status.steps[index].error = Some(error);
        let due = Timestamp::now().checked_add(delay).ok();
        status.steps[index].next_attempt_at = due;
        writer.update(status);
        tokio::select! {
            _ = cancel.cancelled() => return StepOutcome::Cancelled,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// What one attempt runs.
enum Prepared {
    /// Rendered inputs, secret values included, for the inline executor.
    Inline(Value),
    /// A Job whose inputs hold fresh placeholders instead of secret values; its Pod spec
    /// maps them to `secretKeyRef`s.
    Job(Box<k8s_openapi::api::batch::v1::Job>),
}

/// Renders a step's inputs for one attempt (and builds its Job when it runs in one).
fn prepare(
    engine: &Engine,
    run: &Run,
    step: &Step,
    attempt: u32,
    in_job: bool,
    ctx: &mut Value,
    step_secrets: &secrets::StepSecrets,
) -> Result<Prepared, String> {
    let no_inputs = json!({});
    let with = step.with.as_ref().unwrap_or(&no_inputs);
    let run_uid = run.uid().unwrap_or_else(|| run.name_any());
    let keyed = |mut inputs: Value| {
        actions::add_idempotency_key(step.action, &mut inputs, &run_uid, &step.id, attempt);
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
