//! `workflow` steps: starting child runs, settling a step that waits for them, and
//! cancelling the children of a run that ends without them. What happens to each call
//! is decided by `flowline_core::engine::subworkflow`; this module only reads and
//! writes Runs.

use std::collections::HashMap;

use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use flowline_core::clock::now_ms;
use flowline_core::crd::{
    IterationRecord, ParentRef, Run, RunPhase, RunStatus, RunTrigger, Step, StepPhase, StepRecord,
    Workflow, WorkflowState, labels,
};
use flowline_core::engine::lifecycle::Outcome;
use flowline_core::engine::redact::Redactor;
use flowline_core::engine::subworkflow::{self, CallNext, Child, Inputs, MAX_CHILDREN_PER_STEP};
use flowline_core::engine::template;
use flowline_kube::lenient::Lenient;

use crate::runner::{Shared, fail_record, render_items, succeed};

/// Starts the step's calls (one, or one per `forEach` element): with `wait`, the step
/// then waits for them ([`settle`]); without, it succeeds with the children's ids.
pub(crate) async fn start(
    shared: &Shared,
    step: &Step,
    record: &mut StepRecord,
    ctx: &Value,
) -> Outcome {
    let elements = match elements(step, ctx) {
        Ok(elements) => elements,
        Err(reason) => return fail_record(record, step, reason),
    };
    let wait = match elements.first() {
        Some(ctx) => match inputs_for(step, ctx) {
            Ok(inputs) => inputs.wait,
            Err(reason) => return fail_record(record, step, reason),
        },
        // No element: nothing to call; the output is the empty array.
        None => true,
    };
    let now = now_ms();
    record.status = StepPhase::Waiting;
    record.started_at.get_or_insert(now);
    record.error = None;
    record.wake_at = None;
    record.next_attempt_at = None;
    if step.for_each.is_some() {
        record.items = Some(elements.len() as u32);
        record.iterations = (0..elements.len())
            .map(|i| IterationRecord {
                index: i as u32,
                status: StepPhase::Waiting,
                started_at: Some(now),
                ..Default::default()
            })
            .collect();
    }
    // Waiting for them, at most `forEachConcurrency` run at once: `settle` starts the
    // others as they end.
    let starting = if wait {
        step.iterations_at_once()
    } else {
        elements.len()
    };
    let mut ids = Vec::with_capacity(elements.len());
    for (i, element) in elements.iter().enumerate().take(starting) {
        let iteration = step.for_each.as_ref().map(|_| i as u32);
        match create_child(shared, step, iteration, 1, element).await {
            Ok(id) => {
                set_call(record, iteration, Some(id.clone()), 1, None);
                ids.push(id);
            }
            Err(reason) => return fail_record(record, step, reason),
        }
    }
    if !wait {
        let out = |id: &String| json!({"run_id": id});
        let output = match step.for_each {
            Some(_) => Value::Array(ids.iter().map(out).collect()),
            None => out(&ids[0]),
        };
        for it in &mut record.iterations {
            it.status = StepPhase::Succeeded;
            it.finished_at = Some(now_ms());
        }
        succeed(record, output);
        return Outcome::Done;
    }
    settle(shared, step, record, ctx).await
}

/// What a waiting `workflow` step is now: its children read in one request, each call
/// decided ([`subworkflow::call_next`]) and applied (a due retry starts a new child).
/// Parked while a child runs or a retry waits; done once every call succeeded (the
/// output is the child's, or under `forEach` the array of them in element order);
/// failed with the first call that failed for good.
pub(crate) async fn settle(
    shared: &Shared,
    step: &Step,
    record: &mut StepRecord,
    ctx: &Value,
) -> Outcome {
    let children = match children_of(&shared.engine.client, &shared.run, Some(&step.id)).await {
        Ok(children) => children,
        Err(e) => return fail_record(record, step, format!("could not read its child runs: {e}")),
    };
    let policy = step.retry.clone().unwrap_or_default();
    let calls = subworkflow::calls_of(record);
    let limit = step.iterations_at_once();
    let mut running = calls
        .iter()
        .filter_map(|c| children.get(c.child.as_ref()?))
        .filter(|child| !child.phase().is_finished())
        .count();
    let mut outputs = Vec::with_capacity(calls.len());
    let mut earliest_retry = None;
    let mut waiting = false;
    for (i, call) in calls.iter().enumerate() {
        let iteration = record.items.map(|_| i as u32);
        let child = call
            .child
            .as_ref()
            .map(|id| children.get(id).map_or(Child::Gone, child_state));
        let next = subworkflow::call_next(call, child.as_ref(), &policy, now_ms(), rand::random());
        match next {
            CallNext::Done(out) => {
                end_iteration(record, iteration, StepPhase::Succeeded, None);
                outputs.push(out);
            }
            CallNext::Wait(retry) => {
                waiting = true;
                earliest_retry = earliest_retry.into_iter().chain(retry).min();
            }
            CallNext::RetryAt { attempt_failed, at } => {
                set_call(record, iteration, None, call.attempts, Some(at));
                note_error(record, iteration, attempt_failed);
                waiting = true;
                earliest_retry = earliest_retry.into_iter().chain(Some(at)).min();
            }
            // No slot: started once a running child ends, which wakes the step.
            CallNext::Start(_) if running >= limit => waiting = true,
            CallNext::Start(attempt) => {
                let element = match element_context(step, ctx, iteration) {
                    Ok(element) => element,
                    Err(reason) => return fail_record(record, step, reason),
                };
                match create_child(shared, step, iteration, attempt, &element).await {
                    Ok(id) => set_call(record, iteration, Some(id), attempt, None),
                    Err(reason) => return fail_record(record, step, reason),
                }
                running += 1;
                waiting = true;
            }
            CallNext::Failed(reason) => {
                end_iteration(record, iteration, StepPhase::Failed, Some(reason.clone()));
                return fail_record(record, step, reason);
            }
        }
    }
    record.wake_at = earliest_retry;
    if waiting {
        record.status = StepPhase::Waiting;
        return Outcome::Parked;
    }
    let output = match record.items {
        Some(_) => Value::Array(outputs),
        None => outputs.pop().unwrap_or(Value::Null),
    };
    succeed(record, output);
    Outcome::Done
}

/// Cancels the unfinished children of `run`, which ends now with `status` (when its
/// steps started any): every one when it was cancelled or timed out (`all`), else those
/// of the steps that did not succeed (the calls it was still waiting for). Called
/// before the run's final status is written, so a crash in between cancels them again
/// when the run is looked at next.
pub async fn cancel_children(client: &Client, run: &Run, status: &RunStatus, all: bool) {
    if status.phase == RunPhase::Succeeded || !has_children(status) {
        return;
    }
    let calling = |id: &str| {
        all || status
            .steps
            .iter()
            .any(|s| s.step_id == id && s.status != StepPhase::Succeeded)
    };
    let children = match children_of(client, run, None).await {
        Ok(children) => children,
        Err(e) => {
            tracing::warn!(run = %run.name_any(), error = %e,
                "could not list its child runs to cancel them");
            return;
        }
    };
    let api: Api<Run> = Api::namespaced(client.clone(), &run.namespace().unwrap_or_default());
    for (name, child) in children {
        let of_call = child
            .spec
            .parent
            .as_ref()
            .is_some_and(|p| calling(&p.step_id));
        if !of_call || child.spec.cancel || child.phase().is_finished() {
            continue;
        }
        let patch = Patch::Merge(json!({"spec": {"cancel": true}}));
        if let Err(e) = api.patch(&name, &PatchParams::default(), &patch).await {
            tracing::warn!(run = %run.name_any(), child = %name, error = %e,
                "could not cancel a child run");
        }
    }
}

/// Whether `status`'s steps started child runs.
fn has_children(status: &RunStatus) -> bool {
    status
        .steps
        .iter()
        .any(|s| s.child_run_id.is_some() || s.iterations.iter().any(|i| i.child_run_id.is_some()))
}

/// The children of the run (of step `step` only, when given), by name: one LIST by the
/// parent label. A child this version cannot decode counts as gone.
async fn children_of(
    client: &Client,
    parent: &Run,
    step: Option<&str>,
) -> Result<HashMap<String, Run>, kube::Error> {
    let api: Api<Lenient<Run>> =
        Api::namespaced(client.clone(), &parent.namespace().unwrap_or_default());
    let selector = format!("{}={}", labels::PARENT_RUN, parent.name_any());
    let listed = api.list(&ListParams::default().labels(&selector)).await?;
    Ok(listed
        .items
        .into_iter()
        .filter_map(|child| child.decoded().map(|run| (**run).clone()))
        .filter(|run| {
            step.is_none_or(|step| run.spec.parent.as_ref().is_some_and(|p| p.step_id == step))
        })
        .map(|run| (run.name_any(), run))
        .collect())
}

fn child_state(run: &Run) -> Child {
    if !run.phase().is_finished() {
        return Child::Unfinished;
    }
    let status = run.status.as_ref();
    Child::Ended {
        phase: run.phase(),
        output: status.and_then(|s| s.output.clone()),
        error: status.and_then(|s| s.error.clone()),
    }
}

/// The contexts of the step's calls: the step's own, or one per `forEach` element
/// (`item`, `index`), at most [`MAX_CHILDREN_PER_STEP`].
fn elements(step: &Step, ctx: &Value) -> Result<Vec<Value>, String> {
    let Some(template) = &step.for_each else {
        return Ok(vec![ctx.clone()]);
    };
    let items = render_items(template, ctx, &Redactor::default())?;
    if items.len() > MAX_CHILDREN_PER_STEP {
        return Err(format!(
            "forEach rendered {} elements; a workflow step starts at most \
             {MAX_CHILDREN_PER_STEP} child runs",
            items.len()
        ));
    }
    Ok(items
        .into_iter()
        .enumerate()
        .map(|(index, item)| with_element(ctx, index, item))
        .collect())
}

/// The context of call `iteration` (None: the step's only call).
fn element_context(step: &Step, ctx: &Value, iteration: Option<u32>) -> Result<Value, String> {
    let Some(index) = iteration else {
        return Ok(ctx.clone());
    };
    elements(step, ctx)?
        .into_iter()
        .nth(index as usize)
        .ok_or_else(|| format!("forEach no longer renders element {index}"))
}

fn with_element(ctx: &Value, index: usize, item: Value) -> Value {
    let mut ctx = ctx.clone();
    ctx["item"] = item;
    ctx["index"] = json!(index);
    ctx
}

fn inputs_for(step: &Step, ctx: &Value) -> Result<Inputs, String> {
    let no_inputs = json!({});
    let with = template::render(step.with.as_ref().unwrap_or(&no_inputs), ctx)
        .map_err(|e| e.to_string())?;
    subworkflow::inputs(&with)
}

/// Creates the child run of attempt `attempt` of call `iteration` (None: the step's
/// only call), or finds it created by an earlier execution. Err: why the step fails.
async fn create_child(
    shared: &Shared,
    step: &Step,
    iteration: Option<u32>,
    attempt: u32,
    ctx: &Value,
) -> Result<String, String> {
    let inputs = inputs_for(step, ctx)?;
    let depth = subworkflow::child_depth(&shared.run)?;
    let parent = &shared.run;
    let name = subworkflow::child_name(
        &parent.uid().unwrap_or_else(|| parent.name_any()),
        &step.id,
        iteration,
        attempt,
    );
    let workflows: Api<Workflow> = Api::namespaced(shared.engine.client.clone(), &shared.namespace);
    // Another account's workflow is in another namespace: not found, like a made-up id.
    let not_found = || format!("workflow {} not found", inputs.workflow);
    let wf = match workflows.get_opt(&inputs.workflow).await {
        Ok(Some(wf)) => wf,
        Ok(None) | Err(kube::Error::Api(_)) => return Err(not_found()),
        Err(e) => return Err(format!("could not read workflow {}: {e}", inputs.workflow)),
    };
    if wf.spec.state == WorkflowState::Paused {
        return Err(format!(
            "workflow {} is paused: a child run needs a draft or active workflow",
            inputs.workflow
        ));
    }
    let mut child = Run::of_workflow(
        &wf,
        &name,
        RunTrigger::Workflow,
        Some(inputs.payload),
        now_ms(),
    );
    child.spec.parent = Some(ParentRef {
        run_id: parent.name_any(),
        step_id: step.id.clone(),
        iteration,
        depth,
    });
    child
        .labels_mut()
        .insert(labels::PARENT_RUN.into(), parent.name_any());
    let bytes = serde_json::to_vec(&child.spec).map_or(usize::MAX, |b| b.len());
    if bytes > flowline_core::limits::MAX_RUN_SPEC_BYTES {
        return Err(format!(
            "the child run's payload and steps take {bytes} bytes; a run holds at most 1 MiB"
        ));
    }
    let runs: Api<Run> = Api::namespaced(shared.engine.client.clone(), &shared.namespace);
    match runs.create(&PostParams::default(), &child).await {
        Ok(_) => Ok(name),
        // Created by an earlier execution of this step (the name is the call's).
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(name),
        Err(e) => Err(format!("could not create the child run: {e}")),
    }
}

/// Records the call `iteration` (None: the step's only call): its child, attempts and
/// retry time.
fn set_call(
    record: &mut StepRecord,
    iteration: Option<u32>,
    child: Option<String>,
    attempts: u32,
    retry_at: Option<jiff::Timestamp>,
) {
    match iteration.and_then(|i| record.iterations.get_mut(i as usize)) {
        Some(it) => {
            it.child_run_id = child;
            it.attempts = attempts;
            it.next_attempt_at = retry_at;
            it.status = StepPhase::Waiting;
            record.attempts = record.attempts.max(attempts);
        }
        None => {
            record.child_run_id = child;
            record.attempts = attempts;
            record.next_attempt_at = retry_at;
        }
    }
}

fn note_error(record: &mut StepRecord, iteration: Option<u32>, error: String) {
    match iteration.and_then(|i| record.iterations.get_mut(i as usize)) {
        Some(it) => it.error = Some(error),
        None => record.error = Some(error),
    }
}

fn end_iteration(
    record: &mut StepRecord,
    iteration: Option<u32>,
    phase: StepPhase,
    error: Option<String>,
) {
    if let Some(it) = iteration.and_then(|i| record.iterations.get_mut(i as usize))
        && it.status != phase
    {
        it.status = phase;
        it.finished_at = Some(now_ms());
        it.next_attempt_at = None;
        it.error = error;
    }
}
