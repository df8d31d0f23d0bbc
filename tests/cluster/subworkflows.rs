//! `workflow` steps: a run starts child runs of other workflows of its account, waits
//! for them parked (across operator restarts), retries with a new child, cancels its
//! children when it is cancelled, and stops at the call depth bound.

use std::time::Duration;

use flowline_core::crd::{Run, RunPhase, StepPhase, labels};
use kube::api::ListParams;
use serde_json::{Value, json};

use crate::builders::WorkflowBuilder;
use crate::support::{Process, TestApi, eventually, ready};

const FINISH: Duration = Duration::from_secs(90);

async fn operator(api: &TestApi) -> Process {
    let (op, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    op
}

fn call(id: &str, workflow: &str, with: Value) -> Value {
    let mut with = with;
    with["workflow"] = json!(workflow);
    json!({"id": id, "action": "workflow", "with": with})
}

/// The children of `parent`, found by the label kubectl users select them with.
async fn children(api: &TestApi, parent: &str) -> Vec<Run> {
    api.ns
        .api::<Run>()
        .list(&ListParams::default().labels(&format!("{}={parent}", labels::PARENT_RUN)))
        .await
        .unwrap()
        .items
}

/// Waits until `parent` is parked with step `step` waiting and `count` children exist;
/// returns the children.
async fn parked_with_children(api: &TestApi, parent: &str, step: &str, count: usize) -> Vec<Run> {
    let runs = api.ns.api::<Run>();
    eventually(
        &format!("{parent} parked on {step} with {count} children"),
        Duration::from_secs(60),
        || async {
            let r = runs.get(parent).await.ok()?;
            let status = r.status.as_ref()?;
            let record = status.steps.iter().find(|s| s.step_id == step)?;
            if record.status != StepPhase::Waiting || !status.parked {
                return None;
            }
            let found = children(api, parent).await;
            (found.len() == count).then_some(found)
        },
    )
    .await
}

/// Starts a run of a new workflow whose step `each` calls `child` once per element of
/// [1, 2, 3] (`concurrency`: its `for_each_concurrency`), with an operator; returns
/// the run and the operator.
async fn fan_out_of_three(
    api: &TestApi,
    child: &str,
    concurrency: Option<u32>,
) -> (String, Process) {
    let mut step = call("each", child, json!({"payload": {"n": "{{ item }}"}}));
    step["for_each"] = json!("{{ trigger.payload.items }}");
    if let Some(n) = concurrency {
        step["for_each_concurrency"] = json!(n);
    }
    let parent = api.workflow(&WorkflowBuilder::new("fan").step(step)).await;
    let op = operator(api).await;
    let payload = json!({"payload": {"items": [1, 2, 3]}});
    let run = api.start_run(&api.admin_key, &parent, Some(payload)).await;
    (run, op)
}

/// A parent waits for its child parked (no task), across an operator restart; the
/// child's output becomes the step's; both link to each other.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_parent_waits_parked_for_its_child_and_gets_its_output() {
    let api = TestApi::start("sub-wait").await;
    let key = api.admin_key.clone();
    let child = api
        .workflow(&WorkflowBuilder::new("child").steps(json!([
            {"id": "gate", "action": "approval"},
            {"id": "echo", "action": "transform",
             "with": {"value": {"got": "{{ trigger.payload.order }}"}}}
        ])))
        .await;
    api.patch_workflow(
        &key,
        &child,
        json!({"output": {"total": "{{ steps.echo.output.got }}"}}),
    )
    .await;
    let parent = api
        .workflow(&WorkflowBuilder::new("parent").steps(json!([
            call("invoice", &child, json!({"payload": {"order": "{{ trigger.payload.id }}"}})),
            {"id": "after", "action": "transform",
             "with": {"value": "{{ steps.invoice.output.output.total }}"}}
        ])))
        .await;
    let mut first = operator(&api).await;
    let run = api
        .start_run(&key, &parent, Some(json!({"payload": {"id": 42}})))
        .await;
    let kids = parked_with_children(&api, &run, "invoice", 1).await;
    let kid = kids[0].metadata.name.clone().unwrap();
    // The child belongs to its own workflow, not to the parent run.
    crate::support::assert_owned_by_its_workflow(&api.ns, &kid).await;

    // Both ways: the child names its parent, the step names its child.
    let view: Value = api
        .get(&key, &format!("/v1/runs/{kid}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["trigger"], "workflow", "{view}");
    assert_eq!(view["parent_run_id"], run.as_str(), "{view}");
    assert_eq!(view["parent_step_id"], "invoice", "{view}");
    assert_eq!(view["payload"], json!({"order": 42}), "{view}");
    let view: Value = api
        .get(&key, &format!("/v1/runs/{run}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["steps"][0]["status"], "waiting", "{view}");
    assert_eq!(view["steps"][0]["child_run_id"], kid.as_str(), "{view}");

    // The operator that parked the parent goes; another one sees the child end.
    first.kill();
    let _second = operator(&api).await;
    let res = api
        .send(
            "POST",
            &key,
            &format!("/v1/runs/{kid}/steps/gate/approve"),
            None,
        )
        .await;
    assert_eq!(
        res.status(),
        200,
        "{}",
        res.text().await.unwrap_or_default()
    );

    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(
        view["steps"][0]["output"],
        json!({"run_id": kid, "status": "succeeded", "output": {"total": 42}}),
        "{view}"
    );
    assert_eq!(view["steps"][1]["output"], json!(42), "{view}");
    assert_eq!(
        children(&api, &run).await.len(),
        1,
        "one child, never a second"
    );
}

/// A failed child fails its call; the step's retry policy starts a new child, and the
/// step fails naming the last child once the attempts are spent.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_failed_child_is_retried_with_a_new_child_then_fails_the_step() {
    let api = TestApi::start("sub-retry").await;
    let key = api.admin_key.clone();
    let child = api
        .workflow(&WorkflowBuilder::new("broken").step(json!(
            {"id": "boom", "action": "fail", "with": {"message": "out of stock"}})))
        .await;
    let mut step = call("order", &child, json!({}));
    step["retry"] = json!({"max_attempts": 2, "backoff_ms": 200});
    let parent = api
        .workflow(&WorkflowBuilder::new("parent").step(step))
        .await;
    let _op = operator(&api).await;
    let run = api.start_run(&key, &parent, None).await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "failed", "{view}");
    let kids = children(&api, &run).await;
    assert_eq!(kids.len(), 2, "a new child per attempt");
    assert!(kids.iter().all(|k| k.phase() == RunPhase::Failed));
    let last = view["steps"][0]["child_run_id"].as_str().unwrap();
    assert!(
        kids.iter()
            .any(|k| k.metadata.name.as_deref() == Some(last))
    );
    assert_eq!(view["steps"][0]["attempts"], 2, "{view}");
    assert_eq!(
        view["error"],
        format!(
            "step order (workflow) failed: child run {last} failed: step boom (fail) failed: \
             out of stock"
        ),
        "{view}"
    );
}

/// Cancelling a parent cancels the children it waits for: a `forEach` fan-out of three.
#[tokio::test]
#[ignore = "needs cluster"]
async fn cancelling_a_parent_cancels_its_running_children() {
    let api = TestApi::start("sub-cancel").await;
    let key = api.admin_key.clone();
    let child = api
        .workflow(&WorkflowBuilder::new("slow").step(json!({"id": "gate", "action": "approval"})))
        .await;
    let (run, _op) = fan_out_of_three(&api, &child, None).await;
    let kids = parked_with_children(&api, &run, "each", 3).await;
    let view: Value = api
        .get(&key, &format!("/v1/runs/{run}"))
        .await
        .json()
        .await
        .unwrap();
    let per_iteration: Vec<&str> = view["steps"][0]["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["child_run_id"].as_str().unwrap())
        .collect();
    assert_eq!(per_iteration.len(), 3, "{view}");
    for kid in &kids {
        assert!(per_iteration.contains(&kid.metadata.name.as_deref().unwrap()));
    }

    let res = api
        .send("POST", &key, &format!("/v1/runs/{run}/cancel"), None)
        .await;
    assert_eq!(res.status(), 202);
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "cancelled", "{view}");
    for kid in per_iteration {
        let seen = api.finished_view(&key, kid, FINISH).await;
        assert_eq!(seen["status"], "cancelled", "{seen}");
    }
}

/// A fan-out of calls keeps at most `for_each_concurrency` children unfinished at
/// once: the next element's child starts when one ends; the output keeps element order.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_fan_out_of_calls_runs_at_most_for_each_concurrency_children_at_once() {
    let api = TestApi::start("sub-bounded").await;
    let key = api.admin_key.clone();
    let child = api
        .workflow(&WorkflowBuilder::new("gated").steps(json!([
            {"id": "gate", "action": "approval"},
            {"id": "n", "action": "transform", "with": {"value": "{{ trigger.payload.n }}"}}])))
        .await;
    api.patch_workflow(&key, &child, json!({"output": "{{ steps.n.output }}"}))
        .await;
    let (run, _op) = fan_out_of_three(&api, &child, Some(2)).await;
    let first = parked_with_children(&api, &run, "each", 2).await;
    let approve = |kid: String| {
        let (api, key) = (&api, &key);
        async move {
            let path = format!("/v1/runs/{kid}/steps/gate/approve");
            let res = api.send("POST", key, &path, None).await;
            assert_eq!(
                res.status(),
                200,
                "{}",
                res.text().await.unwrap_or_default()
            );
        }
    };
    approve(first[0].metadata.name.clone().unwrap()).await;
    // The third child starts once the first has ended, never while two run.
    let third = eventually("the third child", FINISH, || async {
        let kids = children(&api, &run).await;
        let unfinished = kids.iter().filter(|k| !k.phase().is_finished()).count();
        assert!(unfinished <= 2, "{unfinished} children unfinished at once");
        (kids.len() == 3).then(|| {
            kids.into_iter()
                .find(|k| !first.iter().any(|f| f.metadata.name == k.metadata.name))
                .unwrap()
        })
    })
    .await;
    for kid in [first[1].metadata.name.clone(), third.metadata.name.clone()] {
        approve(kid.unwrap()).await;
    }
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    let outputs: Vec<&Value> = view["steps"][0]["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["output"])
        .collect();
    assert_eq!(outputs, [&json!(1), &json!(2), &json!(3)], "{view}");
}

/// Without `wait`, the step succeeds once the child is created, and the child runs on.
#[tokio::test]
#[ignore = "needs cluster"]
async fn without_wait_the_step_succeeds_with_the_child_id() {
    let api = TestApi::start("sub-nowait").await;
    let key = api.admin_key.clone();
    let child = api
        .workflow(&WorkflowBuilder::new("bg").step(json!({"id": "gate", "action": "approval"})))
        .await;
    let parent = api
        .workflow(&WorkflowBuilder::new("fire").step(call("go", &child, json!({"wait": false}))))
        .await;
    let _op = operator(&api).await;
    let run = api.start_run(&key, &parent, None).await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    let kid = view["steps"][0]["output"]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(view["steps"][0]["output"], json!({"run_id": kid}));
    let seen: Value = api
        .get(&key, &format!("/v1/runs/{kid}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(seen["status"], "running", "the child runs on: {seen}");
    assert_eq!(seen["parent_run_id"], run.as_str());
}

/// A workflow that calls itself stops at the depth bound with a clear error, and every
/// run of the chain ends.
#[tokio::test]
#[ignore = "needs cluster"]
async fn recursion_stops_at_the_depth_bound() {
    let api = TestApi::start("sub-depth").await;
    let key = api.admin_key.clone();
    let id = api.workflow(&WorkflowBuilder::new("self")).await;
    api.patch_workflow(&key, &id, json!({"steps": [call("again", &id, json!({}))]}))
        .await;
    let _op = operator(&api).await;
    let run = api.start_run(&key, &id, None).await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "failed", "{view}");
    let error = view["error"].as_str().unwrap();
    assert!(
        error.contains("workflow call depth exceeds 10"),
        "the deepest call's error reaches the top: {error}"
    );
    let runs: Vec<Run> = api
        .ns
        .api::<Run>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(runs.len(), 11, "the top run and ten levels of children");
    assert!(runs.iter().all(|r| r.phase() == RunPhase::Failed));
    let deepest = runs
        .iter()
        .filter_map(|r| r.spec.parent.as_ref().map(|p| p.depth))
        .max();
    assert_eq!(deepest, Some(10));
}

/// A paused workflow cannot be called: the step fails naming its state.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_paused_workflow_cannot_be_called() {
    let api = TestApi::start("sub-paused").await;
    let key = api.admin_key.clone();
    let child = api
        .workflow(&WorkflowBuilder::new("off").state("paused"))
        .await;
    let parent = api
        .workflow(&WorkflowBuilder::new("caller").step(call("go", &child, json!({}))))
        .await;
    let _op = operator(&api).await;
    let run = api.start_run(&key, &parent, None).await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(
        view["error"],
        format!(
            "step go (workflow) failed: workflow {child} is paused: a child run needs a draft \
             or active workflow"
        ),
        "{view}"
    );
    assert!(children(&api, &run).await.is_empty());
}

/// A child that ends while another branch of its parent still runs is settled at once
/// by the executing parent (the controller passes the child's end on), not when the
/// parent parks: the call finishes long before the slow branch.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_child_ending_while_other_branches_run_is_settled_at_once() {
    let api = TestApi::start("sub-branch").await;
    let key = api.admin_key.clone();
    let child = api
        .workflow(&WorkflowBuilder::new("quick").step(json!(
            {"id": "hi", "action": "transform", "with": {"value": "hi"}})))
        .await;
    let parent = api
        .workflow(&WorkflowBuilder::new("branches").steps(json!([
            call("call", &child, json!({})),
            {"id": "slow", "action": "delay", "with": {"ms": 8000}},
            {"id": "join", "action": "transform", "needs": ["call", "slow"],
             "with": {"value": "{{ steps.call.output.status }}"}}
        ])))
        .await;
    let _op = operator(&api).await;
    let run = api.start_run(&key, &parent, None).await;
    let runs = api.ns.api::<Run>();
    // While `slow` still runs, the call has succeeded.
    eventually(
        "the call to succeed while slow runs",
        Duration::from_secs(30),
        || async {
            let r = runs.get(&run).await.ok()?;
            let steps = &r.status.as_ref()?.steps;
            let call = steps.iter().find(|s| s.step_id == "call")?;
            let slow = steps.iter().find(|s| s.step_id == "slow")?;
            (call.status == StepPhase::Succeeded && slow.status == StepPhase::Running).then_some(())
        },
    )
    .await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(view["steps"][2]["output"], "succeeded", "{view}");
}
