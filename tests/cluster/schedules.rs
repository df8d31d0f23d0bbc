//! Schedules beyond one run per tick: catching up the ticks missed while the operator
//! was stopped, what a tick does while an earlier run is unfinished (`overlap`), and
//! backfilling past ticks through the API.

use std::time::Duration;

use flowline_core::crd::{Run, RunPhase};
use jiff::Timestamp;
use serde_json::{Value, json};

use crate::builders::{WorkflowBuilder, step};
use crate::support::{Process, TestApi, assert_error, eventually, ready};

const MINUTE: Duration = Duration::from_secs(60);

/// Creates `wf` as kubectl would (a seconds field in the cron expression, for quick
/// ticks, is refused by the API but read by the operator); returns its name.
async fn applied(api: &TestApi, wf: WorkflowBuilder) -> String {
    let created = api.ns.create_workflow(&wf).await;
    created.metadata.name.unwrap()
}

/// The workflow's runs as the API server has them.
async fn runs_of(api: &TestApi, wf: &str) -> Vec<Run> {
    api.ns
        .api::<Run>()
        .list(&kube::api::ListParams::default().labels(&format!("flowline.io/workflow={wf}")))
        .await
        .unwrap()
        .items
}

/// The ticks the workflow's runs are for, oldest first.
async fn ticks_of(api: &TestApi, wf: &str) -> Vec<Timestamp> {
    let mut ticks: Vec<Timestamp> = runs_of(api, wf)
        .await
        .iter()
        .filter_map(Run::scheduled_for)
        .collect();
    ticks.sort();
    ticks
}

fn every_two_seconds(extra: Value) -> Value {
    let mut trigger = json!({"type": "schedule", "cron": "*/2 * * * * *"});
    trigger
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    trigger
}

/// The operator is stopped for about ten seconds: with a one-minute catch-up window,
/// every two-second tick of the gap gets its run once a new operator starts, and the
/// runs name their ticks (`scheduled_at`).
#[tokio::test]
#[ignore = "needs cluster"]
async fn missed_ticks_within_the_catch_up_window_run_after_a_stopped_operator() {
    let api = TestApi::start("sched-catchup").await;
    let wf = applied(
        &api,
        WorkflowBuilder::new("catching-up")
            .trigger(every_two_seconds(json!({"catchupWindowMs": 60_000})))
            .step(step::delay("tick", 1))
            .active(),
    )
    .await;
    let (first, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    eventually("a first scheduled run", MINUTE, || async {
        (!ticks_of(&api, &wf).await.is_empty()).then_some(())
    })
    .await;
    first.terminate();
    // The downtime is the subject: ticks pass with nobody to start their runs.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let stopped_with = ticks_of(&api, &wf).await;
    let (_second, port2) = Process::operator(&api.ns, &["--no-api"]);
    ready(port2).await;
    let caught_up = eventually("the gap's ticks to get their runs", MINUTE, || async {
        let ticks = ticks_of(&api, &wf).await;
        (ticks.len() >= stopped_with.len() + 5).then_some(ticks)
    })
    .await;
    // Every tick from the first to the last has its run: no gap, no tick twice.
    for pair in caught_up.windows(2) {
        assert_eq!(
            pair[1].duration_since(pair[0]).as_secs(),
            2,
            "a tick missing or doubled: {caught_up:?}"
        );
    }
    let run = &runs_of(&api, &wf).await[0];
    let view: Value = api
        .get(
            &api.admin_key,
            &format!("/v1/runs/{}", run.metadata.name.as_deref().unwrap()),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["trigger"], "schedule");
    assert!(view["scheduled_at"].is_string(), "{view}");
}

/// `skip`: a tick while the previous run goes on starts nothing, so runs never overlap
/// and fewer runs than ticks start. `cancel_previous`: the next tick cancels the
/// unfinished run, naming why.
#[tokio::test]
#[ignore = "needs cluster"]
async fn overlap_skip_starts_nothing_and_cancel_previous_cancels_the_earlier_run() {
    let api = TestApi::start("sched-overlap").await;
    let skip = applied(
        &api,
        WorkflowBuilder::new("skipping")
            .trigger(every_two_seconds(json!({"overlap": "skip"})))
            .step(step::delay("slow", 5000))
            .active(),
    )
    .await;
    let cancel = applied(
        &api,
        WorkflowBuilder::new("replacing")
            .trigger(every_two_seconds(json!({"overlap": "cancel_previous"})))
            .step(step::delay("slow", 60_000))
            .active(),
    )
    .await;
    let (_operator, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let started = Timestamp::now();

    let cancelled = eventually("a run cancelled by the next tick", MINUTE, || async {
        runs_of(&api, &cancel).await.into_iter().find(|r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.phase == RunPhase::Cancelled)
        })
    })
    .await;
    let error = cancelled.status.unwrap().error.unwrap_or_default();
    assert!(error.contains("cancel_previous"), "{error}");

    // Two skipping runs have finished: a dozen seconds of two-second ticks.
    let runs = eventually("two skipping runs to finish", MINUTE, || async {
        let runs = runs_of(&api, &skip).await;
        let done = runs
            .iter()
            .filter(|r| r.status.as_ref().is_some_and(|s| s.phase.is_finished()))
            .count();
        (done >= 2).then_some(runs)
    })
    .await;
    let elapsed = Timestamp::now().duration_since(started).as_secs();
    assert!(
        (runs.len() as i64) < elapsed / 2,
        "{} runs in {elapsed} s of two-second ticks: ticks were not skipped",
        runs.len()
    );
    let mut spans: Vec<(Timestamp, Option<Timestamp>)> = runs
        .iter()
        .filter_map(|r| {
            let s = r.status.as_ref()?;
            Some((s.started_at?, s.finished_at))
        })
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        let ended = pair[0].1.expect("an earlier run has finished");
        assert!(ended <= pair[1].0, "runs overlapped: {spans:?}");
    }
}

/// `queue`: each tick's run waits `queued` until the earlier one ends; never two run
/// at once.
#[tokio::test]
#[ignore = "needs cluster"]
async fn overlap_queue_makes_each_run_wait_for_the_earlier_one() {
    let api = TestApi::start("sched-queue").await;
    let wf = applied(
        &api,
        WorkflowBuilder::new("queueing")
            .trigger(every_two_seconds(json!({"overlap": "queue"})))
            .step(step::delay("slow", 3000))
            .active(),
    )
    .await;
    let (_operator, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    eventually("a scheduled run to wait queued", MINUTE, || async {
        (!api.run_ids(&wf, "status=queued").await.is_empty()).then_some(())
    })
    .await;
    let runs = eventually("three queued runs to finish", MINUTE, || async {
        let runs = runs_of(&api, &wf).await;
        let done = runs
            .iter()
            .filter(|r| {
                r.status
                    .as_ref()
                    .is_some_and(|s| s.phase == RunPhase::Succeeded)
            })
            .count();
        (done >= 3).then_some(runs)
    })
    .await;
    let mut spans: Vec<(Timestamp, Timestamp)> = runs
        .iter()
        .filter_map(|r| {
            let s = r.status.as_ref()?;
            Some((s.started_at?, s.finished_at?))
        })
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "runs overlapped: {spans:?}");
    }
}

/// A backfill starts one run per past tick (idempotently: a second call starts none),
/// each for its tick; bad spans and workflows without a schedule are refused.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_backfill_runs_each_past_tick_once() {
    let api = TestApi::start("sched-backfill").await;
    let key = api.admin_key.clone();
    let hourly = api
        .workflow(
            &WorkflowBuilder::new("Hourly")
                .trigger(json!({"type": "schedule", "cron": "0 * * * *"}))
                .step(step::transform("at", json!("{{ trigger.scheduled_at }}"))),
        )
        .await;
    let manual = api
        .workflow(&WorkflowBuilder::new("By hand").step(step::delay("d", 1)))
        .await;
    let (_operator, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let now = Timestamp::now();
    let from = now - jiff::SignedDuration::from_hours(3);
    let path = format!("/v1/workflows/{hourly}/backfill");
    let span = json!({"from": from.to_string(), "to": now.to_string()});
    let res = api.send("POST", &key, &path, Some(span.clone())).await;
    assert_eq!(res.status(), 202);
    assert_eq!(res.json::<Value>().await.unwrap(), json!({"runs": 3}));
    let res = api.send("POST", &key, &path, Some(span)).await;
    assert_eq!(
        res.json::<Value>().await.unwrap(),
        json!({"runs": 0}),
        "each tick once"
    );

    let runs = eventually("three backfilled runs to succeed", MINUTE, || async {
        let runs = runs_of(&api, &hourly).await;
        runs.iter()
            .all(|r| {
                r.status
                    .as_ref()
                    .is_some_and(|s| s.phase == RunPhase::Succeeded)
            })
            .then_some(runs)
            .filter(|r| r.len() == 3)
    })
    .await;
    for run in &runs {
        let tick = run.scheduled_for().expect("a tick");
        let output = &run.status.as_ref().unwrap().steps[0].output;
        assert_eq!(output, &Some(json!(flowline_core::clock::format_ts(tick))));
    }

    let long_ago = now - jiff::SignedDuration::from_hours(2000);
    for (body, field) in [
        (
            json!({"from": long_ago.to_string(), "to": now.to_string()}),
            "to",
        ),
        (
            json!({"from": now.to_string(), "to": from.to_string()}),
            "to",
        ),
        (json!({"from": "yesterday", "to": now.to_string()}), "from"),
    ] {
        let res = api.send("POST", &key, &path, Some(body)).await;
        let error = assert_error(res, 400, "validation_error").await;
        assert_eq!(error["error"]["details"][0]["field"], field, "{error}");
    }
    let res = api
        .send(
            "POST",
            &key,
            &format!("/v1/workflows/{manual}/backfill"),
            Some(json!({"from": from.to_string(), "to": now.to_string()})),
        )
        .await;
    assert_error(res, 400, "validation_error").await;
}
