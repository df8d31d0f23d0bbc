//! The job executor: one Kubernetes Job per step attempt, owned by the Run. Built-in
//! actions run the operator's own image as `flowline step`; `container` steps run the
//! user's image. The result is the JSON the container writes to
//! /dev/termination-log, read from the pod's status.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::crd::{Action, Run, Step, labels};

/// Environment variable carrying a built-in step's rendered inputs into `flowline step`.
pub const STEP_ENV: &str = "FLOWLINE_STEP";

/// How step Jobs are built.
#[derive(Debug, Clone, Default)]
pub struct JobSettings {
    /// Image of built-in steps (the operator's own image).
    pub step_image: String,
    /// Annotations added to every step pod.
    pub pod_annotations: BTreeMap<String, String>,
    /// The operator's destination guard, enforced by `flowline step` in the pod too.
    pub destinations: crate::egress::DestinationPolicy,
}

/// Name of the Job of one attempt: readable, unique per run/step/attempt, ≤ 63 chars.
pub fn job_name(run: &str, step: &str, attempt: u32) -> String {
    let digest = hex::encode(&Sha256::digest(format!("{run}/{step}/{attempt}").as_bytes())[..4]);
    let readable: String = format!("{run}-{step}").chars().take(45).collect();
    format!("{}-{attempt}-{digest}", readable.trim_end_matches('-'))
}

fn env_list(with: &Value) -> Vec<Value> {
    match with.get("env") {
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())}))
            .collect(),
        _ => Vec::new(),
    }
}

/// The Job of one attempt. Pure.
pub fn build(
    run: &Run,
    step: &Step,
    attempt: u32,
    inputs: &Value,
    timeout: Option<Duration>,
    settings: &JobSettings,
) -> Job {
    let name = job_name(&run.name_any(), &step.id, attempt);
    let container = match step.action {
        Action::Container => json!({
            "name": "step",
            "image": inputs.get("image").and_then(Value::as_str).unwrap_or_default(),
            "command": inputs.get("command").cloned().unwrap_or(Value::Null),
            "args": inputs.get("args").cloned().unwrap_or(Value::Null),
            "env": env_list(inputs),
            "terminationMessagePolicy": "File",
        }),
        _ => json!({
            "name": "step",
            "image": settings.step_image,
            "args": ["step"],
            "env": [{"name": STEP_ENV, "value": json!({"action": step.action, "with": inputs}).to_string()},
                    {"name": crate::egress::ALLOW_CIDRS_ENV, "value": settings.destinations.to_list()}],
            "terminationMessagePolicy": "File",
        }),
    };
    let labels = json!({
        labels::RUN: run.name_any(),
        labels::STEP: step.id,
        labels::WORKFLOW: run.spec.workflow_ref,
    });
    let mut job: Job = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": timeout.map(|t| t.as_secs().max(1)),
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": labels, "annotations": settings.pod_annotations},
                "spec": {"restartPolicy": "Never", "containers": [container]}
            }
        }
    }))
    .unwrap_or_default();
    job.meta_mut().owner_references = run.controller_owner_ref(&()).map(|o| vec![o]);
    job
}

/// Runs one attempt as a Job and returns the step's output or the failure message.
pub async fn run_attempt(client: &Client, namespace: &str, job: Job) -> Result<Value, String> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let name = job.name_any();
    match jobs.create(&PostParams::default(), &job).await {
        Ok(_) => {}
        // The attempt's Job exists already (an operator restart): wait for it.
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(format!("creating Job {name} failed: {e}")),
    }
    let finished = await_condition(jobs.clone(), &name, |j: Option<&Job>| {
        conditions::is_job_completed().matches_object(j) || job_failed(j)
    });
    if let Err(e) = finished.await {
        return Err(format!("watching Job {name} failed: {e}"));
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = pods
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .map_err(|e| format!("reading the pod of Job {name} failed: {e}"))?
        .items
        .into_iter()
        .next();
    let terminated = pod
        .and_then(|p| p.status)
        .and_then(|s| s.container_statuses)
        .and_then(|c| c.into_iter().next())
        .and_then(|c| c.state)
        .and_then(|s| s.terminated);
    match terminated {
        Some(t) if t.exit_code == 0 => {
            let message = t.message.unwrap_or_default();
            if message.trim().is_empty() {
                Ok(json!({}))
            } else {
                serde_json::from_str(&message)
                    .map_err(|_| format!("the step wrote output that is not JSON: {message}"))
            }
        }
        Some(t) => Err(t
            .message
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| format!("the container exited with code {}", t.exit_code))),
        None => Err(format!(
            "Job {name} failed without a terminated container (deadline exceeded?)"
        )),
    }
}

fn job_failed(job: Option<&Job>) -> bool {
    job.and_then(|j| j.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"))
}

/// Deletes the Jobs of a run that are still active (cancel).
pub async fn delete_run_jobs(client: &Client, namespace: &str, run: &str) {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let selector = format!("{}={run}", labels::RUN);
    let _ = jobs
        .delete_collection(
            &DeleteParams::background(),
            &ListParams::default().labels(&selector),
        )
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "order-sync-1767225900", "namespace": "n", "uid": "u-1"},
            "spec": {"workflowRef": "order-sync"}
        }))
        .unwrap()
    }

    fn step(action: &str) -> Step {
        serde_json::from_value(json!({"id": "fetch-orders", "action": action})).unwrap()
    }

    #[test]
    fn job_names_are_short_unique_and_stable() {
        let a = job_name(&"r".repeat(80), "s", 1);
        assert!(a.len() <= 63, "{a}");
        assert_ne!(job_name("r", "s", 1), job_name("r", "s", 2));
        assert_eq!(job_name("r", "s", 1), job_name("r", "s", 1));
    }

    #[test]
    fn built_in_steps_run_the_operator_image_with_their_inputs() {
        let settings = JobSettings {
            step_image: "flowline:1".into(),
            ..Default::default()
        };
        let job = build(
            &run(),
            &step("transform"),
            2,
            &json!({"value": 1}),
            Some(Duration::from_millis(1500)),
            &settings,
        );
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        assert_eq!(spec.active_deadline_seconds, Some(1));
        let pod = spec.template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(
            (c.image.as_deref(), c.args.as_deref()),
            (Some("flowline:1"), Some(&["step".to_string()][..]))
        );
        let env: Value =
            serde_json::from_str(c.env.as_ref().unwrap()[0].value.as_deref().unwrap()).unwrap();
        assert_eq!(env, json!({"action": "transform", "with": {"value": 1}}));
        assert_eq!(job.metadata.owner_references.unwrap()[0].uid, "u-1");
        assert_eq!(job.metadata.labels.unwrap()[labels::STEP], "fetch-orders");
    }

    #[test]
    fn container_steps_run_the_users_image() {
        let inputs = json!({"image": "busybox", "command": ["sh", "-c"], "args": ["echo {} > /dev/termination-log"], "env": {"A": "1"}});
        let job = build(
            &run(),
            &step("container"),
            1,
            &inputs,
            None,
            &JobSettings::default(),
        );
        let c = &job.spec.unwrap().template.spec.unwrap().containers[0];
        assert_eq!(c.image.as_deref(), Some("busybox"));
        assert_eq!(c.env.as_ref().unwrap()[0].name, "A");
    }
}
