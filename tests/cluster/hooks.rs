//! Inbound webhooks (`POST /v1/hooks/{id}`) signed by the off-the-shelf Standard
//! Webhooks library (PyPI `standardwebhooks`, run as a sender would use it), against
//! the real control plane.

use std::time::Duration;

use flowline_core::crd::{Run, RunPhase, RunTrigger};
use serde_json::{Value, json};

use crate::builders::WorkflowBuilder;
use crate::support::{
    ApiOptions, Process, TestApi, TestNamespace, assert_error, eventually, guarded_client, ready,
    spawn_run_controller,
};

/// The Standard Webhooks headers for `body` sent as message `id` at `timestamp`
/// (Unix seconds), made by the Python library as a sender would.
fn sign(secret: &str, id: &str, timestamp: i64, body: &str) -> Vec<(String, String)> {
    let input = json!([{"secret": secret, "id": id, "timestamp": timestamp, "body": body}]);
    let lines = crate::support::python_lines("hack/sign-standard-webhooks.py", &input);
    let headers: serde_json::Map<String, Value> = serde_json::from_str(&lines[0]).unwrap();
    headers
        .into_iter()
        .map(|(k, v)| (k, v.as_str().unwrap().to_string()))
        .collect()
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Posts `body` to the hook of `workflow` with `headers` (no API key).
async fn post_hook(
    api: &TestApi,
    workflow: &str,
    headers: &[(String, String)],
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    let mut req = api
        .http
        .post(api.url(&format!("/v1/hooks/{workflow}")))
        .header("content-type", "application/json")
        .header("user-agent", "hooks-test/1")
        .header("authorization", "Bearer not-recorded");
    for (k, v) in headers {
        req = req.header(k, v);
    }
    req.body(body).send().await.unwrap()
}

/// Signs `body` with `secret` as message `id` now, and posts it.
async fn send_signed(
    api: &TestApi,
    workflow: &str,
    secret: &str,
    id: &str,
    body: &str,
) -> reqwest::Response {
    let headers = sign(secret, id, now(), body);
    post_hook(api, workflow, &headers, body.to_string()).await
}

async fn accepted_run(res: reqwest::Response) -> String {
    let status = res.status();
    let body: Value = res.json().await.unwrap();
    assert_eq!(status, 202, "{body}");
    body["run_id"].as_str().unwrap().to_string()
}

/// Creates an active webhook-triggered workflow with one transform step that echoes
/// the payload's `order` and the recorded `webhook-id`; returns (id, secret).
async fn webhook_workflow(api: &TestApi) -> (String, String) {
    let res = api
        .send(
            "POST",
            &api.admin_key,
            "/v1/workflows",
            Some(json!({"name": "Orders in", "trigger": {"type": "webhook"}})),
        )
        .await;
    let status = res.status();
    let created: Value = res.json().await.unwrap();
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["trigger"], json!({"type": "webhook"}));
    let secret = created["hook_secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_"), "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let res = api
        .send(
            "PATCH",
            &api.admin_key,
            &format!("/v1/workflows/{id}"),
            Some(
                json!({"state": "active", "steps": [{"id": "echo", "action": "transform",
                "with": {"value": {"order": "{{ trigger.payload.order }}",
                                   "via": "{{ trigger.headers.webhook-id }}",
                                   "agent": "{{ trigger.headers.user-agent }}"}}}]}),
            ),
        )
        .await;
    let patched: Value = res.json().await.unwrap();
    assert!(
        patched.get("hook_secret").is_none(),
        "a PATCH that keeps the webhook trigger shows no secret: {patched}"
    );
    (id, secret)
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_signed_hook_starts_one_run_with_its_payload_and_bad_ones_start_none() {
    let api = TestApi::start("hooks").await;
    let (stop, _telemetry) = spawn_run_controller(&api.ns, guarded_client(), Default::default());
    let (wf, secret) = webhook_workflow(&api).await;

    // Good signature: 202, and the run succeeds with the body as its payload.
    let body = r#"{"order": "A-17", "lines": [1, 2]}"#;
    let first_headers = sign(&secret, "msg_first", now(), body);
    let run = accepted_run(post_hook(&api, &wf, &first_headers, body).await).await;
    let finished = crate::support::finished_run(&api.ns, &run, Duration::from_secs(60)).await;
    assert_eq!(finished.spec.trigger, RunTrigger::Webhook);
    crate::support::assert_owned_by_its_workflow(&api.ns, &run).await;
    assert_eq!(
        finished.spec.payload,
        Some(json!({"order": "A-17", "lines": [1, 2]}))
    );
    let headers = finished.spec.headers.clone().unwrap();
    assert_eq!(headers["webhook-id"], "msg_first");
    assert!(
        !headers.contains_key("authorization") && !headers.contains_key("webhook-signature"),
        "{headers:?}"
    );
    let status = finished.status.unwrap();
    assert_eq!(status.phase, RunPhase::Succeeded, "{:?}", status.error);
    assert_eq!(
        status.steps[0].output,
        Some(json!({"order": "A-17", "via": "msg_first", "agent": "hooks-test/1"}))
    );
    let view: Value = api
        .get(&api.admin_key, &format!("/v1/runs/{run}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["trigger"], "webhook", "{view}");

    // The same webhook-id again, as captured and re-signed later with another body:
    // the first run's id, nothing new.
    let replayed = accepted_run(post_hook(&api, &wf, &first_headers, body).await).await;
    assert_eq!(replayed, run);
    let resent = send_signed(&api, &wf, &secret, "msg_first", r#"{"order": "B"}"#).await;
    assert_eq!(accepted_run(resent).await, run);
    assert_eq!(api.run_ids(&wf, "").await, std::slice::from_ref(&run));

    // Bad requests: 401 invalid_signature each, and no run.
    let wrong_secret = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let res = send_signed(&api, &wf, wrong_secret, "msg_wrong", body).await;
    let wrong = assert_error(res, 401, "invalid_signature").await;
    assert!(
        wrong["error"]["message"]
            .as_str()
            .unwrap()
            .contains("webhook-signature"),
        "{wrong}"
    );
    let signed = sign(&secret, "msg_tampered", now(), body);
    let tampered = r#"{"order": "A-18", "lines": [1, 2]}"#;
    assert_error(
        post_hook(&api, &wf, &signed, tampered).await,
        401,
        "invalid_signature",
    )
    .await;
    for missing in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        let partial: Vec<_> = signed
            .iter()
            .filter(|(k, _)| k != missing)
            .cloned()
            .collect();
        let res = post_hook(&api, &wf, &partial, body).await;
        let err = assert_error(res, 401, "invalid_signature").await;
        assert!(
            err["error"]["message"].as_str().unwrap().contains(missing),
            "{err}"
        );
    }
    for (ts, words) in [(now() - 301, "past"), (now() + 400, "future")] {
        let res = post_hook(&api, &wf, &sign(&secret, "msg_stale", ts, body), body).await;
        let err = assert_error(res, 401, "invalid_signature").await;
        assert!(
            err["error"]["message"].as_str().unwrap().contains(words),
            "{err}"
        );
    }
    assert_eq!(
        api.run_ids(&wf, "").await,
        std::slice::from_ref(&run),
        "no run from a bad request"
    );

    // Body limits, on correctly signed requests.
    let big = format!(r#"{{"pad": "{}"}}"#, "x".repeat(1 << 20));
    let res = send_signed(&api, &wf, &secret, "msg_big", &big).await;
    assert_error(res, 413, "payload_too_large").await;
    let deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(32), "]".repeat(32));
    let res = send_signed(&api, &wf, &secret, "msg_deep", &deep).await;
    assert_error(res, 400, "validation_error").await;
    let res = send_signed(&api, &wf, &secret, "msg_array", "[1, 2]").await;
    assert_error(res, 400, "validation_error").await;
    assert_eq!(api.run_ids(&wf, "").await, std::slice::from_ref(&run));

    // Rotation: the old secret stops verifying at once, the new one works.
    let res = api
        .send(
            "POST",
            &api.admin_key,
            &format!("/v1/workflows/{wf}/hook-secret/rotate"),
            None,
        )
        .await;
    assert_eq!(res.status(), 200);
    let rotated: Value = res.json().await.unwrap();
    let new_secret = rotated["hook_secret"].as_str().unwrap();
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);
    let res = send_signed(&api, &wf, &secret, "msg_after", body).await;
    assert_error(res, 401, "invalid_signature").await;
    let second = accepted_run(send_signed(&api, &wf, new_secret, "msg_after", body).await).await;
    assert_ne!(second, run);
    let mut ids = api.run_ids(&wf, "").await;
    ids.sort();
    let mut expected = vec![run, second];
    expected.sort();
    assert_eq!(ids, expected);
    stop.cancel();
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn retention_keeps_a_hook_run_so_its_webhook_id_still_answers() {
    let api = TestApi::start("hooks-keep").await;
    let (stop, _telemetry) = spawn_run_controller(&api.ns, guarded_client(), Default::default());
    let _workflows = crate::workflows::controller(&api.ns);
    let (wf, secret) = webhook_workflow(&api).await;
    // Keep no finished run at all.
    api.ns
        .api::<flowline_core::crd::Workflow>()
        .patch(
            &wf,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"history": {"succeeded": 0, "failed": 0}}})),
        )
        .await
        .unwrap();
    let body = r#"{"order": "kept"}"#;
    let hooked = accepted_run(send_signed(&api, &wf, &secret, "msg_keep", body).await).await;
    crate::support::finished_run(&api.ns, &hooked, Duration::from_secs(60)).await;
    // A manual run is deleted as soon as it finishes: retention has run.
    let manual = api.start_run(&api.admin_key, &wf, None).await;
    let runs = api.ns.api::<Run>();
    eventually(
        "retention to delete the finished manual run",
        Duration::from_secs(60),
        || async { runs.get_opt(&manual).await.ok()?.is_none().then_some(()) },
    )
    .await;
    assert!(
        runs.get_opt(&hooked).await.unwrap().is_some(),
        "the hook run is held for its webhook-id"
    );
    let again = send_signed(&api, &wf, &secret, "msg_keep", body).await;
    assert_eq!(accepted_run(again).await, hooked);
    assert_eq!(api.run_ids(&wf, "").await, std::slice::from_ref(&hooked));
    stop.cancel();
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn concurrent_deliveries_of_one_message_start_one_run() {
    let api = TestApi::start("hooks-race").await;
    let (wf, secret) = webhook_workflow(&api).await;
    let body = r#"{"order": "race"}"#;
    let headers = sign(&secret, "msg_race", now(), body);
    let sends = (0..8).map(|_| post_hook(&api, &wf, &headers, body));
    let mut ids = Vec::new();
    for res in futures::future::join_all(sends).await {
        ids.push(accepted_run(res).await);
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "every delivery answers the same run: {ids:?}");
    assert_eq!(api.run_ids(&wf, "").await, ids);
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn unknown_manual_paused_and_draft_workflows_answer_the_same_404() {
    let api = TestApi::start("hooks-404").await;
    let key = &api.admin_key;
    let (paused, paused_secret) = webhook_workflow(&api).await;
    api.patch_workflow(key, &paused, json!({"state": "paused"}))
        .await;
    let manual = api.create_workflow("Manual").await;
    api.patch_workflow(key, &manual, json!({"state": "active"}))
        .await;
    let res = api
        .send(
            "POST",
            key,
            "/v1/workflows",
            Some(json!({"name": "Draft hook", "trigger": {"type": "webhook"}})),
        )
        .await;
    let draft: Value = res.json().await.unwrap();
    let draft_secret = draft["hook_secret"].as_str().unwrap();
    let draft = draft["id"].as_str().unwrap();

    let body = r#"{"x": 1}"#;
    let mut answers = Vec::new();
    for (wf, secret) in [
        ("wf-doesnotexist", paused_secret.as_str()),
        (manual.as_str(), paused_secret.as_str()),
        (paused.as_str(), paused_secret.as_str()),
        (draft, draft_secret),
    ] {
        let res = send_signed(&api, wf, secret, "msg_1", body).await;
        answers.push(assert_error(res, 404, "hook_not_found").await);
    }
    assert!(
        answers.windows(2).all(|w| w[0] == w[1]),
        "identical bodies: {answers:?}"
    );
    assert!(api.run_ids(&paused, "").await.is_empty());
    // Other methods: the usual 405 body, with the budget's headers.
    let res = api
        .http
        .get(api.url(&format!("/v1/hooks/{paused}")))
        .send()
        .await
        .unwrap();
    assert_error(res, 405, "method_not_allowed").await;

    // A manual workflow has no hook secret to rotate.
    let res = api
        .send(
            "POST",
            key,
            &format!("/v1/workflows/{manual}/hook-secret/rotate"),
            None,
        )
        .await;
    assert_error(res, 409, "not_webhook_triggered").await;
    // Activating the paused workflow again makes its hook answer.
    api.patch_workflow(key, &paused, json!({"state": "active"}))
        .await;
    accepted_run(send_signed(&api, &paused, &paused_secret, "msg_1", body).await).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_kubectl_applied_webhook_workflow_verifies_with_its_hook_secret() {
    let api = TestApi::start("hooks-kubectl").await;
    // The controller seals the Secret's secret into the workflow's status: the API
    // reads no Secret.
    let (_operator, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    apply_hook_workflow(&api.ns, "orders-in", secret);
    let run = eventually(
        "the hook of the applied workflow to answer",
        Duration::from_secs(30),
        || async {
            let res = send_signed(&api, "orders-in", secret, "msg_k", r#"{"a": 1}"#).await;
            (res.status() == 202).then_some(res)
        },
    )
    .await;
    let run = accepted_run(run).await;
    let stored: Run = api.ns.api::<Run>().get(&run).await.unwrap();
    assert_eq!(stored.spec.workflow_ref, "orders-in");

    // The schema keeps cron for schedules only.
    let bad = WorkflowBuilder::new("bad-hook")
        .display_name("Bad")
        .trigger(json!({"type": "webhook", "cron": "* * * * *"}));
    let out = api.ns.kubectl_apply(&bad.manifest());
    assert!(!out.status.success());
    assert!(
        crate::support::text(&out.stderr).contains("trigger.cron is required when"),
        "{}",
        crate::support::text(&out.stderr)
    );
}

/// Applies, with kubectl, an active webhook-triggered workflow `name` and its inbound
/// secret to `ns`.
fn apply_hook_workflow(ns: &TestNamespace, name: &str, secret: &str) {
    let workflow = WorkflowBuilder::new(name)
        .display_name("Orders in")
        .active()
        .trigger(json!({"type": "webhook"}));
    let out = ns.kubectl_apply(&format!(
        r#"{}
---
apiVersion: v1
kind: Secret
metadata: {{name: {name}-hook}}
type: flowline.io/hook-secret
stringData: {{secret: "{secret}"}}
"#,
        workflow.manifest()
    ));
    assert!(
        out.status.success(),
        "{}",
        crate::support::text(&out.stderr)
    );
}

/// A hook names a workflow by id alone. A name that kubectl users gave workflows in two
/// accounts addresses neither, and addresses the one left when the other is deleted:
/// the API finds a name's accounts through an index kept from its watches.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_workflow_id_held_by_two_accounts_addresses_neither() {
    let other = TestNamespace::new("hooks-twin").await;
    let api = TestApi::start_watching(
        "hooks-twins",
        ApiOptions::default(),
        std::slice::from_ref(&other.name),
    )
    .await;
    let (_operator, port) =
        Process::operator(&api.ns, &["--no-api", "--watch-namespace", &other.name]);
    ready(port).await;
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let answer = |id: &'static str| {
        let api = &api;
        move || async move { send_signed(api, "twin-in", secret, id, "{}").await.status() }
    };
    apply_hook_workflow(&api.ns, "twin-in", secret);
    eventually("the hook to answer", Duration::from_secs(30), || async {
        (answer("msg_1")().await == 202).then_some(())
    })
    .await;
    apply_hook_workflow(&other, "twin-in", secret);
    eventually(
        "the hook to answer 404 once two accounts hold the id",
        Duration::from_secs(10),
        || async { (answer("msg_2")().await == 404).then_some(()) },
    )
    .await;
    let res = send_signed(&api, "twin-in", secret, "msg_3", "{}").await;
    assert_error(res, 404, "hook_not_found").await;
    other.kubectl(&["delete", "workflow", "twin-in", "--wait=true"]);
    eventually(
        "the hook to answer again once one account holds the id",
        Duration::from_secs(10),
        || async { (answer("msg_4")().await == 202).then_some(()) },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_flood_of_forged_hooks_spends_only_its_address_budget() {
    let api = TestApi::start_tuned("hooks-flood", ApiOptions::default(), |config| {
        config.unauthenticated_requests = 5;
    })
    .await;
    let (wf, _secret) = webhook_workflow(&api).await;
    let forged = sign(
        "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        "msg_f",
        now(),
        "{}",
    );
    for _ in 0..5 {
        assert_error(
            post_hook(&api, &wf, &forged, "{}").await,
            401,
            "invalid_signature",
        )
        .await;
    }
    let refused = post_hook(&api, &wf, &forged, "{}").await;
    assert!(refused.headers().contains_key("retry-after"));
    assert_error(refused, 429, "rate_limited").await;
    // The account's own budget is untouched.
    let res = api.get(&api.admin_key, "/v1/workflows").await;
    assert_eq!(res.status(), 200);
    assert!(api.run_ids(&wf, "").await.is_empty());
}
