//! The foundation: CRDs, CEL rules, garbage collection, Jobs through kwok, and the
//! operator process.

use std::time::Duration;

use flowline_core::crd::{Run, Workflow};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};

use crate::support::{TestNamespace, client, eventually, text};

const VALID_WORKFLOW: &str = r#"
apiVersion: flowline.io/v1
kind: Workflow
metadata:
  name: order-sync
spec:
  name: Order sync
  state: active
  trigger:
    type: schedule
    cron: "*/5 * * * *"
    timezone: Europe/Paris
  steps:
    - id: fetch
      name: Fetch orders
      action: http.request
      with: {method: GET, url: "https://example.com/orders"}
      retry: {maxAttempts: 3}
      timeoutMs: 30000
    - id: shape
      action: transform
      with: {value: "{{ steps.fetch.output.body }}"}
"#;

#[tokio::test]
#[ignore = "needs cluster"]
async fn crds_are_installed_and_established() {
    let api: Api<CustomResourceDefinition> = Api::all(client().await);
    for name in [
        "workflows.flowline.io",
        "runs.flowline.io",
        "webhooks.flowline.io",
        "flowlineevents.flowline.io",
        "apikeys.flowline.io",
    ] {
        let crd = api
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "{name} is not Established");
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn kubectl_applied_workflow_is_listed_with_its_columns() {
    let ns = TestNamespace::new("fnd-apply").await;
    let out = ns.kubectl_apply(VALID_WORKFLOW);
    assert!(out.status.success(), "apply failed: {}", text(&out.stderr));

    let wf = ns.api::<Workflow>().get("order-sync").await.unwrap();
    assert_eq!(wf.spec.steps.len(), 2);
    assert_eq!(
        wf.spec.history.succeeded, 100,
        "defaults are applied by the schema"
    );

    let out = ns.kubectl(&["get", "flowline"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    for column in [
        "NAME",
        "DISPLAY NAME",
        "STATE",
        "TRIGGER",
        "LAST RUN",
        "AGE",
    ] {
        assert!(
            table.contains(column),
            "column {column} missing in:\n{table}"
        );
    }
    let row = table
        .lines()
        .find(|l| l.contains("order-sync"))
        .expect("workflow row");
    assert!(
        row.contains("Order sync") && row.contains("active") && row.contains("schedule"),
        "{row}"
    );

    let out = ns.kubectl(&["explain", "workflow.spec.steps"]);
    let explained = text(&out.stdout);
    for field in ["action", "retry", "timeoutMs", "when", "with"] {
        assert!(
            explained.contains(field),
            "kubectl explain lacks {field}:\n{explained}"
        );
    }
    assert!(
        explained.contains("DNS label"),
        "field descriptions come from doc comments:\n{explained}"
    );
}

/// Applies `manifest` and expects the API server to refuse it with `message`.
fn assert_rejected(ns: &TestNamespace, manifest: &str, message: &str) {
    let out = ns.kubectl_apply(manifest);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "manifest was accepted:\n{manifest}");
    assert!(
        stderr.contains(message),
        "expected {message:?} in:\n{stderr}"
    );
}

fn workflow_with(spec: &str) -> String {
    format!(
        "apiVersion: flowline.io/v1\nkind: Workflow\nmetadata:\n  name: bad\nspec:\n  name: Bad\n{spec}"
    )
}

fn webhook_with(spec: &str) -> String {
    format!("apiVersion: flowline.io/v1\nkind: Webhook\nmetadata:\n  name: bad\nspec:\n{spec}")
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn cel_rules_reject_bad_manifests_naming_the_field() {
    let ns = TestNamespace::new("fnd-cel").await;
    assert_rejected(
        &ns,
        &workflow_with("  steps:\n  - {id: a, action: delay}\n  - {id: a, action: fail}\n"),
        "steps[].id must be unique",
    );
    assert_rejected(
        &ns,
        &workflow_with("  steps:\n  - {id: Not_A_Label, action: delay}\n"),
        "steps[].id must be a DNS label",
    );
    assert_rejected(
        &ns,
        &workflow_with("  trigger: {type: schedule}\n"),
        "trigger.cron is required when trigger.type is schedule",
    );
    assert_rejected(
        &ns,
        &workflow_with("  trigger: {type: manual, cron: '* * * * *'}\n"),
        "trigger.cron is required when trigger.type is schedule, and not allowed otherwise",
    );
    assert_rejected(
        &ns,
        &workflow_with("  trigger: {type: manual, timezone: UTC}\n"),
        "trigger.timezone is only allowed when trigger.type is schedule",
    );
    assert_rejected(
        &ns,
        &workflow_with("  steps:\n  - {id: a, action: launch.rocket}\n"),
        "spec.steps[0].action: Unsupported value",
    );
    assert_rejected(
        &ns,
        &webhook_with("  url: http://example.com/hook\n  events: [run.failed]\n"),
        "spec.url must be an https:// URL",
    );
    assert_rejected(
        &ns,
        &webhook_with("  url: https://example.com/hook\n  events: []\n"),
        "spec.events",
    );
    assert_rejected(
        &ns,
        &webhook_with("  url: https://example.com/hook\n  events: [run.exploded]\n"),
        "spec.events[0]: Unsupported value",
    );
    // The same shapes, corrected, are accepted.
    let ok = ns.kubectl_apply(&webhook_with(
        "  url: https://example.com/hook\n  events: [run.failed]\n",
    ));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn deleting_a_workflow_deletes_its_runs() {
    let ns = TestNamespace::new("fnd-gc").await;
    let out = ns.kubectl_apply(VALID_WORKFLOW);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let workflows = ns.api::<Workflow>();
    let runs = ns.api::<Run>();
    let wf = workflows.get("order-sync").await.unwrap();
    for i in 0..3 {
        let run = Run::of_workflow(
            &wf,
            &format!("order-sync-{i}"),
            Default::default(),
            None,
            jiff::Timestamp::now(),
        );
        runs.create(&PostParams::default(), &run).await.unwrap();
    }
    assert_eq!(runs.list(&Default::default()).await.unwrap().items.len(), 3);

    workflows
        .delete("order-sync", &DeleteParams::background())
        .await
        .unwrap();
    eventually(
        "runs garbage-collected with their workflow",
        Duration::from_secs(60),
        || async {
            runs.list(&Default::default())
                .await
                .unwrap()
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_job_completes_through_the_scheduler_and_kwok() {
    let ns = TestNamespace::new("fnd-job").await;
    let job: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "hello"},
        "spec": {
            "backoffLimit": 0,
            // A fake outcome: the pod goes to kwok's node (docs/local-cluster.md).
            "template": {
                "metadata": {"annotations": {"flowline.io/fake-exit-code": "0"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]
                }
            }
        }
    }))
    .unwrap();
    let jobs = ns.api::<Job>();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    eventually(
        "the Job to reach Complete",
        Duration::from_secs(90),
        || async {
            let job = jobs.get("hello").await.ok()?;
            let conditions = job.status?.conditions?;
            conditions
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
                .then_some(())
        },
    )
    .await;
    let pods = ns.api::<k8s_openapi::api::core::v1::Pod>();
    let pod = pods
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .pop()
        .expect("the Job's pod");
    assert_eq!(
        pod.spec.unwrap().node_name.as_deref(),
        Some("kwok-node-0"),
        "scheduled by kube-scheduler"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn operator_becomes_ready_and_stops_on_sigterm() {
    // Its own namespace: the controllers must not touch other tests' runs.
    let ns = crate::support::TestNamespace::new("fnd-op").await;
    let port = free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_flowline"))
        .args(["operator", "--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--watch-namespace",
            &ns.name,
            "--leader-election-namespace",
            &ns.name,
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ready = eventually(
        "operator /readyz to answer 200",
        Duration::from_secs(30),
        || async { http_status(port, "/readyz").filter(|s| *s == 200) },
    )
    .await;
    assert_eq!(ready, 200);
    assert_eq!(http_status(port, "/healthz"), Some(200));
    assert_eq!(http_status(port, "/metrics"), Some(200));

    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = eventually(
        "the operator to exit after SIGTERM",
        Duration::from_secs(10),
        || {
            let exited = child.try_wait().unwrap();
            async move { exited }
        },
    )
    .await;
    assert!(status.success(), "operator exited with {status}");
    let mut logs = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut logs).unwrap();
    assert!(logs.contains("shut down cleanly"), "{logs}");
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Status code of a plain HTTP/1.0 GET, or None when nothing answers.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

/// `--watch-namespace a,b`: the caches hold exactly the listed namespaces (one watch
/// each, as namespaced RBAC allows), and nothing of the others.
#[tokio::test]
#[ignore = "needs cluster"]
async fn caches_over_a_namespace_list_see_only_those_namespaces() {
    let (a, b, other) = (
        TestNamespace::new("scope-a").await,
        TestNamespace::new("scope-b").await,
        TestNamespace::new("scope-c").await,
    );
    for ns in [&a, &b, &other] {
        let wf: Workflow = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "wf"}, "spec": {"name": ns.name}
        }))
        .unwrap();
        ns.api::<Workflow>()
            .create(&PostParams::default(), &wf)
            .await
            .unwrap();
    }
    let scope = flowline_kube::WatchScope::from_list(&[a.name.clone(), b.name.clone()]);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let caches = flowline_api::cache::Caches::start(a.client.clone(), &scope, shutdown.clone());
    eventually("the caches to sync", Duration::from_secs(30), || async {
        caches.is_synced().then_some(())
    })
    .await;
    let mut seen: Vec<String> = caches
        .workflows
        .state()
        .iter()
        .map(|w| w.namespace().unwrap())
        .collect();
    seen.sort();
    let mut want = vec![a.name.clone(), b.name.clone()];
    want.sort();
    assert_eq!(seen, want);
    assert!(flowline_api::cache::get(&caches.workflows, &b.name, "wf").is_some());
    assert!(flowline_api::cache::get(&caches.workflows, &other.name, "wf").is_none());
    let mut namespaces: Vec<String> = caches
        .namespaces
        .state()
        .iter()
        .map(|n| n.name_any())
        .collect();
    namespaces.sort();
    assert_eq!(namespaces, want);
    shutdown.cancel();
}
