//! The operator as real processes: two replicas execute each run once, and a run
//! interrupted by a killed operator ends correctly after a restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use flowline_core::crd::RunPhase;
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::json;

use crate::builders::{RunBuilder, WorkflowBuilder, step};
use crate::support::{Process, TestNamespace, eventually, ready};

/// An operator whose steps may reach the local test endpoint (loopback is refused by
/// default).
fn operator(ns: &TestNamespace) -> (Process, u16) {
    Process::operator(ns, &["--allow-cidr", "127.0.0.1/32"])
}

/// A local endpoint that counts its calls.
async fn counter() -> (String, Arc<AtomicU32>) {
    let hits = Arc::new(AtomicU32::new(0));
    let seen = hits.clone();
    let app = axum::Router::new().route(
        "/hit",
        axum::routing::post(move || {
            seen.fetch_add(1, Ordering::SeqCst);
            async { "ok" }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hit", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, hits)
}

/// Creates the workflow and `runs` Runs of it (`r-0`, `r-1`…); returns their names.
pub(crate) async fn create(ns: &TestNamespace, wf: &WorkflowBuilder, runs: usize) -> Vec<String> {
    ns.create_workflow(wf).await;
    more_runs(ns, wf, 0..runs).await
}

/// Creates the Runs `r-<i>` of `wf` for each i of `range`; returns their names.
async fn more_runs(
    ns: &TestNamespace,
    wf: &WorkflowBuilder,
    range: std::ops::Range<usize>,
) -> Vec<String> {
    let mut names = Vec::new();
    for i in range {
        let run = RunBuilder::of(wf.name()).name(format!("r-{i}"));
        names.push(ns.create_run(&run).await);
    }
    names
}

/// Runs the process serving `port` is executing now (`flowline_runs_in_progress`).
async fn in_progress(port: u16) -> Option<u64> {
    crate::support::gauge(port, "flowline_runs_in_progress").await
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn two_replicas_execute_each_run_once() {
    let ns = TestNamespace::new("rep-two").await;
    let (url, hits) = counter().await;
    let (_a, port_a) = operator(&ns);
    let (_b, port_b) = operator(&ns);
    ready(port_a).await;
    ready(port_b).await;
    let wf = WorkflowBuilder::new("count")
        .display_name("Count")
        .step(step::http("hit", "POST", &url));
    let names = create(&ns, &wf, 12).await;
    crate::support::all_succeeded(&ns, &names, Duration::from_secs(60)).await;
    // A later marker run instead of a pause before counting: whichever replica executes
    // it has seen, in the watch's order, the twelve finish before the marker was
    // created, so it has no reason left to execute one of them again; and once the
    // marker is done neither replica reports a run in progress. (Strong, not strict: it
    // cannot see a reconcile still queued in the replica that does not lead.)
    let marker = more_runs(&ns, &wf, 12..13).await;
    crate::support::all_succeeded(&ns, &marker, Duration::from_secs(60)).await;
    for port in [port_a, port_b] {
        eventually(
            "both replicas to execute nothing",
            Duration::from_secs(30),
            || async { (in_progress(port).await? == 0).then_some(()) },
        )
        .await;
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        13,
        "each run executed exactly once (the twelve and the marker)"
    );
    let lease = ns.api::<Lease>().get("flowline-controller").await.unwrap();
    assert!(
        lease
            .spec
            .unwrap()
            .holder_identity
            .is_some_and(|h| !h.is_empty())
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_run_interrupted_by_a_killed_operator_ends_after_a_restart() {
    let ns = TestNamespace::new("rep-kill").await;
    let (mut first, port) = operator(&ns);
    ready(port).await;
    let wf = WorkflowBuilder::new("slow")
        .display_name("Slow")
        .steps(json!([
            step::transform("before", json!(1)),
            step::delay("wait", 3000),
            step::transform("after", json!("{{ steps.before.output }}")),
        ]));
    let names = create(&ns, &wf, 1).await;
    crate::support::step_running(&ns, &names[0], "wait").await;
    first.kill(); // SIGKILL: no cleanup, the lease stays until it expires

    let (_second, port) = operator(&ns);
    ready(port).await;
    let run = crate::support::finished_run(&ns, &names[0], Duration::from_secs(60)).await;
    let status = run.status.unwrap();
    assert_eq!(status.phase, RunPhase::Succeeded, "{:?}", status.error);
    let wait = status.steps.iter().find(|s| s.step_id == "wait").unwrap();
    // No retry policy: the interrupted attempt is executed again under its number and
    // uses no retry budget (it used to fail the run with "attempt interrupted").
    assert_eq!(
        (wait.attempts, wait.interruptions),
        (1, 1),
        "the interrupted attempt ran again as attempt 1"
    );
    let before = status.steps.iter().find(|s| s.step_id == "before").unwrap();
    assert_eq!(before.attempts, 1, "completed steps are not repeated");
    assert_eq!(
        status
            .steps
            .iter()
            .find(|s| s.step_id == "after")
            .unwrap()
            .output,
        Some(json!(1))
    );
}

/// `--no-api`: the controller process serves health and metrics, but not `/v1`.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_controller_without_the_api_serves_no_v1() {
    let ns = TestNamespace::new("no-api").await;
    let (_operator, port) = Process::operator(&ns, &["--no-api"]);
    ready(port).await;
    assert_eq!(
        crate::foundation::http_status(port, "/v1/openapi.json"),
        Some(404)
    );
    assert_eq!(crate::foundation::http_status(port, "/healthz"), Some(200));
    assert_eq!(crate::foundation::http_status(port, "/metrics"), Some(200));
}
