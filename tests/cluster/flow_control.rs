//! Flow control: run timeouts and concurrency limits, against the real API server,
//! with the run controller in this process or as operator processes (restarts).

use std::time::Duration;

use flowline_core::crd::{Run, RunPhase, StepPhase};
use flowline_telemetry::engine_metrics::QueuedForLabel;
use serde_json::{Value, json};

use crate::builders::{WorkflowBuilder, step};
use crate::support::{
    Process, TestApi, assert_error, eventually, finished_run, ready, spawn_run_controller,
    spawn_run_controller_tuned, step_running,
};

const MINUTE: Duration = Duration::from_secs(60);

/// An API server and a run controller in this process, and the workflow `wf` created
/// through the API; the controller stops when the guard is dropped.
async fn with_controller(
    prefix: &str,
    wf: WorkflowBuilder,
) -> (
    TestApi,
    String,
    tokio_util::sync::DropGuard,
    flowline_telemetry::engine_metrics::EngineTelemetry,
) {
    let api = TestApi::start(prefix).await;
    let (stop, telemetry) = spawn_run_controller(
        &api.ns,
        crate::support::guarded_client(),
        Default::default(),
    );
    let wf = api.workflow(&wf).await;
    (api, wf, stop.drop_guard(), telemetry)
}

/// An API server and a run controller in this process whose accounts may each execute
/// `limit` runs at once; the controller stops when the guard is dropped.
async fn with_account_bound(prefix: &str, limit: u32) -> (TestApi, tokio_util::sync::DropGuard) {
    let api = TestApi::start(prefix).await;
    let (stop, _telemetry) = spawn_run_controller_tuned(
        &api.ns,
        crate::support::guarded_client(),
        Default::default(),
        |ctx| ctx.account_bound().set_limit(limit),
    );
    // The controller watches before the test's runs exist: runs it first sees together
    // in its initial list are admitted in the order it reconciles them, not the order
    // they were created in (a start-up case the tests of order do not measure).
    let warm_up = api
        .workflow(&WorkflowBuilder::new("warm-up").step(step::transform("ok", json!(1))))
        .await;
    let run = api.start_run(&api.admin_key, &warm_up, None).await;
    finished_run(&api.ns, &run, MINUTE).await;
    (api, stop.drop_guard())
}

/// The fields named in a 400's details.
fn fields(body: &Value) -> Vec<String> {
    body["error"]["details"]
        .as_array()
        .map(|d| {
            d.iter()
                .filter_map(|x| x["field"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The most runs whose step `work` overlapped in time (a step that ended at the
/// millisecond another started does not overlap it).
fn most_at_once(runs: &[Run]) -> usize {
    let mut edges: Vec<(i64, i32)> = Vec::new();
    for run in runs {
        let record = &run.status.as_ref().unwrap().steps[0];
        let start = record.started_at.expect("the step started");
        let end = record.finished_at.expect("the step finished");
        edges.push((start.as_millisecond(), 1));
        edges.push((end.as_millisecond(), -1));
    }
    // Ends before starts at the same instant.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// `runs` (in creation order) started in creation order, as far as a limit of `limit`
/// allows telling: runs admitted together (free slots for all of them) start in either
/// order, so a run may be overtaken by at most `limit - 1` younger runs, never more.
fn assert_started_in_creation_order(runs: &[Run], limit: usize) {
    let starts: Vec<i64> = runs
        .iter()
        .map(|r| {
            r.status
                .as_ref()
                .unwrap()
                .started_at
                .unwrap()
                .as_millisecond()
        })
        .collect();
    for (i, start) in starts.iter().enumerate() {
        let overtaken_by = starts[i + 1..].iter().filter(|s| *s < start).count();
        assert!(
            overtaken_by < limit,
            "run {i} started after {overtaken_by} younger runs: {starts:?}"
        );
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn timeout_and_concurrency_are_validated() {
    let api = TestApi::start("fc-valid").await;
    let key = api.admin_key.clone();
    let wf = api.create_workflow("Validated").await;
    let path = format!("/v1/workflows/{wf}");
    for (body, field) in [
        (json!({"timeout_ms": 0}), "timeout_ms"),
        (json!({"timeout_ms": 604_800_001u64}), "timeout_ms"),
        (json!({"timeout_ms": "1s"}), "timeout_ms"),
        (json!({"concurrency": {"limit": 0}}), "concurrency.limit"),
        (json!({"concurrency": {}}), "concurrency.limit"),
        (
            json!({"concurrency": {"limit": 1, "policy": "drop"}}),
            "concurrency.policy",
        ),
        (
            json!({"concurrency": {"limit": 1, "key": "{{ steps.a.output }}"}}),
            "concurrency.key",
        ),
        (
            json!({"concurrency": {"limit": 1, "key": "{{ trigger.payload.x"}}),
            "concurrency.key",
        ),
        (
            json!({"concurrency": {"limit": 1, "group": "x"}}),
            "concurrency.group",
        ),
        (json!({"concurrency": 3}), "concurrency"),
    ] {
        let res = api.send("PATCH", &key, &path, Some(body.clone())).await;
        let err = assert_error(res, 400, "validation_error").await;
        assert_eq!(fields(&err), [field], "{body}: {err}");
    }
    let res = api
        .send(
            "PATCH",
            &key,
            &path,
            Some(json!({"timeout_ms": 604_800_000u64, "concurrency": {"limit": 3, "key": "{{ trigger.payload.customer }}", "policy": "cancel_newest"}})),
        )
        .await;
    assert_eq!(res.status(), 200);
    let view: Value = res.json().await.unwrap();
    assert_eq!(view["timeout_ms"], 604_800_000u64);
    assert_eq!(
        view["concurrency"],
        json!({"limit": 3, "key": "{{ trigger.payload.customer }}", "policy": "cancel_newest"})
    );
    // Null removes both; a concurrency without a key is sent whole, so the key goes.
    api.patch_workflow(&key, &wf, json!({"concurrency": {"limit": 2}}))
        .await;
    let view: Value = api.get(&key, &path).await.json().await.unwrap();
    assert_eq!(
        view["concurrency"],
        json!({"limit": 2, "key": null, "policy": "queue"})
    );
    api.patch_workflow(&key, &wf, json!({"timeout_ms": null, "concurrency": null}))
        .await;
    let view: Value = api.get(&key, &path).await.json().await.unwrap();
    assert_eq!(
        (view["timeout_ms"].clone(), view["concurrency"].clone()),
        (Value::Null, Value::Null)
    );
    // The CRD schema refuses the same bounds from kubectl.
    let out = api.ns.kubectl(&[
        "patch",
        "workflow",
        &wf,
        "--type=merge",
        "-p",
        r#"{"spec":{"timeoutMs":0,"concurrency":{"limit":0}}}"#,
    ]);
    assert!(!out.status.success());
    let stderr = crate::support::text(&out.stderr);
    assert!(
        stderr.contains("timeoutMs") && stderr.contains("concurrency.limit"),
        "{stderr}"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_run_longer_than_its_timeout_fails_and_cancels_its_steps() {
    let (api, wf, _stop, _telemetry) = with_controller(
        "fc-timeout",
        WorkflowBuilder::new("Slow").timeout_ms(1500).steps(json!([
            step::delay("long", 600_000),
            step::transform("after", json!(1))
        ])),
    )
    .await;
    let run = api.start_run(&api.admin_key, &wf, None).await;
    let done = finished_run(&api.ns, &run, MINUTE).await;
    let status = done.status.unwrap();
    assert_eq!(status.phase, RunPhase::Failed);
    assert_eq!(status.error.as_deref(), Some("run timed out after 1500 ms"));
    let duration = status.duration_ms.unwrap();
    assert!(
        (1500..5000).contains(&duration),
        "stopped after {duration} ms"
    );
    let steps: Vec<StepPhase> = status.steps.iter().map(|s| s.status).collect();
    assert_eq!(steps, [StepPhase::Cancelled, StepPhase::Cancelled]);
    let failed = status
        .pending_events
        .iter()
        .find(|e| e.kind == flowline_core::crd::EventKind::RunFailed)
        .expect("run.failed recorded");
    assert_eq!(failed.data["error"], "run timed out after 1500 ms");
    // The API shows it the same way.
    let view = api.finished_view(&api.admin_key, &run, MINUTE).await;
    assert_eq!(view["status"], "failed");
    assert_eq!(view["error"], "run timed out after 1500 ms");
}

/// The deadline is counted from `status.startedAt`: an operator that takes over a run
/// mid-step enforces what is left of the timeout, it does not start the clock again.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_restarted_operator_keeps_the_original_deadline() {
    let api = TestApi::start("fc-deadline").await;
    let wf = api
        .workflow(
            &WorkflowBuilder::new("Deadline")
                .timeout_ms(8000)
                .step(step::delay("work", 600_000)),
        )
        .await;
    let (first, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let run = api.start_run(&api.admin_key, &wf, None).await;
    step_running(&api.ns, &run, "work").await;
    let runs = api.ns.api::<Run>();
    let started = runs
        .get(&run)
        .await
        .unwrap()
        .status
        .unwrap()
        .started_at
        .unwrap();
    // A standby takes over as soon as the first one releases the lease; it is waited
    // for (ready), not slept for.
    let (_second, port2) = Process::operator(&api.ns, &["--no-api"]);
    ready(port2).await;
    // Pacing, not a check: the hand-over must come well into the deadline, 3 s after
    // the start, so that a clock started again would show (3 s + 8 s > 10.5 s).
    let into_deadline = jiff::SignedDuration::from_secs(3);
    let wait = jiff::Timestamp::now().duration_until(started + into_deadline);
    if let Ok(wait) = Duration::try_from(wait) {
        tokio::time::sleep(wait).await;
    }
    first.terminate();
    eventually("the standby to lead", MINUTE, || async {
        crate::support::metrics_text(port2)
            .await?
            .lines()
            .any(|l| l == "flowline_leader 1")
            .then_some(())
    })
    .await;
    let status = finished_run(&api.ns, &run, MINUTE).await.status.unwrap();
    assert_eq!(status.phase, RunPhase::Failed);
    assert_eq!(status.error.as_deref(), Some("run timed out after 8000 ms"));
    assert_eq!(status.started_at, Some(started), "the start is kept");
    let duration = status.duration_ms.unwrap();
    // Restarting the clock would take at least 3 s + 8 s.
    assert!(
        (8000..10_500).contains(&duration),
        "ended {duration} ms after its start"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn queued_runs_start_in_creation_order_within_the_limit() {
    let (api, wf, _stop, telemetry) = with_controller(
        "fc-queue",
        WorkflowBuilder::new("Limited")
            .concurrency(2)
            .step(step::delay("work", "{{ trigger.payload.ms }}")),
    )
    .await;
    let key = api.admin_key.clone();
    let mut ids = Vec::new();
    // The first two take long enough for the other four to be seen waiting, however
    // slowly this machine creates them.
    for i in 0..6 {
        let ms = if i < 2 { 5000 } else { 1000 };
        let payload = json!({"payload": {"ms": ms}});
        ids.push(api.start_run(&key, &wf, Some(payload)).await);
    }
    // Four wait, visible in the list filter and in the gauge (their waits end before
    // they settle: kubectl never sees them queued).
    let queued = eventually("four runs to be queued", MINUTE, || async {
        let q = api.run_ids(&wf, "status=queued").await;
        (q.len() == 4).then_some(q)
    })
    .await;
    assert_eq!(api.run_ids(&wf, "status=running").await.len(), 2);
    let by_concurrency = QueuedForLabel {
        queued_for: "concurrency",
    };
    eventually("flowline_runs_queued to count them", MINUTE, || async {
        (telemetry.runs_queued.get_or_create(&by_concurrency).get() == 4).then_some(())
    })
    .await;
    let view: Value = api
        .get(&key, &format!("/v1/runs/{}", queued[0]))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["status"], "queued");
    assert_eq!(view["queued_for"], "concurrency");
    assert_eq!(view["steps"][0]["status"], "pending");

    let mut done = Vec::new();
    for id in &ids {
        let run = finished_run(&api.ns, id, MINUTE).await;
        assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Succeeded);
        done.push(run);
    }
    assert_eq!(most_at_once(&done), 2, "the limit holds and is used");
    assert_started_in_creation_order(&done, 2);
    eventually("the gauge to drop to 0", MINUTE, || async {
        (telemetry.runs_queued.get_or_create(&by_concurrency).get() == 0).then_some(())
    })
    .await;
}

/// An account at its bound of runs executing at once (2 here): its further runs, of any
/// of its workflows, wait `queued` and start as places free, oldest first; never more
/// than the bound at once, and nothing lost.
#[tokio::test]
#[ignore = "needs cluster"]
async fn an_account_executes_at_most_its_bound_and_its_other_runs_wait_queued() {
    let (api, _stop) = with_account_bound("fc-account", 2).await;
    let payload_delay =
        WorkflowBuilder::new("delay").step(step::delay("work", "{{ trigger.payload.ms }}"));
    let first = api
        .workflow(&payload_delay.clone().display_name("First"))
        .await;
    let second = api.workflow(&payload_delay.display_name("Second")).await;
    let key = api.admin_key.clone();
    let mut ids = Vec::new();
    // The first two take long enough for the other four to be seen waiting.
    for i in 0..6 {
        let ms = if i < 2 { 5000 } else { 800 };
        let wf = if i % 2 == 0 { &first } else { &second };
        ids.push(
            api.start_run(&key, wf, Some(json!({"payload": {"ms": ms}})))
                .await,
        );
    }
    eventually("four runs of the account to be queued", MINUTE, || async {
        let queued = api.run_ids(&first, "status=queued").await.len()
            + api.run_ids(&second, "status=queued").await.len();
        (queued == 4).then_some(())
    })
    .await;
    let mut done = Vec::new();
    for id in &ids {
        let run = finished_run(&api.ns, id, MINUTE).await;
        assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Succeeded);
        done.push(run);
    }
    assert_eq!(most_at_once(&done), 2, "the bound holds and is used");
    assert_started_in_creation_order(&done, 2);
}

/// Parking frees a run's place under its account's bound, and waking takes one again:
/// a parked run woken while its account is full waits, still `running` (never
/// `queued`: it has started), and goes on when a place frees. So parking cannot run
/// more of an account's runs at once than its bound.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_run_woken_from_parking_waits_for_a_place_of_its_account_still_running() {
    let (api, _stop) = with_account_bound("fc-account-park", 1).await;
    let napping = api.workflow(&WorkflowBuilder::new("Napping").steps(json!([{"id": "nap", "action": "wait", "with": {"ms": 1000}}, step::transform("work", json!(1))])))
    .await;
    let busy = api
        .workflow(&WorkflowBuilder::new("Busy").step(step::delay("work", 4000)))
        .await;
    let key = api.admin_key.clone();
    let parked = api.start_run(&key, &napping, None).await;
    eventually("the first run to park", MINUTE, || async {
        let run: Run = api.ns.api::<Run>().get(&parked).await.ok()?;
        run.status.as_ref()?.parked.then_some(())
    })
    .await;
    // Its place is free while it is parked: the other run starts at once.
    let holder = api.start_run(&key, &busy, None).await;
    let phases = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let parked_run = eventually("the parked run to finish", MINUTE, || async {
        let run: Run = api.ns.api::<Run>().get(&parked).await.ok()?;
        phases.lock().unwrap().insert(run.phase().as_str());
        run.phase().is_finished().then_some(run)
    })
    .await;
    let phases = phases.into_inner().unwrap();
    let holder_run = finished_run(&api.ns, &holder, MINUTE).await;
    assert_eq!(parked_run.phase(), RunPhase::Succeeded);
    assert!(
        !phases.contains("queued"),
        "a started run is never queued: {phases:?}"
    );
    let holder_end = holder_run.status.as_ref().unwrap().finished_at.unwrap();
    let holder_start = holder_run.status.as_ref().unwrap().started_at.unwrap();
    let work = &parked_run.status.as_ref().unwrap().steps[1];
    let work_start = work.started_at.expect("the step after the nap ran");
    assert!(
        holder_start < work_start && work_start >= holder_end,
        "woken at 1 s while the other run held the only place, it went on only when \
         that run ended ({holder_start} to {holder_end}); its step started at {work_start}"
    );
}

/// Queued runs survive an operator restart: none is lost, they start in creation
/// order, and the limit holds across the hand-over.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_restart_while_runs_are_queued_loses_none_and_keeps_the_limit() {
    let api = TestApi::start("fc-restart").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(
            &WorkflowBuilder::new("Limited")
                .concurrency(2)
                .step(step::delay("work", 1500)),
        )
        .await;
    let (first, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let mut ids = Vec::new();
    for _ in 0..8 {
        ids.push(api.start_run(&key, &wf, None).await);
    }
    eventually("runs to be queued", MINUTE, || async {
        (api.run_ids(&wf, "status=queued").await.len() >= 4).then_some(())
    })
    .await;
    let (_second, port2) = Process::operator(&api.ns, &["--no-api"]);
    ready(port2).await;
    first.terminate();
    let mut done = Vec::new();
    for id in &ids {
        let run = finished_run(&api.ns, id, Duration::from_secs(120)).await;
        assert_eq!(
            run.status.as_ref().unwrap().phase,
            RunPhase::Succeeded,
            "{id}"
        );
        done.push(run);
    }
    assert!(
        most_at_once(&done) <= 2,
        "limit exceeded: {}",
        most_at_once(&done)
    );
    assert_started_in_creation_order(&done, 2);
}

/// Runs waiting for the one slot of a workflow start by priority (1 first), then by
/// age; a run without its own takes the workflow's priority. The order holds across
/// a restart of the operator while they wait.
#[tokio::test]
#[ignore = "needs cluster"]
async fn queued_runs_start_by_priority_then_age_across_a_restart() {
    let api = TestApi::start("fc-priority").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(
            &WorkflowBuilder::new("Prioritised")
                .concurrency(1)
                .step(step::delay("work", "{{ trigger.payload.ms }}")),
        )
        .await;
    api.patch_workflow(&key, &wf, json!({"priority": 4})).await;
    let (first, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let start = |body: Value| {
        let (api, key, wf) = (&api, key.clone(), wf.clone());
        async move { api.start_run(&key, &wf, Some(body)).await }
    };
    // The slot is held long enough for every other run to be seen waiting.
    let blocker = start(json!({"payload": {"ms": 4000}, "priority": 1})).await;
    step_running(&api.ns, &blocker, "work").await;
    let quick = |priority: Option<u8>| match priority {
        Some(p) => json!({"payload": {"ms": 200}, "priority": p}),
        None => json!({"payload": {"ms": 200}}),
    };
    let low = start(quick(Some(5))).await;
    let default = start(quick(None)).await;
    let urgent = start(quick(Some(1))).await;
    let high = start(quick(Some(2))).await;
    let urgent_later = start(quick(Some(1))).await;
    eventually("five runs to be queued", MINUTE, || async {
        (api.run_ids(&wf, "status=queued").await.len() == 5).then_some(())
    })
    .await;
    let view: Value = api
        .get(&key, &format!("/v1/runs/{default}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["priority"], 4, "the workflow's priority: {view}");

    let (_second, port2) = Process::operator(&api.ns, &["--no-api"]);
    ready(port2).await;
    first.terminate();
    let expected = [&urgent, &urgent_later, &high, &default, &low];
    let mut started = Vec::new();
    for id in expected {
        let run = finished_run(&api.ns, id, Duration::from_secs(120)).await;
        let status = run.status.unwrap();
        assert_eq!(
            status.phase,
            RunPhase::Succeeded,
            "{id}: {:?}",
            status.error
        );
        started.push((status.started_at.unwrap(), id.clone()));
    }
    let mut by_start = started.clone();
    by_start.sort();
    assert_eq!(by_start, started, "started by priority, then age");
}

/// `--max-step-attempts 2`: a forEach of six one-second delays that may run six at
/// once runs two at a time; the iterations' recorded spans never overlap three deep.
#[tokio::test]
#[ignore = "needs cluster"]
async fn an_operator_runs_at_most_its_bound_of_step_attempts_at_once() {
    let api = TestApi::start("fc-attempts").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("Wide").steps(json!([
            {"id": "each", "action": "delay", "for_each": "{{ trigger.payload.items }}",
             "for_each_concurrency": 6, "with": {"ms": 1000}}])))
        .await;
    let (_operator, port) = Process::operator(&api.ns, &["--no-api", "--max-step-attempts", "2"]);
    ready(port).await;
    let run = api
        .start_run(
            &key,
            &wf,
            Some(json!({"payload": {"items": [1, 2, 3, 4, 5, 6]}})),
        )
        .await;
    let view = api.finished_view(&key, &run, MINUTE).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    let spans: Vec<(String, String)> = view["steps"][0]["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let at = |k: &str| i[k].as_str().unwrap().to_string();
            (at("started_at"), at("finished_at"))
        })
        .collect();
    assert_eq!(spans.len(), 6, "{view}");
    let most = spans
        .iter()
        .map(|(start, _)| {
            spans
                .iter()
                .filter(|(s, f)| s <= start && start < f)
                .count()
        })
        .max()
        .unwrap();
    assert_eq!(most, 2, "iterations at once: {spans:?}");
}

/// Every (phase, labels) the API server records for a second run of a `limit: 1`
/// workflow while a first run holds the slot for `hold_ms`, with what `/v1` showed of
/// the second run while it waited.
struct QueuedSecond {
    api: TestApi,
    first: String,
    second: String,
    seen: Vec<(Option<RunPhase>, std::collections::BTreeMap<String, String>)>,
    shown_while_waiting: Value,
    _stop: tokio_util::sync::DropGuard,
}

async fn second_run_behind(prefix: &str, hold_ms: u64) -> QueuedSecond {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let (api, wf, stop, _telemetry) = with_controller(
        prefix,
        WorkflowBuilder::new("One at a time")
            .concurrency(1)
            .step(step::delay("work", "{{ trigger.payload.ms }}")),
    )
    .await;
    let key = api.admin_key.clone();
    let first = api
        .start_run(&key, &wf, Some(json!({"payload": {"ms": hold_ms}})))
        .await;
    step_running(&api.ns, &first, "work").await;
    let runs: kube::Api<Run> = kube::Api::namespaced(api.ns.client.clone(), &api.ns.name);
    let second = api
        .start_run(&key, &wf, Some(json!({"payload": {"ms": 1}})))
        .await;
    let config = watcher::Config::default().fields(&format!("metadata.name={second}"));
    let seen = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut versions = std::pin::pin!(watcher(runs, config).applied_objects());
        while let Some(Ok(run)) = versions.next().await {
            let labels = run.metadata.labels.clone().unwrap_or_default();
            let phase = run.status.as_ref().map(|s| s.phase);
            seen.push((phase, labels));
            if phase.is_some_and(|p| p.is_finished()) {
                return seen;
            }
        }
        seen
    });
    let shown_while_waiting: Value = api
        .get(&key, &format!("/v1/runs/{second}"))
        .await
        .json()
        .await
        .unwrap();
    let seen = tokio::time::timeout(MINUTE, seen)
        .await
        .expect("the second run to finish")
        .unwrap();
    QueuedSecond {
        api,
        first,
        second,
        seen,
        shown_while_waiting,
        _stop: stop,
    }
}

/// A run that waits in the queue longer than the settle time is recorded `queued`,
/// then runs and finishes, and keeps its creator's labels: its phase is a selectable
/// field of its status, so no label write follows it.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_run_through_the_queue_pays_no_label_write() {
    let settle = flowline_core::admission::unrecorded::QUEUED_SETTLE.as_millis() as u64;
    let QueuedSecond {
        api,
        first,
        second,
        seen,
        ..
    } = second_run_behind("fc-label", settle + 2_000).await;
    assert!(
        seen.iter()
            .any(|(phase, _)| *phase == Some(RunPhase::Queued)),
        "the second run waited in the queue: {seen:?}"
    );
    assert!(
        seen.iter().all(|(_, labels)| *labels == seen[0].1),
        "its labels changed: {seen:?}"
    );
    assert_eq!(
        seen.last().and_then(|(phase, _)| *phase),
        Some(RunPhase::Succeeded)
    );
    // kubectl selects it by its phase.
    let runs: kube::Api<Run> = kube::Api::namespaced(api.ns.client.clone(), &api.ns.name);
    let succeeded = runs
        .list(&kube::api::ListParams::default().fields("status.phase=succeeded"))
        .await
        .unwrap();
    assert!(
        succeeded
            .items
            .iter()
            .any(|r| r.metadata.name.as_deref() == Some(&second)),
        "selected by --field-selector status.phase=succeeded"
    );
    finished_run(&api.ns, &first, MINUTE).await;
}

/// A wait shorter than the settle time costs no write: the run's only status is the
/// one it finishes with, while `/v1` showed it `queued` (for its concurrency limit)
/// from the moment it was created.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_short_wait_is_shown_queued_without_a_write() {
    let QueuedSecond {
        api,
        first,
        seen,
        shown_while_waiting,
        ..
    } = second_run_behind("fc-short", 3_000).await;
    assert_eq!(
        shown_while_waiting["status"], "queued",
        "{shown_while_waiting}"
    );
    assert_eq!(shown_while_waiting["queued_for"], "concurrency");
    let phases: Vec<_> = seen.iter().filter_map(|(phase, _)| *phase).collect();
    assert_eq!(
        phases,
        [RunPhase::Succeeded],
        "the statuses recorded: {seen:?}"
    );
    finished_run(&api.ns, &first, MINUTE).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_queued_run_can_be_cancelled() {
    let (api, wf, _stop, _telemetry) = with_controller(
        "fc-cancel",
        WorkflowBuilder::new("One at a time")
            .concurrency(1)
            .step(step::delay("work", 600_000)),
    )
    .await;
    let key = api.admin_key.clone();
    let first = api.start_run(&key, &wf, None).await;
    step_running(&api.ns, &first, "work").await;
    let second = api.start_run(&key, &wf, None).await;
    eventually("the second run to be queued", MINUTE, || async {
        (api.run_ids(&wf, "status=queued").await == [second.clone()]).then_some(())
    })
    .await;
    let res = api
        .send("POST", &key, &format!("/v1/runs/{second}/cancel"), None)
        .await;
    assert_eq!(res.status(), 202);
    let status = finished_run(&api.ns, &second, MINUTE).await.status.unwrap();
    assert_eq!(status.phase, RunPhase::Cancelled);
    assert_eq!(status.steps[0].status, StepPhase::Cancelled);
    assert_eq!(status.steps[0].attempts, 0, "it never started");
    // The first is untouched; a finished run cannot be cancelled again.
    assert_eq!(
        api.run_ids(&wf, "status=running").await,
        std::slice::from_ref(&first)
    );
    let res = api
        .send("POST", &key, &format!("/v1/runs/{second}/cancel"), None)
        .await;
    assert_error(res, 409, "run_not_running").await;
    let res = api
        .send("POST", &key, &format!("/v1/runs/{first}/cancel"), None)
        .await;
    assert_eq!(res.status(), 202);
    finished_run(&api.ns, &first, MINUTE).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn cancel_in_progress_replaces_the_running_run() {
    let (api, wf, _stop, _telemetry) = with_controller(
        "fc-cip",
        WorkflowBuilder::new("Latest wins")
            .concurrency_with(json!({"limit": 1, "policy": "cancel_in_progress"}))
            .step(step::delay("work", "{{ trigger.payload.ms }}")),
    )
    .await;
    let key = api.admin_key.clone();
    let old = api
        .start_run(&key, &wf, Some(json!({"payload": {"ms": 600_000}})))
        .await;
    step_running(&api.ns, &old, "work").await;
    let new = api
        .start_run(&key, &wf, Some(json!({"payload": {"ms": 500}})))
        .await;
    let old_status = finished_run(&api.ns, &old, MINUTE).await;
    assert!(old_status.spec.cancel, "cancel requested on the old run");
    let old_status = old_status.status.unwrap();
    assert_eq!(old_status.phase, RunPhase::Cancelled);
    let new_status = finished_run(&api.ns, &new, MINUTE).await.status.unwrap();
    assert_eq!(new_status.phase, RunPhase::Succeeded);
    // The limit held throughout: the new run started once the old one had stopped.
    assert!(
        new_status.started_at >= old_status.finished_at,
        "new run started {:?}, old run stopped {:?}",
        new_status.started_at,
        old_status.finished_at
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn cancel_newest_cancels_the_new_run_at_once() {
    let (api, wf, _stop, _telemetry) = with_controller(
        "fc-cnew",
        WorkflowBuilder::new("First wins")
            .concurrency_with(json!({"limit": 1, "policy": "cancel_newest"}))
            .step(step::delay("work", 600_000)),
    )
    .await;
    let key = api.admin_key.clone();
    let first = api.start_run(&key, &wf, None).await;
    step_running(&api.ns, &first, "work").await;
    let second = api.start_run(&key, &wf, None).await;
    let view = api.finished_view(&key, &second, MINUTE).await;
    assert_eq!(view["status"], "cancelled", "{view}");
    let error = view["error"].as_str().unwrap();
    assert!(
        error.contains("concurrency limit reached") && error.contains("cancel_newest"),
        "{error}"
    );
    assert_eq!(
        api.run_ids(&wf, "status=running").await,
        std::slice::from_ref(&first)
    );
    api.send("POST", &key, &format!("/v1/runs/{first}/cancel"), None)
        .await;
    finished_run(&api.ns, &first, MINUTE).await;
}

/// Groups come from the key: different customers do not wait for each other, and a
/// run whose key cannot be rendered fails saying so.
/// A key may render a whole document (here 4 KiB each); the operator keeps such a group
/// as its digest, and runs still group exactly as by the text.
#[tokio::test]
#[ignore = "needs cluster"]
async fn keys_that_render_long_texts_group_runs_as_the_texts_do() {
    let (api, wf, _stop, _telemetry) = with_controller(
        "fc-longkey",
        WorkflowBuilder::new("Per document")
            .concurrency_with(json!({"limit": 1, "key": "{{ trigger.payload.doc }}"}))
            .step(step::delay("work", 600_000)),
    )
    .await;
    let key = api.admin_key.clone();
    let doc = |c: &str| json!({"payload": {"doc": c.repeat(4096)}});
    let a = api.start_run(&key, &wf, Some(doc("a"))).await;
    let b = api.start_run(&key, &wf, Some(doc("b"))).await;
    step_running(&api.ns, &a, "work").await;
    step_running(&api.ns, &b, "work").await;
    let a2 = api.start_run(&key, &wf, Some(doc("a"))).await;
    eventually(
        "the second run of document a to be queued",
        MINUTE,
        || async { (api.run_ids(&wf, "status=queued").await == [a2.clone()]).then_some(()) },
    )
    .await;
    api.send("POST", &key, &format!("/v1/runs/{a}/cancel"), None)
        .await;
    step_running(&api.ns, &a2, "work").await;
    for run in [&b, &a2] {
        api.send("POST", &key, &format!("/v1/runs/{run}/cancel"), None)
            .await;
    }
    for run in [&a, &b, &a2] {
        finished_run(&api.ns, run, MINUTE).await;
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn keys_make_groups_and_a_bad_key_fails_the_run() {
    let (api, wf, _stop, _telemetry) = with_controller(
        "fc-key",
        WorkflowBuilder::new("Per customer")
            .concurrency_with(json!({"limit": 1, "key": "{{ trigger.payload.customer }}"}))
            .step(step::delay("work", 600_000)),
    )
    .await;
    let key = api.admin_key.clone();
    let acme = api
        .start_run(&key, &wf, Some(json!({"payload": {"customer": "acme"}})))
        .await;
    let globex = api
        .start_run(&key, &wf, Some(json!({"payload": {"customer": "globex"}})))
        .await;
    step_running(&api.ns, &acme, "work").await;
    step_running(&api.ns, &globex, "work").await;
    let acme2 = api
        .start_run(&key, &wf, Some(json!({"payload": {"customer": "acme"}})))
        .await;
    eventually("the second acme run to be queued", MINUTE, || async {
        (api.run_ids(&wf, "status=queued").await == [acme2.clone()]).then_some(())
    })
    .await;
    let nobody = api.start_run(&key, &wf, None).await;
    let view = api.finished_view(&key, &nobody, MINUTE).await;
    assert_eq!(view["status"], "failed");
    let error = view["error"].as_str().unwrap();
    assert!(
        error.contains("concurrency key could not be rendered")
            && error.contains("trigger.payload.customer"),
        "{error}"
    );
    for run in [&acme, &globex, &acme2] {
        api.send("POST", &key, &format!("/v1/runs/{run}/cancel"), None)
            .await;
    }
    for run in [&acme, &globex, &acme2] {
        finished_run(&api.ns, run, MINUTE).await;
    }
}

/// `--max-running-runs 2`, two accounts. One has 1,000 runs waiting (each holds a place
/// for 2 s), and the operator is replaced while they wait: the other's three runs,
/// started behind that backlog, each get one of the next places to free, not the
/// places after the backlog. No more than two runs of either account ever execute at
/// once.
#[tokio::test]
#[ignore = "needs cluster"]
async fn the_operator_wide_bound_shares_its_places_fairly_between_accounts() {
    let big = TestApi::start("fc-fair-big").await;
    let small = TestApi::start("fc-fair-small").await;
    let flags = [
        "--no-api",
        "--watch-namespace",
        &small.ns.name,
        "--max-running-runs",
        "2",
    ];
    let (first, port) = Process::operator(&big.ns, &flags);
    ready(port).await;
    let busy = big
        .workflow(&WorkflowBuilder::new("Busy").step(step::delay("work", 2000)))
        .await;
    let runs = big.ns.api::<Run>();
    let backlog = big.ns.create_pinned_runs(&busy, "busy", 1000, None).await;
    // Alone this takes seconds; beside the rest of the suite, the API server is slower.
    // The look asks the API server for the queued runs' names only: listing 1,000
    // whole runs ten times a second would itself slow the writes it waits for.
    let queued_only = kube::api::ListParams::default().fields("status.phase=queued");
    eventually("the backlog to wait queued", 3 * MINUTE, || async {
        let queued = runs.list_metadata(&queued_only).await.ok()?.items.len();
        (queued >= 990).then_some(())
    })
    .await;
    let (_second, port2) = Process::operator(&big.ns, &flags);
    ready(port2).await;
    first.terminate();
    let quick = small
        .workflow(&WorkflowBuilder::new("Quick").step(step::delay("work", 100)))
        .await;
    let key = small.admin_key.clone();
    let mut mine = Vec::new();
    for _ in 0..3 {
        mine.push(small.start_run(&key, &quick, None).await);
    }
    let mut done = Vec::new();
    for id in &mine {
        // Three turns of places that free about once a second; the backlog would take
        // about 1,000 s.
        let run = finished_run(&small.ns, id, Duration::from_secs(30)).await;
        assert_eq!(run.phase(), RunPhase::Succeeded);
        done.push(run);
    }
    let first_created = flowline_core::crd::timestamps::created_at(&done[0].metadata);
    let last_started = done
        .iter()
        .filter_map(|r| r.status.as_ref()?.started_at)
        .max()
        .unwrap();
    let all: Vec<Run> = runs.list(&Default::default()).await.unwrap().items;
    let overtook = all
        .iter()
        .filter_map(|r| r.status.as_ref()?.started_at)
        .filter(|s| *s > first_created && *s < last_started)
        .count();
    assert!(
        overtook <= 4,
        "{overtook} runs of the backlog started while the other account's three waited"
    );
    let executed: Vec<Run> = all
        .into_iter()
        .filter(|r| r.status.as_ref().is_some_and(|s| s.phase.is_finished()))
        .chain(done)
        .collect();
    assert!(
        most_at_once(&executed) <= 2,
        "the operator's bound was exceeded: {}",
        most_at_once(&executed)
    );
    drop(backlog);
}
