//! `Idempotency-Key` on `POST /v1/workflows/{id}/runs`: a repeated request answers the
//! run the first one started, also when the requests race.

use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

use crate::support::{TestApi, assert_error};

const KEY: &str = "Idempotency-Key";

async fn post_keyed(
    api: &TestApi,
    workflow: &str,
    key: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut req = api
        .http
        .post(api.url(&format!("/v1/workflows/{workflow}/runs")))
        .bearer_auth(&api.admin_key)
        .header(KEY, key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    req.send().await.unwrap()
}

/// (status, body) of a keyed start.
async fn start_keyed(
    api: &TestApi,
    workflow: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let res = post_keyed(api, workflow, key, body).await;
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

/// (status, run id) of a keyed start without a body.
async fn keyed_id(api: &TestApi, workflow: &str, key: &str) -> (u16, String) {
    let (status, body) = start_keyed(api, workflow, key, None).await;
    (status, body["id"].as_str().unwrap_or_default().to_string())
}

async fn runs_of(api: &TestApi, workflow: &str) -> Vec<flowline_core::crd::Run> {
    let selector = format!("flowline.io/workflow={workflow}");
    api.ns
        .api::<flowline_core::crd::Run>()
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
}

/// Waits until `GET /v1/runs/{run}` answers `status` (the cache has seen a change).
async fn run_answers(api: &TestApi, run: &str, status: u16) {
    crate::support::eventually(
        &format!("GET of run {run} to answer {status}"),
        std::time::Duration::from_secs(10),
        || async {
            let res = api.get(&api.admin_key, &format!("/v1/runs/{run}")).await;
            (res.status() == status).then_some(())
        },
    )
    .await;
}

/// Waits until the API's cache no longer lists `run` among `wf_id`'s runs: a GET of
/// the run answers 404 as soon as the API server has deleted it, while the cache that
/// keyed starts walk may hold it a moment longer.
async fn unlisted(api: &TestApi, wf_id: &str, run: &str) {
    crate::support::eventually(
        &format!("run {run} to leave the API's cache"),
        std::time::Duration::from_secs(10),
        || async {
            let res = api
                .get(&api.admin_key, &format!("/v1/workflows/{wf_id}/runs"))
                .await;
            let page: Value = res.json().await.ok()?;
            let listed = (page["data"].as_array()?.iter()).any(|r| r["id"] == run);
            (!listed).then_some(())
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn the_same_key_returns_the_first_run_with_200() {
    let api = TestApi::start("idem-same").await;
    let wf = api.create_workflow("Keyed").await;
    let body = json!({"payload": {"order": 42, "items": [1, 2]}});
    let (status, first) = start_keyed(&api, &wf, "order-42", Some(body.clone())).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["idempotency_key"], "order-42");
    let id = first["id"].as_str().unwrap().to_string();

    // The same body written differently is the same request.
    let same = json!({"payload": {"items": [1, 2], "order": 42}});
    let res = post_keyed(&api, &wf, "order-42", Some(same)).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["location"], format!("/v1/runs/{id}").as_str());
    let again: Value = res.json().await.unwrap();
    let shown: Value = api
        .get(&api.admin_key, &format!("/v1/runs/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again, shown, "the same JSON as GET");
    assert_eq!(again["id"], id.as_str());
    assert_eq!(runs_of(&api, &wf).await.len(), 1);
    // The key is recorded on the Run for kubectl users.
    let run = api
        .ns
        .api::<flowline_core::crd::Run>()
        .get(&id)
        .await
        .unwrap();
    assert_eq!(run.spec.idempotency_key.as_deref(), Some("order-42"));

    // Without a key every request starts a run.
    api.start_run(&api.admin_key, &wf, Some(body.clone())).await;
    api.start_run(&api.admin_key, &wf, Some(body)).await;
    assert_eq!(runs_of(&api, &wf).await.len(), 3);
}

/// Ten requests sent at once, each from its own task on a multi-threaded runtime and
/// released together by a barrier, so they reach the server while none has finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs cluster"]
async fn ten_concurrent_requests_with_one_key_start_one_run() {
    let api = TestApi::start("idem-race").await;
    let wf = api.create_workflow("Raced").await;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(10));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let request = api
                .http
                .post(api.url(&format!("/v1/workflows/{wf}/runs")))
                .bearer_auth(&api.admin_key)
                .header(KEY, "race-key")
                .json(&json!({"payload": {"n": 1}}));
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let res = request.send().await.unwrap();
                let status = res.status().as_u16();
                (status, res.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let ids: std::collections::BTreeSet<&str> = answers
        .iter()
        .map(|(_, b)| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "every answer names the same run: {answers:?}");
    let mut statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
    statuses.sort();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 200, 200, 200, 200, 201]);
    let runs = runs_of(&api, &wf).await;
    assert_eq!(runs.len(), 1, "exactly one run");
    assert_eq!(
        Some(runs[0].metadata.name.as_deref().unwrap()),
        ids.first().copied()
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_key_reused_with_another_body_is_refused() {
    let api = TestApi::start("idem-reuse").await;
    let wf = api.create_workflow("Reused").await;
    let (status, first) = start_keyed(&api, &wf, "k-1", Some(json!({"payload": {"a": 1}}))).await;
    assert_eq!(status, 201, "{first}");
    let res = post_keyed(&api, &wf, "k-1", Some(json!({"payload": {"a": 2}}))).await;
    crate::support::assert_error_saying(
        res,
        409,
        "idempotency_key_reused",
        "different request body",
    )
    .await;
    // No body is the empty payload: also a different request here.
    assert_error(
        post_keyed(&api, &wf, "k-1", None).await,
        409,
        "idempotency_key_reused",
    )
    .await;
    assert_eq!(runs_of(&api, &wf).await.len(), 1);
    // ... and the same as an explicitly empty payload.
    let (status, _) = start_keyed(&api, &wf, "k-2", None).await;
    assert_eq!(status, 201);
    let (status, _) = start_keyed(&api, &wf, "k-2", Some(json!({"payload": {}}))).await;
    assert_eq!(status, 200);
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_bad_key_is_a_validation_error_naming_the_header() {
    let api = TestApi::start("idem-bad").await;
    let wf = api.create_workflow("Bad keys").await;
    let long = "k".repeat(256);
    for bad in [
        reqwest::header::HeaderValue::from_static(""),
        reqwest::header::HeaderValue::from_str(&long).unwrap(),
        reqwest::header::HeaderValue::from_bytes("caf\u{e9}".as_bytes()).unwrap(),
    ] {
        let res = api
            .http
            .post(api.url(&format!("/v1/workflows/{wf}/runs")))
            .bearer_auth(&api.admin_key)
            .header(KEY, bad)
            .send()
            .await
            .unwrap();
        let body = assert_error(res, 400, "validation_error").await;
        assert_eq!(body["error"]["details"][0]["field"], KEY, "{body}");
    }
    assert!(runs_of(&api, &wf).await.is_empty());
    // 255 characters are fine.
    let (status, _) = start_keyed(&api, &wf, &"k".repeat(255), None).await;
    assert_eq!(status, 201);
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn the_same_key_on_two_workflows_starts_two_runs() {
    let api = TestApi::start("idem-two").await;
    let a = api.create_workflow("A").await;
    let b = api.create_workflow("B").await;
    let (sa, ra) = start_keyed(&api, &a, "shared", None).await;
    let (sb, rb) = start_keyed(&api, &b, "shared", None).await;
    assert_eq!((sa, sb), (201, 201));
    assert_ne!(ra["id"], rb["id"]);
    assert_eq!(rb["workflow_id"], b.as_str());
}

/// A key's run older than 24 h no longer answers for it: the key starts a new run under
/// the next name of its chain, which then answers for it. A key's run deleted (as by
/// retention) no longer answers either. A Run applied with kubectl carrying the key
/// answers like one the API created.
#[tokio::test]
#[ignore = "needs cluster"]
async fn expired_deleted_and_kubectl_holders() {
    let api = TestApi::start("idem-expire").await;
    let wf_id = api.create_workflow("Expiring").await;
    let runs = api.ns.api::<flowline_core::crd::Run>();
    let wf = api
        .ns
        .api::<flowline_core::crd::Workflow>()
        .get(&wf_id)
        .await
        .unwrap();
    let head = flowline_api::plumbing::idempotency::head_name(&wf_id, "old");
    let day_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(25);
    let mut old =
        flowline_core::crd::Run::of_workflow(&wf, &head, Default::default(), None, day_ago);
    old.spec.idempotency_key = Some("old".into());
    let old = runs.create(&PostParams::default(), &old).await.unwrap();
    let (status, fresh) = start_keyed(&api, &wf_id, "old", None).await;
    assert_eq!(status, 201, "{fresh}");
    let fresh_id = fresh["id"].as_str().unwrap().to_string();
    assert_eq!(
        fresh_id,
        flowline_api::plumbing::idempotency::next_name(
            &wf_id,
            "old",
            old.metadata.uid.as_deref().unwrap()
        )
    );
    assert_eq!(keyed_id(&api, &wf_id, "old").await, (200, fresh_id.clone()));
    // Retention deletes the expired head: the live run still answers.
    runs.delete(&head, &Default::default()).await.unwrap();
    run_answers(&api, &head, 404).await;
    unlisted(&api, &wf_id, &head).await;
    assert_eq!(keyed_id(&api, &wf_id, "old").await, (200, fresh_id.clone()));
    // Once the key's run is deleted, the key starts a new run.
    runs.delete(&fresh_id, &Default::default()).await.unwrap();
    run_answers(&api, &fresh_id, 404).await;
    unlisted(&api, &wf_id, &fresh_id).await;
    let (status, renewed) = start_keyed(&api, &wf_id, "old", None).await;
    assert_eq!(status, 201, "{renewed}");
    assert_eq!(renewed["id"], head.as_str());

    // kubectl: a Run of any name with the key.
    let applied = crate::builders::RunBuilder::of(&wf_id)
        .name("by-hand")
        .idempotency_key("gitops-1")
        .payload(json!({"x": 1}));
    let out = api.ns.kubectl_apply(&applied.manifest());
    assert!(
        out.status.success(),
        "{}",
        crate::support::text(&out.stderr)
    );
    run_answers(&api, "by-hand", 200).await;
    let (status, found) =
        start_keyed(&api, &wf_id, "gitops-1", Some(json!({"payload": {"x": 1}}))).await;
    assert_eq!((status, found["id"].as_str()), (200, Some("by-hand")));
    let res = post_keyed(&api, &wf_id, "gitops-1", None).await;
    assert_error(res, 409, "idempotency_key_reused").await;
    // The key names the request that created the run: it cannot be changed.
    let changed = runs
        .patch(
            "by-hand",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"idempotencyKey": "other"}})),
        )
        .await;
    match changed {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422);
            assert!(
                s.message.contains("idempotencyKey is immutable"),
                "{}",
                s.message
            );
        }
        other => panic!("expected the change to be refused, got {other:?}"),
    }
}
