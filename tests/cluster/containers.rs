//! Container steps on the local cluster's real node (containerd and runc): exit codes,
//! env and Secrets, outputs, the restricted pod settings, memory and time limits,
//! cancel, and many steps at once. They need `make cluster` with its real node (the
//! default) and the images `make images` imports.

use std::time::Duration;

use flowline_core::crd::{Run, RunPhase, StepPhase};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ListParams, PostParams};

use crate::builders::{RunBuilder, WorkflowBuilder};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{TestNamespace, eventually, finished_run, loopback_client};

use crate::support::{TOOLBOX, step_image};

struct Node {
    ns: TestNamespace,
    stop: CancellationToken,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn node(prefix: &str) -> Node {
    node_with(prefix, |_| {}).await
}

async fn node_with(
    prefix: &str,
    tune: impl FnOnce(&mut flowline_engine::job::JobSettings),
) -> Node {
    let ns = TestNamespace::new(prefix).await;
    let mut jobs = flowline_engine::job::JobSettings {
        step_image: step_image(),
        ..Default::default()
    };
    tune(&mut jobs);
    let (stop, _) = crate::support::spawn_run_controller(&ns, loopback_client(), jobs);
    Node { ns, stop }
}

impl Node {
    /// A workflow of `steps`, run as Jobs, and one run of it; its name.
    async fn run(&self, name: &str, steps: Value) -> String {
        self.run_of(WorkflowBuilder::new(name).executor("job").steps(steps))
            .await
    }

    async fn run_of(&self, wf: WorkflowBuilder) -> String {
        self.ns.create_workflow(&wf).await;
        self.ns
            .create_run(&RunBuilder::of(&wf).name(wf.name()))
            .await
    }

    async fn finished(&self, name: &str) -> Run {
        finished_run(&self.ns, name, Duration::from_secs(120)).await
    }
}

fn container(id: &str, script: &str) -> Value {
    json!({"id": id, "action": "container",
           "with": {"image": TOOLBOX, "command": ["sh", "-c", script]}})
}

fn step_error(run: &Run) -> String {
    run.status
        .as_ref()
        .and_then(|s| s.steps.iter().find_map(|s| s.error.clone()))
        .unwrap_or_default()
}

fn output(run: &Run, step: &str) -> Value {
    let status = run.status.as_ref().unwrap();
    let record = status.steps.iter().find(|s| s.step_id == step).unwrap();
    assert_eq!(record.status, StepPhase::Succeeded, "{:?}", record.error);
    record.output.clone().unwrap_or(Value::Null)
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_container_gets_its_env_and_secret_and_fails_with_its_exit_code_and_log() {
    let n = node("ctr-exit").await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "crm", "labels": {"flowline.io/workflow-access": "true"}},
        "stringData": {"token": "t0k3n-value"}
    }))
    .unwrap();
    n.ns.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let run = n
        .run(
            "exit",
            json!([{"id": "s", "action": "container", "with": {
                "image": TOOLBOX,
                "command": ["sh", "-c", "echo \"greeting=$GREETING token=$TOKEN\"; exit 3"],
                "env": {"GREETING": "hello", "TOKEN": "{{ secrets.crm.token }}"}
            }}]),
        )
        .await;
    let run = n.finished(&run).await;
    assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Failed);
    let error = step_error(&run);
    assert!(error.contains("exited with code 3"), "{error}");
    // The env arrived (the log shows it), and the Secret's value is redacted from the
    // error the Run keeps.
    assert!(error.contains("greeting=hello token="), "{error}");
    assert!(!error.contains("t0k3n-value"), "{error}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_64_kib_output_arrives_whole_and_a_larger_one_fails_the_step() {
    let n = node("ctr-out").await;
    // 65,536 bytes in all: {"data":"aaa…"} with 65,525 a's.
    let write = |a: usize| {
        format!(
            "printf '{{\"data\":\"' > $FLOWLINE_OUTPUT; head -c {a} /dev/zero | tr '\\0' a >> $FLOWLINE_OUTPUT; printf '\"}}' >> $FLOWLINE_OUTPUT"
        )
    };
    let big = n.run("big", json!([container("w", &write(65_525))])).await;
    let too_big = n
        .run("too-big", json!([container("w", &write(65_526))]))
        .await;
    let run = n.finished(&big).await;
    let data = output(&run, "w")["data"].as_str().unwrap().to_string();
    assert_eq!(data.len(), 65_525);
    assert!(data.bytes().all(|b| b == b'a'));
    let run = n.finished(&too_big).await;
    assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Failed);
    let error = step_error(&run);
    assert!(
        error.contains("65537 bytes") && error.contains("65536"),
        "{error}"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn the_restricted_pod_settings_hold_under_a_real_runtime() {
    let n = node("ctr-restricted").await;
    // A small output through the older channel, /dev/termination-log.
    let script = "if touch /x 2>/dev/null; then root=writable; else root=read-only; fi; \
                  touch /tmp/x && tmp=writable; \
                  printf '{\"uid\":\"%s\",\"root\":\"%s\",\"tmp\":\"%s\"}' \"$(id -u)\" $root $tmp > /dev/termination-log";
    let run = n.run("restricted", json!([container("s", script)])).await;
    let run = n.finished(&run).await;
    assert_eq!(
        output(&run, "s"),
        json!({"uid": "65532", "root": "read-only", "tmp": "writable"})
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_container_out_of_memory_is_reported_as_oom_killed() {
    let n = node_with("ctr-oom", |jobs| {
        jobs.resources.memory_limit =
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("32Mi".into());
        jobs.resources.memory_request = jobs.resources.memory_limit.clone();
    })
    .await;
    // A shell variable of 200 MB.
    let run = n
        .run(
            "oom",
            json!([container(
                "s",
                "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo ${#x}"
            )]),
        )
        .await;
    let run = n.finished(&run).await;
    let error = step_error(&run);
    assert!(error.contains("OOMKilled"), "{error}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_timeout_stops_a_sleeping_container() {
    let n = node("ctr-timeout").await;
    let mut step = container("s", "sleep 300");
    step["timeoutMs"] = json!(2000);
    let run = n.run("sleepy", json!([step])).await;
    let run = n.finished(&run).await;
    let error = step_error(&run);
    assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Failed);
    assert!(
        error.contains("did not finish within its timeout"),
        "{error}"
    );
    // The process is stopped, not left sleeping: its pod ends.
    no_running_pods(&n.ns, "sleepy").await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn cancel_deletes_a_running_container() {
    let n = node("ctr-cancel").await;
    let run = n.run("long", json!([container("s", "sleep 300")])).await;
    let pods = n.ns.api::<Pod>();
    let selector = format!("{}=long", flowline_core::crd::labels::RUN);
    eventually("the step's pod to run", Duration::from_secs(60), || async {
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .ok()?;
        list.items
            .iter()
            .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .then_some(())
    })
    .await;
    crate::support::request_cancel(&n.ns, &run).await;
    let run = n.finished(&run).await;
    assert_eq!(run.status.as_ref().unwrap().phase, RunPhase::Cancelled);
    no_running_pods(&n.ns, "long").await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn twenty_container_steps_run_at_once() {
    let n = node("ctr-many").await;
    let steps: Vec<Value> = (0..20)
        .map(|i| {
            container(
                &format!("s{i}"),
                // Long enough to overlap however slowly a busy node starts pods.
                &format!("sleep 5; echo '{{\"i\":{i}}}' > $FLOWLINE_OUTPUT"),
            )
        })
        .collect();
    // A graph: the twenty start together (up to the workflow's parallelism), and a last
    // step needs them all.
    let mut graph = steps;
    graph.push(
        json!({"id": "all", "action": "transform", "with": {"value": "done"},
                      "needs": (0..20).map(|i| format!("s{i}")).collect::<Vec<_>>()}),
    );
    n.run_of(
        WorkflowBuilder::new("many")
            .executor("job")
            .parallelism(20)
            .steps(Value::Array(graph)),
    )
    .await;
    // At some moment, several of them run at the same time on the node.
    let pods = n.ns.api::<Pod>();
    eventually(
        "three step pods running at once",
        Duration::from_secs(90),
        || async {
            let list = pods.list(&ListParams::default()).await.ok()?;
            let running = list
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            (running >= 3).then_some(())
        },
    )
    .await;
    let run = finished_run(&n.ns, "many", Duration::from_secs(180)).await;
    for i in 0..20 {
        assert_eq!(output(&run, &format!("s{i}")), json!({"i": i}));
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn built_in_actions_run_in_the_step_image() {
    let n = node("ctr-builtin").await;
    let run = n
        .run(
            "builtin",
            json!([
                {"id": "make", "action": "transform", "with": {"value": {"order": 42, "pad": "p".repeat(8000)}}},
                {"id": "read", "action": "transform", "with": {"value": "{{ steps.make.output.order }}"}}
            ]),
        )
        .await;
    let run = n.finished(&run).await;
    // 8 KB: over the termination message's 4 KiB, so through the output file.
    assert_eq!(output(&run, "make")["pad"].as_str().unwrap().len(), 8000);
    assert_eq!(output(&run, "read"), json!(42));
}

/// Waits until no pod of the run is still running.
async fn no_running_pods(ns: &TestNamespace, run: &str) {
    let pods = ns.api::<Pod>();
    let selector = format!("{}={run}", flowline_core::crd::labels::RUN);
    eventually(
        &format!("no running pod of {run}"),
        Duration::from_secs(60),
        || async {
            let list = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .ok()?;
            list.items
                .iter()
                .all(|p| {
                    !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Running" | "Pending")
                    )
                })
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_step_log_streams_while_the_step_runs_and_reads_whole_after() {
    let (api, _process) = crate::support::TestApi::start_process("ctr-logs").await;
    let jobs = flowline_engine::job::JobSettings {
        step_image: step_image(),
        ..Default::default()
    };
    let (stop, _) = crate::support::spawn_run_controller(&api.ns, loopback_client(), jobs);
    let _stop = stop.drop_guard();
    let wf = WorkflowBuilder::new("talk").steps(json!([
        container("talk", "echo first; sleep 5; echo second"),
        {"id": "t", "action": "transform", "with": {"value": 1}}
    ]));
    api.ns.create_workflow(&wf).await;
    let run = api.ns.create_run(&RunBuilder::of(&wf).name("talk")).await;
    crate::support::step_running(&api.ns, &run, "talk").await;
    let key = api.admin_key.clone();
    let path = format!("/v1/runs/{run}/steps/talk/logs");

    // Followed: the first line arrives while the step still runs.
    let mut followed = api.get(&key, &format!("{path}?follow=true")).await;
    assert_eq!(followed.status(), 200);
    assert_eq!(
        followed.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    let mut text = String::new();
    while !text.contains("first") {
        let chunk = followed
            .chunk()
            .await
            .unwrap()
            .expect("the log ended early");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let phase = api
        .ns
        .api::<Run>()
        .get(&run)
        .await
        .unwrap()
        .status
        .unwrap()
        .phase;
    assert_eq!(
        phase,
        RunPhase::Running,
        "the log streamed while the step ran"
    );
    while let Some(chunk) = followed.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(text, "first\nsecond\n");

    // After the run: the whole log, and 404s for what has none.
    let run_object = finished_run(&api.ns, &run, Duration::from_secs(60)).await;
    assert_eq!(run_object.status.unwrap().phase, RunPhase::Succeeded);
    let whole = api.get(&key, &path).await;
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.text().await.unwrap(), "first\nsecond\n");
    for (path, code) in [
        (format!("{path}?attempt=2"), "logs_not_found"),
        (format!("/v1/runs/{run}/steps/t/logs"), "logs_not_found"),
        (format!("/v1/runs/{run}/steps/nope/logs"), "step_not_found"),
    ] {
        crate::support::assert_error(api.get(&key, &path).await, 404, code).await;
    }
}
