//! `GET /v1/workflows/{id}/versions`: the versions of a workflow that Flowline still
//! holds — the workflow as it is now, and every version a kept run is pinned to — so
//! two can be compared. Older versions that no kept run pins are gone (retention).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::ResourceExt;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::find as find_workflow;
use crate::plumbing::auth::{Authorized, needs};
use crate::plumbing::error::ApiResult;
use crate::plumbing::path::Path;
use crate::plumbing::time::ApiTime;
use crate::runs::views::WorkflowVersionView;
use crate::state::ApiState;
use flowline_core::crd::{Run, Workflow, WorkflowSnapshot};

/// The most versions one answer lists (newest first).
pub const MAX_VERSIONS: usize = 50;

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
    /// The version itself, as `workflow_version` of a run shows it.
    pub version: WorkflowVersionView,
}

/// `GET /v1/workflows/{id}/versions`.
#[derive(Serialize, ToSchema)]
pub struct VersionList {
    pub data: Vec<VersionEntry>,
    /// True when more than [`MAX_VERSIONS`] versions are held (the oldest are left out).
    pub truncated: bool,
}

#[utoipa::path(get, path = "/v1/workflows/{id}/versions", operation_id = "workflows.versions", summary = "List a workflow's versions", tag = "workflows",
    description = "Scope: `read`. The workflow as it is now and every version its kept runs are pinned to, newest first, at most 50. A version no kept run pins is not held.",
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
    Ok(Json(list(&wf, &runs)))
}

/// The versions held: the current one, and one per generation the runs are pinned to
/// (the newest run's copy of it), newest generation first.
fn list(wf: &Workflow, runs: &[Arc<Run>]) -> VersionList {
    let current = wf.metadata.generation.unwrap_or(0);
    let mut held: BTreeMap<i64, (u32, Option<&Run>)> = BTreeMap::new();
    held.insert(current, (0, None));
    for run in runs {
        let Some(pinned) = &run.spec.workflow else {
            continue;
        };
        let (count, newest) = held.entry(pinned.generation).or_insert((0, None));
        *count += 1;
        if newest.is_none_or(|n| n.started_at() < run.started_at()) {
            *newest = Some(run);
        }
    }
    let truncated = held.len() > MAX_VERSIONS;
    let now = WorkflowSnapshot::of(wf);
    let data = held
        .into_iter()
        .rev()
        .take(MAX_VERSIONS)
        .map(|(generation, (runs, newest))| {
            let snapshot = match newest.and_then(|r| r.spec.workflow.as_ref()) {
                Some(pinned) if generation != current => pinned,
                _ => &now,
            };
            VersionEntry {
                generation,
                current: generation == current,
                runs,
                last_run_id: newest.map(|r| r.name_any()),
                last_run_at: newest.map(|r| ApiTime(r.started_at())),
                version: WorkflowVersionView::from(snapshot),
            }
        })
        .collect();
    VersionList { data, truncated }
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
                json!([
                    v.generation,
                    v.current,
                    v.runs,
                    v.last_run_id,
                    v.version
                        .steps
                        .iter()
                        .map(|s| s.id.clone())
                        .collect::<Vec<_>>()
                ])
            })
            .collect()
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
        ];
        let list = list(&workflow(3, "c"), &runs);
        assert_eq!(
            shown(&list),
            [
                json!([3, true, 0, null, ["c"]]),
                json!([2, false, 1, "r3", ["b"]]),
                json!([1, false, 2, "r2", ["a"]]),
            ]
        );
        assert!(!list.truncated);
    }

    #[test]
    fn runs_of_the_current_version_are_counted_with_it() {
        let list = list(
            &workflow(2, "b"),
            &[run("r1", 2, "b", "2026-11-01T00:00:00Z")],
        );
        assert_eq!(shown(&list), [json!([2, true, 1, "r1", ["b"]])]);
    }

    #[test]
    fn at_most_fifty_versions_are_listed_the_newest() {
        let runs: Vec<_> = (1..=60)
            .map(|g| run(&format!("r{g}"), g, "a", "2026-11-01T00:00:00Z"))
            .collect();
        let list = list(&workflow(61, "a"), &runs);
        assert!(list.truncated);
        assert_eq!(list.data.len(), MAX_VERSIONS);
        assert_eq!(list.data[0].generation, 61);
        assert_eq!(list.data[MAX_VERSIONS - 1].generation, 12);
    }
}
