//! Operating many runs: tags set at creation (and as labels for kubectl), the
//! account-wide run list with its filters, bulk cancel and bulk retry by filter, and a
//! retry on the workflow's current version.

use std::time::Duration;

use flowline_core::crd::Run;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

use crate::builders::WorkflowBuilder;
use crate::support::{TestApi, eventually, loopback_client, spawn_run_controller};

const FINISH: Duration = Duration::from_secs(60);

/// The ids of the runs a list answers (one page of up to 100), sorted.
async fn listed(api: &TestApi, path: &str) -> Vec<String> {
    let res = api.get(&api.admin_key, path).await;
    assert_eq!(res.status(), 200, "{path}");
    let page: Value = res.json().await.unwrap();
    let mut ids: Vec<String> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

fn sorted(ids: &[&String]) -> Vec<String> {
    let mut ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    ids.sort();
    ids
}

async fn bulk(api: &TestApi, action: &str, body: Value) -> Value {
    let res = api
        .send(
            "POST",
            &api.admin_key,
            &format!("/v1/runs/{action}"),
            Some(body),
        )
        .await;
    assert_eq!(res.status(), 202);
    res.json().await.unwrap()
}

/// Waits until every run of `ids` has the API status `status`.
async fn all_shown(api: &TestApi, ids: &[&String], status: &str) {
    for id in ids {
        eventually(&format!("run {id} to be {status}"), FINISH, || async {
            let view: Value = api
                .get(&api.admin_key, &format!("/v1/runs/{id}"))
                .await
                .json()
                .await
                .ok()?;
            (view["status"] == status).then_some(())
        })
        .await;
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn tags_are_set_at_creation_filter_every_run_list_and_are_labels() {
    let api = TestApi::start("tags").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("Tagged").steps(json!([
            {"id": "t", "action": "transform", "with": {"value": 1}}])))
        .await;
    let other = api
        .workflow(&WorkflowBuilder::new("Other").steps(json!([
            {"id": "t", "action": "transform", "with": {"value": 2}}])))
        .await;
    let gold = api
        .start_run(
            &key,
            &wf,
            Some(json!({"tags": {"customer": "acme", "tier": "gold"}})),
        )
        .await;
    let plain = api
        .start_run(&key, &wf, Some(json!({"tags": {"customer": "acme"}})))
        .await;
    let elsewhere = api
        .start_run(&key, &other, Some(json!({"tags": {"customer": "acme"}})))
        .await;
    let globex = api
        .start_run(&key, &wf, Some(json!({"tags": {"customer": "globex"}})))
        .await;
    // A Run applied with kubectl takes its tags from its labels.
    let applied: Run = serde_json::from_value(json!({
        "apiVersion": "flowline.io/v1", "kind": "Run",
        "metadata": {"name": "applied-1", "labels": {"tags.flowline.io/customer": "acme"}},
        "spec": {"workflowRef": wf}
    }))
    .unwrap();
    api.ns
        .api::<Run>()
        .create(&PostParams::default(), &applied)
        .await
        .unwrap();
    let applied = "applied-1".to_string();

    let view: Value = api
        .get(&key, &format!("/v1/runs/{gold}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        view["tags"],
        json!({"customer": "acme", "tier": "gold"}),
        "{view}"
    );
    let acme = sorted(&[&gold, &plain, &elsewhere, &applied]);
    eventually("the applied run in the API's list", FINISH, || async {
        (listed(&api, "/v1/runs?tag=customer:acme").await == acme).then_some(())
    })
    .await;
    assert_eq!(
        listed(&api, "/v1/runs?tag=customer:acme&tag=tier:gold").await,
        std::slice::from_ref(&gold)
    );
    assert_eq!(
        listed(
            &api,
            &format!("/v1/runs?tag=customer:acme&workflow_id={other}")
        )
        .await,
        std::slice::from_ref(&elsewhere)
    );
    assert_eq!(
        listed(&api, &format!("/v1/workflows/{wf}/runs?tag=customer:acme")).await,
        sorted(&[&gold, &plain, &applied])
    );
    assert_eq!(
        listed(&api, "/v1/runs?tag=customer:globex").await,
        std::slice::from_ref(&globex)
    );
    assert!(
        listed(&api, "/v1/runs?created_after=2999-01-01T00:00:00Z")
            .await
            .is_empty()
    );
    assert_eq!(listed(&api, "/v1/runs?limit=100").await.len(), 5);

    // The tags are labels: kubectl selects by them.
    let labelled: Vec<String> = api
        .ns
        .api::<Run>()
        .list(&ListParams::default().labels("tags.flowline.io/tier=gold"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|r| r.metadata.name)
        .collect();
    assert_eq!(labelled, [gold]);
}

/// Runs waiting on an approval are cancelled by a filter that names their tag and
/// status, and only those; they are then retried by filter, and the retries carry
/// the tags.
#[tokio::test]
#[ignore = "needs cluster"]
async fn bulk_cancel_and_retry_by_filter_act_on_the_matching_runs_only() {
    let api = TestApi::start("bulk").await;
    let key = api.admin_key.clone();
    let (stop, _) = spawn_run_controller(&api.ns, loopback_client(), Default::default());
    let _stop = stop.drop_guard();
    let wf = api
        .workflow(&WorkflowBuilder::new("Gated").steps(json!([
            {"id": "gate", "action": "approval"}])))
        .await;
    let mut batch_a = Vec::new();
    for _ in 0..4 {
        batch_a.push(
            api.start_run(&key, &wf, Some(json!({"tags": {"batch": "a"}})))
                .await,
        );
    }
    let batch_b = api
        .start_run(&key, &wf, Some(json!({"tags": {"batch": "b"}})))
        .await;
    let a_refs: Vec<&String> = batch_a.iter().collect();

    let answer = bulk(
        &api,
        "bulk-cancel",
        json!({"filter": {"tag": ["batch:a"], "status": "running", "workflow_id": wf}}),
    )
    .await;
    assert_eq!(answer, json!({"matched": 4, "truncated": false}));
    all_shown(&api, &a_refs, "cancelled").await;
    let b: Value = api
        .get(&key, &format!("/v1/runs/{batch_b}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(b["status"], "running", "{b}");
    // Nothing left to cancel in batch a: a second call acts on none.
    let again = bulk(
        &api,
        "bulk-cancel",
        json!({"filter": {"tag": ["batch:a"], "status": "running"}}),
    )
    .await;
    assert_eq!(again["matched"], 0);

    let answer = bulk(
        &api,
        "bulk-retry",
        json!({"filter": {"tag": ["batch:a"], "status": "cancelled"}, "from": "start"}),
    )
    .await;
    assert_eq!(answer, json!({"matched": 4, "truncated": false}));
    let res = api
        .get(&key, "/v1/runs?tag=batch:a&status=running&limit=100")
        .await;
    let page: Value = res.json().await.unwrap();
    let mut retried_from: Vec<String> = Vec::new();
    for item in page["data"].as_array().unwrap() {
        let view: Value = api
            .get(&key, &format!("/v1/runs/{}", item["id"].as_str().unwrap()))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(view["tags"], json!({"batch": "a"}), "{view}");
        retried_from.push(view["retry_of"].as_str().unwrap().to_string());
    }
    retried_from.sort();
    assert_eq!(retried_from, sorted(&a_refs));

    // By ids: the one of batch b, and an id the account does not have.
    let answer = bulk(&api, "bulk-cancel", json!({"ids": [batch_b, "run-nope"]})).await;
    assert_eq!(answer, json!({"matched": 1, "truncated": false}));
    all_shown(&api, &[&batch_b], "cancelled").await;
}

/// A run failed at a step later fixed: a retry on the pinned version fails again, a
/// retry on the current version keeps the unchanged step's result and succeeds.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_retry_on_the_current_version_runs_the_fixed_workflow() {
    let api = TestApi::start("retry-current").await;
    let key = api.admin_key.clone();
    let (stop, _) = spawn_run_controller(&api.ns, loopback_client(), Default::default());
    let _stop = stop.drop_guard();
    let wf = api
        .workflow(&WorkflowBuilder::new("Fixed later").steps(json!([
            {"id": "first", "action": "transform", "with": {"value": {"n": 1}}},
            {"id": "broken", "action": "fail", "with": {"message": "not yet"}}])))
        .await;
    let run = api.start_run(&key, &wf, None).await;
    let failed = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    api.patch_workflow(
        &key,
        &wf,
        json!({"steps": [
            {"id": "first", "action": "transform", "with": {"value": {"n": 1}}},
            {"id": "broken", "action": "transform", "with": {"value": "{{ steps.first.output.n }}"}}]}),
    )
    .await;

    let retry = |body: Value| {
        let api = &api;
        let key = key.clone();
        let run = run.clone();
        async move {
            let res = api
                .send("POST", &key, &format!("/v1/runs/{run}/retry"), Some(body))
                .await;
            assert_eq!(res.status(), 201);
            let view: Value = res.json().await.unwrap();
            view["id"].as_str().unwrap().to_string()
        }
    };
    let pinned = retry(json!({})).await;
    let pinned = api.finished_view(&key, &pinned, FINISH).await;
    assert_eq!(pinned["status"], "failed", "{pinned}");
    assert_eq!(pinned["workflow_generation"], failed["workflow_generation"]);

    let current = retry(json!({"version": "current"})).await;
    let current = api.finished_view(&key, &current, FINISH).await;
    assert_eq!(current["status"], "succeeded", "{current}");
    assert_ne!(
        current["workflow_generation"],
        failed["workflow_generation"]
    );
    assert_eq!(current["steps"][0]["reused"], true, "{current}");
    assert_eq!(current["steps"][1]["output"], json!(1), "{current}");

    // The same through a bulk retry by id.
    let answer = bulk(
        &api,
        "bulk-retry",
        json!({"ids": [run], "version": "current"}),
    )
    .await;
    assert_eq!(answer["matched"], 1);
}
