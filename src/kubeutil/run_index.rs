//! A run cache's index by workflow: which run names each workflow of a namespace
//! has, so that a per-workflow read (`GET /v1/workflows/{id}/runs`, an
//! Idempotency-Key's look-up, the workflow controller's counts and retention) reads
//! that workflow's runs and not every cached one.
//!
//! The index is a hint, the store is the truth. It holds run names only (shared
//! `Arc<str>`, no copy of a run); a reader resolves each name through the store and
//! keeps the runs whose `workflowRef` is the one asked for. It is fed from the very
//! watch stream that feeds the store, each event before the store applies it, so a
//! run the store holds is always indexed already: a name indexed a moment early
//! resolves to nothing and is skipped, and a name left over (an object that became
//! undecodable, which the store drops too) resolves to a run of another workflow or to
//! nothing. `spec.workflowRef` is immutable (a CEL rule on the CRD), so a run never
//! moves between workflows without a delete, which removes it.
//!
//! A watch restart (`Init`, `InitApply`…, `InitDone`) builds a new index beside the
//! old one and swaps it in at `InitDone`, as kube-runtime's store does, so runs deleted
//! while the watch was down leave no entry behind.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use kube::runtime::watcher;

use crate::crd::Run;
use crate::kubeutil::lenient::Lenient;

/// Run names by workflow, within one namespace.
type ByWorkflow = HashMap<Arc<str>, HashSet<Arc<str>>>;

/// Run names by namespace, then by workflow.
#[derive(Debug, Default)]
struct Names {
    namespaces: HashMap<Arc<str>, ByWorkflow>,
}

impl Names {
    fn insert(&mut self, namespace: &str, workflow: &str, name: &str) {
        let workflows = match self.namespaces.get_mut(namespace) {
            Some(workflows) => workflows,
            None => self.namespaces.entry(namespace.into()).or_default(),
        };
        let names = match workflows.get_mut(workflow) {
            Some(names) => names,
            None => workflows.entry(workflow.into()).or_default(),
        };
        if !names.contains(name) {
            names.insert(name.into());
        }
    }

    /// Removes `name` from `workflow`, or from every workflow of the namespace when
    /// the workflow is not known (an object that could not be decoded: rare).
    fn remove(&mut self, namespace: &str, workflow: Option<&str>, name: &str) {
        let Some(workflows) = self.namespaces.get_mut(namespace) else {
            return;
        };
        match workflow {
            Some(workflow) => {
                if let Some(names) = workflows.get_mut(workflow) {
                    names.remove(name);
                    if names.is_empty() {
                        workflows.remove(workflow);
                    }
                }
            }
            None => workflows.retain(|_, names| {
                names.remove(name);
                !names.is_empty()
            }),
        }
        if workflows.is_empty() {
            self.namespaces.remove(namespace);
        }
    }

    fn of(&self, namespace: &str, workflow: &str) -> Vec<Arc<str>> {
        self.namespaces
            .get(namespace)
            .and_then(|workflows| workflows.get(workflow))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The index of one watch (one reflector): what it serves, and the one being built
/// while the watch relists.
#[derive(Debug, Default)]
pub struct RunIndex {
    live: Names,
    relisting: Option<Names>,
}

/// Where a run is filed: its namespace, its workflow if it could be decoded, its name.
fn filing(run: &Lenient<Run>) -> Option<(&str, Option<&str>, &str)> {
    use kube::Resource;
    let meta = run.meta();
    let namespace = meta.namespace.as_deref()?;
    let name = meta.name.as_deref()?;
    let workflow = run.decoded().map(|r| r.spec.workflow_ref.as_str());
    Some((namespace, workflow, name))
}

impl RunIndex {
    /// Applies one watch event, as the reflector's store applies it.
    pub fn apply(&mut self, event: &watcher::Event<Lenient<Run>>) {
        match event {
            watcher::Event::Init => self.relisting = Some(Names::default()),
            watcher::Event::InitApply(run) => {
                let target = self.relisting.get_or_insert_with(Names::default);
                if let Some((ns, Some(wf), name)) = filing(run) {
                    target.insert(ns, wf, name);
                }
            }
            watcher::Event::InitDone => {
                if let Some(fresh) = self.relisting.take() {
                    self.live = fresh;
                }
            }
            watcher::Event::Apply(run) => match filing(run) {
                Some((ns, Some(wf), name)) => self.live.insert(ns, wf, name),
                // Undecodable now: the store drops it, so does the index.
                Some((ns, None, name)) => self.live.remove(ns, None, name),
                None => {}
            },
            watcher::Event::Delete(run) => {
                if let Some((ns, wf, name)) = filing(run) {
                    self.live.remove(ns, wf, name);
                }
            }
        }
    }

    /// The names of the runs filed under `workflow` in `namespace`.
    pub fn names(&self, namespace: &str, workflow: &str) -> Vec<Arc<str>> {
        self.live.of(namespace, workflow)
    }
}

/// A [`RunIndex`] shared by the watch task that writes it and the handlers that read
/// it.
#[derive(Clone, Debug, Default)]
pub struct SharedRunIndex(Arc<RwLock<RunIndex>>);

impl SharedRunIndex {
    pub fn apply(&self, event: &watcher::Event<Lenient<Run>>) {
        // A panic while holding the lock cannot leave the maps half-written in a way
        // that matters: readers verify every name against the store.
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .apply(event);
    }

    pub fn names(&self, namespace: &str, workflow: &str) -> Vec<Arc<str>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .names(namespace, workflow)
    }

    /// The runs of `workflow` in `namespace`: each name filed under it, looked up in
    /// the store the index is kept beside (`lookup` by name), and kept only while the
    /// store's copy still names that workflow (the index is a hint, the store decides).
    pub fn runs_of(
        &self,
        namespace: &str,
        workflow: &str,
        lookup: impl Fn(&str) -> Option<Arc<Run>>,
    ) -> Vec<Arc<Run>> {
        self.names(namespace, workflow)
            .iter()
            .filter_map(|name| lookup(name))
            .filter(|run| run.spec.workflow_ref == workflow)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(ns: &str, name: &str, wf: &str) -> Lenient<Run> {
        Lenient::Decoded(Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "flowline.io/v1", "kind": "Run",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"workflowRef": wf},
            }))
            .unwrap(),
        ))
    }

    fn undecodable(ns: &str, name: &str) -> Lenient<Run> {
        let text = json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"workflowRef": 7},
        })
        .to_string();
        let run = Lenient::<Run>::from_json(&text);
        assert!(run.undecodable().is_some());
        run
    }

    fn names(index: &RunIndex, ns: &str, wf: &str) -> Vec<String> {
        let mut names: Vec<String> = index.names(ns, wf).iter().map(|n| n.to_string()).collect();
        names.sort();
        names
    }

    fn listed(events: Vec<watcher::Event<Lenient<Run>>>) -> RunIndex {
        let mut index = RunIndex::default();
        index.apply(&watcher::Event::Init);
        for event in events {
            index.apply(&event);
        }
        index.apply(&watcher::Event::InitDone);
        index
    }

    #[test]
    fn runs_are_filed_by_namespace_and_workflow() {
        let index = listed(vec![
            watcher::Event::InitApply(run("a", "r1", "wf")),
            watcher::Event::InitApply(run("a", "r2", "wf")),
            watcher::Event::InitApply(run("a", "r3", "other")),
            watcher::Event::InitApply(run("b", "r4", "wf")),
        ]);
        assert_eq!(names(&index, "a", "wf"), ["r1", "r2"]);
        assert_eq!(names(&index, "a", "other"), ["r3"]);
        assert_eq!(names(&index, "b", "wf"), ["r4"]);
        assert!(names(&index, "b", "other").is_empty());
        assert!(names(&index, "c", "wf").is_empty());
    }

    #[test]
    fn applies_add_once_and_deletes_remove() {
        let mut index = listed(vec![]);
        index.apply(&watcher::Event::Apply(run("a", "r1", "wf")));
        index.apply(&watcher::Event::Apply(run("a", "r1", "wf")));
        index.apply(&watcher::Event::Apply(run("a", "r2", "wf")));
        assert_eq!(names(&index, "a", "wf"), ["r1", "r2"]);
        index.apply(&watcher::Event::Delete(run("a", "r1", "wf")));
        assert_eq!(names(&index, "a", "wf"), ["r2"]);
        index.apply(&watcher::Event::Delete(run("a", "r2", "wf")));
        assert!(index.live.namespaces.is_empty(), "empty sets are dropped");
    }

    #[test]
    fn a_run_that_becomes_undecodable_leaves_the_index() {
        let mut index = listed(vec![
            watcher::Event::InitApply(run("a", "r1", "wf")),
            watcher::Event::InitApply(run("a", "r2", "wf")),
        ]);
        index.apply(&watcher::Event::Apply(undecodable("a", "r1")));
        assert_eq!(names(&index, "a", "wf"), ["r2"]);
        index.apply(&watcher::Event::Delete(undecodable("a", "r2")));
        assert!(names(&index, "a", "wf").is_empty());
    }

    #[test]
    fn a_relist_replaces_the_index_at_init_done_and_not_before() {
        let mut index = listed(vec![
            watcher::Event::InitApply(run("a", "gone", "wf")),
            watcher::Event::InitApply(run("a", "kept", "wf")),
        ]);
        // The watch restarts: "gone" was deleted while it was down.
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(run("a", "kept", "wf")));
        index.apply(&watcher::Event::InitApply(run("a", "new", "wf")));
        assert_eq!(
            names(&index, "a", "wf"),
            ["gone", "kept"],
            "served as before until the relist is complete"
        );
        index.apply(&watcher::Event::InitDone);
        assert_eq!(names(&index, "a", "wf"), ["kept", "new"]);
    }

    #[test]
    fn a_relist_that_restarts_midway_starts_over() {
        let mut index = listed(vec![watcher::Event::InitApply(run("a", "old", "wf"))]);
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(run("a", "half", "wf")));
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(run("a", "whole", "wf")));
        index.apply(&watcher::Event::InitDone);
        assert_eq!(names(&index, "a", "wf"), ["whole"]);
    }

    #[test]
    fn a_recreated_run_of_another_workflow_is_filed_under_the_new_one() {
        let mut index = listed(vec![watcher::Event::InitApply(run("a", "r", "wf1"))]);
        index.apply(&watcher::Event::Delete(run("a", "r", "wf1")));
        index.apply(&watcher::Event::Apply(run("a", "r", "wf2")));
        assert!(names(&index, "a", "wf1").is_empty());
        assert_eq!(names(&index, "a", "wf2"), ["r"]);
    }
}
