//! The run engine (inline executor) against the real control plane: a controller
//! per test, watching only the test's namespace.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use flowline_core::crd::{EventKind, Run, RunPhase, StepPhase};
use kube::api::PostParams;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::builders::{RunBuilder, WorkflowBuilder};
use crate::support::{TestNamespace, loopback_client};

struct Engine {
    ns: TestNamespace,
    stop: CancellationToken,
    telemetry: flowline_telemetry::engine_metrics::EngineTelemetry,
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn engine(prefix: &str) -> Engine {
    engine_with(prefix, Default::default()).await
}

async fn engine_with(prefix: &str, jobs: flowline_engine::job::JobSettings) -> Engine {
    let ns = TestNamespace::new(prefix).await;
    let (stop, telemetry) = crate::support::spawn_run_controller(&ns, loopback_client(), jobs);
    Engine {
        ns,
        stop,
        telemetry,
    }
}

impl Engine {
    async fn finished(&self, name: &str, within: Duration) -> Run {
        crate::support::finished_run(&self.ns, name, within).await
    }
}

/// A local HTTP server: `/orders` returns JSON, `/ship` echoes what it got and
/// checks the token header, `/flaky` fails twice then succeeds, `/boom` always fails.
async fn receiver() -> (String, Arc<AtomicU32>) {
    let flaky = Arc::new(AtomicU32::new(0));
    let counter = flaky.clone();
    let app = axum::Router::new()
        .route(
            "/orders",
            axum::routing::get(|| async {
                axum::Json(json!({"orders": [{"id": 7, "total": 12.5}]}))
            }),
        )
        .route(
            "/ship",
            axum::routing::post(|headers: HeaderMap, body: axum::Json<Value>| async move {
                let token = headers
                    .get("x-token")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                if token != "s3cret" {
                    return (
                        StatusCode::UNAUTHORIZED,
                        axum::Json(json!({"error": "bad token"})),
                    );
                }
                let key = headers
                    .get("idempotency-key")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                (
                    StatusCode::OK,
                    axum::Json(json!({"shipped": body.0, "idempotency_key": key})),
                )
            }),
        )
        .route(
            "/flaky",
            axum::routing::get(move || {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n < 2 {
                        StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        StatusCode::OK
                    }
                }
            }),
        )
        .route(
            "/boom",
            axum::routing::get(|| async { StatusCode::INTERNAL_SERVER_ERROR }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, flaky)
}

fn step<'a>(run: &'a Run, id: &str) -> &'a flowline_core::crd::StepRecord {
    run.status
        .as_ref()
        .unwrap()
        .steps
        .iter()
        .find(|s| s.step_id == id)
        .unwrap()
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn http_steps_pass_outputs_and_secrets_along() {
    let e = engine("eng-http").await;
    let (base, _) = receiver().await;
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "shop-api", "labels": {"flowline.io/workflow-access": "true"}},
        "stringData": {"token": "s3cret"}
    }))
    .unwrap();
    e.ns.api::<k8s_openapi::api::core::v1::Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let wf = e.ns.create_workflow(&WorkflowBuilder::new("chain").display_name("Chain").steps(json!([
            {"id": "fetch", "action": "http.request", "with": {"url": format!("{base}/orders")}},
            {"id": "first", "action": "transform", "with": {"value": "{{ steps.fetch.output.body.orders.0 }}"}},
            {"id": "ship", "action": "http.request", "with": {
                "method": "POST", "url": format!("{base}/ship"),
                "headers": {"x-token": "{{ secrets.shop-api.token }}"},
                "body": {"order": "{{ steps.first.output.id }}", "customer": "{{ trigger.payload.customer }}", "run": "{{ run.id }}"}}},
            {"id": "never", "action": "fail", "when": "steps.first.output.total > 100"}
        ])))
        .await;
    let name =
        e.ns.create_run(
            &RunBuilder::of(&wf)
                .name("chain-1")
                .payload(json!({"customer": "ada"})),
        )
        .await;
    let run = e.finished(&name, Duration::from_secs(20)).await;
    let status = run.status.as_ref().unwrap();
    assert_eq!(status.phase, RunPhase::Succeeded, "{:?}", status.error);
    assert_eq!(
        step(&run, "first").output,
        Some(json!({"id": 7, "total": 12.5})),
        "a whole-value template keeps its type"
    );
    assert_eq!(
        step(&run, "ship").output.as_ref().unwrap()["body"]["shipped"],
        json!({"order": 7, "customer": "ada", "run": "chain-1"})
    );
    let key = &step(&run, "ship").output.as_ref().unwrap()["body"]["idempotency_key"];
    assert!(
        key.as_str().is_some_and(|k| k.starts_with("flowline-")),
        "the receiver got an Idempotency-Key: {key}"
    );
    assert_eq!(step(&run, "never").status, StepPhase::Skipped);
    // The input as it ran, for people: rendered, the secret shown as redacted.
    let input = step(&run, "ship")
        .input
        .clone()
        .expect("the step's rendered input");
    assert_eq!(
        input["body"],
        json!({"order": 7, "customer": "ada", "run": "chain-1"})
    );
    assert_eq!(input["headers"], json!({"x-token": "[redacted]"}));
    assert!(!input.to_string().contains("s3cret"), "{input}");
    assert!(!step(&run, "ship").input_truncated);
    assert_eq!(
        step(&run, "never").input,
        None,
        "a skipped step did not start"
    );
    assert!(status.duration_ms.is_some() && status.finished_at.is_some());
    assert!(step(&run, "fetch").attempts == 1 && step(&run, "fetch").duration_ms.is_some());
    let kinds: Vec<EventKind> = status.pending_events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [EventKind::RunStarted, EventKind::RunSucceeded],
        "recorded for delivery"
    );
    assert_eq!(status.pending_events[1].data["workflow_name"], "Chain");
    let succeeded =
        e.telemetry
            .runs_finished
            .get_or_create(&flowline_telemetry::engine_metrics::StatusLabel {
                status: "succeeded",
            });
    // Counted when the execution reports its run, just after the final status landed
    // (which is what the test saw first).
    crate::support::eventually(
        "runs_finished{status=succeeded} to count the run",
        std::time::Duration::from_secs(10),
        || async { (succeeded.get() >= 1).then_some(()) },
    )
    .await;
    assert_eq!(succeeded.get(), 1, "runs_finished{{status=succeeded}}");
    // A succeeded run records no Kubernetes Event (runner::kubernetes_event); a failed
    // one's `RunFailed` is checked in hostile::status and hostile::secrets.
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn retries_then_success_and_exhausted_retries_fail_with_the_exact_error() {
    let e = engine("eng-retry").await;
    let (base, flaky) = receiver().await;
    let retry = json!({"maxAttempts": 3, "backoffMs": 20, "backoffFactor": 2.0});
    let ok = e.ns.create_workflow(&WorkflowBuilder::new("flaky").display_name("F").steps(json!([
        {"id": "call", "action": "http.request", "with": {"url": format!("{base}/flaky")}, "retry": retry}]))).await;
    let run = e
        .finished(
            &e.ns
                .create_run(&RunBuilder::of(&ok).name("flaky-1").payload(json!({})))
                .await,
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Succeeded);
    assert_eq!(step(&run, "call").attempts, 3);
    assert_eq!(flaky.load(Ordering::SeqCst), 3);

    let bad = e.ns.create_workflow(&WorkflowBuilder::new("boom").display_name("B").steps(json!([
        {"id": "call", "action": "http.request", "with": {"url": format!("{base}/boom")}, "retry": retry},
        {"id": "after", "action": "transform", "with": {"value": 1}}]))).await;
    let run = e
        .finished(
            &e.ns
                .create_run(&RunBuilder::of(&bad).name("boom-1").payload(json!({})))
                .await,
            Duration::from_secs(20),
        )
        .await;
    let status = run.status.as_ref().unwrap();
    assert_eq!(status.phase, RunPhase::Failed);
    assert_eq!(
        status.error.as_deref(),
        Some(format!("step call (http.request) failed: {base}/boom answered HTTP 500").as_str())
    );
    assert_eq!(step(&run, "call").attempts, 3);
    assert_eq!(
        step(&run, "after").status,
        StepPhase::Pending,
        "steps not reached stay pending"
    );
    let failed = status
        .pending_events
        .iter()
        .find(|e| e.kind == EventKind::RunFailed)
        .unwrap();
    assert_eq!(
        failed.data["error"].as_str(),
        status.error.as_deref(),
        "run.failed names the step, action and reason"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_slow_attempt_times_out_and_a_missing_path_fails_naming_it() {
    let e = engine("eng-timeout").await;
    let slow =
        e.ns.create_workflow(
            &WorkflowBuilder::new("slow").display_name("S").steps(json!([
        {"id": "wait", "action": "delay", "with": {"ms": 10000}, "timeoutMs": 100}])),
        )
        .await;
    let run = e
        .finished(
            &e.ns
                .create_run(&RunBuilder::of(&slow).name("slow-1").payload(json!({})))
                .await,
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(
        run.status.as_ref().unwrap().error.as_deref(),
        Some("step wait (delay) failed: attempt timed out after 100 ms")
    );
    let missing =
        e.ns.create_workflow(
            &WorkflowBuilder::new("missing")
                .display_name("M")
                .steps(json!([
        {"id": "t", "action": "transform", "with": {"value": "{{ trigger.payload.nope }}"}}])),
        )
        .await;
    let run = e
        .finished(
            &e.ns
                .create_run(
                    &RunBuilder::of(&missing)
                        .name("missing-1")
                        .payload(json!({})),
                )
                .await,
            Duration::from_secs(20),
        )
        .await;
    let error = run.status.as_ref().unwrap().error.clone().unwrap();
    assert!(error.contains("trigger.payload.nope"), "{error}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn cancel_stops_an_inline_step_within_a_second() {
    let e = engine("eng-cancel").await;
    let wf =
        e.ns.create_workflow(
            &WorkflowBuilder::new("long").display_name("L").steps(json!([
        {"id": "quick", "action": "transform", "with": {"value": 1}},
        {"id": "wait", "action": "delay", "with": {"ms": 60000}},
        {"id": "later", "action": "transform", "with": {"value": 2}}])),
        )
        .await;
    let name =
        e.ns.create_run(&RunBuilder::of(&wf).name("long-1").payload(json!({})))
            .await;
    crate::support::step_running(&e.ns, &name, "wait").await;
    crate::support::request_cancel(&e.ns, &name).await;
    let asked = std::time::Instant::now();
    let run = e.finished(&name, Duration::from_secs(5)).await;
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "took {:?}",
        asked.elapsed()
    );
    assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Cancelled);
    assert_eq!(
        step(&run, "quick").status,
        StepPhase::Succeeded,
        "completed steps stay"
    );
    assert_eq!(step(&run, "wait").status, StepPhase::Cancelled);
    assert_eq!(step(&run, "later").status, StepPhase::Cancelled);
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_run_created_with_kubectl_on_a_paused_workflow_fails_at_once() {
    let e = engine("eng-paused").await;
    let wf =
        e.ns.create_workflow(
            &WorkflowBuilder::new("held")
                .display_name("H")
                .state("paused")
                .steps(json!([
        {"id": "a", "action": "transform", "with": {"value": 1}}])),
        )
        .await;
    let out =
        e.ns.kubectl_apply(&RunBuilder::of(&wf).name("by-hand").manifest());
    assert!(out.status.success());
    let run = e.finished("by-hand", Duration::from_secs(20)).await;
    let status = run.status.as_ref().unwrap();
    assert_eq!(status.phase, RunPhase::Failed);
    assert_eq!(
        status.error.as_deref(),
        Some("workflow held is paused; runs cannot start")
    );
}

/// Job settings whose pods kwok completes with `exit_code` and `message`.
fn kwok_jobs(exit_code: &str, message: &str) -> flowline_engine::job::JobSettings {
    flowline_engine::job::JobSettings {
        step_image: "flowline:test".into(),
        pod_annotations: [
            (
                "flowline.io/fake-exit-code".to_string(),
                exit_code.to_string(),
            ),
            (
                "flowline.io/fake-termination-message".to_string(),
                message.to_string(),
            ),
        ]
        .into(),
        ..Default::default()
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_job_executor_run_completes_through_the_scheduler_and_kwok() {
    let e = engine_with("eng-job", kwok_jobs("0", r#"{"from": "kwok", "n": 1}"#)).await;
    let wf = e.ns.create_workflow(&WorkflowBuilder::new("in-jobs").display_name("In jobs").executor("job").steps(json!([
            {"id": "first", "action": "transform", "with": {"value": 1}},
            {"id": "second", "action": "transform", "with": {"value": "{{ steps.first.output.n }}"}}
        ])))
        .await;
    let run = e
        .finished(
            &e.ns
                .create_run(&RunBuilder::of(&wf).name("jobs-1").payload(json!({})))
                .await,
            Duration::from_secs(60),
        )
        .await;
    let status = run.status.as_ref().unwrap();
    assert_eq!(status.phase, RunPhase::Succeeded, "{:?}", status.error);
    assert_eq!(
        step(&run, "first").output,
        Some(json!({"from": "kwok", "n": 1})),
        "read from the termination message"
    );
    let jobs =
        e.ns.api::<k8s_openapi::api::batch::v1::Job>()
            .list(&Default::default())
            .await
            .unwrap()
            .items;
    assert_eq!(jobs.len(), 2, "one Job per step attempt");
    for job in &jobs {
        assert_eq!(
            job.metadata.owner_references.as_ref().unwrap()[0].name,
            "jobs-1",
            "owned by the Run"
        );
        assert_eq!(
            job.metadata.labels.as_ref().unwrap()["flowline.io/run"],
            "jobs-1"
        );
        let container = &job
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0];
        assert_eq!(container.args.as_deref(), Some(&["step".to_string()][..]));
    }
    let pods =
        e.ns.api::<k8s_openapi::api::core::v1::Pod>()
            .list(&Default::default())
            .await
            .unwrap()
            .items;
    assert!(
        pods.iter()
            .all(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some("kwok-node-0"))
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_failed_step_job_fails_the_step_with_its_message() {
    let e = engine_with("eng-jobfail", kwok_jobs("3", "image pull said no")).await;
    let wf = e.ns.create_workflow(&WorkflowBuilder::new("boxed").display_name("Boxed").steps(json!([
            {"id": "box", "action": "container", "with": {"image": "busybox", "command": ["false"]}}
        ])))
        .await;
    let run = e
        .finished(
            &e.ns
                .create_run(&RunBuilder::of(&wf).name("box-1").payload(json!({})))
                .await,
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(
        run.status.as_ref().unwrap().error.as_deref(),
        Some("step box (container) failed: the container exited with code 3: image pull said no")
    );
    let job =
        e.ns.api::<k8s_openapi::api::batch::v1::Job>()
            .list(&Default::default())
            .await
            .unwrap()
            .items;
    let container = &job[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some("busybox"),
        "container steps run the user's image"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn cancel_deletes_the_running_step_job() {
    let mut jobs = kwok_jobs("0", "{}");
    jobs.pod_annotations
        .insert("flowline.io/fake-hang".into(), "true".into());
    let e = engine_with("eng-jobcancel", jobs).await;
    let wf =
        e.ns.create_workflow(
            &WorkflowBuilder::new("held")
                .display_name("Held")
                .executor("job")
                .steps(json!([
                    {"id": "hang", "action": "transform", "with": {"value": 1}},
                    {"id": "later", "action": "transform", "with": {"value": 2}}
                ])),
        )
        .await;
    let name =
        e.ns.create_run(&RunBuilder::of(&wf).name("held-1").payload(json!({})))
            .await;
    let job_api = e.ns.api::<k8s_openapi::api::batch::v1::Job>();
    crate::support::eventually(
        "the step's Job to be running",
        Duration::from_secs(30),
        || async {
            let jobs = job_api.list(&Default::default()).await.ok()?.items;
            jobs.iter()
                .any(|j| j.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0)
                .then_some(())
        },
    )
    .await;
    crate::support::step_running(&e.ns, &name, "hang").await;
    crate::support::request_cancel(&e.ns, &name).await;
    let run = e.finished(&name, Duration::from_secs(10)).await;
    assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Cancelled);
    assert_eq!(step(&run, "hang").status, StepPhase::Cancelled);
    assert_eq!(step(&run, "later").status, StepPhase::Cancelled);
    crate::support::no_jobs_left(&e.ns).await;
}

/// A graph under the job executor: independent branches get their Jobs at the same
/// time (both are active at once while kwok holds their pods), and a cancel deletes
/// every Job of the run and cancels both branches and the step that needs them.
#[tokio::test]
#[ignore = "needs cluster"]
async fn graph_branches_run_their_jobs_at_once_and_a_cancel_deletes_them_all() {
    let mut jobs = kwok_jobs("0", "{}");
    jobs.pod_annotations
        .insert("flowline.io/fake-hang".into(), "true".into());
    let e = engine_with("eng-jobgraph", jobs).await;
    let wf = e.ns.create_workflow(&WorkflowBuilder::new("branches").display_name("Branches").executor("job").steps(json!([
                {"id": "left", "action": "transform", "with": {"value": 1}},
                {"id": "right", "action": "transform", "with": {"value": 2}},
                {"id": "join", "action": "transform", "needs": ["left", "right"], "with": {"value": 3}}
            ])))
        .await;
    let name =
        e.ns.create_run(&RunBuilder::of(&wf).name("branches-1").payload(json!({})))
            .await;
    let job_api = e.ns.api::<k8s_openapi::api::batch::v1::Job>();
    crate::support::eventually(
        "both branches' Jobs to be active at once",
        Duration::from_secs(60),
        || async {
            let jobs = job_api.list(&Default::default()).await.ok()?.items;
            let active = jobs
                .iter()
                .filter(|j| j.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0)
                .count();
            (active == 2).then_some(())
        },
    )
    .await;
    crate::support::step_running(&e.ns, &name, "left").await;
    crate::support::step_running(&e.ns, &name, "right").await;
    crate::support::request_cancel(&e.ns, &name).await;
    let run = e.finished(&name, Duration::from_secs(30)).await;
    assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Cancelled);
    for id in ["left", "right", "join"] {
        assert_eq!(step(&run, id).status, StepPhase::Cancelled, "{id}");
    }
    crate::support::no_jobs_left(&e.ns).await;
}
