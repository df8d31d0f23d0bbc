//! The workflow controller: status, transition events, schedules and retention.

use std::collections::HashSet;
use std::time::Duration;

use flowline_core::crd::{EventKind, Run, RunStatus, Workflow};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::builders::{RunBuilder, WorkflowBuilder};
use crate::support::{TestNamespace, eventually};

/// A workflow controller for one test namespace; stops when dropped.
pub(crate) struct Controller(CancellationToken);

impl Drop for Controller {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

pub(crate) fn controller(ns: &TestNamespace) -> Controller {
    let stop = CancellationToken::new();
    let telemetry = flowline_telemetry::engine_metrics::EngineTelemetry::new(
        &flowline_telemetry::metrics::Metrics::default(),
        Some(ns.client.clone()),
    );
    let runs =
        flowline_controller::run_cache::RunCache::start(&ns.client, Some(&ns.name), stop.clone());
    tokio::spawn(flowline_controller::workflow::run(
        ns.client.clone(),
        Some(ns.name.clone()),
        runs.clone(),
        telemetry,
        // These tests seal no hook secret the API reads: any key will do.
        std::sync::Arc::new(
            flowline_core::sealed::SealKey::new(&flowline_core::sealed::SealKey::generate())
                .unwrap(),
        ),
        stop.clone(),
    ));
    runs.watch.begin();
    Controller(stop)
}

/// `kubectl patch` of a workflow's state, as a cluster admin or GitOps would.
fn kubectl_set_state(ns: &TestNamespace, name: &str, state: &str) {
    let patch = format!(r#"{{"spec":{{"state":"{state}"}}}}"#);
    let out = ns.kubectl(&[
        "patch",
        "workflows.flowline.io",
        name,
        "--type",
        "merge",
        "-p",
        &patch,
    ]);
    assert!(
        out.status.success(),
        "{}",
        crate::support::text(&out.stderr)
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn status_and_transition_events_follow_kubectl_edits() {
    let ns = TestNamespace::new("wfc-status").await;
    let _c = controller(&ns);
    ns.create_workflow(
        &WorkflowBuilder::new("edited")
            .display_name("Edited")
            .state("draft"),
    )
    .await;
    kubectl_set_state(&ns, "edited", "active");
    let api = ns.api::<Workflow>();
    let wf = eventually(
        "workflow.activated recorded",
        Duration::from_secs(20),
        || async {
            let wf = api.get("edited").await.ok()?;
            let events = &wf.status.as_ref()?.pending_events;
            events
                .iter()
                .any(|e| e.kind == EventKind::WorkflowActivated)
                .then_some(wf)
        },
    )
    .await;
    let status = wf.status.clone().unwrap();
    assert_eq!(status.observed_generation, wf.metadata.generation);
    eventually(
        "a Kubernetes Event on the workflow",
        Duration::from_secs(20),
        || async {
            let out = ns.kubectl(&[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=edited",
                "-o",
                "jsonpath={.items[*].reason}",
            ]);
            crate::support::text(&out.stdout)
                .contains("Activated")
                .then_some(())
        },
    )
    .await;
    assert_eq!(status.conditions[0].type_, "Ready");
    kubectl_set_state(&ns, "edited", "paused");
    eventually(
        "workflow.paused recorded",
        Duration::from_secs(20),
        || async {
            let wf = api.get("edited").await.ok()?;
            let events = &wf.status.as_ref()?.pending_events;
            let paused = events
                .iter()
                .find(|e| e.kind == EventKind::WorkflowPaused)?;
            (paused.data["previous_state"] == "active" && paused.data["workflow_name"] == "Edited")
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn retention_deletes_the_oldest_finished_runs() {
    let ns = TestNamespace::new("wfc-keep").await;
    let wf = ns
        .create_workflow(
            &WorkflowBuilder::new("kept")
                .display_name("Kept")
                .history(2, 1),
        )
        .await;
    let runs = ns.api::<Run>();
    let owner = kube::Resource::controller_owner_ref(&wf, &()).unwrap();
    for (i, phase) in [
        "succeeded",
        "succeeded",
        "failed",
        "succeeded",
        "failed",
        "succeeded",
    ]
    .iter()
    .enumerate()
    {
        let mut run = RunBuilder::of("kept").name(format!("r{i}")).object();
        run.metadata.owner_references = Some(vec![owner.clone()]);
        runs.create(&PostParams::default(), &run).await.unwrap();
        let status: RunStatus = serde_json::from_value(json!({
            "phase": phase, "startedAt": format!("2026-01-01T00:00:0{i}Z"), "finishedAt": format!("2026-01-01T00:00:0{i}Z")
        }))
        .unwrap();
        runs.patch_status(
            &format!("r{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap();
    }
    let _c = controller(&ns);
    let left: HashSet<String> =
        eventually("retention to apply", Duration::from_secs(30), || async {
            let names: HashSet<String> = runs
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|r| r.metadata.name)
                .collect();
            (names.len() == 3).then_some(names)
        })
        .await;
    assert_eq!(
        left,
        HashSet::from(["r5".to_string(), "r3".to_string(), "r4".to_string()])
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_schedule_fires_on_time_without_duplicates_across_a_restart() {
    let ns = TestNamespace::new("wfc-cron").await;
    // A leading seconds field gives a 2-second cadence; the contract's 5 fields work the same.
    ns.create_workflow(
        &WorkflowBuilder::new("tick")
            .display_name("Tick")
            .active()
            .schedule("*/2 * * * * *", "UTC"),
    )
    .await;
    let runs = ns.api::<Run>();
    let first = controller(&ns);
    eventually("two scheduled runs", Duration::from_secs(20), || async {
        (runs.list(&Default::default()).await.ok()?.items.len() >= 2).then_some(())
    })
    .await;
    drop(first);
    // Two controllers at once (a restart overlapping the old one, or two replicas).
    let _a = controller(&ns);
    let _b = controller(&ns);
    let restarted = jiff::Timestamp::now().as_second();
    // Instead of watching for a while: wait until the new controllers have fired two
    // ticks later than the restart, then check every tick so far had one run. (Strong,
    // not strict: a duplicate created later still for an earlier tick would go unseen;
    // run names derive from the tick, so one would have to bypass them.)
    eventually(
        "two ticks fired after the restart",
        Duration::from_secs(20),
        || async {
            let items = runs.list(&Default::default()).await.ok()?.items;
            (items.iter().filter(|r| tick_of(r) > restarted).count() >= 2).then_some(())
        },
    )
    .await;
    let items = runs.list(&Default::default()).await.unwrap().items;
    let mut ticks: Vec<i64> = items.iter().map(tick_of).collect();
    ticks.sort();
    assert!(ticks.len() >= 4, "{ticks:?}");
    assert!(
        ticks.iter().all(|t| t % 2 == 0),
        "runs only on ticks: {ticks:?}"
    );
    let unique: HashSet<i64> = ticks.iter().copied().collect();
    assert_eq!(unique.len(), ticks.len(), "one run per tick: {ticks:?}");
    for run in &items {
        assert_eq!(run.spec.trigger, flowline_core::crd::RunTrigger::Schedule);
        let created = run
            .metadata
            .creation_timestamp
            .as_ref()
            .unwrap()
            .0
            .as_second();
        let tick = tick_of(run);
        assert!(
            (created - tick).abs() <= 2,
            "run for tick {tick} created at {created}"
        );
    }
}

/// The cron tick a scheduled run is for, in Unix seconds (its annotation).
fn tick_of(run: &Run) -> i64 {
    let tick = &run.metadata.annotations.as_ref().unwrap()
        [flowline_core::crd::timestamps::SCHEDULED_FOR_ANNOTATION];
    tick.parse::<jiff::Timestamp>().unwrap().as_second()
}
