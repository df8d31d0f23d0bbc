//! `POST /v1/runs/{id}/retry`: a new run of a finished run, with its payload and
//! workflow version, keeping the results before the first failure or starting over.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::builders::WorkflowBuilder;
use crate::support::{TestApi, assert_error, loopback_client, spawn_run_controller};

/// A local receiver: `/count` answers how often it was called; `/gate` fails its first
/// call and succeeds afterwards. Returns its base URL and the two counters.
async fn receiver() -> (String, Arc<AtomicU32>, Arc<AtomicU32>) {
    let counted = Arc::new(AtomicU32::new(0));
    let gated = Arc::new(AtomicU32::new(0));
    let (c, g) = (counted.clone(), gated.clone());
    let app = axum::Router::new()
        .route(
            "/count",
            axum::routing::get(move || {
                let n = c.fetch_add(1, Ordering::SeqCst) + 1;
                async move { axum::Json(json!({"n": n})) }
            }),
        )
        .route(
            "/gate",
            axum::routing::get(move || {
                let n = g.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n == 0 {
                        StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        StatusCode::OK
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, counted, gated)
}

async fn retry(api: &TestApi, key: &str, run: &str, body: Option<Value>) -> reqwest::Response {
    api.send("POST", key, &format!("/v1/runs/{run}/retry"), body)
        .await
}

/// The id of a retry that was accepted (201 with its Location).
async fn retried(api: &TestApi, run: &str, body: Option<Value>) -> String {
    let res = retry(api, &api.admin_key, run, body).await;
    assert_eq!(res.status(), 201);
    let location = res.headers()["location"].to_str().unwrap().to_string();
    let view: Value = res.json().await.unwrap();
    assert_eq!(view["retry_of"], run, "{view}");
    let id = view["id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("/v1/runs/{id}"));
    id
}

/// Waits until the API shows `run` as failed (its status was written by hand).
async fn shown_failed(api: &TestApi, run: &str) {
    crate::support::eventually(
        &format!("the API to show run {run} failed"),
        Duration::from_secs(10),
        || async {
            let res = api.get(&api.admin_key, &format!("/v1/runs/{run}")).await;
            let view: Value = res.json().await.ok()?;
            (view["status"] == "failed").then_some(())
        },
    )
    .await;
}

fn step<'a>(view: &'a Value, id: &str) -> &'a Value {
    view["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step_id"] == id)
        .unwrap_or_else(|| panic!("no step {id} in {view}"))
}

/// The second step fails on the first run because the receiver answers 500; the retry
/// keeps the first step's output (the receiver is not called again), runs the rest —
/// as the workflow was when the first run started, although it was edited since — and
/// succeeds. A retry from the start calls every step again.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_retry_keeps_the_steps_before_the_failure_and_runs_the_original_version() {
    let api = TestApi::start("retry").await;
    let key = api.admin_key.clone();
    let (stop, _) = spawn_run_controller(&api.ns, loopback_client(), Default::default());
    let _stop = stop.drop_guard();
    let (base, counted, gated) = receiver().await;
    let wf = api.workflow(&WorkflowBuilder::new("Retried").steps(json!([
            {"id": "fetch", "action": "http.request", "with": {"url": format!("{base}/count")}},
            {"id": "check", "action": "http.request", "with": {"url": format!("{base}/gate")}},
            {"id": "after", "action": "transform",
             "with": {"value": {"n": "{{ steps.fetch.output.body.n }}", "who": "{{ trigger.payload.who }}"}}}]))).await;
    let first = api
        .start_run(&key, &wf, Some(json!({"payload": {"who": "ada"}})))
        .await;
    let failed = api
        .finished_view(&key, &first, Duration::from_secs(60))
        .await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(step(&failed, "fetch")["status"], "succeeded");
    let version = failed["workflow_generation"].as_i64().unwrap();

    // An edit after the run: the retry does not see it.
    api.patch_workflow(
        &key,
        &wf,
        json!({"steps": [{"id": "other", "action": "fail", "with": {"message": "edited"}}]}),
    )
    .await;
    let second = retried(&api, &first, None).await;
    let view = api
        .finished_view(&key, &second, Duration::from_secs(60))
        .await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(view["workflow_generation"].as_i64(), Some(version));
    assert_eq!(view["payload"], json!({"who": "ada"}));
    let fetch = step(&view, "fetch");
    assert_eq!(fetch["status"], "succeeded");
    assert_eq!(fetch["reused"], true, "{fetch}");
    assert_eq!(fetch["attempts"], 0, "not executed in this run");
    assert_eq!(fetch["output"]["body"]["n"], 1);
    assert_eq!(step(&view, "check")["reused"], false);
    assert_eq!(
        step(&view, "after")["output"],
        json!({"n": 1, "who": "ada"})
    );
    assert_eq!(counted.load(Ordering::SeqCst), 1, "fetch ran once in all");
    assert_eq!(gated.load(Ordering::SeqCst), 2);
    let run = api
        .ns
        .api::<flowline_core::crd::Run>()
        .get(&second)
        .await
        .unwrap();
    assert_eq!(run.spec.retry_of.as_deref(), Some(first.as_str()));

    // From the start: every step runs again, nothing is kept.
    let third = retried(&api, &second, Some(json!({"from": "start"}))).await;
    let view = api
        .finished_view(&key, &third, Duration::from_secs(60))
        .await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert!(
        view["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["reused"] == false),
        "{view}"
    );
    assert_eq!(step(&view, "after")["output"]["n"], 2);
    assert_eq!(counted.load(Ordering::SeqCst), 2);
    assert_eq!(view["workflow_generation"].as_i64(), Some(version));
}

/// Only finished runs can be retried; unknown runs, bad bodies and keys without the
/// `execute` scope are refused.
#[tokio::test]
#[ignore = "needs cluster"]
async fn retries_that_cannot_start_are_refused() {
    let api = TestApi::start("retry-no").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(
            &WorkflowBuilder::new("Long")
                .steps(json!([{"id": "long", "action": "delay", "with": {"ms": 600_000}}])),
        )
        .await;
    // No controller runs here: the run stays running.
    let running = api.start_run(&key, &wf, None).await;
    crate::support::assert_error_saying(
        retry(&api, &key, &running, None).await,
        409,
        "run_not_finished",
        "running",
    )
    .await;
    assert_error(
        retry(&api, &key, "run-nosuchrun", None).await,
        404,
        "run_not_found",
    )
    .await;
    // Not even a valid object name (the fuzzer once got a 500 here): not found, and no
    // request reaches the API server.
    assert_error(
        retry(&api, &key, "Not_A%20Name%F1%BE%96%9C", None).await,
        404,
        "run_not_found",
    )
    .await;
    let body = assert_error(
        retry(&api, &key, &running, Some(json!({"from": "middle"}))).await,
        400,
        "validation_error",
    )
    .await;
    assert_eq!(body["error"]["details"][0]["field"], "from");
    let reader =
        crate::support::new_key(&api.ns, &[flowline_api::plumbing::auth::Scope::Read]).await;
    api.await_key(&reader).await;
    assert_error(
        retry(&api, &reader, &running, None).await,
        403,
        "insufficient_scope",
    )
    .await;
    // Finished, but its workflow is paused now: no retry starts.
    let runs = api.ns.api::<flowline_core::crd::Run>();
    runs.patch_status(
        &running,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"status": {"phase": "failed"}})),
    )
    .await
    .unwrap();
    shown_failed(&api, &running).await;
    api.patch_workflow(&key, &wf, json!({"state": "paused"}))
        .await;
    assert_error(
        retry(&api, &key, &running, None).await,
        409,
        "workflow_paused",
    )
    .await;
    assert_eq!(runs.list(&Default::default()).await.unwrap().items.len(), 1);
}

/// The kept outputs travel in the new Run's spec: a retry whose spec would pass the
/// 1 MiB limit with them is refused, saying so, and one from the start still fits.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_retry_too_large_to_keep_its_outputs_is_refused_clearly() {
    use kube::api::{Patch, PatchParams, PostParams};
    let api = TestApi::start("retry-size").await;
    let key = api.admin_key.clone();
    let wf_id = api
        .workflow(&WorkflowBuilder::new("Nearly full").steps(
            json!([{"id": "a", "action": "transform", "with": {"value": 1}},
                         {"id": "b", "action": "fail"}]),
        ))
        .await;
    let wf = api
        .ns
        .api::<flowline_core::crd::Workflow>()
        .get(&wf_id)
        .await
        .unwrap();
    // A run whose spec is 1000 bytes short of the limit (written as the API would).
    let sized = |n: usize| {
        flowline_core::crd::Run::of_workflow(
            &wf,
            "nearly-full",
            Default::default(),
            Some(json!({"p": "x".repeat(n)})),
            jiff::Timestamp::now(),
        )
    };
    let base = serde_json::to_vec(&sized(0).spec).unwrap().len();
    let run = sized(flowline_core::limits::MAX_RUN_SPEC_BYTES - 1000 - base);
    let runs = api.ns.api::<flowline_core::crd::Run>();
    runs.create(&PostParams::default(), &run).await.unwrap();
    runs.patch_status(
        "nearly-full",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "failed", "steps": [
            {"stepId": "a", "name": "a", "status": "succeeded", "output": "y".repeat(2000)},
            {"stepId": "b", "name": "b", "status": "failed", "error": "no"}]}})),
    )
    .await
    .unwrap();
    shown_failed(&api, "nearly-full").await;
    let body = assert_error(
        retry(&api, &key, "nearly-full", None).await,
        400,
        "validation_error",
    )
    .await;
    assert_eq!(body["error"]["details"][0]["field"], "from", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("at most 1 MiB"), "{message}");
    assert!(
        message.contains(r#"retry with "from": "start""#),
        "{message}"
    );
    assert_eq!(runs.list(&Default::default()).await.unwrap().items.len(), 1);
    retried(&api, "nearly-full", Some(json!({"from": "start"}))).await;
}
