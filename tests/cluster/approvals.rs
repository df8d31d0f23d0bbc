//! `approval` and `wait` steps: a run whose steps wait is parked (no task, no writes)
//! and resumes across operator restarts when a decision arrives or its time comes.

use std::time::Duration;

use flowline_core::crd::{Run, StepPhase};
use serde_json::{Value, json};

use crate::builders::WorkflowBuilder;
use crate::support::{Process, TestApi, assert_error, eventually, ready};

const FINISH: Duration = Duration::from_secs(90);

async fn parked(api: &TestApi, run: &str, step: &str) -> Run {
    crate::support::parked_on(&api.ns, run, step).await
}

fn decision_path(run: &str, step: &str, verdict: &str) -> String {
    format!("/v1/runs/{run}/steps/{step}/{verdict}")
}

/// Kills `first` and starts a new operator for the namespace; returns it once ready.
async fn restart(api: &TestApi, mut first: Process) -> Process {
    first.kill();
    let (second, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    second
}

async fn operator(api: &TestApi) -> Process {
    let (op, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    op
}

/// A run of an approval-then-echo workflow (`timeout_ms` on the approval), parked on
/// its approval while one operator ran, then that operator killed and another
/// started: every decision below reaches an operator that never saw the run execute.
struct ParkedAcrossRestart {
    api: TestApi,
    key: String,
    run: String,
    waiting: Run,
    _operator: Process,
}

async fn parked_across_restart(test: &str, timeout_ms: Option<u64>) -> ParkedAcrossRestart {
    let api = TestApi::start(test).await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new(test).steps(approval_then_echo(timeout_ms)))
        .await;
    let first = operator(&api).await;
    let run = api.start_run(&key, &wf, None).await;
    let waiting = parked(&api, &run, "ok").await;
    let operator = restart(&api, first).await;
    ParkedAcrossRestart {
        api,
        key,
        run,
        waiting,
        _operator: operator,
    }
}

/// Decides step `ok` of `p`'s run (`verdict`: approve or reject) with `comment`; the
/// API must accept it.
async fn decide(p: &ParkedAcrossRestart, verdict: &str, comment: &str) -> Value {
    decided(
        &p.api,
        &p.key,
        &p.run,
        verdict,
        Some(json!({ "comment": comment })),
    )
    .await
}

/// Approves step `ok` of `run` and waits until the run has succeeded.
async fn approved_to_the_end(api: &TestApi, key: &str, run: &str) {
    decided(api, key, run, "approve", None).await;
    let view = api.finished_view(key, run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
}

/// Sends a decision on step `ok` of `run`; the API must accept it. Returns the run.
async fn decided(api: &TestApi, key: &str, run: &str, verdict: &str, body: Option<Value>) -> Value {
    let res = api
        .send("POST", key, &decision_path(run, "ok", verdict), body)
        .await;
    assert_eq!(
        res.status(),
        200,
        "{}",
        res.text().await.unwrap_or_default()
    );
    res.json().await.unwrap()
}

fn approval_then_echo(timeout_ms: Option<u64>) -> Value {
    let with = match timeout_ms {
        Some(ms) => json!({ "timeout_ms": ms }),
        None => json!({}),
    };
    json!([
        {"id": "ok", "action": "approval", "with": with},
        {"id": "after", "action": "transform",
         "with": {"value": {"by": "{{ steps.ok.output.by }}", "comment": "{{ steps.ok.output.comment }}"}}},
    ])
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn an_approval_approved_after_an_operator_restart_lets_the_run_go_on() {
    let p = parked_across_restart("appr-yes", None).await;
    let (api, key, run) = (&p.api, &p.key, &p.run);
    let view = decide(&p, "approve", "ship it").await;
    assert_eq!(view["id"], run.as_str(), "{view}");

    let view = api.finished_view(key, run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    let ok = &view["steps"][0];
    assert_eq!(ok["status"], "succeeded", "{view}");
    assert_eq!(ok["output"]["approved"], true, "{view}");
    assert_eq!(ok["output"]["comment"], "ship it", "{view}");
    let by = ok["output"]["by"].as_str().expect("who decided");
    assert!(!by.is_empty() && by != "unknown", "{view}");
    assert!(ok["output"]["at"].is_string(), "{view}");
    assert_eq!(
        view["steps"][1]["output"],
        json!({"by": by, "comment": "ship it"})
    );
    // Decided once: a second decision is refused.
    let again = api
        .send("POST", key, &decision_path(run, "ok", "reject"), None)
        .await;
    assert_error(again, 409, "step_not_waiting").await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn an_approval_rejected_after_an_operator_restart_fails_the_run() {
    let p = parked_across_restart("appr-no", None).await;
    decide(&p, "reject", "not on a Friday").await;
    let view = p.api.finished_view(&p.key, &p.run, FINISH).await;
    assert_eq!(view["status"], "failed", "{view}");
    let error = view["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("step ok (approval) failed: rejected by ")
            && error.ends_with(": not on a Friday"),
        "{error}"
    );
    assert_eq!(view["steps"][0]["status"], "failed");
    assert_eq!(view["steps"][0]["attempts"], 1, "no retries for approvals");
    assert_eq!(view["steps"][1]["status"], "pending");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn an_approval_times_out_across_an_operator_restart() {
    let p = parked_across_restart("appr-late", Some(3000)).await;
    assert!(
        p.waiting.status.as_ref().unwrap().steps[0]
            .wake_at
            .is_some(),
        "its timeout is recorded"
    );
    let view = p.api.finished_view(&p.key, &p.run, FINISH).await;
    assert_eq!(view["status"], "failed", "{view}");
    assert_eq!(
        view["error"], "step ok (approval) failed: approval timed out after 3000 ms",
        "{view}"
    );
}

/// kubectl shows the run waiting (the Succeeded condition's reason), and a decision
/// patched into `spec.approvals` with kubectl resumes it.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_decision_patched_with_kubectl_resumes_the_run() {
    let api = TestApi::start("appr-kubectl").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("GitOps approval").steps(approval_then_echo(None)))
        .await;
    let _op = operator(&api).await;
    let run = api.start_run(&key, &wf, None).await;
    parked(&api, &run, "ok").await;
    let shown = api.ns.kubectl(&["get", "runs", &run, "--no-headers"]);
    let line = crate::support::text(&shown.stdout);
    assert!(
        line.contains("running") && line.contains("Waiting"),
        "{line}"
    );
    let wide = api.ns.kubectl(&["get", "runs", &run, "-o", "wide"]);
    assert!(
        crate::support::text(&wide.stdout).contains("WAITING-FOR"),
        "{}",
        crate::support::text(&wide.stdout)
    );

    let patch = r#"[{"op": "add", "path": "/spec/approvals", "value": [{"stepId": "ok", "decision": "approve", "comment": "lgtm", "by": "alice"}]}]"#;
    let out = api
        .ns
        .kubectl(&["patch", "run", &run, "--type=json", "-p", patch]);
    assert!(
        out.status.success(),
        "{}",
        crate::support::text(&out.stderr)
    );
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(
        view["steps"][1]["output"],
        json!({"by": "alice", "comment": "lgtm"})
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_wait_completes_across_an_operator_restart() {
    let api = TestApi::start("wait-restart").await;
    let key = api.admin_key.clone();
    let wf = api.workflow(&WorkflowBuilder::new("Nap").steps(json!([
            {"id": "nap", "action": "wait", "with": {"ms": 2000}},
            {"id": "after", "action": "transform", "with": {"value": "{{ steps.nap.output.waited_until }}"}},
        ])))
    .await;
    let first = operator(&api).await;
    let run = api.start_run(&key, &wf, None).await;
    let waiting = parked(&api, &run, "nap").await;
    let record = &waiting.status.as_ref().unwrap().steps[0];
    let (started, wake) = (record.started_at.unwrap(), record.wake_at.unwrap());
    assert_eq!(wake.as_millisecond() - started.as_millisecond(), 2000);
    let _second = restart(&api, first).await;

    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(view["steps"][0]["output"]["waited_until"], wake.to_string());
    assert_eq!(view["steps"][1]["output"], wake.to_string());
    assert_eq!(view["steps"][0]["interruptions"], Value::Null, "{view}");
}

/// A wait without a restart: the controller wakes the parked run at its time.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_parked_wait_is_woken_at_its_time() {
    let api = TestApi::start("wait-wake").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("Until").steps(
            json!([{"id": "nap", "action": "wait", "with": {"until": "{{ trigger.payload.at }}"}}]),
        ))
        .await;
    let _op = operator(&api).await;
    // Far enough ahead that the run parks first even on a loaded machine.
    let until = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(6))
        .unwrap();
    let run = api
        .start_run(
            &key,
            &wf,
            Some(json!({"payload": {"at": until.to_string()}})),
        )
        .await;
    parked(&api, &run, "nap").await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    let finished: jiff::Timestamp = view["finished_at"].as_str().unwrap().parse().unwrap();
    assert!(finished >= until, "not before its time");
    assert_eq!(
        view["steps"][0]["output"]["waited_until"],
        until.to_string()
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn cancelling_a_parked_run_cancels_it_at_once() {
    let api = TestApi::start("wait-cancel").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("Cancel me").steps(
            json!([{"id": "nap", "action": "wait", "with": {"ms": 600_000}},
               {"id": "after", "action": "transform", "with": {"value": 1}}]),
        ))
        .await;
    let _op = operator(&api).await;
    let run = api.start_run(&key, &wf, None).await;
    parked(&api, &run, "nap").await;
    let res = api
        .send("POST", &key, &format!("/v1/runs/{run}/cancel"), None)
        .await;
    assert_eq!(res.status(), 202);
    let view = api.finished_view(&key, &run, Duration::from_secs(10)).await;
    assert_eq!(view["status"], "cancelled", "{view}");
    assert_eq!(view["steps"][0]["status"], "cancelled", "{view}");
    assert_eq!(view["steps"][1]["status"], "cancelled", "{view}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn decisions_are_refused_where_nothing_waits_for_one() {
    let api = TestApi::start("appr-errors").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(
            &WorkflowBuilder::new("Errors").steps(json!([{"id": "ok", "action": "approval"},
               {"id": "t", "action": "transform", "with": {"value": 1}}])),
        )
        .await;
    let _op = operator(&api).await;
    let run = api.start_run(&key, &wf, None).await;
    parked(&api, &run, "ok").await;
    let post = |path: String, body: Option<Value>| {
        let api = &api;
        let key = key.clone();
        async move { api.send("POST", &key, &path, body).await }
    };
    assert_error(
        post(decision_path("run-nosuchrun1", "ok", "approve"), None).await,
        404,
        "run_not_found",
    )
    .await;
    assert_error(
        post(decision_path(&run, "ghost", "approve"), None).await,
        404,
        "step_not_found",
    )
    .await;
    assert_error(
        post(decision_path(&run, "t", "approve"), None).await,
        409,
        "step_not_waiting",
    )
    .await;
    assert_error(
        post(
            decision_path(&run, "ok", "approve"),
            Some(json!({"comment": "x".repeat(1001)})),
        )
        .await,
        400,
        "validation_error",
    )
    .await;
    // A key without the execute scope.
    let reader =
        crate::support::new_key(&api.ns, &[flowline_api::plumbing::auth::Scope::Read]).await;
    api.await_key(&reader).await;
    let res = api
        .send("POST", &reader, &decision_path(&run, "ok", "approve"), None)
        .await;
    assert_error(res, 403, "insufficient_scope").await;
    // Once the run has finished, nothing waits.
    let res = post(format!("/v1/runs/{run}/cancel"), None).await;
    assert_eq!(res.status(), 202);
    api.finished_view(&key, &run, Duration::from_secs(10)).await;
    assert_error(
        post(decision_path(&run, "ok", "approve"), None).await,
        409,
        "step_not_waiting",
    )
    .await;
}

/// A parked run costs no writes: once its status says it waits, its resourceVersion
/// stays the same while the controller looks at it again on its resync.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_waiting_run_is_not_written_while_it_waits() {
    let api = TestApi::start("appr-quiet").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("Quiet").steps(approval_then_echo(Some(600_000))))
        .await;
    let (_op, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let run = api.start_run(&key, &wf, None).await;
    let seen = parked(&api, &run, "ok").await;
    let version = seen.metadata.resource_version.clone();
    // Not a quiet period but the controller's own count of its reconciles of runs (the
    // only run here is this one). At most two can be owed to what happened before it
    // parked (one under way, one pending: the controller merges the triggers of one
    // object), so the third one from now is a resync of the parked run.
    let reconciles = move || async move {
        let text = crate::support::metrics_text(port).await?;
        text.lines()
            .find_map(|l| {
                l.strip_prefix("flowline_reconcile_duration_seconds_count{controller=\"run\"} ")
            })
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let before = reconciles()
        .await
        .expect("the operator counts its reconciles");
    eventually(
        "the controller to look at the parked run again (its resync)",
        3 * flowline_controller::run::RESYNC_UNFINISHED + Duration::from_secs(30),
        || async { (reconciles().await? >= before + 3.0).then_some(()) },
    )
    .await;
    let now = api.ns.api::<Run>().get(&run).await.unwrap();
    assert_eq!(
        now.metadata.resource_version, version,
        "the parked run was written while it waited"
    );
    // Still decidable afterwards.
    approved_to_the_end(&api, &key, &run).await;
}

/// In a graph, the other branches run on while a step waits: a `wait` whose time comes
/// while a longer branch runs completes in the same execution, and the run parks on
/// the approval only once nothing else can progress.
#[tokio::test]
#[ignore = "needs cluster"]
async fn other_branches_run_on_while_a_step_waits() {
    let api = TestApi::start("appr-graph").await;
    let key = api.admin_key.clone();
    let wf = api.workflow(&WorkflowBuilder::new("Branches").steps(json!([
            {"id": "go", "action": "transform", "with": {"value": 1}},
            {"id": "ok", "action": "approval", "needs": ["go"]},
            {"id": "nap", "action": "wait", "needs": ["go"], "with": {"ms": 300}},
            {"id": "slow", "action": "delay", "needs": ["go"], "with": {"ms": 2500}},
            {"id": "end", "action": "transform", "needs": ["ok", "nap", "slow"], "with": {"value": 2}},
        ])))
    .await;
    let _op = operator(&api).await;
    let run = api.start_run(&key, &wf, None).await;
    let seen = parked(&api, &run, "ok").await;
    let steps = &seen.status.as_ref().unwrap().steps;
    let (nap, slow) = (&steps[2], &steps[3]);
    assert_eq!(nap.status, StepPhase::Succeeded, "{steps:?}");
    assert_eq!(slow.status, StepPhase::Succeeded, "{steps:?}");
    assert!(
        nap.finished_at < slow.finished_at,
        "the wait ended while the slow branch ran: {steps:?}"
    );
    assert_eq!(steps[4].status, StepPhase::Pending);
    approved_to_the_end(&api, &key, &run).await;
}

/// `forEach` over an approval is refused where the workflow is written (the API: 400
/// on the field; kubectl: `Ready=False InvalidSpec`); examples/approval.yaml is sound.
#[tokio::test]
#[ignore = "needs cluster"]
async fn for_each_over_an_approval_is_refused_when_written() {
    use crate::spec_errors::ready_condition;
    use flowline_core::crd::ConditionStatus;
    let api = TestApi::start("appr-spec").await;
    let key = api.admin_key.clone();
    let wf = api.create_workflow("Fan-out gate").await;
    let res = api
        .send(
            "PATCH",
            &key,
            &format!("/v1/workflows/{wf}"),
            Some(json!({"steps": [{"id": "ok", "action": "approval", "for_each": "{{ trigger.payload.xs }}"}]})),
        )
        .await;
    let body = assert_error(res, 400, "validation_error").await;
    assert_eq!(
        body["error"]["details"][0]["field"], "steps[0].for_each",
        "{body}"
    );
    let res = api
        .send(
            "PATCH",
            &key,
            &format!("/v1/workflows/{wf}"),
            Some(json!({"steps": [{"id": "nap", "action": "wait", "with": {"ms": 1, "until": "2026-01-01T00:00:00Z"}}]})),
        )
        .await;
    assert_error(res, 400, "validation_error").await;

    let _op = operator(&api).await;
    let fanned = WorkflowBuilder::new("fanned")
        .active()
        .step(json!({"id": "ok", "action": "approval", "forEach": "{{ trigger.payload.xs }}"}));
    let out = api.ns.kubectl_apply(&fanned.manifest());
    assert!(
        out.status.success(),
        "{}",
        crate::support::text(&out.stderr)
    );
    let (status, reason, message) = ready_condition(&api.ns, "fanned").await;
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "InvalidSpec")
    );
    assert!(message.contains("steps[0].for_each"), "{message}");
    let example =
        std::fs::read_to_string(crate::support::repo_root().join("examples/approval.yaml"))
            .unwrap();
    let out = api.ns.kubectl_apply(&example);
    assert!(
        out.status.success(),
        "{}",
        crate::support::text(&out.stderr)
    );
    let (status, reason, message) = ready_condition(&api.ns, "release-gate").await;
    assert_eq!(status, ConditionStatus::True, "{reason}: {message}");
}

/// A parked run is `running`: it keeps its concurrency slot, so the next run of a
/// `limit: 1` workflow stays queued until the parked one is decided and finishes.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_parked_run_keeps_its_concurrency_slot() {
    let api = TestApi::start("appr-slot").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(
            &WorkflowBuilder::new("One at a time")
                .concurrency(1)
                .steps(json!([{"id": "ok", "action": "approval"}])),
        )
        .await;
    let _op = operator(&api).await;
    let first = api.start_run(&key, &wf, None).await;
    parked(&api, &first, "ok").await;
    let second = api.start_run(&key, &wf, None).await;
    let runs = api.ns.api::<Run>();
    // Recorded once its wait has settled (`/v1` shows it queued before that), and
    // then visible to kubectl with what it waits for.
    eventually(
        "the second run to be recorded queued",
        Duration::from_secs(60),
        || async {
            let r = runs.get(&second).await.ok()?;
            (r.phase() == flowline_core::crd::RunPhase::Queued).then_some(())
        },
    )
    .await;
    let out = api.ns.kubectl(&["get", "runs", &second, "-o", "wide"]);
    let wide = crate::support::text(&out.stdout);
    assert!(wide.contains("queued"), "{wide}");
    assert!(
        wide.contains("concurrency"),
        "the Queued-For column: {wide}"
    );
    let res = api
        .send("POST", &key, &decision_path(&first, "ok", "approve"), None)
        .await;
    assert_eq!(
        res.status(),
        200,
        "{}",
        res.text().await.unwrap_or_default()
    );
    let view = api.finished_view(&key, &first, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    // Its slot passes on: the second run starts, and parks in turn.
    parked(&api, &second, "ok").await;
}

/// A decision made while other branches still run is settled at once (the controller
/// passes it on to the execution), not when the run would park.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_decision_reaches_a_run_that_is_still_executing() {
    let api = TestApi::start("appr-live").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("Live").steps(json!([
            {"id": "ok", "action": "approval"},
            {"id": "slow", "action": "delay", "needs": [], "with": {"ms": 6000}},
            {"id": "end", "action": "transform", "needs": ["ok", "slow"], "with": {"value": 1}},
        ])))
        .await;
    let _op = operator(&api).await;
    let run = api.start_run(&key, &wf, None).await;
    let runs = api.ns.api::<Run>();
    eventually(
        "ok to wait while slow runs",
        Duration::from_secs(30),
        || async {
            let r = runs.get(&run).await.ok()?;
            let steps = &r.status.as_ref()?.steps;
            (steps[0].status == StepPhase::Waiting && steps[1].status == StepPhase::Running)
                .then_some(())
        },
    )
    .await;
    let res = api
        .send("POST", &key, &decision_path(&run, "ok", "approve"), None)
        .await;
    assert_eq!(
        res.status(),
        200,
        "{}",
        res.text().await.unwrap_or_default()
    );
    eventually(
        "ok to succeed while slow still runs",
        Duration::from_secs(5),
        || async {
            let r = runs.get(&run).await.ok()?;
            let steps = &r.status.as_ref()?.steps;
            assert_eq!(
                steps[1].status,
                StepPhase::Running,
                "slow ended first: {steps:?}"
            );
            (steps[0].status == StepPhase::Succeeded).then_some(())
        },
    )
    .await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
}
