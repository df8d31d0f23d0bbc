//! The inline executor: runs a Run's steps in order inside the operator, records
//! step-level results, and stops promptly on cancel.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::actions;
use super::output;
use super::status_writer::StatusWriter;
use super::{expr, job, retry, template};
use crate::api::views::now_ms;
use crate::crd::{
    Action, EventKind, Executor, Run, RunPhase, RunStatus, Step, StepPhase, StepRecord, Workflow,
};
use crate::telemetry::engine_metrics::{ActionLabel, StatusLabel};

/// What the executor needs from the process.
#[derive(Clone)]
pub struct Engine {
    pub client: Client,
    pub http: reqwest::Client,
    pub telemetry: crate::telemetry::engine_metrics::EngineTelemetry,
    /// Executor of workflows that do not choose one.
    pub default_executor: Executor,
    pub jobs: job::JobSettings,
}

fn millis_between(a: Timestamp, b: Timestamp) -> u64 {
    (b.as_millisecond() - a.as_millisecond()).max(0) as u64
}

/// The status a run starts from: what is recorded, or fresh pending records.
pub fn initial_status(run: &Run, wf: &Workflow) -> RunStatus {
    let mut status = run.status.clone().unwrap_or_default();
    if status.steps.is_empty() {
        status.steps = wf
            .spec
            .steps
            .iter()
            .map(|s| StepRecord {
                step_id: s.id.clone(),
                name: s.display_name().to_string(),
                action: Some(s.action),
                ..Default::default()
            })
            .collect();
    }
    status.phase = RunPhase::Running;
    status
        .started_at
        .get_or_insert_with(|| crate::api::views::run_started_at(run));
    status.workflow_generation = wf.metadata.generation;
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
fn context(run: &Run, wf: &Workflow, status: &RunStatus, secrets: Map<String, Value>) -> Value {
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
        "trigger": {"payload": run.spec.payload.clone().unwrap_or_else(|| json!({}))},
        "run": {"id": run.name_any()},
        "workflow": {"id": wf.name_any(), "name": wf.spec.name},
        "steps": steps,
        "secrets": secrets,
    })
}

/// Secrets a step's inputs refer to (`secrets.<name>.`), read from its namespace.
async fn secrets_for(engine: &Engine, namespace: &str, step: &Step) -> Map<String, Value> {
    let text = step.with.as_ref().map(Value::to_string).unwrap_or_default();
    let mut out = Map::new();
    for piece in text.split("secrets.").skip(1) {
        let name: String = piece
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
            .collect();
        let name = name.split('.').next().unwrap_or_default().to_string();
        if name.is_empty() || out.contains_key(&name) {
            continue;
        }
        let api: Api<Secret> = Api::namespaced(engine.client.clone(), namespace);
        // A missing Secret stays absent, so the template names the missing path.
        if let Ok(Some(secret)) = api.get_opt(&name).await {
            let data: BTreeMap<String, Value> = secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, json!(String::from_utf8_lossy(&v.0))))
                .collect();
            out.insert(name, json!(data));
        }
    }
    out
}

enum StepOutcome {
    Done,
    Failed(String),
    Cancelled,
}

/// Executes the remaining steps of `run`, then writes its final status.
pub async fn execute(engine: Engine, run: Run, wf: Workflow, cancel: CancellationToken) {
    let namespace = run.namespace().unwrap_or_default();
    let api: Api<Run> = Api::namespaced(engine.client.clone(), &namespace);
    let mut status = initial_status(&run, &wf);
    super::events::record(&mut status, EventKind::RunStarted, &run, &wf.spec.name);
    let writer = StatusWriter::start(api, &run, RunStatus::default());
    writer.update(&status);

    let mut failure = None;
    let mut cancelled = false;
    for (index, step) in wf.spec.steps.iter().enumerate() {
        let Some(record) = status.steps.get(index) else {
            break;
        };
        if matches!(record.status, StepPhase::Succeeded | StepPhase::Skipped) {
            continue; // finished before a restart
        }
        match run_step(
            &engine,
            &run,
            &wf,
            &namespace,
            step,
            index,
            &mut status,
            &writer,
            &cancel,
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
    match (cancelled, failure) {
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
        super::events::record(&mut status, kind, &run, &wf.spec.name);
    }
    writer.finish(&status).await;
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
        .event(&run, status.phase == RunPhase::Failed, reason, note)
        .await;
}

#[allow(clippy::too_many_arguments)]
async fn run_step(
    engine: &Engine,
    run: &Run,
    wf: &Workflow,
    namespace: &str,
    step: &Step,
    index: usize,
    status: &mut RunStatus,
    writer: &StatusWriter,
    cancel: &CancellationToken,
) -> StepOutcome {
    let fail_step = |status: &mut RunStatus, reason: String| {
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
    let secrets = secrets_for(engine, namespace, step).await;
    let ctx = context(run, wf, status, secrets);
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
    loop {
        let attempt = status.steps[index].attempts + 1;
        if attempt > policy.max_attempts {
            // Interrupted attempts (operator restarts) count against the policy.
            let reason = status.steps[index]
                .error
                .clone()
                .unwrap_or_else(|| "attempt interrupted".into());
            return fail_step(status, reason);
        }
        {
            let record = &mut status.steps[index];
            record.attempts = attempt;
            record.status = StepPhase::Running;
            record.started_at.get_or_insert_with(now_ms);
            record.next_attempt_at = None;
        }
        writer.update(status);
        let inputs = match template::render(step.with.as_ref().unwrap_or(&json!({})), &ctx) {
            Ok(v) => v,
            // Rendering is deterministic: retrying cannot help.
            Err(e) => return fail_step(status, e.to_string()),
        };
        let timeout = step
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(Duration::from_secs(24 * 3600));
        let attempt_started = std::time::Instant::now();
        let in_job = step.action == Action::Container
            || wf.spec.executor.unwrap_or(engine.default_executor) == Executor::Job;
        let work = async {
            if in_job {
                let spec = job::build(
                    run,
                    step,
                    attempt,
                    &inputs,
                    step.timeout_ms.map(Duration::from_millis),
                    &engine.jobs,
                );
                job::run_attempt(&engine.client, namespace, spec)
                    .await
                    .map_err(actions::ActionError)
            } else {
                actions::execute(step.action, &inputs, &engine.http).await
            }
        };
        let result = tokio::select! {
            _ = cancel.cancelled() => {
                if in_job {
                    job::delete_run_jobs(&engine.client, namespace, &run.name_any()).await;
                }
                return StepOutcome::Cancelled;
            }
            r = tokio::time::timeout(timeout, work) => r,
        };
        engine
            .telemetry
            .step_duration
            .get_or_create(&ActionLabel {
                action: step.action.as_str(),
            })
            .observe(attempt_started.elapsed().as_secs_f64());
        let error = match result {
            Ok(Ok(out)) => {
                let (stored, truncated) = output::cap(out);
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
                return StepOutcome::Done;
            }
            Ok(Err(e)) => e.0,
            Err(_) => format!("attempt timed out after {} ms", timeout.as_millis()),
        };
        status.steps[index].error = Some(error.clone());
        let Some(delay) = retry::delay_before(&policy, attempt + 1, rand::random()) else {
            return fail_step(status, error);
        };
        let due = Timestamp::now().checked_add(delay).ok();
        status.steps[index].next_attempt_at = due;
        writer.update(status);
        tokio::select! {
            _ = cancel.cancelled() => return StepOutcome::Cancelled,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}
