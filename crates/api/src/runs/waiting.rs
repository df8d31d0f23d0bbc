//! How `/v1` shows a run whose wait the operator has not recorded yet. The operator
//! writes `queued` only once a wait has lasted a while (`admission::unrecorded`): most
//! waits in a burst end sooner, and a write each would slow the drain. `/v1` shows
//! such a run `queued` at once, with what it waits for, as the same admission code
//! decides it over this process's cache of its workflow's runs. Every view and filter
//! of runs reads them through here, so a list filtered on `status=queued` and the
//! run's own page agree.

use std::collections::HashMap;
use std::sync::Arc;

use kube::ResourceExt;

use crate::state::ApiState;
use flowline_core::admission::unrecorded::{Unrecorded, may_wait_unrecorded};
use flowline_core::crd::{QueuedFor, Run, RunPhase, RunStatus};

/// `runs` as `/v1` shows them: each run without a status that its admission holds
/// back is shown `queued`. One pass over each concerned workflow's cached runs.
pub(crate) fn shown(state: &ApiState, runs: Vec<Arc<Run>>) -> Vec<Arc<Run>> {
    let mut books: HashMap<(String, String), Unrecorded> = HashMap::new();
    let now = flowline_core::clock::now_ms();
    runs.into_iter()
        .map(|run| {
            if !may_wait_unrecorded(&run) {
                return run;
            }
            let key = (
                run.namespace().unwrap_or_default(),
                run.spec.workflow_ref.clone(),
            );
            let book = books
                .entry(key)
                .or_insert_with_key(|(namespace, workflow)| book_of(state, namespace, workflow));
            match book.waits_for(&run, now) {
                Some(waits_for) => Arc::new(queued(&run, waits_for)),
                None => run,
            }
        })
        .collect()
}

/// One run (read whole from the API server) as `/v1` shows it; None: as it is.
pub(crate) fn shown_one(state: &ApiState, run: &Run) -> Option<Run> {
    if !may_wait_unrecorded(run) {
        return None;
    }
    let namespace = run.namespace().unwrap_or_default();
    let waits_for = book_of(state, &namespace, &run.spec.workflow_ref)
        .waits_for(run, flowline_core::clock::now_ms())?;
    Some(queued(run, waits_for))
}

fn book_of(state: &ApiState, namespace: &str, workflow: &str) -> Unrecorded {
    let runs = state.caches.runs_of_workflow(namespace, workflow);
    Unrecorded::of(runs.iter().map(|run| &**run))
}

/// `run` with the status its recorded wait will have.
fn queued(run: &Run, waits_for: QueuedFor) -> Run {
    let mut shown = run.clone();
    shown.status = Some(RunStatus {
        phase: RunPhase::Queued,
        queued_for: Some(waits_for),
        ..RunStatus::default()
    });
    shown
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::*;

    /// Three runs of a `limit: 1` workflow: one running, two the operator has not
    /// recorded yet.
    fn world() -> World {
        let steps = json!([{"id": "a", "action": "delay", "with": {"ms": 1}}]);
        let pinned = json!({"workflow": {"generation": 1, "name": "L",
            "concurrency": {"limit": 1}, "steps": steps}});
        let whole = run("run-b", "wf-l", "null", pinned.clone());
        World::default()
            .workflow(workflow(
                "wf-l",
                json!({"concurrency": {"limit": 1}, "steps": steps}),
            ))
            .run(run("run-a", "wf-l", "running", pinned.clone()))
            .run(whole.clone())
            .run(run("run-c", "wf-l", "null", pinned))
            .answer(move |seen| {
                (seen.method == "GET" && seen.path == server_path("runs", "run-b"))
                    .then(|| (200, serde_json::to_value(&whole).unwrap()))
            })
    }

    fn ids(answer: &Answer) -> Vec<&str> {
        answer.body["data"]
            .as_array()
            .expect("a page")
            .iter()
            .filter_map(|r| r["id"].as_str())
            .collect()
    }

    #[tokio::test]
    async fn runs_their_limit_holds_back_are_queued_before_the_operator_records_it() {
        let api = world().start();
        let get = |path: &str| api.send(call("GET", path).key(READ).build());
        let queued = get("/v1/workflows/wf-l/runs?status=queued").await;
        assert_eq!(ids(&queued), ["run-c", "run-b"], "{}", queued.body);
        let running = get("/v1/runs?status=running").await;
        assert_eq!(ids(&running), ["run-a"], "{}", running.body);
        let shown = get("/v1/runs/run-b").await;
        assert_eq!(
            (&shown.body["status"], &shown.body["queued_for"]),
            (&Value::from("queued"), &Value::from("concurrency")),
            "{}",
            shown.body
        );
    }

    #[tokio::test]
    async fn a_run_without_flow_control_and_no_status_is_running() {
        let api = World::default()
            .workflow(workflow("wf-p", json!({"steps": []})))
            .run(run(
                "run-p",
                "wf-p",
                "null",
                json!({"workflow": {"generation": 1,
                "name": "P", "steps": [{"id": "a", "action": "delay", "with": {"ms": 1}}]}}),
            ))
            .start();
        let listed = api
            .send(call("GET", "/v1/runs?status=running").key(READ).build())
            .await;
        assert_eq!(ids(&listed), ["run-p"], "{}", listed.body);
    }
}
