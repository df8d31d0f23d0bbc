//! What the scenario executes: seven workflows that cannot fail on their own (inline
//! steps, a step Job inside an inline workflow, a workflow executed in Jobs, one whose
//! runs start under a rate limit, one whose
//! `workflow` step waits for a child run of the inline one, then hands a callback URL
//! to the step endpoint, which calls it back, a `forEach` of slow calls, and one that
//! waits for an event), started
//! through `/v1` at a steady rate with an event posted every other run (see `inbound`),
//! and the local endpoint their `http.request` steps call. Step Jobs run on the local
//! cluster's real node: the toolbox image for the container step, the step image for
//! built-in steps.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use rand::Rng;
use serde_json::{Value, json};

use super::settings::Settings;
use crate::builders::WorkflowBuilder;
use crate::support::TestApi;

/// Steps that take a while (a delay, and steps executed as Jobs): a kill while one of
/// them runs interrupts it.
pub const LONG_STEPS: [&str; 5] = ["pause", "boxed", "first", "second", "each"];

/// Operator flags for step Jobs on the real node: its step image.
pub fn job_flags() -> Vec<String> {
    vec!["--step-image".into(), crate::support::step_image()]
}

/// The place of the rate-limited workflow among [`workflows`], and its limit: at most
/// this many of its runs start in any second.
pub const PACED: usize = 3;
pub const PACED_PER_SECOND: usize = 4;

/// One call of an `http.request` step.
#[derive(Debug, Clone)]
pub struct Hit {
    pub run: String,
    /// The element of a `forEach` step's iteration.
    pub item: Option<u64>,
    pub idempotency_key: String,
    pub at: std::time::Instant,
}

/// The endpoint of the `http.request` steps; records every call, and calls back the
/// callback URL a call hands it (`reply_to`), as a third party would, once per call:
/// a repeated call (a retried step) calls back again and gets 409.
pub struct StepSink {
    pub url: String,
    hits: Arc<Mutex<Vec<Hit>>>,
}

impl StepSink {
    pub async fn start() -> StepSink {
        let hits = Arc::new(Mutex::new(Vec::new()));
        let seen = hits.clone();
        let app = axum::Router::new().route(
            "/call",
            axum::routing::post(move |headers: HeaderMap, body: axum::Json<Value>| {
                let key = headers
                    .get("idempotency-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                seen.lock().unwrap().push(Hit {
                    run: body["run"].as_str().unwrap_or_default().to_string(),
                    item: body["item"].as_u64(),
                    idempotency_key: key,
                    at: std::time::Instant::now(),
                });
                if let Some(url) = body["reply_to"].as_str().map(String::from) {
                    tokio::spawn(async move {
                        let answer = json!({"paid": true});
                        let _ = reqwest::Client::new().post(url).json(&answer).send().await;
                    });
                }
                // An iteration takes a while, so kills find some in flight.
                let slow = body["slow"].as_bool() == Some(true);
                async move {
                    if slow {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    "ok"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/call", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        StepSink { url, hits }
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }
}

fn call(sink: &StepSink) -> Value {
    json!({"id": "call", "action": "http.request", "with": {
        "method": "POST", "url": sink.url, "body": {"run": "{{ run.id }}"}}})
}

/// Creates the seven workflows through the API; returns their ids, "Waits" last.
pub async fn workflows(api: &TestApi, sink: &StepSink) -> Vec<String> {
    let prep = json!({"id": "prep", "action": "transform",
        "with": {"value": {"n": "{{ trigger.payload.n }}"}}});
    let pause =
        json!({"id": "pause", "action": "delay", "with": {"ms": "{{ trigger.payload.ms }}"}});
    let shapes = [
        WorkflowBuilder::new("Inline").steps(json!([prep, pause, call(sink),
            {"id": "done", "action": "transform", "with": {"value": "{{ steps.call.output.status }}"}}])),
        WorkflowBuilder::new("Mixed").steps(json!([prep, {"id": "boxed", "action": "container",
            "with": {"image": crate::support::TOOLBOX, "command": ["sh", "-c",
                "echo '{\"boxed\": true}' > \"$FLOWLINE_OUTPUT\""]}}, pause, call(sink)])),
        WorkflowBuilder::new("In jobs").executor("job").steps(json!([
            {"id": "first", "action": "transform", "with": {"value": 1}},
            {"id": "second", "action": "transform", "with": {"value": "{{ steps.first.output }}"}}])),
    ];
    let mut ids = Vec::new();
    for wf in shapes {
        let id = api.workflow(&wf).await;
        api.keep_every_run(&id).await;
        ids.push(id);
    }
    let paced = api
        .workflow(&WorkflowBuilder::new("Paced").steps(json!([prep, call(sink)])))
        .await;
    let limit = json!({"rate_limit": {"limit": PACED_PER_SECOND, "period_ms": 1000}});
    api.patch_workflow(&api.admin_key, &paced, limit).await;
    api.keep_every_run(&paced).await;
    ids.push(paced);
    assert_eq!(ids.len() - 1, PACED);
    // Its children are runs of "Inline", started by the engine (not through `/v1`): the
    // verdict counts every run of the namespace, so they must end well too.
    let nested = WorkflowBuilder::new("Nested").steps(json!([
        {"id": "sub", "action": "workflow", "with": {"workflow": ids[0],
            "payload": {"n": "{{ trigger.payload.n }}", "ms": "{{ trigger.payload.ms }}"}}},
        {"id": "ask", "action": "http.request", "with": {"method": "POST", "url": sink.url,
            "body": {"run": "{{ run.id }}", "reply_to": "{{ callbacks.paid.url }}"}}},
        {"id": "paid", "action": "callback", "with": {"timeout_ms": 600_000}},
        {"id": "after", "action": "transform", "with": {"value": "{{ steps.paid.output.paid }}"}}]));
    // Six calls, two at a time: a kill in the middle resumes from the unfinished ones.
    let each = WorkflowBuilder::new("Each").steps(json!([
        {"id": "list", "action": "transform", "with": {"value": [0, 1, 2, 3, 4, 5]}},
        {"id": "each", "action": "http.request", "for_each": "{{ steps.list.output }}",
         "for_each_concurrency": 2, "with": {"method": "POST", "url": sink.url,
            "body": {"run": "{{ run.id }}", "item": "{{ item }}", "slow": true}}}]));
    for wf in [nested, each, super::inbound::waits()] {
        let id = api.workflow(&wf).await;
        api.keep_every_run(&id).await;
        ids.push(id);
    }
    ids
}

/// Starts `settings.runs` runs at `settings.rate` per second, taking turns over the
/// workflows (the last waits for an event a third party posts), each with a random
/// delay step, and posts an order event with every other run; their names are
/// appended to `created`, the events to `posted`.
pub async fn start_runs(
    api: &TestApi,
    workflows: &[String],
    settings: &Settings,
    mut rng: rand::rngs::StdRng,
    created: &Mutex<Vec<String>>,
    posted: &Mutex<Vec<super::inbound::Posted>>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / settings.rate));
    for n in 0..settings.runs {
        tick.tick().await;
        let turn = n % workflows.len();
        let payload = json!({"payload": {"n": n, "ms": rng.random_range(200..1500)}});
        let run = api
            .start_run(&api.admin_key, &workflows[turn], Some(payload))
            .await;
        if turn == workflows.len() - 1 {
            super::inbound::nudge(api, run.clone(), n);
        }
        created.lock().unwrap().push(run);
        if n.is_multiple_of(2) {
            let event = super::inbound::post_order(api, n).await;
            posted.lock().unwrap().push(event);
        }
    }
}
