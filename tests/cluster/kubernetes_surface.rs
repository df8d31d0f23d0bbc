//! The kinds as kubectl users and generic tools see them: the `Succeeded` condition of
//! a Run (`kubectl wait`), phase and workflow labels (`kubectl get -l`), printer
//! columns, and a Webhook's `Ready` condition and observed generation. Everything
//! here goes through kubectl against an operator process, as a cluster admin would.

use serde_json::json;

use crate::builders::{RunBuilder, WorkflowBuilder, step};
use crate::support::{Process, TestNamespace, ready, text};

fn applied(ns: &TestNamespace, manifest: &str) {
    let out = ns.kubectl_apply(manifest);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A namespace with an operator process reconciling it, ready.
async fn operated(prefix: &str) -> (TestNamespace, Process) {
    let ns = TestNamespace::new(prefix).await;
    let (operator, port) = Process::operator(&ns, &[]);
    ready(port).await;
    (ns, operator)
}

/// `kubectl wait … --for=<condition> <object>` in `ns`; the output when it held.
fn wait_for(ns: &TestNamespace, condition: &str, object: &str) -> String {
    let out = ns.kubectl(&["wait", "--timeout=90s", "--for", condition, object]);
    assert!(
        out.status.success(),
        "kubectl wait --for {condition} {object}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn get(ns: &TestNamespace, args: &[&str]) -> String {
    let out = ns.kubectl(&[&["get"], args].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn kubectl_waits_for_runs_and_selects_them_by_phase_and_workflow() {
    let (ns, _operator) = operated("k8s-runs").await;
    let works = WorkflowBuilder::new("works")
        .active()
        .step(step::transform("only", json!(1)));
    let breaks = WorkflowBuilder::new("breaks")
        .active()
        .step(step::fail("only", "boom"));
    applied(&ns, &works.manifest());
    applied(&ns, &breaks.manifest());
    applied(&ns, &RunBuilder::of(&works).name("works-1").manifest());
    applied(&ns, &RunBuilder::of(&breaks).name("breaks-1").manifest());

    wait_for(&ns, "condition=Succeeded", "run/works-1");
    wait_for(&ns, "condition=Succeeded=False", "run/breaks-1");
    let reason = get(
        &ns,
        &[
            "run/breaks-1",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Succeeded")].reason}|{.status.conditions[?(@.type=="Succeeded")].message}|{.status.observedGeneration}|{.metadata.generation}"#,
        ],
    );
    let parts: Vec<&str> = reason.split('|').collect();
    assert_eq!(parts[0], "Failed");
    assert!(parts[1].contains("boom"), "the run's error: {}", parts[1]);
    assert_eq!(
        parts[2], parts[3],
        "observedGeneration is the Run's generation"
    );

    // Runs are selected by their phase and workflow as fields (selectableFields).
    crate::support::eventually(
        "the field selectors to find the runs by phase",
        std::time::Duration::from_secs(30),
        || async {
            let failed = get(
                &ns,
                &[
                    "runs",
                    "--field-selector",
                    "status.phase=failed",
                    "-o",
                    "name",
                ],
            );
            let succeeded = get(
                &ns,
                &[
                    "runs",
                    "--field-selector",
                    "status.phase=succeeded,spec.workflowRef=works",
                    "-o",
                    "name",
                ],
            );
            // The workflow label is added to a run created with kubectl.
            let labelled = get(
                &ns,
                &["runs", "-l", "flowline.io/workflow=works", "-o", "name"],
            );
            (failed.trim() == "run.flowline.io/breaks-1"
                && succeeded.trim() == "run.flowline.io/works-1"
                && labelled.trim() == "run.flowline.io/works-1")
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        get(
            &ns,
            &[
                "runs",
                "--field-selector",
                "status.phase=running",
                "-o",
                "name"
            ]
        )
        .trim(),
        "",
        "no run is left running"
    );

    let table = get(&ns, &["runs"]);
    let header = table.lines().next().unwrap_or_default();
    for column in ["STATUS", "REASON", "STARTED", "COMPLETED"] {
        assert!(header.contains(column), "{column} in {header}");
    }
    let failed_row = table.lines().find(|l| l.starts_with("breaks-1")).unwrap();
    assert!(
        failed_row.contains("failed") && failed_row.contains("Failed"),
        "{failed_row}"
    );
    let wide = get(&ns, &["runs", "-o", "wide"]);
    assert!(
        wide.lines().next().unwrap_or_default().contains("WORKFLOW"),
        "{wide}"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_webhook_is_ready_for_its_current_generation() {
    let (ns, _operator) = operated("k8s-hook").await;
    let hook = |events: &str| {
        format!(
            "apiVersion: flowline.io/v1\nkind: Webhook\nmetadata:\n  name: wh\nspec:\n  url: https://receiver.example.com/hook\n  events: [{events}]\n"
        )
    };
    applied(&ns, &hook("run.failed"));
    wait_for(&ns, "condition=Ready", "webhook/wh");
    wait_for(&ns, "jsonpath={.status.observedGeneration}=1", "webhook/wh");
    applied(&ns, &hook("run.failed, run.succeeded"));
    wait_for(&ns, "jsonpath={.status.observedGeneration}=2", "webhook/wh");
    let ready_column = get(
        &ns,
        &[
            "webhooks",
            "wh",
            "--no-headers",
            "-o",
            "custom-columns=R:.status.conditions[0].reason",
        ],
    );
    assert_eq!(ready_column.trim(), "Delivering");
    // The default columns read as words, not as a JSON array.
    let table = get(&ns, &["webhooks", "wh"]);
    let header = table.lines().next().unwrap_or_default();
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(
        header.contains("EVENTS") && header.contains("AGE"),
        "{table}"
    );
    assert!(
        row.contains("run.failed,run.succeeded") && !row.contains('['),
        "{table}"
    );
}
