//! Hostile-tenant tests: `workflow` steps. A workflow author calls another account's
//! workflow by its id, and fans out more child runs than a step may start.

use std::time::Duration;

use flowline_core::crd::{Run, labels};
use kube::api::ListParams;
use serde_json::json;

use crate::builders::WorkflowBuilder;
use crate::support::{Process, TestApi, ready};

const FINISH: Duration = Duration::from_secs(60);

/// Another account's workflow id reads exactly as a made-up one: the call fails with
/// the same error, and the other account gets no run.
#[tokio::test]
#[ignore = "needs cluster"]
async fn another_accounts_workflow_is_not_found_like_an_unknown_one() {
    let victim = TestApi::start("call-victim").await;
    let theirs = victim
        .workflow(&WorkflowBuilder::new("payroll").active())
        .await;
    let attacker = TestApi::start("call-attacker").await;
    let key = attacker.admin_key.clone();
    let (_op, port) = Process::operator(&attacker.ns, &["--no-api"]);
    ready(port).await;
    for target in [theirs.as_str(), "wf-madeup0000"] {
        let caller = attacker
            .workflow(&WorkflowBuilder::new("caller").step(json!(
                {"id": "steal", "action": "workflow", "with": {"workflow": target}})))
            .await;
        let run = attacker.start_run(&key, &caller, None).await;
        let view = attacker.finished_view(&key, &run, FINISH).await;
        assert_eq!(
            view["error"],
            format!("step steal (workflow) failed: workflow {target} not found"),
            "{view}"
        );
    }
    let victims_runs = victim
        .ns
        .api::<Run>()
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(victims_runs.items.is_empty(), "no run in the other account");
}

/// A `forEach` over a `workflow` step starts at most 100 children: 101 elements fail
/// the step before any child exists.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_fan_out_over_the_bound_starts_no_child() {
    let api = TestApi::start("call-bomb").await;
    let key = api.admin_key.clone();
    let child = api.workflow(&WorkflowBuilder::new("leaf")).await;
    let parent = api
        .workflow(&WorkflowBuilder::new("bomb").step(json!({
            "id": "each", "action": "workflow", "for_each": "{{ trigger.payload.items }}",
            "with": {"workflow": child}})))
        .await;
    let (_op, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let items: Vec<u32> = (0..101).collect();
    let run = api
        .start_run(&key, &parent, Some(json!({"payload": {"items": items}})))
        .await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(
        view["error"],
        "step each (workflow) failed: forEach rendered 101 elements; a workflow step starts \
         at most 100 child runs",
        "{view}"
    );
    let selector = format!("{}={run}", labels::PARENT_RUN);
    let kids = api
        .ns
        .api::<Run>()
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap();
    assert!(kids.items.is_empty());
}
