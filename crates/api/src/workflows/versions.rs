//! `GET /v1/workflows/{id}/versions`: the versions of a workflow that Flowline still
//! holds — the workflow as it is now, and every version a kept run is pinned to — so
//! two can be compared. Older versions that no kept run pins are gone (retention).
//!
//! The run cache keeps summaries (each run's generation, not its pinned copy), so a
//! version other than the current one is read from its newest run, a few at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use futures::StreamExt;
use kube::ResourceExt;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::find as find_workflow;
use crate::cache;
use crate::plumbing::auth::{Authorized, needs};
use crate::plumbing::error::{ApiError, ApiResult, Missing};
use crate::plumbing::path::Path;
use crate::plumbing::time::ApiTime;
use crate::runs::views::WorkflowVersionView;
use crate::state::ApiState;
use flowline_core::crd::{Run, Workflow, WorkflowSnapshot};

/// The most versions one answer lists (newest first): each older one costs a read.
pub const MAX_VERSIONS: usize = 20;

/// Runs read at once for their pinned versions.
const READS_IN_FLIGHT: usize = 4;

pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(versions))
}

/// One version of a workflow.
#[derive(Serialize, ToSchema)]
pub struct VersionEntry {
    /// The workflow's `metadata.generation` at that version.
    pub generation: i64,
    /// True for the workflow as it is now.
    pub current: bool,
    /// How many of the workflow's kept runs execute this version.
    pub runs: u32,
    /// The newest of those runs.
    pub last_run_id: Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_run_at: Option<ApiTime>,
    /// The version itself, as `workflow_version` of a run shows it; `null` when it
    /// cannot be read (its run was deleted meanwhile, or predates pinned versions).
    pub version: Option<WorkflowVersionView>,
}

/// `GET /v1/workflows/{id}/versions`.
#[derive(Serialize, ToSchema)]
pub struct VersionList {
    pub data: Vec<VersionEntry>,
    /// True when more than [`MAX_VERSIONS`] versions are held (the oldest are left out).
    pub truncated: bool,
}

#[utoipa::path(get, path = "/v1/workflows/{id}/versions", operation_id = "workflows.versions", summary = "List a workflow's versions", tag = "workflows",
    description = "Scope: `read`. The workflow as it is now and every version its kept runs are pinned to, newest first, at most 20. A version no kept run pins is not held.",
    params(("id" = String, Path, description = "Workflow id")),
    responses((status = 200, description = "The versions, newest first", body = VersionList),
              (status = 404, description = "No such workflow")))]
async fn versions(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
    Path(id): Path<String>,
) -> ApiResult<Json<VersionList>> {
    let wf = find_workflow(&state, &who.namespace, &id)?;
    let runs = state.caches.runs_of_workflow(&who.namespace, &id);
    let (mut list, newest) = plan(&wf, &runs);
    let reads = newest.into_iter().map(|(index, run)| {
        let (state, ns) = (&state, who.namespace.as_str());
        async move {
            let pinned = match crate::runs::read_whole(state, ns, &run).await {
                Ok(run) => run.spec.workflow.as_ref().map(WorkflowVersionView::from),
                Err(ApiError::NotFound(Missing::Run)) => None,
                Err(e) => return Err(e),
            };
            Ok((index, pinned))
        }
    });
    let mut read = futures::stream::iter(reads).buffer_unordered(READS_IN_FLIGHT);
    while let Some(result) = read.next().await {
        let (index, version) = result?;
        list.data[index].version = version;
    }
    Ok(Json(list))
}

/// The versions held, newest generation first: the current one (its `version` filled
/// in), and one per generation the runs execute, each with its newest run (returned
/// with the entry's index when its `version` is still to be read from that run).
fn plan(wf: &Workflow, runs: &[Arc<Run>]) -> (VersionList, Vec<(usize, String)>) {
    let current = wf.metadata.generation.unwrap_or(0);
    let mut held: BTreeMap<i64, (u32, Option<&Run>)> = BTreeMap::new();
    held.insert(current, (0, None));
    for run in runs {
        let Some(generation) = cache::workflow_generation(run) else {
            continue;
        };
        let (count, newest) = held.entry(generation).or_insert((0, None));
        *count += 1;
        if newest.is_none_or(|n| n.started_at() < run.started_at()) {
            *newest = Some(run);
        }
    }
    let truncated = held.len() > MAX_VERSIONS;
    let mut to_read = Vec::new();
    let data = held
        .into_iter()
        .rev()
        .take(MAX_VERSIONS)
        .enumerate()
        .map(|(index, (generation, (runs, newest)))| {
            let is_current = generation == current;
            let version = if is_current {
                Some(WorkflowVersionView::from(&WorkflowSnapshot::of(wf)))
            } else {
                to_read.extend(newest.map(|r| (index, r.name_any())));
                None
            };
            VersionEntry {
                generation,
                current: is_current,
                runs,
                last_run_id: newest.map(|r| r.name_any()),
                last_run_at: newest.map(|r| ApiTime(r.started_at())),
                version,
            }
        })
        .collect();
    (VersionList { data, truncated }, to_read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn workflow(generation: i64, step: &str) -> Workflow {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "wf-1", "namespace": "n", "generation": generation},
            "spec": {"name": "W", "steps": [{"id": step, "action": "transform"}]},
        }))
        .unwrap()
    }

    fn run(name: &str, generation: i64, step: &str, created: &str) -> Arc<Run> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "flowline.io/v1", "kind": "Run",
                "metadata": {"name": name, "namespace": "n",
                             "annotations": {"flowline.io/created-at": created}},
                "spec": {"workflowRef": "wf-1",
                         "workflow": {"generation": generation, "name": "W",
                                      "steps": [{"id": step, "action": "transform"}]}},
            }))
            .unwrap(),
        )
    }

    fn shown(list: &VersionList) -> Vec<Value> {
        list.data
            .iter()
            .map(|v| {
                let steps = v
                    .version
                    .as_ref()
                    .map(|v| v.steps.iter().map(|s| s.id.clone()).collect::<Vec<_>>());
                json!([v.generation, v.current, v.runs, v.last_run_id, steps])
            })
            .collect()
    }

    /// What the API's cache holds of a run.
    fn summary(run: Arc<Run>) -> Arc<Run> {
        let mut run = Arc::unwrap_or_clone(run);
        crate::cache::summarize_for_tests(&mut run);
        assert!(
            run.spec.workflow.is_none(),
            "the cache keeps no pinned copy"
        );
        Arc::new(run)
    }

    #[test]
    fn the_current_version_and_each_pinned_one_are_listed_newest_first() {
        let runs = [
            run("r1", 1, "a", "2026-11-01T00:00:00Z"),
            run("r2", 1, "a", "2026-11-02T00:00:00Z"),
            run("r3", 2, "b", "2026-11-03T00:00:00Z"),
            // A run created without a version yet (kubectl, not seen by the controller).
            Arc::new(Run {
                spec: Default::default(),
                ..(*run("r4", 0, "x", "2026-11-04T00:00:00Z")).clone()
            }),
        ]
        .map(summary);
        let (list, to_read) = plan(&workflow(3, "c"), &runs);
        assert_eq!(
            shown(&list),
            [
                json!([3, true, 0, null, ["c"]]),
                json!([2, false, 1, "r3", null]),
                json!([1, false, 2, "r2", null]),
            ]
        );
        assert_eq!(to_read, [(1, "r3".to_owned()), (2, "r2".to_owned())]);
        assert!(!list.truncated);
    }

    #[test]
    fn runs_of_the_current_version_are_counted_with_it_and_need_no_read() {
        let runs = [run("r1", 2, "b", "2026-11-01T00:00:00Z")].map(summary);
        let (list, to_read) = plan(&workflow(2, "b"), &runs);
        assert_eq!(shown(&list), [json!([2, true, 1, "r1", ["b"]])]);
        assert!(to_read.is_empty());
    }

    #[test]
    fn at_most_twenty_versions_are_listed_the_newest() {
        let runs: Vec<_> = (1..=60)
            .map(|g| summary(run(&format!("r{g}"), g, "a", "2026-11-01T00:00:00Z")))
            .collect();
        let (list, to_read) = plan(&workflow(61, "a"), &runs);
        assert!(list.truncated);
        assert_eq!(list.data.len(), MAX_VERSIONS);
        assert_eq!(to_read.len(), MAX_VERSIONS - 1, "every one but the current");
        assert_eq!(list.data[0].generation, 61);
        assert_eq!(list.data[MAX_VERSIONS - 1].generation, 42);
    }
}
