//! Operating runs in bulk as an attacker would: a backfill over a million ticks and a
//! bulk call matching more runs than one call acts on are bounded and answer clearly,
//! and a bulk call never acts on another account's runs.

use std::time::{Duration, Instant};

use flowline_core::crd::Run;
use futures::StreamExt;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

use crate::builders::{WorkflowBuilder, step};
use crate::support::{TestApi, assert_error};

/// A backfill of a schedule ticking every minute, over two years (about a million
/// ticks): refused at once, naming the bound, and not one run created.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_backfill_over_a_million_ticks_is_refused_at_once() {
    let api = TestApi::start("hostile-backfill").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(
            &WorkflowBuilder::new("Every minute")
                .trigger(json!({"type": "schedule", "cron": "* * * * *"}))
                .step(step::delay("d", 1)),
        )
        .await;
    let to = jiff::Timestamp::now();
    let from = to - jiff::SignedDuration::from_hours(2 * 365 * 24);
    let asked = Instant::now();
    let res = api
        .send(
            "POST",
            &key,
            &format!("/v1/workflows/{wf}/backfill"),
            Some(json!({"from": from.to_string(), "to": to.to_string()})),
        )
        .await;
    let error = assert_error(res, 400, "validation_error").await;
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("1000 ticks"),
        "{error}"
    );
    let runs = api
        .ns
        .api::<Run>()
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(runs.items.is_empty(), "a refused backfill created runs");
}

/// 1,001 unfinished runs match a bulk cancel's filter: one call acts on 1,000 (the
/// newest) and says it was truncated; the next acts on the last one. Another
/// account's run with the same tag is never touched.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_bulk_call_matching_more_than_its_bound_acts_on_the_bound_and_says_so() {
    let api = TestApi::start("hostile-bulk").await;
    let other = TestApi::start("hostile-bulk-other").await;
    let wf = api
        .workflow(&WorkflowBuilder::new("Many").step(step::delay("d", 1)))
        .await;
    let theirs_wf = other
        .workflow(&WorkflowBuilder::new("Theirs").step(step::delay("d", 1)))
        .await;
    let theirs = other
        .start_run(
            &other.admin_key,
            &theirs_wf,
            Some(json!({"tags": {"batch": "x"}})),
        )
        .await;
    // Runs created straight in the cluster, with no controller: they stay unfinished.
    let runs = api.ns.api::<Run>();
    let created = futures::stream::iter(0..1001)
        .map(|i| {
            let runs = runs.clone();
            let run: Run = serde_json::from_value(json!({
                "apiVersion": "flowline.io/v1", "kind": "Run",
                "metadata": {"name": format!("many-{i:04}"),
                             "labels": {"tags.flowline.io/batch": "x", "flowline.io/workflow": wf}},
                "spec": {"workflowRef": wf}
            }))
            .unwrap();
            async move { runs.create(&PostParams::default(), &run).await.is_ok() }
        })
        .buffer_unordered(32)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await;
    assert_eq!(created, 1001);
    crate::support::eventually(
        "the API to list every run",
        Duration::from_secs(60),
        || async {
            let mut listed = 0;
            let mut cursor = String::new();
            loop {
                let page: Value = api
                    .get(
                        &api.admin_key,
                        &format!("/v1/runs?tag=batch:x&limit=100&cursor={cursor}"),
                    )
                    .await
                    .json()
                    .await
                    .ok()?;
                listed += page["data"].as_array()?.len();
                match page["next_cursor"].as_str() {
                    Some(next) => cursor = next.to_string(),
                    None => break,
                }
            }
            (listed == 1001).then_some(())
        },
    )
    .await;
    assert_eq!(
        cancel_batch(&api).await,
        json!({"matched": 1000, "truncated": true})
    );
    let requested = runs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|r| r.spec.cancel)
        .count();
    assert_eq!(requested, 1000);
    assert_eq!(
        cancel_batch(&api).await,
        json!({"matched": 1, "truncated": false})
    );
    let view: Value = other
        .get(&other.admin_key, &format!("/v1/runs/{theirs}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["cancel_requested"], false, "{view}");
}

/// A bulk cancel of the account's running runs tagged `batch:x`; its answer.
async fn cancel_batch(api: &TestApi) -> Value {
    let res = api
        .send(
            "POST",
            &api.admin_key,
            "/v1/runs/bulk-cancel",
            Some(json!({"filter": {"tag": ["batch:x"], "status": "running"}})),
        )
        .await;
    assert_eq!(res.status(), 202);
    res.json::<Value>().await.unwrap()
}
