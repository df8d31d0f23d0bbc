//! The Run controller: decides what a Run needs (start, cancel, fail at once) and
//! hands execution to the engine. Execution state lives in the Run's status, so a
//! restarted operator picks up where the last one stopped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::crd::{Executor, Run, RunPhase, StepPhase, Workflow, WorkflowState};
use crate::engine::runner::{self, Engine};
use crate::engine::status_writer::StatusWriter;
use crate::kubeutil::lenient::Lenient;
use crate::telemetry::engine_metrics::{ControllerLabel, EngineTelemetry};

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
}

/// What a Run needs now. Decided from the Run, its Workflow and whether this
/// process is already executing it; pure.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Finished, or in hand: nothing to do.
    Nothing,
    /// Stop the execution in progress.
    StopExecution,
    /// Record the cancellation: nothing is executing.
    MarkCancelled,
    /// It cannot run; fail it with this error.
    Fail(String),
    /// Start (or resume) executing it.
    Execute,
}

pub fn decide(run: &Run, workflow: Option<&Workflow>, executing: bool) -> Decision {
    let phase = run.status.as_ref().map(|s| s.phase).unwrap_or_default();
    if phase.is_finished() {
        return Decision::Nothing;
    }
    if run.spec.cancel {
        return if executing {
            Decision::StopExecution
        } else {
            Decision::MarkCancelled
        };
    }
    if executing {
        return Decision::Nothing;
    }
    let Some(wf) = workflow else {
        return Decision::Fail(format!("workflow {} does not exist", run.spec.workflow_ref));
    };
    let never_started = run
        .status
        .as_ref()
        .is_none_or(|s| s.steps.iter().all(|r| r.status == StepPhase::Pending));
    if wf.spec.state == WorkflowState::Paused && never_started {
        return Decision::Fail(format!(
            "workflow {} is paused; runs cannot start",
            wf.name_any()
        ));
    }
    Decision::Execute
}

pub struct Context {
    pub client: Client,
    pub engine: Engine,
    /// Watch only this namespace (tests, namespaced installs); None = all.
    pub namespace: Option<String>,
    /// Runs this process is executing, by uid.
    executing: Mutex<HashMap<String, CancellationToken>>,
}

impl Context {
    pub fn new(
        client: Client,
        http: crate::egress::GuardedClient,
        default_executor: Executor,
        namespace: Option<String>,
        telemetry: EngineTelemetry,
        jobs: crate::engine::job::JobSettings,
    ) -> Arc<Self> {
        Arc::new(Context {
            engine: Engine {
                client: client.clone(),
                http,
                telemetry,
                default_executor,
                jobs,
            },
            client,
            namespace,
            executing: Mutex::new(HashMap::new()),
        })
    }

    /// The same engine and settings, watching `namespace` (None = all). Each
    /// namespace of a list gets its own controller and so its own context.
    pub fn in_namespace(&self, namespace: Option<String>) -> Arc<Self> {
        Arc::new(Context {
            client: self.client.clone(),
            engine: self.engine.clone(),
            namespace,
            executing: Mutex::new(HashMap::new()),
        })
    }

    fn token(&self, uid: &str) -> Option<CancellationToken> {
        self.executing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .cloned()
    }
}

/// A run's workflow as read from the API server.
#[derive(Debug)]
pub enum WorkflowRead {
    Missing,
    Found(Arc<Workflow>),
    /// It exists but cannot be decoded: the reason.
    Undecodable(String),
}

/// [`decide`] for a workflow read: one that cannot be decoded counts as missing, with
/// its reason (decoding is deterministic, so this version of it can never run). Pure.
pub fn decide_read(run: &Run, workflow: &WorkflowRead, executing: bool) -> Decision {
    match workflow {
        WorkflowRead::Found(wf) => decide(run, Some(wf), executing),
        WorkflowRead::Missing => decide(run, None, executing),
        WorkflowRead::Undecodable(reason) => match decide(run, None, executing) {
            Decision::Fail(_) => Decision::Fail(reason.clone()),
            other => other,
        },
    }
}

async fn read_workflow(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<WorkflowRead, ReconcileError> {
    let workflows: Api<Lenient<Workflow>> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(match workflows.get_opt(name).await? {
        None => WorkflowRead::Missing,
        Some(Lenient::Decoded(wf)) => WorkflowRead::Found(wf),
        Some(Lenient::Undecodable(failure)) => WorkflowRead::Undecodable(format!(
            "workflow {name} cannot be decoded: {}",
            failure.error
        )),
    })
}

async fn reconcile(object: Arc<Lenient<Run>>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    // An undecodable run is reported by the watchers and left alone until it changes.
    let Some(run) = object.decoded() else {
        return Ok(Action::await_change());
    };
    let namespace = run.namespace().unwrap_or_default();
    let uid = run.uid().unwrap_or_default();
    let token = ctx.token(&uid);
    let phase_finished = run.status.as_ref().is_some_and(|s| s.phase.is_finished());
    // decide() needs the workflow only for a run that is neither finished nor
    // executing here: skip the round trip otherwise.
    let workflow = if phase_finished || token.is_some() {
        WorkflowRead::Missing
    } else {
        read_workflow(&ctx, &namespace, &run.spec.workflow_ref).await?
    };
    let mut decision = decide_read(run, &workflow, token.is_some());
    let mut run = run.clone();
    if matches!(
        decision,
        Decision::Execute | Decision::MarkCancelled | Decision::Fail(_)
    ) {
        // The watch cache may still show a status this process has since replaced
        // (a run that just finished here looks "running, not executing"): decide
        // again on a fresh read before writing anything.
        let runs: Api<Lenient<Run>> = Api::namespaced(ctx.client.clone(), &namespace);
        let Some(Lenient::Decoded(fresh)) = runs.get_opt(&run.name_any()).await? else {
            // Gone, or changed into something undecodable (reported by the watchers).
            return Ok(Action::await_change());
        };
        let executing = ctx.token(&uid).is_some();
        decision = decide_read(&fresh, &workflow, executing);
        run = fresh;
    }
    let workflow = match workflow {
        WorkflowRead::Found(wf) => Some(Arc::unwrap_or_clone(wf)),
        _ => None,
    };
    match decision {
        Decision::Nothing => {}
        Decision::StopExecution => {
            if let Some(t) = token {
                t.cancel();
            }
        }
        Decision::MarkCancelled => {
            end_without_executing(&ctx, &run, workflow.as_ref(), RunPhase::Cancelled, None).await;
        }
        Decision::Fail(error) => {
            tracing::info!(run = %run.name_any(), %error, "run cannot execute");
            end_without_executing(&ctx, &run, workflow.as_ref(), RunPhase::Failed, Some(error))
                .await;
        }
        Decision::Execute => {
            let Some(wf) = workflow else {
                return Ok(Action::await_change());
            };
            let cancel = CancellationToken::new();
            ctx.executing
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(uid.clone(), cancel.clone());
            let (engine, run, ctx2) = (ctx.engine.clone(), (*run).clone(), ctx.clone());
            tokio::spawn(async move {
                runner::execute(engine, run, wf, cancel).await;
                ctx2.executing
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&uid);
            });
        }
    }
    Ok(Action::await_change())
}

/// Records a final status for a run that is not (or no longer) executing here.
async fn end_without_executing(
    ctx: &Context,
    run: &Run,
    workflow: Option<&Workflow>,
    phase: RunPhase,
    error: Option<String>,
) {
    let mut status = match workflow {
        Some(wf) => runner::initial_status(run, wf),
        None => run.status.clone().unwrap_or_default(),
    };
    status.started_at.get_or_insert_with(|| run.started_at());
    let unfinished = if phase == RunPhase::Cancelled {
        StepPhase::Cancelled
    } else {
        StepPhase::Pending
    };
    runner::finish(&mut status, phase, error, unfinished);
    if let Some(kind) = crate::engine::events::final_kind(phase) {
        let workflow_name = workflow
            .map(|wf| wf.spec.name.as_str())
            .unwrap_or(&run.spec.workflow_ref);
        crate::engine::events::record(&mut status, kind, run, workflow_name);
    }
    let api: Api<Run> = Api::namespaced(ctx.client.clone(), &run.namespace().unwrap_or_default());
    StatusWriter::start(api, run, status.clone())
        .finish(&status)
        .await;
}

fn error_policy(_run: Arc<Lenient<Run>>, err: &ReconcileError, ctx: Arc<Context>) -> Action {
    ctx.engine
        .telemetry
        .reconcile_errors
        .get_or_create(&ControllerLabel { controller: "run" })
        .inc();
    tracing::warn!(error = %err, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// Runs the controller until `shutdown`.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) {
    let runs: Api<Lenient<Run>> =
        crate::kubeutil::scoped_api(&ctx.client, ctx.namespace.as_deref());
    let jobs: Api<k8s_openapi::api::batch::v1::Job> =
        crate::kubeutil::scoped_api(&ctx.client, ctx.namespace.as_deref());
    // Step Jobs are owned by their Run: a Job's progress wakes the Run at once (after a
    // restart, that is what resumes a run whose step was running in a Job).
    let step_jobs = watcher::Config::default().labels(crate::crd::labels::RUN);
    Controller::new(runs, watcher::Config::default())
        .owns(jobs, step_jobs)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            if let Err(err) = result {
                tracing::debug!(error = %err, "run reconcile error");
            }
            futures::future::ready(())
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(status: serde_json::Value, cancel: bool) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n", "uid": "u"},
            "spec": {"workflowRef": "wf", "cancel": cancel},
            "status": status,
        }))
        .unwrap()
    }

    fn workflow(state: &str, executor: Option<&str>) -> Workflow {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "wf", "namespace": "n"},
            "spec": {"name": "W", "state": state, "executor": executor, "steps": [{"id": "a", "action": "delay", "with": {"ms": 1}}]},
        }))
        .unwrap()
    }

    #[test]
    fn finished_runs_need_nothing() {
        let r = run(json!({"phase": "succeeded"}), true);
        assert_eq!(decide(&r, None, false), Decision::Nothing);
    }

    #[test]
    fn cancel_stops_or_marks() {
        let r = run(json!(null), true);
        assert_eq!(
            decide(&r, Some(&workflow("active", None)), true),
            Decision::StopExecution
        );
        assert_eq!(
            decide(&r, Some(&workflow("active", None)), false),
            Decision::MarkCancelled
        );
    }

    #[test]
    fn runs_that_cannot_start_fail_with_a_clear_error() {
        let r = run(json!(null), false);
        assert_eq!(
            decide(&r, None, false),
            Decision::Fail("workflow wf does not exist".into())
        );
        assert_eq!(
            decide(&r, Some(&workflow("paused", None)), false),
            Decision::Fail("workflow wf is paused; runs cannot start".into())
        );
    }

    #[test]
    fn both_executors_execute() {
        let r = run(json!(null), false);
        let job = workflow("active", Some("job"));
        assert_eq!(decide(&r, Some(&job), false), Decision::Execute);
        assert_eq!(
            decide(&r, Some(&workflow("active", None)), false),
            Decision::Execute
        );
    }

    #[test]
    fn an_undecodable_workflow_fails_its_runs_with_the_reason() {
        let why = WorkflowRead::Undecodable("workflow wf cannot be decoded: too deep".into());
        assert_eq!(
            decide_read(&run(json!(null), false), &why, false),
            Decision::Fail("workflow wf cannot be decoded: too deep".into())
        );
        // Cancelling and finished runs are decided as before.
        assert_eq!(
            decide_read(&run(json!(null), true), &why, false),
            Decision::MarkCancelled
        );
        assert_eq!(
            decide_read(&run(json!({"phase": "failed"}), false), &why, false),
            Decision::Nothing
        );
        let found = WorkflowRead::Found(Arc::new(workflow("active", None)));
        assert_eq!(
            decide_read(&run(json!(null), false), &found, false),
            Decision::Execute
        );
    }

    #[test]
    fn runnable_runs_execute_once() {
        let r = run(json!(null), false);
        assert_eq!(
            decide(&r, Some(&workflow("draft", None)), false),
            Decision::Execute
        );
        assert_eq!(
            decide(&r, Some(&workflow("draft", None)), true),
            Decision::Nothing
        );
    }
}
