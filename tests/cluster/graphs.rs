//! Steps as a graph (`needs`) and fan-out (`forEach`) against the real control plane:
//! a run controller per test, in this process, watching only the test's namespace.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowline_core::crd::{ConditionStatus, Run, RunPhase, StepPhase, StepRecord};
use jiff::Timestamp;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::builders::{RunBuilder, WorkflowBuilder};
use crate::spec_errors::{ready_condition, refused};
use crate::support::{
    Process, TestApi, TestNamespace, finished_run, loopback_client, ready, step_running, text,
};

struct Engine {
    ns: TestNamespace,
    stop: CancellationToken,
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn engine(prefix: &str) -> Engine {
    let ns = TestNamespace::new(prefix).await;
    let (stop, _) =
        crate::support::spawn_run_controller(&ns, loopback_client(), Default::default());
    Engine { ns, stop }
}

impl Engine {
    /// Creates the workflow `wf` and starts a run of it, `<name>-1`; returns the run's name.
    async fn start(&self, wf: WorkflowBuilder, payload: Value) -> String {
        self.ns.create_workflow(&wf).await;
        let run = RunBuilder::of(&wf)
            .name(format!("{}-1", wf.name()))
            .payload(payload);
        self.ns.create_run(&run).await
    }
}

fn record<'a>(run: &'a Run, id: &str) -> &'a StepRecord {
    run.status
        .as_ref()
        .unwrap()
        .steps
        .iter()
        .find(|s| s.step_id == id)
        .unwrap()
}

fn times(r: &StepRecord) -> (Timestamp, Timestamp) {
    (r.started_at.unwrap(), r.finished_at.unwrap())
}

/// Most intervals open at once (an interval ending when another starts does not overlap it).
fn peak(mut intervals: Vec<(Timestamp, Timestamp)>) -> usize {
    let mut events: Vec<(Timestamp, i32)> = Vec::new();
    for (start, end) in intervals.drain(..) {
        events.push((start, 1));
        events.push((end, -1));
    }
    // Ends before starts at the same instant.
    events.sort();
    let (mut open, mut most) = (0i32, 0i32);
    for (_, delta) in events {
        open += delta;
        most = most.max(open);
    }
    most as usize
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_diamond_runs_its_branches_in_parallel_and_keeps_the_declared_order() {
    let e = engine("graph-diamond").await;
    // Declared out of execution order: the records keep this order.
    let name = e.start(WorkflowBuilder::new("diamond").display_name("D").steps(json!([
                {"id": "a", "action": "transform", "with": {"value": {"n": 2}}},
                {"id": "d", "action": "transform", "needs": ["b", "c"],
                 "with": {"value": ["{{ steps.b.output.slept_ms }}", "{{ steps.c.output.slept_ms }}",
                                    "{{ steps.a.output.n }}"]}},
                {"id": "b", "action": "delay", "needs": ["a"], "with": {"ms": 1500}},
                {"id": "c", "action": "delay", "needs": ["a"], "with": {"ms": 1500}}])), json!({}))
        .await;
    let run = finished_run(&e.ns, &name, Duration::from_secs(30)).await;
    let status = run.status.as_ref().unwrap();
    assert_eq!(status.phase, RunPhase::Succeeded, "{:?}", status.error);
    let ids: Vec<&str> = status.steps.iter().map(|s| s.step_id.as_str()).collect();
    assert_eq!(ids, ["a", "d", "b", "c"]);
    let (a, b, c, d) = (
        times(record(&run, "a")),
        times(record(&run, "b")),
        times(record(&run, "c")),
        times(record(&run, "d")),
    );
    assert!(
        a.1 <= b.0 && a.1 <= c.0,
        "b and c start after a: {a:?} {b:?} {c:?}"
    );
    assert!(
        b.0 < c.1 && c.0 < b.1,
        "b and c overlap in time: {b:?} {c:?}"
    );
    assert!(
        d.0 >= b.1 && d.0 >= c.1,
        "d starts after both: {b:?} {c:?} {d:?}"
    );
    assert_eq!(record(&run, "d").output, Some(json!([1500, 1500, 2])));
    // Not just touching: the two 1.5 s branches run side by side for most of their
    // time (one after the other they could not overlap at all). A bound on the whole
    // run's duration would say the same but depend on the machine's load.
    let overlap = b.1.min(c.1).duration_since(b.0.max(c.0));
    assert!(
        overlap >= jiff::SignedDuration::from_millis(750),
        "b and c overlap for {overlap:?} only: {b:?} {c:?}"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_failed_branch_cancels_the_other_and_fails_the_run_naming_it() {
    let e = engine("graph-fail").await;
    let name = e
        .start(
            WorkflowBuilder::new("failing")
                .display_name("F")
                .steps(json!([
                {"id": "a", "action": "transform", "with": {"value": 1}},
                {"id": "slow", "action": "delay", "needs": ["a"], "with": {"ms": 60000}},
                {"id": "bad", "action": "fail", "needs": ["a"], "with": {"message": "boom"},
                 "retry": {"maxAttempts": 2, "backoffMs": 300}},
                {"id": "after", "action": "transform", "needs": ["slow", "bad"],
                 "with": {"value": 2}}])),
            json!({}),
        )
        .await;
    let run = finished_run(&e.ns, &name, Duration::from_secs(15)).await;
    let status = run.status.as_ref().unwrap();
    assert_eq!(status.phase, RunPhase::Failed);
    assert_eq!(
        status.error.as_deref(),
        Some("step bad (fail) failed: boom")
    );
    assert_eq!(record(&run, "a").status, StepPhase::Succeeded);
    assert_eq!(record(&run, "bad").status, StepPhase::Failed);
    assert_eq!(record(&run, "bad").attempts, 2, "retries exhausted first");
    let slow = record(&run, "slow");
    assert_eq!(slow.status, StepPhase::Cancelled);
    assert!(slow.started_at.is_some() && slow.finished_at.is_some());
    assert_eq!(record(&run, "after").status, StepPhase::Pending);
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_cancel_stops_every_branch() {
    let e = engine("graph-cancel").await;
    let name = e
        .start(
            WorkflowBuilder::new("branches")
                .display_name("B")
                .steps(json!([
                {"id": "left", "action": "delay", "with": {"ms": 60000}},
                {"id": "right", "action": "delay", "with": {"ms": 60000}},
                {"id": "join", "action": "transform", "needs": ["left", "right"],
                 "with": {"value": 1}}])),
            json!({}),
        )
        .await;
    step_running(&e.ns, &name, "left").await;
    step_running(&e.ns, &name, "right").await;
    crate::support::request_cancel(&e.ns, &name).await;
    let asked = std::time::Instant::now();
    let run = finished_run(&e.ns, &name, Duration::from_secs(5)).await;
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Cancelled);
    for id in ["left", "right", "join"] {
        assert_eq!(record(&run, id).status, StepPhase::Cancelled, "{id}");
    }
}

/// `GET /echo?n=…&ms=…` answers `{"n": …}` after `ms` milliseconds; the counter holds
/// the most requests it had in flight at once.
async fn slow_echo() -> (String, Arc<AtomicUsize>) {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (now, peak) = (in_flight.clone(), most.clone());
    let app = axum::Router::new().route(
        "/echo",
        axum::routing::get(
            move |q: axum::extract::Query<std::collections::HashMap<String, String>>| {
                let (now, peak) = (now.clone(), peak.clone());
                async move {
                    let open = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(open, Ordering::SeqCst);
                    let ms: u64 = q.get("ms").and_then(|m| m.parse().ok()).unwrap_or(0);
                    // Pacing: a slow endpoint, so that calls overlap and the peak says
                    // how many ran at once.
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    let n: u64 = q.get("n").and_then(|n| n.parse().ok()).unwrap_or(9999);
                    axum::Json(json!({"n": n}))
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, most)
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn for_each_runs_fifty_items_eight_at_a_time_with_outputs_in_input_order() {
    let e = engine("graph-foreach").await;
    let (base, most) = slow_echo().await;
    // Later elements answer sooner than earlier ones: completion order is not input order.
    let items: Vec<Value> = (0..50)
        .map(|n| json!({"n": n, "ms": 100 + (49 - n) * 4}))
        .collect();
    let name = e.start(WorkflowBuilder::new("fan").display_name("Fan").parallelism(4).steps(json!([
                {"id": "list", "action": "transform", "with": {"value": "{{ trigger.payload.items }}"}},
                {"id": "each", "action": "http.request", "needs": ["list"],
                 "forEach": "{{ steps.list.output }}", "forEachConcurrency": 8,
                 "with": {"url": format!("{base}/echo?n={{{{ item.n }}}}&ms={{{{ item.ms }}}}&i={{{{ index }}}}")}},
                {"id": "none", "action": "transform", "forEach": "{{ trigger.payload.empty }}",
                 "with": {"value": "{{ item }}"}},
                {"id": "count", "action": "transform", "needs": ["each", "none"],
                 "with": {"value": {"first": "{{ steps.each.output.0.body.n }}",
                                    "last": "{{ steps.each.output.49.body.n }}",
                                    "none": "{{ steps.none.output }}"}}}])), json!({"items": items, "empty": []}))
        .await;
    let run = finished_run(&e.ns, &name, Duration::from_secs(60)).await;
    let status = run.status.as_ref().unwrap();
    assert_eq!(status.phase, RunPhase::Succeeded, "{:?}", status.error);
    let each = record(&run, "each");
    let outputs = each.output.as_ref().unwrap().as_array().unwrap();
    let order: Vec<u64> = outputs
        .iter()
        .map(|o| o["body"]["n"].as_u64().unwrap())
        .collect();
    assert_eq!(order, (0..50).collect::<Vec<u64>>());
    assert_eq!(each.items, Some(50));
    assert_eq!(each.iterations.len(), 50);
    assert!(
        each.iterations
            .iter()
            .enumerate()
            .all(|(i, it)| it.index as usize == i && it.status == StepPhase::Succeeded)
    );
    let recorded = peak(
        each.iterations
            .iter()
            .map(|it| (it.started_at.unwrap(), it.finished_at.unwrap()))
            .collect(),
    );
    assert!(recorded <= 8, "the records show {recorded} at once");
    let served = most.load(Ordering::SeqCst);
    // Never more than 8; and they did overlap (8 on an idle machine; fewer only means
    // the later requests started slowly, never that the bound failed).
    assert!(
        (4..=8).contains(&served),
        "the server had {served} requests in flight at most"
    );
    assert_eq!(
        record(&run, "count").output,
        Some(json!({"first": 0, "last": 49, "none": []}))
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn for_each_over_something_else_than_an_array_or_too_long_fails_the_step() {
    let e = engine("graph-foreach-bad").await;
    let name = e
        .start(
            WorkflowBuilder::new("notarray")
                .display_name("N")
                .steps(json!([
                {"id": "each", "action": "transform", "forEach": "{{ trigger.payload.items }}",
                 "with": {"value": "{{ item }}"}}])),
            json!({"items": {"a": 1}}),
        )
        .await;
    let run = finished_run(&e.ns, &name, Duration::from_secs(15)).await;
    assert_eq!(
        run.status.as_ref().unwrap().error.as_deref(),
        Some(
            "step each (transform) failed: forEach must render to a JSON array; it rendered to an object"
        )
    );
    // A trigger sender's 1,001 elements: the step fails at once, no iteration runs.
    let items: Vec<u32> = (0..1001).collect();
    let name = e
        .start(
            WorkflowBuilder::new("toomany")
                .display_name("T")
                .steps(json!([
                {"id": "each", "action": "transform", "forEach": "{{ trigger.payload.items }}",
                 "with": {"value": "{{ item }}"}}])),
            json!({ "items": items }),
        )
        .await;
    let run = finished_run(&e.ns, &name, Duration::from_secs(15)).await;
    let status = run.status.as_ref().unwrap();
    assert_eq!(
        status.error.as_deref(),
        Some("step each (transform) failed: forEach rendered 1001 elements; the limit is 1000")
    );
    assert!(status.steps[0].iterations.is_empty(), "no iteration ran");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn the_api_refuses_a_cycle_and_an_unknown_need_on_their_fields() {
    let api = TestApi::start("graph-api").await;
    let key = api.admin_key.clone();
    let id = api.create_workflow("Graph").await;
    let path = format!("/v1/workflows/{id}");
    let patch = |steps: Value| api.send("PATCH", &key, &path, Some(json!({"steps": steps})));

    let found = refused(
        patch(json!([
            {"id": "a", "action": "fail", "needs": ["c"]},
            {"id": "b", "action": "fail", "needs": ["a"]},
            {"id": "c", "action": "fail", "needs": ["b"]}]))
        .await,
    )
    .await;
    assert_eq!(
        found,
        [(
            "steps[1].needs[0]".to_string(),
            "the needs form a cycle: a needs c, c needs b, b needs a".to_string()
        )]
    );
    let found = refused(
        patch(json!([
            {"id": "a", "action": "fail"},
            {"id": "b", "action": "fail", "needs": ["a", "ghost"]}]))
        .await,
    )
    .await;
    assert_eq!(
        found,
        [(
            "steps[1].needs[1]".to_string(),
            r#"needs step "ghost", which this workflow does not have"#.to_string()
        )]
    );
    let res = api
        .send("PATCH", &key, &path, Some(json!({"parallelism": 0})))
        .await;
    assert_eq!(refused(res).await[0].0, "parallelism");

    // A sound graph is accepted and shown back.
    api.patch_workflow(
        &key,
        &id,
        json!({"parallelism": 3, "steps": [
            {"id": "a", "action": "transform", "with": {"value": [1, 2]}},
            {"id": "b", "action": "transform", "needs": ["a"],
             "for_each": "{{ steps.a.output }}", "for_each_concurrency": 2,
             "with": {"value": "{{ item }}"}}]}),
    )
    .await;
    let view: Value = api.get(&key, &path).await.json().await.unwrap();
    assert_eq!(view["parallelism"], 3);
    assert_eq!(view["steps"][1]["needs"], json!(["a"]));
    assert_eq!(view["steps"][1]["for_each"], "{{ steps.a.output }}");
    assert_eq!(view["steps"][1]["for_each_concurrency"], 2);
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_cyclic_workflow_applied_with_kubectl_is_not_ready() {
    let ns = TestNamespace::new("graph-kubectl").await;
    let (_operator, port) = Process::operator(&ns, &[]);
    ready(port).await;
    let cyclic = WorkflowBuilder::new("cyclic").active().steps(json!([
        {"id": "a", "action": "transform", "needs": ["b"], "with": {"value": 1}},
        {"id": "b", "action": "transform", "needs": ["a"], "with": {"value": 2}},
    ]));
    let out = ns.kubectl_apply(&cyclic.manifest());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (status, reason, message) = ready_condition(&ns, "cyclic").await;
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "InvalidSpec")
    );
    assert!(
        message.contains("steps[1].needs[0]: the needs form a cycle: a needs b, b needs a"),
        "{message}"
    );
    // The fan-out example is a sound graph.
    let example =
        std::fs::read_to_string(crate::support::repo_root().join("examples/fan-out.yaml")).unwrap();
    let out = ns.kubectl_apply(&example);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (status, reason, message) = ready_condition(&ns, "invoice-reminders").await;
    assert_eq!(status, ConditionStatus::True, "{reason}: {message}");
}
