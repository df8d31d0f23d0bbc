//! `callback` steps: a run parks until its single-use URL is called; the body is the
//! step's output; the URL renders in every step, also before the callback step.

use std::time::Duration;

use serde_json::{Value, json};

use crate::builders::WorkflowBuilder;
use crate::support::{Process, TestApi, assert_error, ready};

const FINISH: Duration = Duration::from_secs(60);

/// An operator whose callback URLs point at `api`.
async fn operator(api: &TestApi) -> Process {
    let base = api.url("");
    let (op, port) = Process::operator(&api.ns, &["--no-api", "--public-url", &base]);
    ready(port).await;
    op
}

/// The URL step `hand` rendered (it reads `{{ callbacks.paid.url }}`).
async fn handed_url(api: &TestApi, run: &str) -> String {
    let view: Value = api
        .get(&api.admin_key, &format!("/v1/runs/{run}"))
        .await
        .json()
        .await
        .unwrap();
    view["steps"][0]["output"]
        .as_str()
        .expect("the url")
        .to_string()
}

fn steps(timeout_ms: u64, before: Option<Value>) -> Value {
    let mut steps = vec![json!({"id": "hand", "action": "transform",
        "with": {"value": "{{ callbacks.paid.url }}"}})];
    steps.extend(before);
    steps.push(json!({"id": "paid", "action": "callback", "with": {"timeout_ms": timeout_ms}}));
    steps.push(json!({"id": "after", "action": "transform",
        "with": {"value": "{{ steps.paid.output.amount }}"}}));
    Value::Array(steps)
}

async fn call(api: &TestApi, url: &str, body: Value) -> reqwest::Response {
    api.http.post(url).json(&body).send().await.unwrap()
}

/// The URL, handed out before the step, completes it once; a second call is refused.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_callback_completes_its_step_once_with_the_body() {
    let api = TestApi::start("cb-once").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("pay").steps(steps(600_000, None)))
        .await;
    let _op = operator(&api).await;
    let run = api.start_run(&key, &wf, None).await;
    crate::support::parked_on(&api.ns, &run, "paid").await;
    let url = handed_url(&api, &run).await;
    assert!(url.starts_with(&api.url("/v1/callbacks/")), "{url}");

    let res = call(&api, &url, json!({"amount": 12})).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body, json!({"run_id": run, "step_id": "paid"}));
    assert_error(
        call(&api, &url, json!({"amount": 99})).await,
        409,
        "callback_used",
    )
    .await;

    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(view["steps"][1]["output"], json!({"amount": 12}), "{view}");
    assert_eq!(view["steps"][2]["output"], json!(12), "{view}");
    assert_error(call(&api, &url, json!({})).await, 409, "callback_used").await;
}

/// A call that comes before the callback step starts is kept for it; a step that is
/// never called times out, and its URL is then refused as expired.
#[tokio::test]
#[ignore = "needs cluster"]
async fn an_early_call_is_kept_and_an_expired_url_is_refused() {
    let api = TestApi::start("cb-early").await;
    let key = api.admin_key.clone();
    let gate = json!({"id": "gate", "action": "approval"});
    let wf = api
        .workflow(&WorkflowBuilder::new("early").steps(steps(600_000, Some(gate))))
        .await;
    let _op = operator(&api).await;
    let run = api.start_run(&key, &wf, None).await;
    crate::support::parked_on(&api.ns, &run, "gate").await;
    let url = handed_url(&api, &run).await;
    let res = call(&api, &url, json!({"amount": 5})).await;
    assert_eq!(res.status(), 200, "a call before the step starts is kept");
    let res = api
        .send(
            "POST",
            &key,
            &format!("/v1/runs/{run}/steps/gate/approve"),
            None,
        )
        .await;
    assert_eq!(res.status(), 200);
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(view["steps"][3]["output"], json!(5), "{view}");

    let short = api
        .workflow(&WorkflowBuilder::new("late").steps(steps(1_000, None)))
        .await;
    let run = api.start_run(&key, &short, None).await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "failed", "{view}");
    assert_eq!(
        view["error"],
        "step paid (callback) failed: callback timed out after 1000 ms"
    );
    let url = view["steps"][0]["output"].as_str().unwrap();
    assert_error(call(&api, url, json!({})).await, 404, "callback_not_found").await;
}
