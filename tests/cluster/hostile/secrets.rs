//! Hostile-tenant tests: secrets. A tenant holding a write-scope key authors workflows that
//! try to read Secrets of their own namespace that were never opted in (other
//! applications' credentials, Flowline's API keys and signing secrets), and to get an
//! opted-in value out through outputs, errors, Events, event payloads or a step Job's Pod
//! spec.

use std::collections::BTreeMap;
use std::time::Duration;

use flowline_api::plumbing::auth::Scope;
use flowline_core::crd::{EventKind, Run, RunPhase, StepPhase};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::builders::WorkflowBuilder;
use crate::support::{TestApi, TestNamespace, eventually, new_key, text};

const OPT_IN: (&str, &str) = ("flowline.io/workflow-access", "true");
const TOKEN: &str = "tok-9f8e7d6c5b4a-very-secret";

/// An account with an API, a run controller, and one key per role of the attack.
struct Tenant {
    api: TestApi,
    write: String,
    execute: String,
    read: String,
    stop: CancellationToken,
}

impl Drop for Tenant {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn tenant(prefix: &str, jobs: flowline_engine::job::JobSettings) -> Tenant {
    let api = TestApi::start(prefix).await;
    let (stop, _) =
        crate::support::spawn_run_controller(&api.ns, crate::support::guarded_client(), jobs);
    let write = new_key(&api.ns, &[Scope::Write]).await;
    let execute = new_key(&api.ns, &[Scope::Execute]).await;
    let read = new_key(&api.ns, &[Scope::Read]).await;
    for key in [&write, &execute, &read] {
        api.await_key(key).await;
    }
    Tenant {
        api,
        write,
        execute,
        read,
        stop,
    }
}

impl Tenant {
    fn ns(&self) -> &TestNamespace {
        &self.api.ns
    }

    /// The write key authors a workflow, the execute key starts it, and the run as the
    /// read key sees it once finished is returned with the stored Run.
    async fn run(&self, wf: WorkflowBuilder) -> (Value, Run) {
        let id = self.api.workflow_as(&self.write, &wf).await;
        let run_id = self.api.start_run(&self.execute, &id, None).await;
        let stored =
            crate::support::finished_run(self.ns(), &run_id, Duration::from_secs(60)).await;
        // The API answers from its watch cache, which may lag behind the stored Run.
        let seen = self
            .api
            .finished_view(&self.read, &run_id, Duration::from_secs(10))
            .await;
        (seen, stored)
    }

    async fn secret(
        &self,
        name: &str,
        type_: &str,
        labels: &[(&str, &str)],
        data: &[(&str, &str)],
    ) {
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            type_: Some(type_.into()),
            string_data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        };
        self.ns()
            .api::<Secret>()
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// Runs a one-step workflow reading `secrets.<name>.<key>` and asserts it was refused.
    async fn assert_refused(&self, workflow: &str, secret: &str, key: &str) {
        let steps = json!([{"id": "steal", "action": "transform",
            "with": {"value": format!("{{{{ secrets.{secret}.{key} }}}}")}}]);
        let (seen, _) = self.run(WorkflowBuilder::new(workflow).steps(steps)).await;
        assert_refusal(&seen, "steal", secret);
    }
}

fn assert_refusal(seen: &Value, step: &str, secret: &str) {
    let message = format!("secret {secret} is not readable by workflows");
    assert_eq!(seen["status"], "failed", "{seen}");
    assert_eq!(seen["steps"][0]["error"], message.as_str(), "{seen}");
    assert_eq!(
        seen["error"],
        format!("step {step} (transform) failed: {message}").as_str(),
        "{seen}"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn secrets_that_did_not_opt_in_are_refused_like_missing_ones() {
    let t = tenant("hs-optin", Default::default()).await;
    t.secret("billing-db", "Opaque", &[], &[("password", TOKEN)])
        .await;
    t.assert_refused("steal-unlabelled", "billing-db", "password")
        .await;
    // A missing Secret reads exactly the same: existence is not revealed.
    t.assert_refused("steal-missing", "no-such-secret", "password")
        .await;
    // A label with another value is not an opt-in.
    t.secret("half-in", "Opaque", &[(OPT_IN.0, "yes")], &[("k", TOKEN)])
        .await;
    t.assert_refused("steal-half", "half-in", "k").await;

    // `when` reads through the same path: refused, not evaluated.
    let (seen, stored) = t
        .run(
            WorkflowBuilder::new("steal-when").steps(json!([{"id": "probe", "action": "transform",
                "when": "secrets.billing-db.password == 'guess'", "with": {"value": 1}}])),
        )
        .await;
    assert_refusal(&seen, "probe", "billing-db");
    assert!(!serde_json::to_string(&stored).unwrap().contains(TOKEN));
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn flowline_own_secrets_are_refused_even_when_labelled() {
    let t = tenant("hs-own", Default::default()).await;
    // An API key Secret as earlier versions kept them, opted in by someone with kubectl.
    t.secret(
        "key-legacy",
        "flowline.io/api-key",
        &[OPT_IN],
        &[("sha256", TOKEN)],
    )
    .await;
    t.assert_refused("steal-key", "key-legacy", "sha256").await;

    // A webhook's signing secret, created by the API, opted in.
    let res = t
        .api
        .send(
            "POST",
            &t.api.admin_key,
            "/v1/webhooks",
            Some(json!({"url": "https://hooks.example.com/x", "events": ["run.failed"]})),
        )
        .await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let hook = res.json::<Value>().await.unwrap();
    // Its signing secret is sealed into the Webhook, not a Secret a template could name.
    let signing = format!("{}-signing", hook["id"].as_str().unwrap());
    assert!(
        t.ns()
            .api::<Secret>()
            .get_opt(&signing)
            .await
            .unwrap()
            .is_none(),
        "the API made a signing Secret"
    );
    // One applied with kubectl, as a Webhook's `secretRef` would name it, opted in.
    t.secret(
        "applied-signing",
        "flowline.io/webhook-secret",
        &[OPT_IN],
        &[("secret", TOKEN)],
    )
    .await;
    t.assert_refused("steal-signing", "applied-signing", "secret")
        .await;

    // The chart's bootstrap admin key value: an Opaque Secret with the chart's labels.
    t.secret(
        "flowline-admin-key",
        "Opaque",
        &[OPT_IN, ("app.kubernetes.io/part-of", "flowline")],
        &[("api-key", TOKEN)],
    )
    .await;
    t.assert_refused("steal-bootstrap", "flowline-admin-key", "api-key")
        .await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn an_opted_in_secret_works_and_is_redacted_everywhere() {
    let t = tenant("hs-redact", Default::default()).await;
    t.secret(
        "app-creds",
        "Opaque",
        &[OPT_IN],
        &[("token", TOKEN), ("mode", "on")],
    )
    .await;
    let (seen, stored) = t
        .run(WorkflowBuilder::new("leaky").steps(json!([
            {"id": "echo", "action": "transform",
             "when": "secrets.app-creds.mode == 'on'",
             "with": {"value": {"raw": "{{ secrets.app-creds.token }}",
                                "header": "Bearer {{ secrets.app-creds.token }}"}}},
            {"id": "leak", "action": "fail",
             "with": {"message": "token is {{ secrets.app-creds.token }}"}}
        ])))
        .await;
    // The step read the Secret (`when` compared its value, the template rendered it)…
    assert_eq!(seen["steps"][0]["status"], "succeeded", "{seen}");
    // …and nobody sees the value: not the read key, not the stored status.
    assert_eq!(
        seen["steps"][0]["output"],
        json!({"raw": "[redacted]", "header": "Bearer [redacted]"})
    );
    assert_eq!(seen["steps"][1]["error"], "token is [redacted]");
    assert_eq!(
        seen["error"],
        "step leak (fail) failed: token is [redacted]"
    );
    let status = stored.status.as_ref().unwrap();
    assert_eq!(status.phase, RunPhase::Failed);
    assert_eq!(status.steps[1].status, StepPhase::Failed);
    let failed = status
        .pending_events
        .iter()
        .find(|e| e.kind == EventKind::RunFailed)
        .expect("run.failed recorded for webhooks");
    assert_eq!(
        failed.data["error"],
        "step leak (fail) failed: token is [redacted]"
    );
    assert!(!serde_json::to_string(&stored).unwrap().contains(TOKEN));
    assert!(!seen.to_string().contains(TOKEN));

    let run = stored.metadata.name.clone().unwrap();
    let notes = eventually(
        "the run's Kubernetes Event",
        Duration::from_secs(20),
        || async {
            let out = t.ns().kubectl(&[
                "get",
                "events",
                "--field-selector",
                &format!("involvedObject.name={run}"),
                "-o",
                "json",
            ]);
            let notes = text(&out.stdout);
            notes.contains("RunFailed").then_some(notes)
        },
    )
    .await;
    assert!(notes.contains("token is [redacted]"), "{notes}");
    assert!(!notes.contains(TOKEN), "{notes}");
}

/// Job settings whose pods kwok completes with `message` as their termination message.
fn kwok_jobs(message: &str) -> flowline_engine::job::JobSettings {
    flowline_engine::job::JobSettings {
        step_image: "flowline:test".into(),
        pod_annotations: BTreeMap::from([
            ("flowline.io/fake-exit-code".to_string(), "0".to_string()),
            (
                "flowline.io/fake-termination-message".to_string(),
                message.to_string(),
            ),
        ]),
        ..Default::default()
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn step_jobs_get_secrets_by_reference_never_by_value() {
    let t = tenant("hs-job", kwok_jobs(r#"{"done": true}"#)).await;
    t.secret("app-creds", "Opaque", &[OPT_IN], &[("token", TOKEN)])
        .await;
    let (seen, _) = t
        .run(WorkflowBuilder::new("in-a-job").executor("job").steps(json!([
                {"id": "use", "action": "transform",
                 "with": {"value": {"header": "Bearer {{ secrets.app-creds.token }}"}}},
                {"id": "box", "action": "container",
                 "with": {"image": "busybox", "env": {"TOKEN": "{{ secrets.app-creds.token }}"}}}
            ])))
        .await;
    assert_eq!(seen["status"], "succeeded", "{seen}");
    let jobs = t
        .ns()
        .api::<Job>()
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(jobs.len(), 2);
    for job in &jobs {
        let spec_text = serde_json::to_string(job).unwrap();
        assert!(!spec_text.contains(TOKEN), "{spec_text}");
        let pod = job.spec.as_ref().unwrap().template.spec.clone().unwrap();
        assert_eq!(pod.automount_service_account_token, Some(false));
        let security = pod.security_context.as_ref().unwrap();
        assert_eq!(security.run_as_non_root, Some(true));
        let c = &pod.containers[0];
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(
            (sc.allow_privilege_escalation, sc.read_only_root_filesystem),
            (Some(false), Some(true))
        );
        let by_ref: Vec<_> = c
            .env
            .iter()
            .flatten()
            .filter_map(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
            .map(|s| (s.name.as_str(), s.key.as_str()))
            .collect();
        assert_eq!(by_ref, vec![("app-creds", "token")], "{spec_text}");
    }

    // `flowline step`, given exactly what the built-in step's pod gets (its env, the
    // referenced value where the kubelet would put it), uses the value and redacts it.
    let built_in = jobs
        .iter()
        .find(|j| j.metadata.labels.as_ref().unwrap()["flowline.io/step"] == "use")
        .unwrap();
    let env = built_in
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env
        .clone()
        .unwrap();
    let mut vars: Vec<(String, String)> = env
        .iter()
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect();
    for e in env.iter().filter(|e| e.value_from.is_some()) {
        vars.push((e.name.clone(), TOKEN.to_string()));
    }
    let (code, message) = super::step_process::run_step(&vars);
    assert_eq!(code, 0, "{message}");
    let output: Value = serde_json::from_str(&message).unwrap();
    // "[redacted]" and not the placeholder: the value was substituted, then redacted.
    assert_eq!(output, json!({"header": "Bearer [redacted]"}));
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_secret_cannot_be_smuggled_into_a_pod_spec() {
    let t = tenant("hs-smuggle", kwok_jobs("{}")).await;
    t.secret("app-creds", "Opaque", &[OPT_IN], &[("token", TOKEN)])
        .await;
    for (workflow, with, error) in [
        (
            "partial-env",
            json!({"image": "busybox", "env": {"AUTH": "Bearer {{ secrets.app-creds.token }}"}}),
            "env AUTH: a secret must be the whole value of an env variable \
             (\"{{ secrets.<name>.<key> }}\"), not part of it",
        ),
        (
            "in-args",
            json!({"image": "busybox", "args": ["{{ secrets.app-creds.token }}"]}),
            "a container step receives secrets only as env values, not in `args`",
        ),
    ] {
        let (seen, _) = t
            .run(
                WorkflowBuilder::new(workflow).steps(json!([{"id": "box", "action": "container",
                    "retry": {"max_attempts": 3, "backoff_ms": 10}, "with": with}])),
            )
            .await;
        assert_eq!(seen["steps"][0]["error"], error, "{seen}");
        // Deterministic: failed at once, not retried, and no Job was created.
        assert_eq!(seen["steps"][0]["attempts"], 1, "{seen}");
    }
    let jobs = t.ns().api::<Job>().list(&Default::default()).await.unwrap();
    assert!(jobs.items.is_empty());
}

/// A namespace user applies a Webhook whose `secretRef` names another application's
/// Secret; a write key then asks the API to rotate "its" signing secret. The rotation
/// seals a new secret into the Webhook and touches no Secret: the other application's
/// is left exactly as it was.
#[tokio::test]
#[ignore = "needs a cluster (make test)"]
async fn a_webhook_cannot_adopt_another_secret_for_rotation() {
    let tenant = tenant("hostile-sigref", Default::default()).await;
    tenant
        .secret("billing-db", "Opaque", &[], &[("secret", TOKEN)])
        .await;
    let applied = tenant.ns().kubectl_apply(
        r#"
apiVersion: flowline.io/v1
kind: Webhook
metadata: {name: adopt}
spec:
  url: https://receiver.example.com/hook
  events: [run.failed]
  secretRef: {name: billing-db}
"#,
    );
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let path = "/v1/webhooks/adopt/rotate-secret";
    let res = eventually(
        "the API to see the webhook",
        Duration::from_secs(10),
        || async {
            let res = tenant.api.send("POST", &tenant.write, path, None).await;
            (res.status() != 404).then_some(res)
        },
    )
    .await;
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    let hook = tenant
        .ns()
        .api::<flowline_core::crd::Webhook>()
        .get("adopt")
        .await
        .unwrap();
    assert!(
        hook.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(flowline_core::delivery::signing_secrets::ANNOTATION),
        "the new secret is sealed into the Webhook"
    );
    let stored = tenant.ns().api::<Secret>().get("billing-db").await.unwrap();
    let data = stored.data.unwrap_or_default();
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["secret"],
        "no rotation keys were added"
    );
    assert_eq!(data["secret"].0, TOKEN.as_bytes());
}
