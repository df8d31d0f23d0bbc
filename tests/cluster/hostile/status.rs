//! Hostile-tenant tests: bounded status. Huge error messages, huge outputs and big
//! payloads cannot make a Run object too large to store, and a status write that the
//! API server refuses is retried until the run's final status lands.

use std::time::Duration;

use flowline_core::crd::{Run, RunPhase};
use flowline_core::limits::{MAX_ERROR_BYTES, TRUNCATED_MARKER};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::builders::{RunBuilder, WorkflowBuilder};
use crate::support::{TestApi, eventually, kubectl, text};

/// An account with nothing but an admin key, and the run controller for its namespace.
struct Tenant {
    api: TestApi,
    stop: CancellationToken,
}

impl Drop for Tenant {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Tenant {
    async fn start(prefix: &str) -> Tenant {
        let api = TestApi::start(prefix).await;
        let (stop, _) = crate::support::spawn_run_controller(
            &api.ns,
            crate::support::guarded_client(),
            Default::default(),
        );
        Tenant { api, stop }
    }

    /// A workflow with `steps`, created through the API; returns its id.
    async fn workflow(&self, steps: Value) -> String {
        let wf = WorkflowBuilder::new("Hostile").steps(steps);
        self.api.workflow(&wf).await
    }

    /// Starts a run through the API; returns its id.
    async fn trigger(&self, workflow: &str, payload: Value) -> String {
        self.api
            .start_run(
                &self.api.admin_key,
                workflow,
                Some(json!({"payload": payload})),
            )
            .await
    }

    /// Waits until the API shows the run finished, and returns it.
    async fn finished(&self, run: &str, within: Duration) -> Value {
        self.api
            .finished_view(&self.api.admin_key, run, within)
            .await
    }

    /// The stored Run and the bytes it takes as JSON.
    async fn stored(&self, run: &str) -> (Run, usize) {
        let stored: Run = self.api.ns.api::<Run>().get(run).await.unwrap();
        let size = serde_json::to_vec(&stored).unwrap().len();
        (stored, size)
    }
}

fn assert_capped(error: &str) {
    assert!(error.len() <= MAX_ERROR_BYTES, "{} bytes", error.len());
    assert!(
        error.ends_with(TRUNCATED_MARKER),
        "…{}",
        &error[error.len() - 40..]
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_600_kb_failure_message_ends_the_run_failed_with_a_capped_error() {
    let tenant = Tenant::start("hostile-status-fail").await;
    let message = "boom ".repeat(120_000);
    let wf = tenant
        .workflow(json!([{"id": "explode", "action": "fail", "with": {"message": message}}]))
        .await;
    let run = tenant.trigger(&wf, json!({})).await;
    let done = tenant.finished(&run, Duration::from_secs(20)).await;

    assert_eq!(done["status"], "failed", "{}", done["status"]);
    let error = done["error"].as_str().unwrap();
    assert!(
        error.starts_with("step explode (fail) failed: boom boom"),
        "{error:.60}"
    );
    assert_capped(error);
    let step_error = done["steps"][0]["error"].as_str().unwrap();
    assert!(step_error.starts_with("boom boom"));
    assert_capped(step_error);

    // The run.failed event waiting for delivery carries the capped error too.
    let (stored, _) = tenant.stored(&run).await;
    let status = stored.status.unwrap();
    let failed = status
        .pending_events
        .iter()
        .find(|e| e.kind == flowline_core::crd::EventKind::RunFailed)
        .expect("run.failed recorded with the final status");
    assert_capped(failed.data["error"].as_str().unwrap());

    // And the Kubernetes Event about it was recorded: its note capped at what the API
    // server accepts (1 KiB), or the Event would have been refused.
    let events = tenant.api.ns.api::<Event>();
    let note = eventually("a RunFailed Event", Duration::from_secs(10), || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("RunFailed"))
            .and_then(|e| e.note)
    })
    .await;
    assert!(
        note.starts_with("step explode (fail) failed: boom"),
        "{note:.60}"
    );
    let max_note = flowline_core::limits::MAX_EVENT_NOTE_BYTES;
    assert!(
        note.len() <= max_note && note.ends_with(TRUNCATED_MARKER),
        "{}",
        note.len()
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn huge_values_next_to_huge_errors_and_big_payloads_stay_bounded() {
    let tenant = Tenant::start("hostile-status-size").await;
    let other = Tenant::start("hostile-status-other").await;

    // A transform returning a 400 kB value, then a step failing with a 400 kB message,
    // started with a 150 kB payload: together well over what a status could hold.
    let wf = tenant
        .workflow(json!([
            {"id": "big", "action": "transform", "with": {"value": {"blob": "v".repeat(400_000)}}},
            {"id": "explode", "action": "fail", "with": {"message": "e".repeat(400_000)}},
        ]))
        .await;
    let run = tenant
        .trigger(&wf, json!({"padding": "p".repeat(150_000)}))
        .await;
    let done = tenant.finished(&run, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "failed");
    assert_eq!(done["steps"][0]["status"], "succeeded");
    assert_eq!(done["steps"][0]["output_truncated"], true);
    assert_capped(done["error"].as_str().unwrap());
    assert_capped(done["steps"][1]["error"].as_str().unwrap());
    // The spec holds the payload and the run's copy of the workflow (800 kB of
    // inputs): what the engine bounds is the status.
    let (stored, _) = tenant.stored(&run).await;
    let status_size = serde_json::to_vec(&stored.status).unwrap().len();
    assert!(
        status_size < 300 * 1024,
        "Run status is {status_size} bytes"
    );

    // Forty steps each producing a near-cap output (a 60 kB string read from the
    // payload), next to 500 kB of payload: the run succeeds, the newest outputs are
    // whole, the oldest were cut, and the Run object stays under the engine's budget.
    let steps: Vec<Value> = (0..40)
        .map(|i| {
            json!({"id": format!("s{i}"), "action": "transform",
                        "with": {"value": "{{ trigger.payload.blob }}"}})
        })
        .collect();
    let wf = tenant.workflow(json!(steps)).await;
    let blob = "b".repeat(60_000);
    let run = tenant
        .trigger(&wf, json!({"blob": blob, "padding": "p".repeat(500_000)}))
        .await;
    let done = tenant.finished(&run, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{:.300}", done.to_string());
    let outputs = done["steps"].as_array().unwrap();
    assert_eq!(
        outputs[39]["output"],
        json!(blob),
        "the newest output is whole"
    );
    assert_eq!(outputs[39]["output_truncated"], false);
    assert_eq!(outputs[0]["output_truncated"], true, "the oldest was cut");
    let (_, size) = tenant.stored(&run).await;
    assert!(
        size <= flowline_core::engine::output::RUN_OBJECT_BUDGET,
        "Run object is {size} bytes"
    );

    // Another account is served as usual meanwhile.
    let wf = other
        .workflow(json!([{"id": "ok", "action": "transform", "with": {"value": {"fine": true}}}]))
        .await;
    let run = other.trigger(&wf, json!({})).await;
    let done = other.finished(&run, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["steps"][0]["output"], json!({"fine": true}));
}

/// A ValidatingAdmissionPolicy that denies every status update of the Runs labelled
/// `flowline.io/test-freeze: "true"` in one namespace; deleted when dropped.
struct StatusFreeze {
    name: String,
}

impl StatusFreeze {
    fn apply(namespace: &str) -> StatusFreeze {
        let name = format!("flowline-test-freeze-{namespace}");
        let manifest = format!(
            r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["flowline.io"]
      apiVersions: ["v1"]
      operations: ["UPDATE"]
      resources: ["runs/status"]
  validations:
  - expression: "false"
    message: "status updates of this run are frozen by the test"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {name}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {namespace}}}
    objectSelector:
      matchLabels: {{flowline.io/test-freeze: "true"}}
"#
        );
        let out = kubectl(&["apply", "-f", "-"], Some(&manifest));
        assert!(out.status.success(), "{}", text(&out.stderr));
        StatusFreeze { name }
    }

    fn lift(&self) {
        for kind in [
            "validatingadmissionpolicybinding",
            "validatingadmissionpolicy",
        ] {
            let out = kubectl(&["delete", kind, &self.name, "--ignore-not-found"], None);
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
    }

    /// Denials of this policy so far, from the API server's metrics.
    fn denials(&self) -> u64 {
        let out = kubectl(&["get", "--raw", "/metrics"], None);
        let policy = format!("policy=\"{}\"", self.name);
        text(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("apiserver_validating_admission_policy_check_total"))
            .filter(|l| l.contains(&policy) && l.contains("enforcement_action=\"deny\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
}

impl Drop for StatusFreeze {
    fn drop(&mut self) {
        self.lift();
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_refused_status_write_is_retried_until_the_final_status_lands() {
    let tenant = Tenant::start("hostile-status-frozen").await;
    let ns = &tenant.api.ns;
    let wf = tenant
        .workflow(json!([{"id": "answer", "action": "transform", "with": {"value": {"n": 42}}}]))
        .await;
    let runs = ns.api::<Run>();
    let labelled = |name: &str| -> Run {
        RunBuilder::of(&wf)
            .name(name)
            .label("flowline.io/test-freeze", "true")
            .object()
    };

    let freeze = StatusFreeze::apply(&ns.name);
    // The policy is in force once a status update of a labelled Run is denied: the
    // probe is a dry run, so it changes nothing.
    let probe = runs
        .create(&PostParams::default(), &{
            let mut run = labelled("probe");
            run.spec.workflow_ref = "missing".into();
            run
        })
        .await
        .unwrap();
    let dry_run = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    eventually(
        "the policy to deny status updates",
        Duration::from_secs(30),
        || async {
            let patch = json!({"status": {"phase": "running"}});
            match runs
                .patch_status("probe", &dry_run, &Patch::Merge(&patch))
                .await
            {
                Err(kube::Error::Api(s)) if s.message.contains("frozen by the test") => Some(()),
                _ => None,
            }
        },
    )
    .await;

    let before = freeze.denials();
    runs.create(&PostParams::default(), &labelled("frozen"))
        .await
        .unwrap();
    // The engine's writes are refused, and it keeps trying: several denials, with
    // nothing written meanwhile.
    eventually(
        "the engine to retry refused writes",
        Duration::from_secs(30),
        || async { (freeze.denials() >= before + 3).then_some(()) },
    )
    .await;
    let frozen = runs.get("frozen").await.unwrap();
    assert!(frozen.status.is_none(), "no status can be written yet");

    freeze.lift();
    let done = crate::support::finished_run(ns, "frozen", Duration::from_secs(40)).await;
    let status = done.status.unwrap();
    assert_eq!(status.phase, RunPhase::Succeeded);
    assert_eq!(status.steps[0].output, Some(json!({"n": 42})));
    assert!(
        !status.steps[0].output_truncated,
        "a denial is not about size: nothing shrunk"
    );
    // The probe's "workflow does not exist" failure, refused just as long, lands too.
    let probe =
        crate::support::finished_run(ns, &probe.metadata.name.unwrap(), Duration::from_secs(40))
            .await;
    assert_eq!(probe.status.unwrap().phase, RunPhase::Failed);
}
