//! Runs created outside the API (kubectl, GitOps, the Kubernetes API) are adopted by
//! their workflow: the run controller gives them the owner reference the API gives the
//! runs it creates, so the workflow counts them and deleting it deletes them.

use std::time::Duration;

use flowline_core::crd::{Run, RunPhase, Workflow};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DeleteParams;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::builders::{RunBuilder, WorkflowBuilder, step};
use crate::support::{TestApi, TestNamespace, eventually, finished_run, loopback_client, text};

/// The run and workflow controllers of `ns`; both stop when dropped.
struct Controllers {
    runs: CancellationToken,
    _workflows: crate::workflows::Controller,
}

impl Drop for Controllers {
    fn drop(&mut self) {
        self.runs.cancel();
    }
}

fn controllers(ns: &TestNamespace) -> Controllers {
    let (runs, _) = crate::support::spawn_run_controller(ns, loopback_client(), Default::default());
    Controllers {
        runs,
        _workflows: crate::workflows::controller(ns),
    }
}

/// The owner reference the API gives the runs of `wf`.
fn api_owner(wf: &Workflow) -> OwnerReference {
    kube::Resource::controller_owner_ref(wf, &()).expect("a stored workflow has a uid")
}

/// Waits until the run `name` has an owner reference, and returns them.
async fn owners_of(ns: &TestNamespace, name: &str) -> Vec<OwnerReference> {
    let runs = ns.api::<Run>();
    eventually(
        &format!("run {name} to get an owner"),
        Duration::from_secs(20),
        || async {
            let run = runs.get(name).await.ok()?;
            run.metadata
                .owner_references
                .filter(|owners| !owners.is_empty())
        },
    )
    .await
}

fn quick(name: &str) -> WorkflowBuilder {
    WorkflowBuilder::new(name)
        .display_name(name)
        .active()
        .step(step::delay("a", 1))
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_run_applied_with_kubectl_is_adopted_and_counted_by_its_workflow() {
    let ns = TestNamespace::new("own-kubectl").await;
    let _c = controllers(&ns);
    let wf = ns.create_workflow(&quick("applied")).await;
    let out = ns.kubectl_apply(&RunBuilder::of(&wf).name("by-hand").manifest());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(owners_of(&ns, "by-hand").await, vec![api_owner(&wf)]);
    let run = finished_run(&ns, "by-hand", Duration::from_secs(20)).await;
    assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Succeeded);
    assert!(run.spec.workflow.is_some(), "pinned as well");
    assert_eq!(
        run.metadata.owner_references.clone().unwrap(),
        vec![api_owner(&wf)],
        "one owner reference after it executed"
    );
    // The workflow saw it finish: nothing left running, the success counted, its
    // start recorded.
    let workflows = ns.api::<Workflow>();
    let status = eventually(
        "the workflow to count the finished run",
        Duration::from_secs(20),
        || async {
            let status = workflows.get("applied").await.ok()?.status?;
            let c = &status.run_counts;
            (c.succeeded == 1 && c.running == 0 && c.queued == 0).then_some(status)
        },
    )
    .await;
    assert_eq!(status.last_run_at, Some(run.started_at()));
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn deleting_a_workflow_deletes_the_runs_it_adopted() {
    let ns = TestNamespace::new("own-gc").await;
    let _c = controllers(&ns);
    let runs = ns.api::<Run>();
    let workflows = ns.api::<Workflow>();
    for (name, propagation) in [
        ("background", DeleteParams::background()),
        ("foreground", DeleteParams::foreground()),
    ] {
        let wf = ns.create_workflow(&quick(name)).await;
        // Created through the Kubernetes API directly, without owner references.
        let run = ns
            .create_run(&RunBuilder::of(&wf).name(format!("{name}-run")))
            .await;
        assert_eq!(owners_of(&ns, &run).await, vec![api_owner(&wf)], "{name}");
        finished_run(&ns, &run, Duration::from_secs(20)).await;
        workflows.delete(name, &propagation).await.unwrap();
        eventually(
            &format!("the garbage collector to delete {run} ({name})"),
            Duration::from_secs(30),
            || async {
                let gone = runs.get_opt(&run).await.ok()?.is_none();
                let wf_gone = workflows.get_opt(name).await.ok()?.is_none();
                (gone && wf_gone).then_some(())
            },
        )
        .await;
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn runs_of_the_api_and_the_schedule_keep_exactly_one_owner_reference() {
    let api = TestApi::start("own-api").await;
    let ns = &api.ns;
    let _c = controllers(ns);
    let id = api.workflow(&quick("through-api")).await;
    let run = api.start_run(&api.admin_key, &id, None).await;
    // A leading seconds field gives a 2-second cadence.
    let scheduled = ns
        .create_workflow(&quick("scheduled").schedule("*/2 * * * * *", "UTC"))
        .await;
    let by_api = finished_run(ns, &run, Duration::from_secs(20)).await;
    let workflows = ns.api::<Workflow>();
    let through_api = workflows.get(&id).await.unwrap();
    assert_eq!(
        by_api.metadata.owner_references.unwrap(),
        vec![api_owner(&through_api)]
    );
    let runs = ns.api::<Run>();
    let by_schedule = eventually(
        "a scheduled run to finish",
        Duration::from_secs(20),
        || async {
            let listed = runs.list(&Default::default()).await.ok()?.items;
            listed.into_iter().find(|r| {
                r.spec.workflow_ref == "scheduled"
                    && r.status.as_ref().is_some_and(|s| s.phase.is_finished())
            })
        },
    )
    .await;
    assert_eq!(
        by_schedule.metadata.owner_references.unwrap(),
        vec![api_owner(&scheduled)]
    );
    let status = by_schedule.status.unwrap();
    assert_eq!(status.phase, RunPhase::Succeeded, "{:?}", status.error);
    // Nothing else was written into the reference lists meanwhile.
    for r in runs.list(&Default::default()).await.unwrap().items {
        assert_eq!(
            r.metadata.owner_references.as_ref().map(Vec::len),
            Some(1),
            "{:?}: {}",
            r.metadata.name,
            json!(r.metadata.owner_references)
        );
    }
}
