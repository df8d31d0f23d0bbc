//! The labels of a Run: its workflow (`kubectl get runs -l flowline.io/workflow=<name>`
//! selects on the API server) and, while it is unfinished, whether its workflow has
//! `wait_for_event` steps (what an event's fan-out selects on). Its creator sets both;
//! the run controller adds them to a Run created without them (kubectl) once it has a
//! status.
//!
//! A Run's phase is selected by field (`--field-selector status.phase=failed`, a
//! selectable field of the CRD), not by a label: a label cannot follow the status
//! without a write of its own (the status subresource ignores metadata), which every
//! run paid at its end. The `flowline.io/phase` label older versions kept is removed
//! from an unfinished run that still carries it (one write), and from a finished one
//! when it no longer says the run's phase, so no label ever contradicts a status.

use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use flowline_core::crd::{Run, labels};
use flowline_engine::status_writer::FIELD_MANAGER;

/// The label older versions kept in step with a Run's phase.
const LEGACY_PHASE: &str = "flowline.io/phase";

/// The merge patch that brings `run`'s labels in line with it, if any is needed. A run
/// whose status was never written keeps what its creator set (a write then would only
/// make the pinning write conflict). Pure.
pub fn patch(run: &Run) -> Option<Value> {
    let status = run.status.as_ref()?;
    let mut wanted = vec![(labels::WORKFLOW, run.spec.workflow_ref.as_str())];
    // A run pinned before the label existed gets it while it can still wait.
    if !status.phase.is_finished()
        && run
            .spec
            .workflow
            .as_ref()
            .is_some_and(|w| w.waits_for_events())
    {
        wanted.push((labels::WAITS_FOR_EVENTS, "true"));
    }
    let current = run.labels();
    let mut stale: serde_json::Map<String, Value> = wanted
        .into_iter()
        .filter(|(key, value)| current.get(*key).map(String::as_str) != Some(*value))
        .map(|(key, value)| (key.to_string(), Value::from(value)))
        .collect();
    if current
        .get(LEGACY_PHASE)
        .is_some_and(|phase| phase != status.phase.as_str())
    {
        stale.insert(LEGACY_PHASE.into(), Value::Null);
    }
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
    use flowline_kube::mock_api;

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
    fn a_runs_phase_needs_no_label_write_and_an_old_phase_label_goes_once_it_is_wrong() {
        let rows = [
            (
                "labelled by its creator, finished",
                run(json!({"flowline.io/workflow": "wf"}), Some("failed")),
                None,
            ),
            (
                "an old label that still says the phase",
                run(
                    json!({"flowline.io/workflow": "wf", "flowline.io/phase": "failed"}),
                    Some("failed"),
                ),
                None,
            ),
            (
                "an old label that no longer does",
                run(
                    json!({"flowline.io/workflow": "wf", "flowline.io/phase": "running"}),
                    Some("succeeded"),
                ),
                Some(json!({"metadata": {"labels": {"flowline.io/phase": null}}})),
            ),
            (
                "other labels are left alone",
                run(
                    json!({"flowline.io/workflow": "wf", "team": "a"}),
                    Some("queued"),
                ),
                None,
            ),
        ];
        for (name, r, want) in rows {
            assert_eq!(patch(&r), want, "{name}");
        }
    }

    #[test]
    fn an_unfinished_run_that_may_wait_for_events_is_labelled_so() {
        let waiting = |phase: &str, labels: Value| -> Run {
            let mut r = run(labels, Some(phase));
            r.spec.workflow = Some(
                serde_json::from_value(json!({"generation": 1, "name": "W", "steps": [
                    {"id": "w", "action": "wait_for_event", "with": {"event": "e"}}]}))
                .unwrap(),
            );
            r
        };
        let plain = json!({"flowline.io/workflow": "wf"});
        assert_eq!(
            patch(&waiting("failed", plain.clone())),
            None,
            "a finished run waits for nothing"
        );
        assert_eq!(
            patch(&waiting("running", plain)),
            Some(json!({"metadata": {"labels": {"flowline.io/waits-for-events": "true"}}}))
        );
        let labelled =
            json!({"flowline.io/workflow": "wf", "flowline.io/waits-for-events": "true"});
        assert_eq!(patch(&waiting("running", labelled)), None);
    }

    /// A mocked API server answering every request with `code` (a Run when it is a
    /// success).
    fn api_answering(code: u16) -> (Client, mock_api::Log) {
        mock_api::client(move |_| {
            let body = if code < 300 {
                serde_json::to_value(run(json!({}), Some("failed"))).unwrap()
            } else {
                mock_api::status(code)
            };
            (code, body)
        })
    }

    #[tokio::test]
    async fn sync_patches_the_labels_and_returns_a_failure() {
        let stale = run(json!({}), Some("failed"));
        let (client, log) = api_answering(200);
        sync(&client, &stale).await.unwrap();
        let seen = mock_api::seen(&log);
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].method, "PATCH");
        assert_eq!(seen[0].path, "/apis/flowline.io/v1/namespaces/n/runs/r");
        assert_eq!(
            seen[0].body,
            json!({"metadata": {"labels": {"flowline.io/workflow": "wf"}}})
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

        let fresh = run(json!({"flowline.io/workflow": "wf"}), Some("failed"));
        let (idle, log) = api_answering(200);
        sync(&idle, &fresh).await.unwrap();
        assert!(
            mock_api::seen(&log).is_empty(),
            "labels in step cost no request"
        );
    }

    #[test]
    fn a_kubectl_run_gets_its_workflow_label_once_it_has_a_status() {
        assert_eq!(
            patch(&run(json!({}), None)),
            None,
            "not before its first status"
        );
        assert_eq!(
            patch(&run(json!({}), Some("running"))),
            Some(json!({"metadata": {"labels": {"flowline.io/workflow": "wf"}}}))
        );
    }
}
