//! The labels of a Run that mirror it, so `kubectl get runs -l flowline.io/phase=failed`
//! (or `-l flowline.io/workflow=<name>`) selects on the API server: its phase and its
//! workflow. A Run's creator labels it (`running`, as a Run without status is); the
//! run controller brings the labels up to date once its status says otherwise. A
//! status write cannot carry labels (the status subresource ignores metadata), so
//! this costs a write when a run is queued, admitted or finished.

use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::crd::{Run, labels};
use crate::engine::status_writer::FIELD_MANAGER;

/// The merge patch that brings `run`'s labels in line with it, if any is needed. A
/// run whose status was never written keeps what its creator set (a write then would
/// only make the pinning write conflict). Pure.
pub fn patch(run: &Run) -> Option<Value> {
    let status = run.status.as_ref()?;
    let wanted = [
        (labels::PHASE, status.phase.as_str()),
        (labels::WORKFLOW, run.spec.workflow_ref.as_str()),
    ];
    let current = run.labels();
    let stale: serde_json::Map<String, Value> = wanted
        .into_iter()
        .filter(|(key, value)| current.get(*key).map(String::as_str) != Some(*value))
        .map(|(key, value)| (key.to_string(), Value::from(value)))
        .collect();
    (!stale.is_empty()).then(|| json!({"metadata": {"labels": stale}}))
}

/// Applies [`patch`] when one is needed; a Run that is gone needs none.
pub async fn sync(client: &Client, run: &Run) -> Result<(), kube::Error> {
    let Some(patch) = patch(run) else {
        return Ok(());
    };
    let api: Api<Run> = Api::namespaced(client.clone(), &run.namespace().unwrap_or_default());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api
        .patch(&run.name_any(), &params, &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn run(labels: Value, phase: Option<&str>) -> Run {
        let mut run = json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n", "labels": labels},
            "spec": {"workflowRef": "wf"},
        });
        if let Some(phase) = phase {
            run["status"] = json!({"phase": phase});
        }
        serde_json::from_value(run).unwrap()
    }

    #[test]
    fn a_finished_run_is_relabelled_with_its_phase() {
        let labelled = run(
            json!({"flowline.io/phase": "running", "flowline.io/workflow": "wf"}),
            Some("failed"),
        );
        assert_eq!(
            patch(&labelled),
            Some(json!({"metadata": {"labels": {"flowline.io/phase": "failed"}}}))
        );
    }

    #[test]
    fn labels_in_step_need_no_write() {
        let labelled = run(
            json!({"flowline.io/phase": "queued", "flowline.io/workflow": "wf", "team": "a"}),
            Some("queued"),
        );
        assert_eq!(patch(&labelled), None);
    }

    /// A Kubernetes client whose API server answers every request with `code`, and
    /// the requests it got (method, path, body).
    /// The requests a mocked API server got: method, path, body.
    type Seen = Arc<Mutex<Vec<(String, String, Value)>>>;

    fn api_answering(code: u16) -> (Client, Seen) {
        use http_body_util::BodyExt;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let log = log.clone();
            async move {
                let (parts, body) = req.into_parts();
                let body = body.collect().await?.to_bytes();
                log.lock().unwrap().push((
                    parts.method.to_string(),
                    parts.uri.path().to_string(),
                    serde_json::from_slice(&body).unwrap_or(Value::Null),
                ));
                let answer = if code < 300 {
                    serde_json::to_value(run(json!({}), Some("failed")))?
                } else {
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "no", "code": code})
                };
                Ok::<_, tower::BoxError>(
                    http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(bytes::Bytes::from(
                            serde_json::to_vec(&answer)?,
                        )))?,
                )
            }
        });
        (Client::new(service, "n"), seen)
    }

    #[tokio::test]
    async fn sync_patches_the_labels_and_returns_a_failure() {
        let stale = run(
            json!({"flowline.io/phase": "running", "flowline.io/workflow": "wf"}),
            Some("failed"),
        );
        let (client, seen) = api_answering(200);
        sync(&client, &stale).await.unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, "PATCH");
        assert_eq!(seen[0].1, "/apis/flowline.io/v1/namespaces/n/runs/r");
        assert_eq!(
            seen[0].2,
            json!({"metadata": {"labels": {"flowline.io/phase": "failed"}}})
        );

        let (gone, _) = api_answering(404);
        sync(&gone, &stale)
            .await
            .expect("a run that is gone needs no labels");
        let (failing, _) = api_answering(500);
        assert!(
            sync(&failing, &stale).await.is_err(),
            "a failed write is not swallowed"
        );

        let fresh = run(
            json!({"flowline.io/phase": "failed", "flowline.io/workflow": "wf"}),
            Some("failed"),
        );
        let (idle, seen) = api_answering(200);
        sync(&idle, &fresh).await.unwrap();
        assert!(
            seen.lock().unwrap().is_empty(),
            "labels in step cost no request"
        );
    }

    #[test]
    fn a_kubectl_run_gets_both_labels_once_it_has_a_status() {
        assert_eq!(
            patch(&run(json!({}), None)),
            None,
            "not before its first status"
        );
        assert_eq!(
            patch(&run(json!({}), Some("running"))),
            Some(json!({"metadata": {"labels": {
                "flowline.io/phase": "running", "flowline.io/workflow": "wf"}}}))
        );
    }
}
