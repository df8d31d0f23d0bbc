//! A workflow's `output`: rendered when a run succeeds and shown as the run's `output`
//! (`null` without one); a template the engine could not render is refused by `/v1`
//! on `output…` and shown as `InvalidSpec` on a Workflow applied as an object.

use std::time::Duration;

use flowline_core::crd::{ConditionStatus, RunPhase};
use serde_json::{Value, json};

use crate::builders::{RunBuilder, WorkflowBuilder};
use crate::spec_errors::{ready_condition, refused};
use crate::support::{Process, TestApi, TestNamespace, finished_run, ready, text};

const FINISH: Duration = Duration::from_secs(60);

fn summing() -> WorkflowBuilder {
    WorkflowBuilder::new("output").steps(json!([
        {"id": "sum", "action": "transform", "with": {"value": "{{ trigger.payload.total }}"}}
    ]))
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn workflow_output_is_the_runs_output() {
    let api = TestApi::start("wf-output").await;
    let key = api.admin_key.clone();
    let (_operator, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;

    let with_output = api.workflow(&summing()).await;
    let path = format!("/v1/workflows/{with_output}");
    let output = json!({"total": "{{ steps.sum.output }}", "order": "{{ trigger.payload.order }}"});
    let res = api
        .send("PATCH", &key, &path, Some(json!({"output": output})))
        .await;
    assert_eq!(res.status(), 200);
    let view: Value = res.json().await.unwrap();
    assert_eq!(view["output"], output);

    let run = api
        .start_run(
            &key,
            &with_output,
            Some(json!({"payload": {"total": 42, "order": "A-7"}})),
        )
        .await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(
        view["output"],
        json!({"total": 42, "order": "A-7"}),
        "{view}"
    );

    // A path the run does not hold fails the run, naming `output`.
    let run = api
        .start_run(&key, &with_output, Some(json!({"payload": {"total": 1}})))
        .await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "failed", "{view}");
    assert_eq!(view["output"], Value::Null);
    let error = view["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("output failed: output.order")
            && error.contains("\"trigger.payload.order\" not found"),
        "{error}"
    );

    // `null` removes it; runs then have no output.
    let res = api
        .send("PATCH", &key, &path, Some(json!({"output": null})))
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.unwrap()["output"], Value::Null);
    let run = api
        .start_run(&key, &with_output, Some(json!({"payload": {"total": 3}})))
        .await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(view["output"], Value::Null, "{view}");

    // Refused on its field: an unknown step, a secret, a template that does not parse.
    for (body, field, says) in [
        (
            json!({"output": {"x": "{{ steps.ghost.output }}"}}),
            "output.x",
            "which this workflow does not have",
        ),
        (
            json!({"output": "{{ secrets.crm.token }}"}),
            "output",
            "output may not read secrets",
        ),
        (
            json!({"output": {"x": "{{ trigger.payload"}}),
            "output.x",
            "unterminated template",
        ),
        // Checked over the steps as the request leaves them.
        (
            json!({"output": {"t": "{{ steps.sum.output }}"}, "steps": []}),
            "output.t",
            "sum",
        ),
    ] {
        let res = api.send("PATCH", &key, &path, Some(body.clone())).await;
        let found = refused(res).await;
        assert!(
            found.iter().any(|(f, m)| f == field && m.contains(says)),
            "{body}: {found:?}"
        );
    }
    // Removing the step the stored output reads is refused too.
    api.patch_workflow(
        &key,
        &with_output,
        json!({"output": {"t": "{{ steps.sum.output }}"}}),
    )
    .await;
    let res = api
        .send("PATCH", &key, &path, Some(json!({"steps": []})))
        .await;
    let found = refused(res).await;
    assert_eq!(found[0].0, "output.t", "{found:?}");
    let res = api
        .send(
            "POST",
            &key,
            "/v1/workflows",
            Some(json!({"name": "O", "output": {"t": "{{ steps.sum.output }}"}})),
        )
        .await;
    assert_eq!(refused(res).await[0].0, "output.t");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn workflow_output_applied_as_an_object_is_checked_and_rendered() {
    let ns = &TestNamespace::new("wf-output-obj").await;
    let (_operator, port) = Process::operator(ns, &[]);
    ready(port).await;

    let mut good = summing().manifest_value();
    good["spec"]["output"] =
        json!({"total": "{{ steps.sum.output }}", "order": "{{ trigger.payload.order }}"});
    let out = ns.kubectl_apply(&good.to_string());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (status, _, message) = ready_condition(ns, "output").await;
    assert_eq!(status, ConditionStatus::True, "{message}");
    let run = RunBuilder::of("output")
        .name("output-1")
        .payload(json!({"total": 5, "order": "B-2"}));
    let out = ns.kubectl_apply(&run.manifest());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run = finished_run(ns, "output-1", FINISH).await;
    let status = run.status.unwrap();
    assert_eq!(status.phase, RunPhase::Succeeded, "{:?}", status.error);
    assert_eq!(status.output, Some(json!({"total": 5, "order": "B-2"})));
    assert!(!status.output_truncated);
    // The pinned version carries the output it renders.
    assert!(run.spec.workflow.unwrap().output.is_some());

    let mut bad = summing().manifest_value();
    bad["metadata"]["name"] = json!("bad-output");
    bad["spec"]["output"] =
        json!({"t": "{{ secrets.crm.token }}", "g": "{{ steps.ghost.output }}"});
    let out = ns.kubectl_apply(&bad.to_string());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (status, reason, message) = ready_condition(ns, "bad-output").await;
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "InvalidSpec")
    );
    assert!(
        message.contains("output.t: \"secrets.crm.token\": output may not read secrets")
            && message.contains("output.g: \"steps.ghost.output\" reads step \"ghost\""),
        "{message}"
    );
}
