//! Time-based flow control: rate limits and debounce, against the real API server,
//! with operator processes killed or stopped and replaced while runs wait.

use std::time::Duration;

use flowline_core::crd::{Run, RunPhase};
use jiff::Timestamp;
use serde_json::{Value, json};

use crate::builders::{WorkflowBuilder, step};
use crate::support::{Process, TestApi, eventually, finished_run, most_within, ready};

const MINUTE: Duration = Duration::from_secs(60);

fn started_at(run: &Run) -> Timestamp {
    run.status
        .as_ref()
        .and_then(|s| s.started_at)
        .expect("a start")
}

fn created_at(run: &Run) -> Timestamp {
    flowline_core::crd::timestamps::created_at(&run.metadata)
}

/// A rate limit of 3 runs per 2 seconds. 12 runs are started at once. The operator is
/// killed (SIGKILL) while some wait `queued`, and a new one takes over. Every run
/// succeeds, none is dropped, and no 2-second window holds more than 3 recorded starts.
#[tokio::test]
#[ignore = "needs cluster"]
async fn rate_limited_starts_never_exceed_the_limit_in_any_window_across_a_kill() {
    let api = TestApi::start("tc-rate").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("Limited").step(step::transform("ok", json!(1))))
        .await;
    api.patch_workflow(
        &key,
        &wf,
        json!({"rate_limit": {"limit": 3, "period_ms": 2000}}),
    )
    .await;
    let view: Value = api
        .get(&key, &format!("/v1/workflows/{wf}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        view["rate_limit"],
        json!({"limit": 3, "period_ms": 2000}),
        "{view}"
    );
    let (mut first, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(api.start_run(&key, &wf, None).await);
    }
    let queued = eventually(
        "the first window's runs to succeed while the others wait queued",
        MINUTE,
        || async {
            let succeeded = api.run_ids(&wf, "status=succeeded").await.len();
            let queued = api.run_ids(&wf, "status=queued").await;
            (succeeded >= 3 && queued.len() >= 3).then_some(queued)
        },
    )
    .await;
    // A waiting run says what it waits for.
    let waiting: Value = api
        .get(&key, &format!("/v1/runs/{}", queued[0]))
        .await
        .json()
        .await
        .unwrap();
    assert!(
        waiting["status"] != "queued" || waiting["queued_for"] == "rate_limit",
        "{waiting}"
    );
    first.kill();
    let (_second, port2) = Process::operator(&api.ns, &["--no-api"]);
    ready(port2).await;
    let mut starts = Vec::new();
    for id in &ids {
        let run = finished_run(&api.ns, id, Duration::from_secs(120)).await;
        let status = run.status.as_ref().unwrap();
        assert_eq!(
            status.phase,
            RunPhase::Succeeded,
            "{id}: {:?}",
            status.error
        );
        starts.push(started_at(&run));
    }
    assert!(
        most_within(starts.iter().map(|t| t.as_millisecond()).collect(), 2000) <= 3,
        "more than 3 starts in 2 s: {starts:?}"
    );
}

/// Runs of one debounce key (period 1.5 s, max wait 4 s) posted every 500 ms for 7 s:
/// each supersedes the one before (`superseded by <newer run>`), the burst's max wait
/// starts one before the burst ends, and the last starts a period after its
/// creation. The operator is stopped and replaced mid-burst. A run of another key is
/// its own burst.
#[tokio::test]
#[ignore = "needs cluster"]
async fn debounce_starts_the_newest_run_after_the_period_or_the_max_wait() {
    let api = TestApi::start("tc-debounce").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(
            &WorkflowBuilder::new("Debounced")
                .step(step::transform("ok", json!("{{ trigger.payload.k }}"))),
        )
        .await;
    api.patch_workflow(
        &key,
        &wf,
        json!({"debounce": {"key": "{{ trigger.payload.k }}", "period_ms": 1500, "max_wait_ms": 4000}}),
    )
    .await;
    let (first, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let other = api
        .start_run(&key, &wf, Some(json!({"payload": {"k": "b"}})))
        .await;
    let mut burst = Vec::new();
    let mut second = None;
    for i in 0..14 {
        burst.push(
            api.start_run(&key, &wf, Some(json!({"payload": {"k": "a"}})))
                .await,
        );
        if i == 5 {
            let (process, port2) = Process::operator(&api.ns, &["--no-api"]);
            ready(port2).await;
            first.terminate();
            second = Some(process);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut runs = Vec::new();
    for id in &burst {
        runs.push(finished_run(&api.ns, id, MINUTE).await);
    }
    drop(second);
    let other = finished_run(&api.ns, &other, MINUTE).await;
    assert_eq!(other.status.as_ref().unwrap().phase, RunPhase::Succeeded);
    assert!(
        started_at(&other) >= created_at(&other) + Duration::from_millis(1500),
        "key b waits its period"
    );
    let names: Vec<String> = runs
        .iter()
        .map(|r| r.metadata.name.clone().unwrap())
        .collect();
    let mut burst_first = created_at(&runs[0]);
    let mut started = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let status = run.status.as_ref().unwrap();
        match status.phase {
            RunPhase::Succeeded => {
                let start = started_at(run);
                // Due a period after its creation or the max wait after the burst's
                // first run, whichever is sooner; never before.
                let due = (created_at(run) + Duration::from_millis(1500))
                    .min(burst_first + Duration::from_millis(4000));
                assert!(start >= due, "run {i} started at {start}, due {due}");
                assert!(
                    start <= due + Duration::from_secs(20),
                    "run {i} started at {start}, long after {due}"
                );
                started.push(i);
                if let Some(next) = runs.get(i + 1) {
                    burst_first = created_at(next);
                }
            }
            RunPhase::Cancelled => {
                let error = status.error.as_deref().unwrap_or_default();
                let by = error.strip_prefix("superseded by ").unwrap_or_else(|| {
                    panic!("run {i}: {error}");
                });
                let newer = names.iter().position(|n| n == by);
                assert!(
                    newer.is_some_and(|n| n > i),
                    "run {i} superseded by {by}, not a newer run of its key"
                );
            }
            other => panic!("run {i} ended {other:?}"),
        }
    }
    assert_eq!(
        started.last(),
        Some(&(runs.len() - 1)),
        "the last run starts"
    );
    assert!(
        started.len() >= 2,
        "the max wait started a run before the burst ended: {started:?}"
    );
}

/// Bad settings get the API's 400 naming each field; the engine's check refuses them
/// for kubectl too.
#[tokio::test]
#[ignore = "needs cluster"]
async fn rate_limit_and_debounce_are_validated() {
    let api = TestApi::start("tc-valid").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("Checked").step(step::transform("ok", json!(1))))
        .await;
    let res = api
        .send(
            "PATCH",
            &key,
            &format!("/v1/workflows/{wf}"),
            Some(json!({
                "rate_limit": {"limit": 0, "period_ms": 500, "key": "{{ steps.x.output }}"},
                "debounce": {"period_ms": 5000, "max_wait_ms": 1000},
            })),
        )
        .await;
    assert_eq!(res.status(), 400);
    let body: Value = res.json().await.unwrap();
    let mut fields: Vec<&str> = body["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["field"].as_str())
        .collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "debounce.max_wait_ms",
            "rate_limit.key",
            "rate_limit.limit",
            "rate_limit.period_ms"
        ],
        "{body}"
    );
    let res = api
        .send(
            "PATCH",
            &key,
            &format!("/v1/workflows/{wf}"),
            Some(json!({"rate_limit": {"limit": 1, "period_ms": 1000, "extra": 1}})),
        )
        .await;
    assert_eq!(res.status(), 400, "unknown fields are refused");
    // The CRD's own bounds, for kubectl and GitOps.
    let mut manifest = WorkflowBuilder::new("bad-debounce")
        .step(step::transform("ok", json!(1)))
        .manifest_value();
    manifest["spec"]["debounce"] = json!({"periodMs": 5000, "maxWaitMs": 1000});
    let object: flowline_core::crd::Workflow = serde_json::from_value(manifest).unwrap();
    let refused = api
        .ns
        .api::<flowline_core::crd::Workflow>()
        .create(&Default::default(), &object)
        .await
        .expect_err("refused at admission");
    assert!(
        refused.to_string().contains("maxWaitMs must be at least"),
        "{refused}"
    );
}
