//! Hostile events: an account that subscribes more workflows to one event than a
//! fan-out may start, a filter made as slow as the language allows over the largest
//! payload, and bodies over the size and depth limits. Each is bounded or refused, and
//! the fan-out still completes.

use std::time::Duration;

use futures::StreamExt;
use kube::api::PostParams;
use serde_json::json;

use crate::builders::WorkflowBuilder;
use crate::events::{event_object, fanned_out, post_event, subscriber};
use crate::support::{Process, TestApi, assert_error, ready};
use flowline_core::crd::Workflow;
use flowline_core::fanout::MAX_WORKFLOWS_PER_EVENT;

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_fan_out_is_bounded_and_a_hostile_filter_cannot_stall_it() {
    let api = TestApi::start("events-hostile").await;
    let key = api.admin_key.clone();
    let (_operator, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;

    // More subscribers than one event may start, written straight to the cluster (as
    // kubectl would). Their filter is false for this event: the bound is what is tested,
    // not 1,000 runs on a test machine.
    let workflows = api.ns.api::<Workflow>();
    let flood = MAX_WORKFLOWS_PER_EVENT + 5;
    futures::stream::iter(0..flood)
        .map(|i| {
            let workflows = workflows.clone();
            async move {
                let wf = WorkflowBuilder::new(format!("flood-{i:05}"))
                    .trigger(json!({"type": "event", "event": "flood",
                                    "filter": "event.payload.go == true"}))
                    .active()
                    .object();
                workflows.create(&PostParams::default(), &wf).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let (status, body) = post_event(
        &api,
        &key,
        json!({"name": "flood", "payload": {"go": false}}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let event = fanned_out(&api, &id, Duration::from_secs(120)).await;
    assert_eq!(event["runs"], json!([]));
    let status = event_object(&api, &id).await.status.unwrap();
    assert!(status.truncated);
    assert_eq!(status.observed_workflows as usize, MAX_WORKFLOWS_PER_EVENT);

    // The slowest filter the language allows: the longest expression, comparing the
    // largest payload of many small members with itself again and again. Its
    // evaluation stops at the budget: that workflow gets no run (the event says why),
    // the others their runs.
    let filter = "event.payload.blob == event.payload.blob && ".repeat(22) + "true";
    assert!(filter.len() <= 1000);
    let slow = api
        .workflow(&subscriber("slow", "heavy", Some(&filter), "active"))
        .await;
    let cheap = api
        .workflow(&subscriber(
            "cheap",
            "heavy",
            Some("event.payload.n == 1"),
            "active",
        ))
        .await;
    let blob: serde_json::Map<String, serde_json::Value> = (0..40_000)
        .map(|i| (format!("k{i:05}"), json!(i)))
        .collect();
    let (status, body) = post_event(
        &api,
        &key,
        json!({"name": "heavy", "payload": {"blob": blob, "n": 1}}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().unwrap();
    let event = fanned_out(&api, id, Duration::from_secs(60)).await;
    assert_eq!(
        event["runs"].as_array().unwrap().len(),
        1,
        "{}",
        event["runs"]
    );
    assert_eq!(api.run_ids(&cheap, "").await.len(), 1);
    assert!(api.run_ids(&slow, "").await.is_empty());
    // The reason is kept where administrators look: the object's status.
    let problems = event_object(&api, id).await.status.unwrap().problems;
    assert!(
        problems
            .iter()
            .any(|p| p.contains("compares too much data")),
        "{problems:?}"
    );

    // Bodies over the limits are refused before anything is stored.
    let res = api
        .http
        .post(api.url("/v1/events"))
        .bearer_auth(&key)
        .header("content-type", "application/json")
        .body(format!(
            "{{\"name\":\"x\",\"payload\":{{\"b\":\"{}\"}}}}",
            "x".repeat(1 << 20)
        ))
        .send()
        .await
        .unwrap();
    assert_error(res, 413, "payload_too_large").await;
    let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
    let res = api
        .http
        .post(api.url("/v1/events"))
        .bearer_auth(&key)
        .header("content-type", "application/json")
        .body(format!("{{\"name\":\"x\",\"payload\":{{\"d\":{deep}}}}}"))
        .send()
        .await
        .unwrap();
    assert_error(res, 400, "validation_error").await;
}
