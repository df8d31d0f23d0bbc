//! Runs are pinned to the workflow version they were created with, and deleting a
//! workflow stops its runs.

use std::time::Duration;

use serde_json::json;

use crate::builders::WorkflowBuilder;
use crate::support::{Process, TestApi, eventually, ready, step_running};

/// Edited while a run is in flight, then the operator is killed and replaced: the run
/// still executes the steps it was created with, and says which version that was.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_run_executes_the_workflow_version_it_was_created_with() {
    let api = TestApi::start("pin").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("Pinned").steps(json!([
            {"id": "wait", "action": "delay", "with": {"ms": 2000}},
            {"id": "after", "action": "transform", "with": {"value": "v1"}}])))
        .await;
    let created_with = api.get(&key, &format!("/v1/workflows/{wf}")).await;
    assert_eq!(created_with.status(), 200);
    let (mut first, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let run = api.start_run(&key, &wf, None).await;
    step_running(&api.ns, &run, "wait").await;

    // The edit renames nothing but changes what `after` produces and adds a step.
    api.patch_workflow(
        &key,
        &wf,
        json!({"steps": [
            {"id": "wait", "action": "delay", "with": {"ms": 10}},
            {"id": "after", "action": "transform", "with": {"value": "v2"}},
            {"id": "extra", "action": "fail", "with": {"message": "not in this run"}}]}),
    )
    .await;
    first.kill();
    let (_second, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;

    let view = api.finished_view(&key, &run, Duration::from_secs(60)).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    let steps = view["steps"].as_array().unwrap();
    let ids: Vec<&str> = steps
        .iter()
        .map(|s| s["step_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["wait", "after"],
        "the steps of the version it started with"
    );
    assert_eq!(steps[1]["output"], "v1");
    let pinned = view["workflow_generation"].as_i64().expect("shown");
    let now = ns_workflow_generation(&api, &wf).await;
    assert!(
        pinned < now,
        "pinned generation {pinned}, workflow now at {now}"
    );
    // A run started now gets the edited version.
    let later = api.start_run(&key, &wf, None).await;
    let view = api
        .finished_view(&key, &later, Duration::from_secs(60))
        .await;
    assert_eq!(view["workflow_generation"].as_i64(), Some(now));
    assert_eq!(
        view["status"], "failed",
        "the edited version fails at `extra`"
    );
    // Both versions are held, each with the run that executes it; the API's cache
    // sees the later run's pinned version once it has the run.
    let versions = eventually(
        "both versions listed with their runs",
        Duration::from_secs(10),
        || async {
            let res = api.get(&key, &format!("/v1/workflows/{wf}/versions")).await;
            assert_eq!(res.status(), 200);
            let body: serde_json::Value = res.json().await.unwrap();
            let listed: Vec<(i64, bool, String)> = body["data"]
                .as_array()?
                .iter()
                .map(|v| {
                    let id = v["last_run_id"].as_str().unwrap_or_default().to_owned();
                    (v["generation"].as_i64().unwrap(), v["current"] == true, id)
                })
                .collect();
            (listed == [(now, true, later.clone()), (pinned, false, run.clone())]).then_some(body)
        },
    )
    .await;
    let steps_of = |i: usize| {
        versions["data"][i]["version"]["steps"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!((steps_of(0), steps_of(1)), (3, 2), "{versions}");
    let other = api.get(&key, "/v1/workflows/wf-none/versions").await;
    assert_eq!(other.status(), 404);
}

async fn ns_workflow_generation(api: &TestApi, wf: &str) -> i64 {
    let wf = api
        .ns
        .api::<flowline_core::crd::Workflow>()
        .get(wf)
        .await
        .unwrap();
    wf.metadata.generation.unwrap()
}

/// A run in the middle of a long step stops executing within seconds of its workflow
/// being deleted (and its history goes with the workflow).
#[tokio::test]
#[ignore = "needs cluster"]
async fn deleting_a_workflow_stops_its_runs() {
    let api = TestApi::start("wf-del").await;
    let key = api.admin_key.clone();
    let (stop, telemetry) = crate::support::spawn_run_controller(
        &api.ns,
        crate::support::guarded_client(),
        Default::default(),
    );
    let _stop = stop.drop_guard();
    let wf = api
        .workflow(
            &WorkflowBuilder::new("Doomed")
                .steps(json!([{"id": "long", "action": "delay", "with": {"ms": 600_000}}])),
        )
        .await;
    let run = api.start_run(&key, &wf, None).await;
    step_running(&api.ns, &run, "long").await;
    assert_eq!(telemetry.runs_in_progress.get(), 1, "executing here");

    let res = api
        .send("DELETE", &key, &format!("/v1/workflows/{wf}"), None)
        .await;
    assert_eq!(res.status(), 204);
    eventually(
        "the execution of the run to stop",
        Duration::from_secs(10),
        || async { (telemetry.runs_in_progress.get() == 0).then_some(()) },
    )
    .await;
    let runs = api.ns.api::<flowline_core::crd::Run>();
    eventually(
        "the run to be deleted with its workflow",
        Duration::from_secs(60),
        || async { runs.get_opt(&run).await.unwrap().is_none().then_some(()) },
    )
    .await;
}

/// A run holds its payload and its copy of the workflow: together they may not exceed
/// 1 MiB, and the API says so instead of failing to store the Run.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_run_too_large_to_store_with_its_workflow_is_refused_clearly() {
    let api = TestApi::start("pin-size").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("Big inputs").steps(
            json!([{"id": "big", "action": "transform", "with": {"value": "v".repeat(600_000)}}]),
        ))
        .await;
    let res = api
        .send(
            "POST",
            &key,
            &format!("/v1/workflows/{wf}/runs"),
            Some(json!({"payload": {"blob": "p".repeat(600_000)}})),
        )
        .await;
    let body = crate::support::assert_error(res, 400, "validation_error").await;
    assert_eq!(body["error"]["details"][0]["field"], "payload", "{body}");
    // A smaller payload fits next to the same workflow.
    api.start_run(&key, &wf, Some(json!({"payload": {"blob": "small"}})))
        .await;
}

/// A job step in flight when the operator is SIGKILLed: the restarted operator
/// re-attaches to the Job of the recorded attempt (same Job, same attempt number) and
/// the run succeeds; no second Job is ever created for that attempt.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_restarted_operator_reattaches_to_the_running_step_job() {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Patch, PatchParams, PostParams};

    let ns = crate::support::TestNamespace::new("job-attach").await;
    // kwok keeps the pods running while they carry fake-hang.
    let flags = [
        "--no-api",
        "--job-pod-annotation",
        "flowline.io/fake-hang=true",
        "--job-pod-annotation",
        r#"flowline.io/fake-termination-message={"n": 7}"#,
    ];
    let (mut first, port) = Process::operator(&ns, &flags);
    ready(port).await;
    let wf: flowline_core::crd::Workflow = serde_json::from_value(json!({
        "metadata": {"name": "boxed"},
        "spec": {"name": "Boxed", "executor": "job", "steps": [
            {"id": "only", "action": "transform", "with": {"value": 1}}]}}))
    .unwrap();
    let wf = ns
        .api::<flowline_core::crd::Workflow>()
        .create(&PostParams::default(), &wf)
        .await
        .unwrap();
    let run = flowline_core::crd::Run::of_workflow(
        &wf,
        "boxed-1",
        Default::default(),
        None,
        jiff::Timestamp::now(),
    );
    ns.api::<flowline_core::crd::Run>()
        .create(&PostParams::default(), &run)
        .await
        .unwrap();
    let jobs = ns.api::<Job>();
    let pods = ns.api::<Pod>();
    let running = |pods: Vec<Pod>| {
        pods.into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    };
    let pod = eventually("the step pod to run", Duration::from_secs(30), || async {
        running(pods.list(&Default::default()).await.ok()?.items)
    })
    .await;
    step_running(&ns, "boxed-1", "only").await;
    let job_uid = jobs.list(&Default::default()).await.unwrap().items[0]
        .metadata
        .uid
        .clone();
    first.kill();

    let (_second, port) = Process::operator(&ns, &flags);
    ready(port).await;
    // Let the pod finish: kwok completes it once the annotation is gone.
    pods.patch(
        &pod.metadata.name.clone().unwrap(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"flowline.io/fake-hang": null}}})),
    )
    .await
    .unwrap();
    let done = crate::support::finished_run(&ns, "boxed-1", Duration::from_secs(120)).await;
    let status = done.status.unwrap();
    assert_eq!(
        status.phase,
        flowline_core::crd::RunPhase::Succeeded,
        "{:?}",
        status.error
    );
    let step = &status.steps[0];
    assert_eq!(step.output, Some(json!({"n": 7})), "the Job's result");
    assert_eq!(
        (step.attempts, step.interruptions),
        (1, 0),
        "the same attempt, re-attached: the Job ran on, nothing was interrupted"
    );
    let all = jobs.list(&Default::default()).await.unwrap().items;
    assert_eq!(all.len(), 1, "never two Jobs for one attempt");
    assert_eq!(
        all[0].metadata.uid, job_uid,
        "the Job of the recorded attempt"
    );
}

/// A `forEach` step in flight when the operator is SIGKILLed: the next operator runs
/// only the iterations the step's record did not show finished (their records are
/// kept as they were), and the step's output holds every element's, in order.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_for_each_step_resumes_after_a_kill_from_its_unfinished_iterations() {
    use flowline_core::crd::{Run, RunPhase, StepPhase};
    let api = TestApi::start("dur-foreach").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("each").steps(json!([
            {"id": "each", "action": "delay", "for_each": "{{ trigger.payload.items }}",
             "for_each_concurrency": 2, "with": {"ms": "{{ item }}"}}])))
        .await;
    let (first, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let items = [600, 601, 602, 603, 604, 605, 606, 607];
    let run = api
        .start_run(&key, &wf, Some(json!({"payload": {"items": items}})))
        .await;
    let runs = api.ns.api::<Run>();
    eventually(
        "two iterations recorded done",
        Duration::from_secs(60),
        || async {
            let r = runs.get(&run).await.ok()?;
            let step = &r.status.as_ref()?.steps[0];
            (step.items_done.len() >= 2 && step.items_done.len() < items.len()).then_some(())
        },
    )
    .await;
    drop(first);
    let at_kill = runs.get(&run).await.unwrap().status.unwrap().steps[0].clone();
    let done = at_kill.items_done.clone();
    assert!(!done.is_empty() && done.len() < items.len(), "{done:?}");

    let (_second, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let finished = crate::support::finished_run(&api.ns, &run, Duration::from_secs(60)).await;
    let status = finished.status.unwrap();
    assert_eq!(status.phase, RunPhase::Succeeded, "{:?}", status.error);
    let step = &status.steps[0];
    let want: Vec<_> = items.iter().map(|ms| json!({"slept_ms": ms})).collect();
    assert_eq!(step.output, Some(json!(want)));
    assert!(
        step.items_done.is_empty(),
        "no progress kept once the step ended"
    );
    for i in &done {
        let (before, after) = (
            &at_kill.iterations[*i as usize],
            &step.iterations[*i as usize],
        );
        assert_eq!(before.status, StepPhase::Succeeded);
        assert_eq!(
            before.started_at, after.started_at,
            "iteration {i} finished before the kill ran again"
        );
    }
    let rerun = (0..items.len() as u32)
        .filter(|i| !done.contains(i))
        .count();
    assert!(rerun > 0 && rerun < items.len());
}
