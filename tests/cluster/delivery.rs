//! Webhook delivery end to end: a real operator process delivers to a real HTTPS
//! receiver on loopback (its CA handed over with `--ca-bundle`, loopback allowed with
//! `--allow-cidr`), with the retry clock compressed by `--delivery-time-scale`.
//! Signatures are checked with code independent of Flowline's and with the
//! `standardwebhooks` package from PyPI run as a process.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::builders::{WorkflowBuilder, step};
use crate::support::{
    Process, TestApi, assert_error, eventually, http_client, new_key, ready, text,
};
use flowline_api::plumbing::auth::Scope;

#[path = "../support/receiver.rs"]
pub(crate) mod receiver;
use receiver::{Received, Receiver, TestPki};

const ALL_KINDS: [&str; 6] = [
    "run.started",
    "run.succeeded",
    "run.failed",
    "run.cancelled",
    "workflow.activated",
    "workflow.paused",
];

struct Setup {
    api: TestApi,
    receiver: Receiver,
    operator: Process,
    /// The operator's HTTP port (/metrics).
    port: u16,
}

/// The operator flags of a test: trust the receiver's CA, allow loopback, and compress
/// the retry schedule a thousandfold (5 s → 5 ms, 5 min → 0.3 s, 30 min → 1.8 s).
pub(crate) fn flags(pki: &TestPki) -> Vec<String> {
    vec![
        "--ca-bundle".into(),
        pki.ca_file.display().to_string(),
        "--allow-cidr".into(),
        "127.0.0.0/8,::1/128".into(),
        "--delivery-time-scale".into(),
        "0.001".into(),
    ]
}

async fn start_operator(api: &TestApi, flags: &[String]) -> Process {
    start_operator_on(api, flags).await.0
}

async fn start_operator_on(api: &TestApi, flags: &[String]) -> (Process, u16) {
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (process, port) = Process::operator(&api.ns, &args);
    ready(port).await;
    (process, port)
}

async fn setup(prefix: &str) -> Setup {
    let api = TestApi::start(prefix).await;
    let receiver = Receiver::start().await;
    let (operator, port) = start_operator_on(&api, &flags(&receiver.pki)).await;
    Setup {
        api,
        receiver,
        operator,
        port,
    }
}

/// Creates a webhook through the API; returns its id and secret.
pub(crate) async fn webhook(
    api: &TestApi,
    url: &str,
    events: &[&str],
    workflow: Option<&str>,
) -> (String, String) {
    let res = api
        .send(
            "POST",
            &api.admin_key,
            "/v1/webhooks",
            Some(json!({"url": url, "events": events, "workflow_id": workflow})),
        )
        .await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let body: Value = res.json().await.unwrap();
    (
        body["id"].as_str().unwrap().to_string(),
        body["secret"].as_str().unwrap().to_string(),
    )
}

/// Creates `wf` through the API as a draft and activates it once the controller has
/// seen the draft, so workflow.activated says where it came from (a workflow first seen
/// active has no previous state); returns its id.
async fn activated(api: &TestApi, wf: WorkflowBuilder) -> String {
    let res = api
        .send(
            "POST",
            &api.admin_key,
            "/v1/workflows",
            Some(wf.create_json()),
        )
        .await;
    let id = crate::support::created_id(res).await;
    let workflows = api.ns.api::<flowline_core::crd::Workflow>();
    eventually(
        "the controller to observe the draft",
        Duration::from_secs(30),
        || async {
            let wf = workflows.get(&id).await.ok()?;
            wf.status?.observed_state.map(|_| ())
        },
    )
    .await;
    patch(api, &id, wf.active().patch_json().unwrap()).await;
    id
}

async fn set_state(api: &TestApi, id: &str, state: &str) {
    patch(api, id, json!({"state": state})).await;
}

async fn patch(api: &TestApi, id: &str, body: Value) {
    api.patch_workflow(&api.admin_key, id, body).await;
}

async fn start_run(api: &TestApi, workflow: &str) -> String {
    api.start_run(&api.admin_key, workflow, Some(json!({"payload": {}})))
        .await
}

/// A workflow whose one step succeeds.
fn succeeding(name: &str) -> WorkflowBuilder {
    WorkflowBuilder::new(name).step(step::transform("a", json!(1)))
}

/// Waits until a request on `path` matches `pred`; returns it.
async fn received(
    receiver: &Receiver,
    what: &str,
    within: Duration,
    pred: impl Fn(&Received) -> bool,
) -> Received {
    eventually(what, within, || async {
        receiver.received().into_iter().find(|r| pred(r))
    })
    .await
}

fn is_event(r: &Received, kind: &str, field: &str, value: &str) -> bool {
    let body = r.json();
    body["event"] == kind && body["data"][field] == value
}

/// Checks the headers and both signatures with code independent of Flowline's
/// signing module. `secrets` newest first.
fn assert_signed(r: &Received, secrets: &[&str]) {
    let body = r.json();
    assert_eq!(r.header("content-type"), "application/json");
    assert!(
        r.header("user-agent").starts_with("flowline/"),
        "{}",
        r.header("user-agent")
    );
    assert_eq!(r.header("x-service-event"), body["event"].as_str().unwrap());
    assert_eq!(r.header("x-service-event-id"), body["id"].as_str().unwrap());
    assert_eq!(r.header("webhook-id"), body["id"].as_str().unwrap());
    assert!(body["id"].as_str().unwrap().starts_with("evt_"));
    assert!(
        r.header("x-service-delivery-attempt")
            .parse::<u32>()
            .unwrap()
            >= 1
    );
    let ts: i64 = r.header("webhook-timestamp").parse().unwrap();
    assert!((jiff::Timestamp::now().as_second() - ts).abs() < 300);

    let mut mac = Hmac::<Sha256>::new_from_slice(secrets[0].as_bytes()).unwrap();
    mac.update(&r.body);
    let seed = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(r.header("x-service-signature"), seed);

    let expected: Vec<String> = secrets
        .iter()
        .map(|secret| {
            let key = BASE64
                .decode(secret.strip_prefix("whsec_").unwrap())
                .unwrap();
            let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
            mac.update(format!("{}.{ts}.", r.header("webhook-id")).as_bytes());
            mac.update(&r.body);
            format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
        })
        .collect();
    assert_eq!(r.header("webhook-signature"), expected.join(" "));
}

/// Verifies deliveries with the `standardwebhooks` package (PyPI) in a Python
/// process; returns its verdict per delivery.
fn standard_webhooks_verdicts(items: &[(&str, &Received)]) -> Vec<String> {
    let input: Vec<Value> = items
        .iter()
        .map(|(secret, r)| {
            let headers: serde_json::Map<String, Value> = ["webhook-id", "webhook-timestamp", "webhook-signature"]
                .iter()
                .map(|h| (h.to_string(), json!(r.header(h))))
                .collect();
            json!({"secret": secret, "headers": headers, "body": String::from_utf8(r.body.to_vec()).unwrap()})
        })
        .collect();
    crate::support::python_lines("hack/verify-standard-webhooks.py", &json!(input))
}

async fn deliveries(api: &TestApi, hook: &str) -> Vec<Value> {
    let res = api
        .get(
            &api.admin_key,
            &format!("/v1/webhooks/{hook}/deliveries?limit=100"),
        )
        .await;
    assert_eq!(res.status(), 200);
    res.json::<Value>().await.unwrap()["data"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn every_event_kind_arrives_signed_with_its_data_and_filters_apply() {
    let s = setup("dlv-kinds").await;
    let api = &s.api;
    let (_all, secret) = webhook(api, &s.receiver.url("/all"), &ALL_KINDS, None).await;
    let ok = activated(api, succeeding("Succeeds")).await;
    // Subscribed to run.succeeded of one workflow only.
    let (_filtered, filtered_secret) = webhook(
        api,
        &s.receiver.url("/filtered"),
        &["run.succeeded"],
        Some(&ok),
    )
    .await;
    let failing = activated(
        api,
        WorkflowBuilder::new("Fails").step(step::fail("boom", "no")),
    )
    .await;
    let slow = activated(
        api,
        WorkflowBuilder::new("Slow").step(step::delay("wait", 60_000)),
    )
    .await;

    let ok_run = start_run(api, &ok).await;
    let failed_run = start_run(api, &failing).await;
    let slow_run = start_run(api, &slow).await;
    crate::support::step_running(&api.ns, &slow_run, "wait").await;
    let res = api
        .send(
            "POST",
            &api.admin_key,
            &format!("/v1/runs/{slow_run}/cancel"),
            None,
        )
        .await;
    assert_eq!(res.status(), 202);
    set_state(api, &failing, "paused").await;

    let wait = Duration::from_secs(30);
    let started = received(&s.receiver, "run.started", wait, |r| {
        is_event(r, "run.started", "run_id", &ok_run)
    })
    .await;
    let succeeded = received(&s.receiver, "run.succeeded", wait, |r| {
        is_event(r, "run.succeeded", "run_id", &ok_run)
    })
    .await;
    let failed = received(&s.receiver, "run.failed", wait, |r| {
        is_event(r, "run.failed", "run_id", &failed_run)
    })
    .await;
    let cancelled = received(&s.receiver, "run.cancelled", wait, |r| {
        is_event(r, "run.cancelled", "run_id", &slow_run)
    })
    .await;
    let activated = received(&s.receiver, "workflow.activated", wait, |r| {
        is_event(r, "workflow.activated", "workflow_id", &ok)
    })
    .await;
    let paused = received(&s.receiver, "workflow.paused", wait, |r| {
        is_event(r, "workflow.paused", "workflow_id", &failing)
    })
    .await;

    let data = |r: &Received| r.json()["data"].clone();
    let d = data(&started);
    assert_eq!(
        (d["workflow_id"].as_str(), d["workflow_name"].as_str()),
        (Some(ok.as_str()), Some("Succeeds"))
    );
    assert_eq!(d["trigger"], "manual");
    assert!(d["started_at"].as_str().unwrap().ends_with('Z'));
    let d = data(&succeeded);
    assert!(
        d["finished_at"].is_string() && d["duration_ms"].is_u64(),
        "{d}"
    );
    let d = data(&failed);
    let error = d["error"].as_str().unwrap();
    assert!(
        error.contains("boom") && error.contains("fail") && error.contains("no"),
        "{error}"
    );
    assert!(d["duration_ms"].is_u64());
    let d = data(&cancelled);
    assert!(
        d.get("error").is_none() && d["finished_at"].is_string(),
        "{d}"
    );
    let d = data(&activated);
    assert_eq!(
        (d["previous_state"].as_str(), d["state"].as_str()),
        (Some("draft"), Some("active"))
    );
    let d = data(&paused);
    assert_eq!(
        (d["previous_state"].as_str(), d["state"].as_str()),
        (Some("active"), Some("paused"))
    );

    // The catch-all webhook got everything above, so the filtered one has been offered
    // every event too (the worker offers an event to every webhook at once). Instead of
    // a pause for stragglers, a later marker: one more run of `ok`, whose run.succeeded
    // the filtered webhook must get; what it was wrongly offered before was queued
    // ahead of the marker in its FIFO lane. (Strong, not strict: its attempts run up
    // to 16 at once, so an earlier one could in theory still be in flight.)
    let marker_run = start_run(api, &ok).await;
    for path in ["/all", "/filtered"] {
        received(&s.receiver, &format!("the marker at {path}"), wait, |r| {
            r.path == path && is_event(r, "run.succeeded", "run_id", &marker_run)
        })
        .await;
    }
    let everything: Vec<Received> = s
        .receiver
        .received()
        .into_iter()
        .filter(|r| r.json()["data"]["run_id"] != marker_run.as_str())
        .collect();

    // Which request went to which webhook: the signature says (different secrets).
    let mut for_filtered = Vec::new();
    let mut for_all = Vec::new();
    for r in &everything {
        let mut mac = Hmac::<Sha256>::new_from_slice(filtered_secret.as_bytes()).unwrap();
        mac.update(&r.body);
        if r.header("x-service-signature")
            == format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        {
            for_filtered.push(r.clone());
        } else {
            assert_signed(r, &[&secret]);
            for_all.push(r.clone());
        }
    }
    assert_eq!(for_filtered.len(), 1, "only run.succeeded of {ok}");
    assert!(is_event(
        &for_filtered[0],
        "run.succeeded",
        "workflow_id",
        &ok
    ));
    assert_signed(&for_filtered[0], &[&filtered_secret]);
    let kinds: std::collections::BTreeSet<String> = for_all
        .iter()
        .map(|r| r.json()["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds.len(), 6, "{kinds:?}");

    let mut items: Vec<(&str, &Received)> = for_all.iter().map(|r| (secret.as_str(), r)).collect();
    items.push((filtered_secret.as_str(), &for_filtered[0]));
    let verdicts = standard_webhooks_verdicts(&items);
    assert_eq!(verdicts.len(), items.len());
    assert!(verdicts.iter().all(|v| v == "ok"), "{verdicts:?}");
    // And the library does reject a wrong secret (the check can fail).
    let wrong = standard_webhooks_verdicts(&[(filtered_secret.as_str(), &for_all[0])]);
    assert!(wrong[0].starts_with("invalid"), "{wrong:?}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn failures_are_retried_with_one_event_id_and_listed_as_deliveries() {
    let s = setup("dlv-retry").await;
    let api = &s.api;
    let (hook, secret) = webhook(api, &s.receiver.url("/"), &["run.succeeded"], None).await;
    let wf = activated(api, succeeding("Retry")).await;

    // 500, 500, 200: delivered on the third attempt.
    s.receiver.script(&[500, 500]);
    let run = start_run(api, &wf).await;
    let third = received(
        &s.receiver,
        "the third attempt",
        Duration::from_secs(30),
        |r| r.status_sent == 200 && is_event(r, "run.succeeded", "run_id", &run),
    )
    .await;
    let of_run: Vec<Received> = s
        .receiver
        .received()
        .into_iter()
        .filter(|r| is_event(r, "run.succeeded", "run_id", &run))
        .collect();
    let attempts: Vec<(&str, u16)> = of_run
        .iter()
        .map(|r| (r.header("x-service-delivery-attempt"), r.status_sent))
        .collect();
    assert_eq!(attempts, [("1", 500), ("2", 500), ("3", 200)]);
    let event_id = third.header("webhook-id").to_string();
    assert!(of_run.iter().all(|r| r.header("webhook-id") == event_id));
    for r in &of_run {
        assert_signed(r, &[&secret]);
    }

    // The deliveries API: newest first, with status codes, durations and times.
    let listed = eventually(
        "the attempts in the status",
        Duration::from_secs(10),
        || async {
            let list = deliveries(api, &hook).await;
            (list.len() >= 3).then_some(list)
        },
    )
    .await;
    let codes: Vec<u64> = listed
        .iter()
        .map(|d| d["status_code"].as_u64().unwrap())
        .collect();
    assert_eq!(codes, [200, 500, 500]);
    assert!(
        listed
            .iter()
            .all(|d| d["event_id"] == event_id.as_str() && d["event"] == "run.succeeded")
    );
    assert_eq!(listed[0]["attempt"], 3);
    assert!(listed[0]["duration_ms"].is_u64() && listed[0]["attempted_at"].is_string());
    assert!(listed[0]["error"].is_null());
    // Paging.
    let page: Value = api
        .get(
            &api.admin_key,
            &format!("/v1/webhooks/{hook}/deliveries?limit=1"),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    let cursor = page["next_cursor"].as_str().unwrap();
    let next: Value = api
        .get(
            &api.admin_key,
            &format!("/v1/webhooks/{hook}/deliveries?limit=1&cursor={cursor}"),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(next["data"][0]["id"], listed[1]["id"]);
    let hook_view: Value = api
        .get(&api.admin_key, &format!("/v1/webhooks/{hook}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(hook_view["enabled"], true);

    // Redelivery on request: one more attempt of the same event.
    let delivery = listed[0]["id"].as_str().unwrap();
    let reader = new_key(&api.ns, &[Scope::Read]).await;
    api.await_key(&reader).await;
    let path = format!("/v1/webhooks/{hook}/deliveries/{delivery}/retry");
    assert_error(
        api.send("POST", &reader, &path, None).await,
        403,
        "insufficient_scope",
    )
    .await;
    assert_eq!(
        api.get(&reader, &format!("/v1/webhooks/{hook}/deliveries"))
            .await
            .status(),
        200
    );
    let res = api.send("POST", &api.admin_key, &path, None).await;
    assert_eq!(res.status(), 202);
    let accepted: Value = res.json().await.unwrap();
    assert_eq!(
        (accepted["event_id"].as_str(), accepted["status"].as_str()),
        (Some(event_id.as_str()), Some("queued"))
    );
    received(
        &s.receiver,
        "the redelivery",
        Duration::from_secs(15),
        |r| r.header("webhook-id") == event_id && r.header("x-service-delivery-attempt") == "4",
    )
    .await;
    assert_error(
        api.send(
            "POST",
            &api.admin_key,
            &format!("/v1/webhooks/{hook}/deliveries/dlv_nope/retry"),
            None,
        )
        .await,
        404,
        "delivery_not_found",
    )
    .await;
    assert_error(
        api.send(
            "POST",
            &api.admin_key,
            "/v1/webhooks/wh-nope/deliveries/x/retry",
            None,
        )
        .await,
        404,
        "webhook_not_found",
    )
    .await;
    assert_error(
        api.get(&api.admin_key, "/v1/webhooks/wh-nope/deliveries")
            .await,
        404,
        "webhook_not_found",
    )
    .await;

    // Receiver down, then up: attempts fail, then one succeeds with a higher number.
    s.receiver.set_down(true);
    let second = start_run(api, &wf).await;
    eventually("two failed attempts", Duration::from_secs(30), || async {
        let list = deliveries(api, &hook).await;
        let failed = list
            .iter()
            .filter(|d| d["status_code"].is_null() && d["error"].is_string())
            .count();
        (failed >= 2).then_some(())
    })
    .await;
    s.receiver.set_down(false);
    let delivered = received(
        &s.receiver,
        "delivery after the receiver is back",
        Duration::from_secs(30),
        |r| is_event(r, "run.succeeded", "run_id", &second),
    )
    .await;
    assert!(
        delivered
            .header("x-service-delivery-attempt")
            .parse::<u32>()
            .unwrap()
            >= 3
    );
    let errors: Vec<String> = deliveries(api, &hook)
        .await
        .iter()
        .filter_map(|d| d["error"].as_str().map(str::to_string))
        .collect();
    assert!(!errors.is_empty(), "transport errors are listed");

    // Once the run is deleted its events are gone: a redelivery is refused.
    api.ns
        .api::<flowline_core::crd::Run>()
        .delete(&run, &Default::default())
        .await
        .unwrap();
    eventually(
        "redelivery of a deleted run's event to be refused",
        Duration::from_secs(15),
        || async {
            let res = api.send("POST", &api.admin_key, &path, None).await;
            (res.status() == 409).then_some(res)
        },
    )
    .await;
    assert_error(
        api.send("POST", &api.admin_key, &path, None).await,
        409,
        "event_expired",
    )
    .await;

    // The metrics count the attempts by outcome, their latency and the queue.
    let metrics = http_client()
        .get(format!("http://127.0.0.1:{}/metrics", s.port))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let count = |outcome: &str| -> f64 {
        metrics
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "flowline_webhook_deliveries_total{{outcome=\"{outcome}\"}}"
                ))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    };
    assert!(
        count("delivered") >= 3.0 && count("http_error") >= 2.0,
        "{metrics}"
    );
    assert!(count("transport_error") >= 2.0, "{metrics}");
    assert!(metrics.contains("flowline_webhook_delivery_duration_seconds_bucket"));
    assert!(metrics.contains("flowline_webhook_delivery_queue_depth"));
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_slow_endpoint_does_not_hold_up_the_others() {
    let s = setup("dlv-slow").await;
    let api = &s.api;
    let slow = Receiver::start_with(s.receiver.pki.clone()).await;
    // Longer than a loaded machine needs for the 40 runs, so the test says whether the
    // fast endpoint waited, not how fast the machine is.
    let slow_attempt = Duration::from_secs(30);
    slow.set_delay(slow_attempt);
    webhook(api, &slow.url("/"), &["run.succeeded"], None).await;
    webhook(api, &s.receiver.url("/"), &["run.succeeded"], None).await;
    let wf = activated(api, succeeding("Busy")).await;
    let started = std::time::Instant::now();
    for _ in 0..40 {
        start_run(api, &wf).await;
    }
    // All 40 reach the fast endpoint while the slow one has at most its 16 slots busy
    // (each attempt there takes 30 s).
    eventually(
        "40 deliveries to the fast endpoint",
        Duration::from_secs(60),
        || async { (s.receiver.count() >= 40).then_some(()) },
    )
    .await;
    let elapsed = started.elapsed();
    assert!(
        elapsed < slow_attempt,
        "the fast endpoint waited for the slow one: {elapsed:?}"
    );
    assert_eq!(slow.count(), 0, "no slow attempt has completed yet");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_410_disables_the_webhook() {
    let s = setup("dlv-gone").await;
    let api = &s.api;
    let (hook, _) = webhook(api, &s.receiver.url("/"), &["run.succeeded"], None).await;
    let wf = activated(api, succeeding("Gone")).await;
    s.receiver.script(&[410]);
    start_run(api, &wf).await;
    eventually(
        "the webhook to be disabled",
        Duration::from_secs(30),
        || async {
            let view: Value = api
                .get(&api.admin_key, &format!("/v1/webhooks/{hook}"))
                .await
                .json()
                .await
                .ok()?;
            (view["enabled"] == false).then_some(())
        },
    )
    .await;
    let hooks = api.ns.api::<flowline_core::crd::Webhook>();
    let status = hooks.get(&hook).await.unwrap().status.unwrap();
    assert_eq!(status.last_status_code, Some(410));
    assert!(status.disabled_reason.unwrap().contains("410"));
    // Nothing more is sent to it. Proven with a marker webhook on another path, known
    // to the worker (it has written the marker's status): the worker offers a run's
    // event to every webhook in one step, so once the marker has the next run's
    // run.succeeded, the disabled webhook was passed over for it.
    let (marker, _) = webhook(api, &s.receiver.url("/marker"), &["run.succeeded"], None).await;
    eventually(
        "the worker to know the marker webhook",
        Duration::from_secs(30),
        || async {
            let hook = hooks.get(&marker).await.ok()?;
            let observed = hook.status?.observed_generation;
            (observed.is_some() && observed == hook.metadata.generation).then_some(())
        },
    )
    .await;
    let run = start_run(api, &wf).await;
    received(
        &s.receiver,
        "run.succeeded at the marker",
        Duration::from_secs(30),
        |r| r.path == "/marker" && is_event(r, "run.succeeded", "run_id", &run),
    )
    .await;
    let to_disabled: Vec<Received> = s
        .receiver
        .received()
        .into_iter()
        .filter(|r| r.path == "/")
        .collect();
    assert_eq!(to_disabled.len(), 1, "only the attempt answered 410");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn an_event_survives_an_operator_killed_before_delivering_it() {
    let mut s = setup("dlv-crash").await;
    let api = &s.api;
    webhook(api, &s.receiver.url("/"), &["run.succeeded"], None).await;
    let wf = activated(api, succeeding("Crash")).await;
    s.receiver.set_down(true);
    let run = start_run(api, &wf).await;
    let finished = crate::support::finished_run(&api.ns, &run, Duration::from_secs(30)).await;
    let event_id = finished
        .status
        .unwrap()
        .pending_events
        .last()
        .unwrap()
        .id
        .clone();
    s.operator.kill();
    assert_eq!(s.receiver.count(), 0);
    s.receiver.set_down(false);
    let _restarted = start_operator(api, &flags(&s.receiver.pki)).await;
    let delivered = received(
        &s.receiver,
        "the delivery after the restart",
        Duration::from_secs(30),
        |r| is_event(r, "run.succeeded", "run_id", &run),
    )
    .await;
    assert_eq!(delivered.header("webhook-id"), event_id);
    assert_eq!(delivered.json()["id"], event_id.as_str());
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn the_destination_guard_refuses_loopback_metadata_and_plain_http() {
    let api = TestApi::start("dlv-ssrf").await;
    let pki = Arc::new(TestPki::new());
    let receiver = Receiver::start_with(pki.clone()).await;
    // Trusts the CA, but neither --allow-cidr nor --allow-http.
    let ca = pki.ca_file.display().to_string();
    let _operator = start_operator(&api, &["--ca-bundle".into(), ca]).await;
    let loopback = format!("https://127.0.0.1:{}/", receiver.addr.port());
    let (to_loopback, _) = webhook(&api, &loopback, &["workflow.activated"], None).await;
    let (to_metadata, _) = webhook(
        &api,
        "https://169.254.169.254/latest/meta-data",
        &["workflow.activated"],
        None,
    )
    .await;
    // http:// cannot even be created through the API without the flag; kubectl can.
    let plain = format!("http://127.0.0.1:{}/", receiver.addr.port());
    let hooks = api.ns.api::<flowline_core::crd::Webhook>();
    let manifest: flowline_core::crd::Webhook = serde_json::from_value(json!({
        "apiVersion": "flowline.io/v1", "kind": "Webhook",
        "metadata": {"name": "plain-http"},
        "spec": {"url": plain, "allowInsecureHttp": true, "events": ["workflow.activated"]}
    }))
    .unwrap();
    hooks.create(&Default::default(), &manifest).await.unwrap();
    activated(&api, succeeding("Guarded")).await;

    let first_error = |hook: String| {
        let api = &api;
        async move {
            eventually(
                &format!("a refused attempt for {hook}"),
                Duration::from_secs(30),
                || async {
                    deliveries(api, &hook)
                        .await
                        .first()
                        .and_then(|d| d["error"].as_str().map(str::to_string))
                },
            )
            .await
        }
    };
    let e = first_error(to_loopback).await;
    assert!(
        e.contains("127.0.0.1 is loopback") && e.contains("--allow-cidr"),
        "{e}"
    );
    let e = first_error(to_metadata).await;
    assert!(
        e.contains("169.254.169.254 is link-local") && e.contains("--allow-cidr"),
        "{e}"
    );
    let e = first_error("plain-http".into()).await;
    assert!(e.contains("--allow-http"), "{e}");
    // kubectl users get the generated signing Secret, owned by the webhook.
    let secret = api
        .ns
        .api::<k8s_openapi::api::core::v1::Secret>()
        .get("plain-http-signing")
        .await
        .unwrap();
    assert_eq!(
        secret.metadata.owner_references.unwrap()[0].name,
        "plain-http"
    );
    assert_eq!(receiver.count(), 0, "nothing reached the receiver");
}

/// A Webhook applied with kubectl signs with its Secret; rotated through the API, its
/// new secret is sealed into the Webhook (no Secret is read or written) and the
/// Secret's secret signs beside it for the grace period.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_kubectl_webhook_rotated_through_the_api_keeps_its_secret_signing_for_a_day() {
    let s = setup("dlv-rotate-applied").await;
    let api = &s.api;
    let old = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let applied = api.ns.kubectl_apply(&format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: applied-signing}}
type: flowline.io/webhook-secret
stringData: {{secret: "{old}"}}
---
apiVersion: flowline.io/v1
kind: Webhook
metadata: {{name: applied}}
spec:
  url: "{}"
  events: [run.succeeded]
  secretRef: {{name: applied-signing}}
"#,
        s.receiver.url("/")
    ));
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let res = eventually(
        "the API to rotate the applied webhook",
        Duration::from_secs(10),
        || async {
            let res = api
                .send(
                    "POST",
                    &api.admin_key,
                    "/v1/webhooks/applied/rotate-secret",
                    None,
                )
                .await;
            (res.status() != 404).then_some(res)
        },
    )
    .await;
    assert_eq!(res.status(), 200);
    let new = res.json::<Value>().await.unwrap()["secret"]
        .as_str()
        .unwrap()
        .to_string();
    let stored = api
        .ns
        .api::<k8s_openapi::api::core::v1::Secret>()
        .get("applied-signing")
        .await
        .unwrap();
    assert_eq!(
        stored.data.unwrap_or_default().keys().collect::<Vec<_>>(),
        ["secret"],
        "the Secret is left as it was"
    );
    a_run_is_signed_with_both(&s, "Rotate applied", &new, old).await;
}

/// A run of a new workflow `name`: its `run.succeeded` delivery carries two signatures,
/// `new`'s and `old`'s, and a receiver on either secret verifies it.
async fn a_run_is_signed_with_both(s: &Setup, name: &str, new: &str, old: &str) {
    let wf = activated(&s.api, succeeding(name)).await;
    let run = start_run(&s.api, &wf).await;
    let r = received(
        &s.receiver,
        "a delivery after rotation",
        Duration::from_secs(30),
        |r| is_event(r, "run.succeeded", "run_id", &run),
    )
    .await;
    assert_eq!(r.header("webhook-signature").matches("v1,").count(), 2);
    assert_signed(&r, &[new, old]);
    let verdicts = standard_webhooks_verdicts(&[(new, &r), (old, &r)]);
    assert_eq!(verdicts, ["ok", "ok"], "receivers on either secret verify");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_rotated_secret_signs_alongside_the_old_one_for_a_day() {
    let s = setup("dlv-rotate").await;
    let api = &s.api;
    let (hook, old) = webhook(api, &s.receiver.url("/"), &["run.succeeded"], None).await;
    let res = api
        .send(
            "POST",
            &api.admin_key,
            &format!("/v1/webhooks/{hook}/rotate-secret"),
            None,
        )
        .await;
    assert_eq!(res.status(), 200);
    let rotated: Value = res.json().await.unwrap();
    let new = rotated["secret"].as_str().unwrap().to_string();
    assert!(new.starts_with("whsec_") && new != old);
    assert_eq!(rotated["id"], hook.as_str());
    let expires: jiff::Timestamp = rotated["previous_secret_expires_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let in_a_day = expires.duration_since(jiff::Timestamp::now()).as_hours();
    assert!((23..=24).contains(&in_a_day), "{expires}");

    a_run_is_signed_with_both(&s, "Rotate", &new, &old).await;
    assert_error(
        api.send(
            "POST",
            &api.admin_key,
            "/v1/webhooks/wh-nope/rotate-secret",
            None,
        )
        .await,
        404,
        "webhook_not_found",
    )
    .await;
}

/// The events `runs` hold, once each has finished.
async fn events_of(api: &TestApi, runs: &[String]) -> Vec<flowline_core::crd::PendingEvent> {
    let mut events = Vec::new();
    for run in runs {
        let finished = crate::support::finished_run(&api.ns, run, Duration::from_secs(60)).await;
        events.extend(finished.status.unwrap().pending_events);
    }
    events
}

/// Waits until the webhook's status records every one of `events` as settled, the way
/// a restarted worker reads it.
async fn await_acknowledged(
    api: &TestApi,
    hook: &str,
    events: &[flowline_core::crd::PendingEvent],
) {
    use flowline_core::delivery::settled::{Acknowledgements, Recorded, created};
    let hooks = api.ns.api::<flowline_core::crd::Webhook>();
    eventually(
        "the webhook status to acknowledge every event",
        Duration::from_secs(30),
        || async {
            let hook = hooks.get(hook).await.ok()?;
            let acks = Acknowledgements::from_status(hook.status.as_ref(), created(&hook));
            events
                .iter()
                .all(|e| acks.recorded(&e.id, e.timestamp) == Recorded::Settled)
                .then_some(())
        },
    )
    .await;
}

/// Waits until the receiver has had each of `events` at least once.
async fn await_delivered(
    receiver: &Receiver,
    what: &str,
    events: &[flowline_core::crd::PendingEvent],
) {
    eventually(what, Duration::from_secs(60), || async {
        let counts = deliveries_per_event(receiver);
        events
            .iter()
            .all(|e| counts.contains_key(&e.id))
            .then_some(())
    })
    .await;
}

/// How many requests carried each event id.
fn deliveries_per_event(receiver: &Receiver) -> std::collections::HashMap<String, usize> {
    let mut counts = std::collections::HashMap::new();
    for r in receiver.received() {
        *counts
            .entry(r.header("webhook-id").to_string())
            .or_default() += 1;
    }
    counts
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_killed_operator_does_not_send_acknowledged_events_again() {
    let mut s = setup("dlv-dupes").await;
    let api = &s.api;
    let (hook, _) = webhook(
        api,
        &s.receiver.url("/"),
        &["run.started", "run.succeeded"],
        None,
    )
    .await;
    let wf = activated(api, succeeding("Dupes")).await;
    let mut before = Vec::new();
    for _ in 0..10 {
        before.push(start_run(api, &wf).await);
    }
    let events = events_of(api, &before).await;
    assert_eq!(events.len(), 20, "run.started and run.succeeded of each");
    await_delivered(&s.receiver, "every event delivered", &events).await;
    // Still inside the new leader's first 2 minutes, when the watermark stays behind
    // the clock: what acknowledges them is the list of ids.
    await_acknowledged(api, &hook, &events).await;

    s.operator.kill();
    let _restarted = start_operator(api, &flags(&s.receiver.pki)).await;
    let mut after = Vec::new();
    for _ in 0..3 {
        after.push(start_run(api, &wf).await);
    }
    // The restarted worker offered the earlier events at start, before these existed:
    // once these have arrived, any earlier one sent again would have too.
    let later = events_of(api, &after).await;
    await_delivered(
        &s.receiver,
        "the events after the restart delivered",
        &later,
    )
    .await;
    let counts = deliveries_per_event(&s.receiver);
    let repeated: Vec<(&str, usize)> = events
        .iter()
        .map(|e| (e.id.as_str(), counts[&e.id]))
        .filter(|(_, n)| *n != 1)
        .collect();
    assert!(
        repeated.is_empty(),
        "acknowledged events sent again after the restart: {repeated:?}"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn retention_keeps_a_run_until_its_events_are_delivered() {
    let s = setup("dlv-retain").await;
    let api = &s.api;
    let (hook, _) = webhook(api, &s.receiver.url("/"), &["run.succeeded"], None).await;
    let wf = activated(api, succeeding("Retain")).await;
    // Keep no succeeded run at all.
    api.ns
        .api::<flowline_core::crd::Workflow>()
        .patch(
            &wf,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"history": {"succeeded": 0}}})),
        )
        .await
        .unwrap();
    s.receiver.set_down(true);
    let run = start_run(api, &wf).await;
    let events = events_of(api, std::slice::from_ref(&run)).await;
    let event = events.last().unwrap().id.clone();
    // Two failed attempts: the run finished a while ago and the controller has
    // reconciled its workflow since.
    eventually("two failed attempts", Duration::from_secs(30), || async {
        let failed = deliveries(api, &hook)
            .await
            .iter()
            .filter(|d| d["event_id"] == event.as_str() && d["error"].is_string())
            .count();
        (failed >= 2).then_some(())
    })
    .await;
    let runs = api.ns.api::<flowline_core::crd::Run>();
    assert!(
        runs.get_opt(&run).await.unwrap().is_some(),
        "retention deleted a run whose run.succeeded was not delivered"
    );
    s.receiver.set_down(false);
    received(
        &s.receiver,
        "the delivery once the receiver is back",
        Duration::from_secs(30),
        |r| r.header("webhook-id") == event,
    )
    .await;
    eventually(
        "retention to delete the delivered run",
        Duration::from_secs(30),
        || async { runs.get_opt(&run).await.unwrap().is_none().then_some(()) },
    )
    .await;
}
