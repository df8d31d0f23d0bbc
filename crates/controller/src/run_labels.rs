//! The labels of a Run that mirror it, so `kubectl get runs -l flowline.io/phase=failed`
//! (or `-l flowline.io/workflow=<name>`) selects on the API server: its phase and its
//! workflow (and whether it may wait for events, which the event fan-out selects on). A Run's creator labels it (`running`, as a Run without status is); the
//! run controller brings the labels up to date once its status says otherwise. A
//! status write cannot carry labels (the status subresource ignores metadata), so
//! each relabelling costs a write of its own: a finished phase is labelled at once, a
//! passing one (`queued`, `running`) only once the run has stayed in it for
//! [`SETTLE`], so a run that waits or executes briefly costs one label write (at its
//! end) instead of three. A queued run is relabelled only while it stays queued: the
//! run controller skips the write for one it is about to start.

use std::time::Duration;

use jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use flowline_core::crd::{Run, RunPhase, labels};
use flowline_engine::status_writer::FIELD_MANAGER;

/// How long a run stays `queued` or `running` before its label says so. The run
/// controller looks at an unfinished run at least every 10 s, so the label follows
/// within about that.
pub const SETTLE: Duration = Duration::from_secs(3);

/// The merge patch that brings `run`'s labels in line with it at `now`, if any is
/// needed. A run whose status was never written keeps what its creator set (a write
/// then would only make the pinning write conflict). Pure.
pub fn patch(run: &Run, now: Timestamp) -> Option<Value> {
    let status = run.status.as_ref()?;
    // When the run entered its passing phase: queued since it was created, running
    // since it was admitted.
    let since = match status.phase {
        RunPhase::Queued => Some(flowline_core::crd::timestamps::created_at(&run.metadata)),
        RunPhase::Running => Some(run.started_at()),
        _ => None,
    };
    let settled = since.is_none_or(|since| {
        now.duration_since(since)
            .try_into()
            .is_ok_and(|elapsed: Duration| elapsed >= SETTLE)
    });
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
    if settled {
        wanted.push((labels::PHASE, status.phase.as_str()));
    }
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
    let Some(patch) = patch(run, flowline_core::clock::now_ms()) else {
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
    fn a_finished_run_is_relabelled_with_its_phase() {
        let labelled = run(
            json!({"flowline.io/phase": "running", "flowline.io/workflow": "wf"}),
            Some("failed"),
        );
        assert_eq!(
            patch(&labelled, Timestamp::now()),
            Some(json!({"metadata": {"labels": {"flowline.io/phase": "failed"}}}))
        );
    }

    #[test]
    fn a_passing_phase_is_labelled_once_the_run_stayed_in_it() {
        let created = Timestamp::from_second(1_000_000).unwrap();
        let mut queued = run(
            json!({"flowline.io/phase": "running", "flowline.io/workflow": "wf"}),
            Some("queued"),
        );
        queued.metadata.creation_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(created),
        );
        let soon = created + jiff::SignedDuration::from_secs(1);
        assert_eq!(patch(&queued, soon), None, "queued for a moment: no write");
        let later = created + SETTLE;
        assert_eq!(
            patch(&queued, later),
            Some(json!({"metadata": {"labels": {"flowline.io/phase": "queued"}}}))
        );
        // Running counts from its admission, not from its creation.
        let mut running = queued.clone();
        let status = running.status.as_mut().unwrap();
        status.phase = RunPhase::Running;
        status.started_at = Some(later);
        running
            .labels_mut()
            .insert("flowline.io/phase".into(), "queued".into());
        assert_eq!(
            patch(&running, later + jiff::SignedDuration::from_secs(1)),
            None
        );
        assert_eq!(
            patch(&running, later + SETTLE),
            Some(json!({"metadata": {"labels": {"flowline.io/phase": "running"}}}))
        );
        // A finished phase is labelled at once, whenever the run started.
        running.status.as_mut().unwrap().phase = RunPhase::Succeeded;
        assert_eq!(
            patch(&running, later),
            Some(json!({"metadata": {"labels": {"flowline.io/phase": "succeeded"}}}))
        );
    }

    #[test]
    fn labels_in_step_need_no_write() {
        let labelled = run(
            json!({"flowline.io/phase": "queued", "flowline.io/workflow": "wf", "team": "a"}),
            Some("queued"),
        );
        assert_eq!(patch(&labelled, Timestamp::now()), None);
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
        let stale = run(
            json!({"flowline.io/phase": "running", "flowline.io/workflow": "wf"}),
            Some("failed"),
        );
        let (client, log) = api_answering(200);
        sync(&client, &stale).await.unwrap();
        let seen = mock_api::seen(&log);
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].method, "PATCH");
        assert_eq!(seen[0].path, "/apis/flowline.io/v1/namespaces/n/runs/r");
        assert_eq!(
            seen[0].body,
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
        let (idle, log) = api_answering(200);
        sync(&idle, &fresh).await.unwrap();
        assert!(
            mock_api::seen(&log).is_empty(),
            "labels in step cost no request"
        );
    }

    #[test]
    fn a_kubectl_run_gets_both_labels_once_it_has_a_status() {
        assert_eq!(
            patch(&run(json!({}), None), Timestamp::now()),
            None,
            "not before its first status"
        );
        assert_eq!(
            patch(&run(json!({}), Some("running")), Timestamp::now()),
            Some(json!({"metadata": {"labels": {
                "flowline.io/phase": "running", "flowline.io/workflow": "wf"}}}))
        );
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
        let plain = json!({"flowline.io/phase": "failed", "flowline.io/workflow": "wf"});
        assert_eq!(
            patch(&waiting("failed", plain.clone()), Timestamp::now()),
            None,
            "a finished run waits for nothing"
        );
        let running = json!({"flowline.io/phase": "running", "flowline.io/workflow": "wf"});
        let unlabelled = waiting("running", running.clone());
        assert_eq!(
            patch(&unlabelled, unlabelled.started_at()),
            Some(json!({"metadata": {"labels": {"flowline.io/waits-for-events": "true"}}}))
        );
        let mut labelled = running;
        labelled["flowline.io/waits-for-events"] = json!("true");
        let labelled = waiting("running", labelled);
        assert_eq!(patch(&labelled, labelled.started_at()), None);
    }
}
