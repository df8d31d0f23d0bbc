//! Hostile-tenant tests: nesting.
//!
//! JSON nested deeper than the limit (32) is refused by the API with a 400 naming the
//! limit; objects stored with kubectl that Flowline cannot decode (nested past serde_json's
//! recursion limit) stop no watcher: a freshly started API and operator become ready,
//! serve the other tenants and run their runs, and report the object.

use std::time::Duration;

use flowline_core::crd::{Run, RunPhase, Workflow};
use k8s_openapi::api::events::v1::Event;
use serde_json::{Value, json};

use crate::builders::{RunBuilder, WorkflowBuilder, step};
use crate::support::{
    ApiOptions, Process, TestApi, TestNamespace, assert_error, eventually, finished_run, kubectl,
    new_key, ready, text,
};
use flowline_api::plumbing::auth::Scope;

use crate::delivery::receiver;

/// A namespace user (impersonated), who may write Workflows and Runs with kubectl.
const AUTHOR: &str = "nesting-author";

/// `{"a":{"a":…1…}}`, `levels` objects deep, as text (serde_json could not build the
/// deepest ones as values).
fn deep_text(levels: usize) -> String {
    format!("{}1{}", r#"{"a":"#.repeat(levels), "}".repeat(levels))
}

fn deep(levels: usize) -> Value {
    (0..levels).fold(json!(1), |v, _| json!({ "a": v }))
}

async fn send_text(api: &TestApi, method: &str, path: &str, body: String) -> reqwest::Response {
    api.http
        .request(method.parse().unwrap(), api.url(path))
        .bearer_auth(&api.admin_key)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn bodies_nested_past_the_limit_are_validation_errors() {
    let api = TestApi::start("nest-key").await;
    let wf = api.create_workflow("target").await;
    for levels in [33, 120, 124, 10_000] {
        let d = deep_text(levels);
        for (method, path, body) in [
            (
                "POST",
                "/v1/workflows".to_string(),
                format!(r#"{{"name":"n","description":{d}}}"#),
            ),
            (
                "PATCH",
                format!("/v1/workflows/{wf}"),
                format!(
                    r#"{{"steps":[{{"id":"s","action":"transform","with":{{"value":{d}}}}}]}}"#
                ),
            ),
            (
                "POST",
                format!("/v1/workflows/{wf}/runs"),
                format!(r#"{{"payload":{d}}}"#),
            ),
            (
                "POST",
                "/v1/webhooks".to_string(),
                format!(r#"{{"url":"https://h.test","events":{d}}}"#),
            ),
        ] {
            let res = send_text(&api, method, &path, body).await;
            let body = assert_error(res, 400, "validation_error").await;
            let message = body["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("nesting deeper than 32"),
                "{method} {path} at {levels} levels: {body}"
            );
        }
    }
    // At the limit (the body counts: 1 + 31 levels of payload) a run starts.
    api.start_run(&api.admin_key, &wf, Some(json!({"payload": deep(31)})))
        .await;
    // Nothing of the refused bodies was stored.
    let res = api
        .get(&api.admin_key, &format!("/v1/workflows/{wf}"))
        .await;
    let shown: Value = res.json().await.unwrap();
    assert_eq!(shown["steps"], json!([]), "{shown}");
}

/// Lets `AUTHOR` write Workflows and Runs in `ns`, as a namespace's own user would.
fn grant_author(ns: &TestNamespace) {
    let rbac = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "flowline-author"},
         "rules": [{"apiGroups": ["flowline.io"], "resources": ["workflows", "runs"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "flowline-author"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "flowline-author"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": AUTHOR}]},
    ]});
    let out = ns.kubectl_apply(&rbac.to_string());
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn apply_as_author(ns: &TestNamespace, manifest: Value) {
    let out = kubectl(
        &["-n", &ns.name, "--as", AUTHOR, "apply", "-f", "-"],
        Some(&manifest.to_string()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn undecodable_objects_stop_no_watcher_and_are_reported() {
    // The attacker writes with kubectl what the API would refuse.
    let evil = TestNamespace::new("nest-evil").await;
    grant_author(&evil);
    apply_as_author(
        &evil,
        WorkflowBuilder::new("deep-with")
            .display_name("Deep")
            .active()
            .step(step::transform("s", deep(120)))
            .manifest_value(),
    );
    apply_as_author(
        &evil,
        RunBuilder::of("deep-with")
            .name("deep-payload")
            .payload(deep(124))
            .manifest_value(),
    );
    // 126 levels of `with` make the Workflow too deep to decode even on its own.
    apply_as_author(
        &evil,
        WorkflowBuilder::new("deeper-with")
            .display_name("Deeper")
            .active()
            .step(step::transform("s", deep(126)))
            .manifest_value(),
    );
    for (run, workflow) in [
        ("of-deep-with", "deep-with"),
        ("of-deeper-with", "deeper-with"),
    ] {
        apply_as_author(&evil, RunBuilder::of(workflow).name(run).manifest_value());
    }
    // What this does to a client that decodes lists as a whole: nothing can be listed.
    assert!(evil.api::<Run>().list(&Default::default()).await.is_err());
    assert!(
        evil.api::<Workflow>()
            .list(&Default::default())
            .await
            .is_err()
    );

    // A fresh API over both namespaces becomes ready (start_watching waits for its
    // caches) and serves the other tenant.
    let api = TestApi::start_watching(
        "nest-ok",
        ApiOptions::default(),
        std::slice::from_ref(&evil.name),
    )
    .await;
    let receiver = receiver::Receiver::start().await;
    let res = api
        .send(
            "POST",
            &api.admin_key,
            "/v1/webhooks",
            Some(json!({"url": receiver.url("/hook"), "events": ["run.succeeded"]})),
        )
        .await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let wf = api
        .workflow(
            &WorkflowBuilder::new("fine").active().steps(
                json!([{"id": "t", "action": "transform", "with": {"value": {"ok": true}}}]),
            ),
        )
        .await;

    // A fresh operator over both namespaces: controllers and delivery worker start.
    let ca = receiver.pki.ca_file.display().to_string();
    let (_operator, port) = Process::operator(
        &api.ns,
        &[
            "--watch-namespace",
            &evil.name,
            "--ca-bundle",
            &ca,
            "--allow-cidr",
            "127.0.0.0/8,::1/128",
        ],
    );
    ready(port).await;
    let run_id = api.start_run(&api.admin_key, &wf, None).await;
    let run = finished_run(&api.ns, &run_id, Duration::from_secs(60)).await;
    assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Succeeded);
    eventually(
        "the run.succeeded delivery",
        Duration::from_secs(30),
        || async {
            receiver
                .received()
                .iter()
                .any(|r| {
                    r.json()["event"] == "run.succeeded"
                        && r.json()["data"]["run_id"] == run_id.as_str()
                })
                .then_some(())
        },
    )
    .await;

    // The attacker's own runs fail with a clear error: the decodable workflow's step
    // refuses its `with`, the undecodable workflow cannot run at all.
    for (run, expected) in [
        ("of-deep-with", "with.value"),
        (
            "of-deeper-with",
            "workflow deeper-with cannot be decoded: recursion limit",
        ),
    ] {
        let failed = finished_run(&evil, run, Duration::from_secs(60)).await;
        let status = failed.status.unwrap();
        assert_eq!(status.phase, RunPhase::Failed, "{run}");
        let error = status.error.unwrap_or_default();
        assert!(error.contains(expected), "{run}: {error}");
        if run == "of-deep-with" {
            assert!(error.contains("nesting deeper than 32"), "{error}");
        }
    }

    // The undecodable run is absent from the API…
    let evil_key = new_key(&evil, &[Scope::Admin]).await;
    api.await_key(&evil_key).await;
    let res = api.get(&evil_key, "/v1/runs/deep-payload").await;
    assert_error(res, 404, "run_not_found").await;
    let res = api.get(&evil_key, "/v1/workflows/deeper-with").await;
    assert_error(res, 404, "workflow_not_found").await;
    let res = api.get(&evil_key, "/v1/runs/of-deep-with").await;
    assert_eq!(
        res.status(),
        200,
        "decodable runs of the namespace are served"
    );
    // …and reported: counted by kind, and an Event on the object.
    eventually(
        "the undecodable run to be counted",
        Duration::from_secs(30),
        || async {
            let metrics = crate::support::metrics_text(port).await?;
            (metrics.contains(r#"flowline_undecodable_objects{kind="Run"} 1"#)
                && metrics.contains(r#"flowline_undecodable_objects{kind="Workflow"} 1"#))
            .then_some(())
        },
    )
    .await;
    let events = evil.api::<Event>();
    let note = eventually(
        "an Undecodable Event on the run",
        Duration::from_secs(30),
        || async {
            let list = events.list(&Default::default()).await.ok()?;
            list.items.into_iter().find_map(|e| {
                let on_it = e.regarding.as_ref()?.name.as_deref() == Some("deep-payload");
                (on_it && e.reason.as_deref() == Some("Undecodable")).then_some(e.note?)
            })
        },
    )
    .await;
    assert!(note.contains("recursion limit"), "{note}");
}
