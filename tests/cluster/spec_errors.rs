//! Spec errors are reported before run time: a `when` or a template that does not
//! parse, or a read of a step that does not run before, is refused by `/v1` on its
//! field, and shown as `Ready=False` (reason `InvalidSpec`) on a Workflow applied with
//! kubectl. Runs of such a workflow still fail at run time, naming the problem.

use std::time::Duration;

use flowline_core::crd::{ConditionStatus, Workflow};
use serde_json::{Value, json};

use crate::builders::{RunBuilder, WorkflowBuilder};
use crate::support::{
    Process, TestApi, TestNamespace, assert_error, eventually, finished_run, ready, text,
};

/// The `details[].field`s of a 400 `validation_error`, with their messages.
pub(crate) async fn refused(res: reqwest::Response) -> Vec<(String, String)> {
    let body = assert_error(res, 400, "validation_error").await;
    body["error"]["details"]
        .as_array()
        .unwrap_or_else(|| panic!("details in {body}"))
        .iter()
        .map(|d| {
            (
                d["field"].as_str().unwrap().to_string(),
                d["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn the_api_refuses_steps_that_would_fail_every_run_on_their_fields() {
    let api = TestApi::start("spec-api").await;
    let key = api.admin_key.clone();
    let id = api.create_workflow("Checked").await;
    let path = format!("/v1/workflows/{id}");
    let patch = |steps: Value| api.send("PATCH", &key, &path, Some(json!({"steps": steps})));

    for (steps, field, says) in [
        (
            json!([{"id": "a", "action": "fail", "when": "trigger.payload.n = 1"}]),
            "steps[0].when",
            "expected '==' to compare",
        ),
        (
            json!([{"id": "a", "action": "fail"},
                   {"id": "b", "action": "http.request",
                    "with": {"url": "https://x.test/{{ trigger.payload.id"}}]),
            "steps[1].with.url",
            "unterminated template",
        ),
        (
            json!([{"id": "a", "action": "transform",
                    "with": {"value": {"list": ["ok", "{{ payload.id }}"]}}}]),
            "steps[0].with.value.list[1]",
            "unknown root",
        ),
        (
            json!([{"id": "a", "action": "transform", "with": {"value": "{{ steps.b.output }}"}},
                   {"id": "b", "action": "transform", "with": {"value": 1}}]),
            "steps[0].with.value",
            "runs later",
        ),
        (
            json!([{"id": "a", "action": "transform", "with": {"value": "{{ steps.a.output }}"}}]),
            "steps[0].with.value",
            "own output",
        ),
        (
            json!([{"id": "a", "action": "fail", "when": "steps.ghost.output.ok"}]),
            "steps[0].when",
            "does not have",
        ),
    ] {
        let details = refused(patch(steps.clone()).await).await;
        assert_eq!(details.len(), 1, "{steps}: {details:?}");
        assert_eq!(details[0].0, field, "{steps}");
        assert!(details[0].1.contains(says), "{steps}: {details:?}");
    }

    // Several problems at once: each on its field, in the order of the steps.
    let details = refused(
        patch(json!([
            {"id": "a", "action": "fail", "when": "("},
            {"id": "b", "action": "http.request",
             "with": {"url": "https://x.test/", "headers": {"X-Id": "{{ }}"}}}
        ]))
        .await,
    )
    .await;
    let fields: Vec<&str> = details.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(fields, ["steps[0].when", "steps[1].with.headers.X-Id"]);

    // Nothing refused was stored.
    let res = api.get(&key, &path).await;
    assert_eq!(res.status(), 200);
    let stored: Value = res.json().await.unwrap();
    assert_eq!(stored["steps"], json!([]), "{stored}");

    // Reading earlier steps, data that a run may lack, secrets: accepted.
    api.patch_workflow(
        &key,
        &id,
        json!({"steps": [
            {"id": "fetch", "action": "transform", "with": {"value": {"n": "{{ trigger.payload.n }}"}}},
            {"id": "use", "action": "transform",
             "when": "steps.fetch.output.n > 1 || {{ trigger.payload.force }}",
             "with": {"value": "{{ steps.fetch.output.missing }} {{ secrets.none.key }}"}}
        ]}),
    )
    .await;
}

/// The active workflow `checked` with `steps`, as kubectl applies it.
fn checked(steps: Value) -> String {
    WorkflowBuilder::new("checked")
        .active()
        .steps(steps)
        .manifest()
}

fn bad_steps() -> Value {
    json!([
        {"id": "shape", "action": "transform", "with": {"value": "{{ steps.later.output }}"}},
        {"id": "later", "action": "transform", "when": "trigger.payload.n = 1", "with": {"value": 1}},
    ])
}

fn good_steps() -> Value {
    json!([
        {"id": "first", "action": "transform", "with": {"value": 1}},
        {"id": "shape", "action": "transform", "when": "trigger.payload.n == 1",
         "with": {"value": "{{ steps.first.output }}"}},
    ])
}

/// The workflow's `Ready` condition (status, reason, message), once it judges the
/// workflow's current generation.
pub(crate) async fn ready_condition(
    ns: &TestNamespace,
    name: &str,
) -> (ConditionStatus, String, String) {
    let api = ns.api::<Workflow>();
    let wf = api.get(name).await.unwrap();
    let generation = wf.metadata.generation;
    eventually(
        &format!("Ready of {name} at generation {generation:?}"),
        Duration::from_secs(30),
        || async {
            let wf = api.get(name).await.ok()?;
            let ready = wf
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready" && c.observed_generation == generation)?;
            Some((ready.status, ready.reason, ready.message))
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_workflow_applied_with_kubectl_shows_its_spec_errors_on_ready() {
    let ns = TestNamespace::new("spec-kubectl").await;
    let (_operator, port) = Process::operator(&ns, &[]);
    ready(port).await;

    let out = ns.kubectl_apply(&checked(bad_steps()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (status, reason, message) = ready_condition(&ns, "checked").await;
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "InvalidSpec")
    );
    assert!(
        message.contains(
            "steps[0].with.value: \"steps.later.output\" reads step \"later\", which runs later"
        ) && message.contains("steps[1].when: syntax error at position 18"),
        "{message}"
    );
    // kubectl shows it too.
    let out = ns.kubectl(&[
        "get",
        "workflow/checked",
        "-o",
        r#"jsonpath={.status.conditions[?(@.type=="Ready")].reason}"#,
    ]);
    assert_eq!(text(&out.stdout), "InvalidSpec");

    // Runs are not held back: a run starts and fails at run time, naming the problem.
    let out = ns.kubectl_apply(&RunBuilder::of("checked").name("checked-1").manifest());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run = finished_run(&ns, "checked-1", Duration::from_secs(60)).await;
    let error = run.status.unwrap().error.unwrap_or_default();
    assert!(
        error.contains("step shape (transform) failed")
            && error.contains("\"steps.later.output\" not found"),
        "{error}"
    );

    // Fixed: Ready again, for the new generation.
    let out = ns.kubectl_apply(&checked(good_steps()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (status, reason, message) = ready_condition(&ns, "checked").await;
    assert_eq!(
        (status, reason.as_str(), message.as_str()),
        (ConditionStatus::True, "Reconciled", "")
    );
}
