//! An index of a watch cache: the names of its objects by namespace, and within a
//! namespace by a group the kind chooses (a run's workflow; nothing for kinds listed
//! only by namespace). A read that concerns one account, or one workflow's runs, then
//! reads those objects and not every object the cache holds for every account:
//! `GET /v1/workflows`, `GET /v1/webhooks`, `GET /v1/keys`, a redelivery's event
//! look-up, `GET /v1/workflows/{id}/runs`, an Idempotency-Key's look-up.
//!
//! The index is a hint, the store is the truth. It holds names only (shared
//! `Arc<str>`, no copy of an object); a reader resolves each name through the store and
//! keeps the objects still filed where it looked (same group). It is fed from the very
//! watch stream that feeds the store, each event before the store applies it, so an
//! object the store holds is always indexed already: a name indexed a moment early
//! resolves to nothing and is skipped, and a name left over (an object that became
//! undecodable, which the store drops too) resolves to an object of another group or to
//! nothing. A group must not change while an object lives (a run's `spec.workflowRef`
//! is immutable, a CEL rule on the CRD), so an object never moves between groups
//! without a delete, which removes it.
//!
//! A watch restart (`Init`, `InitApply`…, `InitDone`) builds a new index beside the
//! old one and swaps it in at `InitDone`, as kube-runtime's store does, so objects
//! deleted while the watch was down leave no entry behind.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use kube::Resource;
use kube::runtime::watcher;

use crate::lenient::Lenient;
use flowline_core::crd::Run;

/// The group an object is filed under within its namespace.
pub type Grouping<K> = for<'a> fn(&'a K) -> &'a str;

/// Runs, by workflow.
pub fn by_workflow(run: &Run) -> &str {
    &run.spec.workflow_ref
}

/// Kinds read by namespace only: one group.
pub fn by_namespace<K>(_: &K) -> &'static str {
    ""
}

/// Names by group, within one namespace.
type ByGroup = HashMap<Arc<str>, HashSet<Arc<str>>>;

/// Names by namespace, then by group.
#[derive(Debug)]
struct Names {
    namespaces: HashMap<Arc<str>, ByGroup>,
    /// The namespaces each name is found in, for a kind looked up by name across
    /// namespaces (workflows, by an inbound hook); None for the others.
    homes: Option<HashMap<Arc<str>, HashSet<Arc<str>>>>,
}

impl Names {
    fn new(with_homes: bool) -> Self {
        Names {
            namespaces: HashMap::new(),
            homes: with_homes.then(HashMap::new),
        }
    }

    fn insert(&mut self, namespace: &str, group: &str, name: &str) {
        if let Some(homes) = &mut self.homes {
            let namespaces = match homes.get_mut(name) {
                Some(namespaces) => namespaces,
                None => homes.entry(name.into()).or_default(),
            };
            if !namespaces.contains(namespace) {
                namespaces.insert(namespace.into());
            }
        }
        let groups = match self.namespaces.get_mut(namespace) {
            Some(groups) => groups,
            None => self.namespaces.entry(namespace.into()).or_default(),
        };
        let names = match groups.get_mut(group) {
            Some(names) => names,
            None => groups.entry(group.into()).or_default(),
        };
        if !names.contains(name) {
            names.insert(name.into());
        }
    }

    /// Removes `name` from `group`, or from every group of the namespace when the
    /// group is not known (an object that could not be decoded: rare).
    fn remove(&mut self, namespace: &str, group: Option<&str>, name: &str) {
        if let Some(homes) = &mut self.homes
            && let Some(namespaces) = homes.get_mut(name)
        {
            namespaces.remove(namespace);
            if namespaces.is_empty() {
                homes.remove(name);
            }
        }
        let Some(groups) = self.namespaces.get_mut(namespace) else {
            return;
        };
        match group {
            Some(group) => {
                if let Some(names) = groups.get_mut(group) {
                    names.remove(name);
                    if names.is_empty() {
                        groups.remove(group);
                    }
                }
            }
            None => groups.retain(|_, names| {
                names.remove(name);
                !names.is_empty()
            }),
        }
        if groups.is_empty() {
            self.namespaces.remove(namespace);
        }
    }

    fn of(&self, namespace: &str, group: &str) -> Vec<Arc<str>> {
        self.namespaces
            .get(namespace)
            .and_then(|groups| groups.get(group))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn homes_of(&self, name: &str) -> Vec<Arc<str>> {
        self.homes
            .as_ref()
            .and_then(|homes| homes.get(name))
            .map(|namespaces| namespaces.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn in_namespace(&self, namespace: &str) -> Vec<Arc<str>> {
        self.namespaces
            .get(namespace)
            .map(|groups| groups.values().flatten().cloned().collect())
            .unwrap_or_default()
    }
}

/// The index of one watch (one reflector): what it serves, and the one being built
/// while the watch relists.
pub struct NameIndex<K> {
    live: Names,
    relisting: Option<Names>,
    grouping: Grouping<K>,
}

impl<K: Resource + Clone> NameIndex<K> {
    pub fn new(grouping: Grouping<K>) -> Self {
        NameIndex {
            live: Names::new(false),
            relisting: None,
            grouping,
        }
    }

    /// [`NameIndex::new`], also keeping the namespaces each name is found in
    /// ([`NameIndex::homes_of`]).
    pub fn with_homes(grouping: Grouping<K>) -> Self {
        NameIndex {
            live: Names::new(true),
            ..NameIndex::new(grouping)
        }
    }

    fn fresh(&self) -> Names {
        Names::new(self.live.homes.is_some())
    }

    /// Where an object is filed: its namespace, its group if it could be decoded, its
    /// name. Cluster-scoped objects (no namespace) are not filed.
    fn filing<'a>(&self, object: &'a Lenient<K>) -> Option<(&'a str, Option<&'a str>, &'a str)> {
        let meta = object.meta();
        let namespace = meta.namespace.as_deref()?;
        let name = meta.name.as_deref()?;
        let group = object.decoded().map(|o| (self.grouping)(o));
        Some((namespace, group, name))
    }

    /// Applies one watch event, as the reflector's store applies it.
    pub fn apply(&mut self, event: &watcher::Event<Lenient<K>>) {
        match event {
            watcher::Event::Init => self.relisting = Some(self.fresh()),
            watcher::Event::InitApply(object) => {
                let filed = self.filing(object);
                let fresh = self.fresh();
                let target = self.relisting.get_or_insert(fresh);
                if let Some((ns, Some(group), name)) = filed {
                    target.insert(ns, group, name);
                }
            }
            watcher::Event::InitDone => {
                if let Some(fresh) = self.relisting.take() {
                    self.live = fresh;
                }
            }
            watcher::Event::Apply(object) => match self.filing(object) {
                Some((ns, Some(group), name)) => self.live.insert(ns, group, name),
                // Undecodable now: the store drops it, so does the index.
                Some((ns, None, name)) => self.live.remove(ns, None, name),
                None => {}
            },
            watcher::Event::Delete(object) => {
                if let Some((ns, group, name)) = self.filing(object) {
                    self.live.remove(ns, group, name);
                }
            }
        }
    }

    /// The names filed under `group` in `namespace`.
    pub fn names(&self, namespace: &str, group: &str) -> Vec<Arc<str>> {
        self.live.of(namespace, group)
    }

    /// The names filed in `namespace`, every group's.
    pub fn names_in(&self, namespace: &str) -> Vec<Arc<str>> {
        self.live.in_namespace(namespace)
    }

    /// The namespaces an object named `name` is filed in (none unless the index was
    /// made [`NameIndex::with_homes`]).
    pub fn homes_of(&self, name: &str) -> Vec<Arc<str>> {
        self.live.homes_of(name)
    }
}

/// A [`NameIndex`] shared by the watch task that writes it and the handlers that read
/// it, with a count of the store's changes beside it.
pub struct SharedNameIndex<K> {
    index: Arc<RwLock<NameIndex<K>>>,
    /// Bumped before the store applies each watch event ([`SharedNameIndex::apply`])
    /// and again after ([`SharedNameIndex::settled`]): odd while a change is on its way
    /// into the store. An atomic beside the lock: every event of every kind pays it.
    changes: Arc<AtomicU64>,
}

impl<K> Clone for SharedNameIndex<K> {
    fn clone(&self) -> Self {
        SharedNameIndex {
            index: self.index.clone(),
            changes: self.changes.clone(),
        }
    }
}

impl<K: Resource + Clone> SharedNameIndex<K> {
    fn of(index: NameIndex<K>) -> Self {
        SharedNameIndex {
            index: Arc::new(RwLock::new(index)),
            changes: Arc::default(),
        }
    }

    pub fn new(grouping: Grouping<K>) -> Self {
        Self::of(NameIndex::new(grouping))
    }

    /// [`NameIndex::with_homes`], shared.
    pub fn with_homes(grouping: Grouping<K>) -> Self {
        Self::of(NameIndex::with_homes(grouping))
    }

    /// The objects named `name`, in whichever namespaces hold one (`lookup` by
    /// namespace and name). Empty unless made [`SharedNameIndex::with_homes`].
    pub fn named(&self, name: &str, lookup: impl Fn(&str, &str) -> Option<Arc<K>>) -> Vec<Arc<K>> {
        let homes = self.read().homes_of(name);
        homes
            .iter()
            .filter_map(|namespace| lookup(namespace, name))
            .collect()
    }

    /// Applies one watch event, before the reflector's store does.
    pub fn apply(&self, event: &watcher::Event<Lenient<K>>) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        // A panic while holding the lock cannot leave the maps half-written in a way
        // that matters: readers verify every name against the store.
        self.index
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .apply(event);
    }

    /// The store has applied the event last given to [`SharedNameIndex::apply`].
    pub fn settled(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    /// How many times the store's objects began or finished changing: even when no
    /// change is on its way. Equal before and after a read of the store, and even, the
    /// read saw one state of the store.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, NameIndex<K>> {
        self.index.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The objects filed under `group` in `namespace`: each name, looked up in the
    /// store the index is kept beside (`lookup` by name), and kept only while the
    /// store's copy is still of that group (the index is a hint, the store decides).
    pub fn filed_under(
        &self,
        namespace: &str,
        group: &str,
        lookup: impl Fn(&str) -> Option<Arc<K>>,
    ) -> Vec<Arc<K>> {
        let (names, grouping) = {
            let index = self.read();
            (index.names(namespace, group), index.grouping)
        };
        names
            .iter()
            .filter_map(|name| lookup(name))
            .filter(|object| grouping(object) == group)
            .collect()
    }

    /// The objects of `namespace`, every group's, looked up as [`Self::filed_under`]
    /// does (`lookup` by name within that namespace).
    pub fn in_namespace(
        &self,
        namespace: &str,
        lookup: impl Fn(&str) -> Option<Arc<K>>,
    ) -> Vec<Arc<K>> {
        let names = self.read().names_in(namespace);
        names.iter().filter_map(|name| lookup(name)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
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

    fn names(index: &NameIndex<Run>, ns: &str, wf: &str) -> Vec<String> {
        let mut names: Vec<String> = index.names(ns, wf).iter().map(|n| n.to_string()).collect();
        names.sort();
        names
    }

    fn listed(events: Vec<watcher::Event<Lenient<Run>>>) -> NameIndex<Run> {
        let mut index = NameIndex::new(by_workflow);
        index.apply(&watcher::Event::Init);
        for event in events {
            index.apply(&event);
        }
        index.apply(&watcher::Event::InitDone);
        index
    }

    #[test]
    fn changes_are_odd_between_an_event_and_its_store_settling() {
        let index = SharedNameIndex::new(by_workflow);
        assert_eq!(index.changes(), 0);
        index.apply(&watcher::Event::Apply(run("a", "r1", "wf")));
        assert_eq!(index.changes() % 2, 1, "on its way into the store");
        index.settled();
        assert_eq!(index.changes(), 2);
        index.apply(&watcher::Event::Delete(run("a", "r1", "wf")));
        index.settled();
        index.apply(&watcher::Event::Init);
        index.settled();
        assert_eq!(index.changes(), 6, "every event counts, a list's too");
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

    #[test]
    fn a_namespace_lists_every_group_and_nothing_of_another_namespace() {
        let index = listed(vec![
            watcher::Event::InitApply(run("a", "r1", "wf")),
            watcher::Event::InitApply(run("a", "r2", "other")),
            watcher::Event::InitApply(run("b", "r3", "wf")),
        ]);
        let mut names: Vec<String> = index.names_in("a").iter().map(|n| n.to_string()).collect();
        names.sort();
        assert_eq!(names, ["r1", "r2"]);
        assert!(index.names_in("c").is_empty());
    }

    #[test]
    fn readers_keep_only_what_the_store_holds_where_they_looked() {
        let shared = SharedNameIndex::new(by_workflow);
        shared.apply(&watcher::Event::Init);
        for (name, wf) in [("r1", "wf"), ("r2", "wf"), ("r3", "other")] {
            shared.apply(&watcher::Event::InitApply(run("a", name, wf)));
        }
        shared.apply(&watcher::Event::InitDone);
        // The store's truth: r1 is gone (its delete not seen yet), r2 was recreated
        // under another workflow, r3 is as indexed.
        let store = |name: &str| match name {
            "r2" => run("a", "r2", "moved").decoded().cloned(),
            "r3" => run("a", "r3", "other").decoded().cloned(),
            _ => None,
        };
        assert!(shared.filed_under("a", "wf", store).is_empty());
        let mut all: Vec<String> = shared
            .in_namespace("a", store)
            .iter()
            .map(|r| r.name_any())
            .collect();
        all.sort();
        assert_eq!(
            all,
            ["r2", "r3"],
            "a namespace read keeps what the store holds"
        );
    }

    #[test]
    fn kinds_indexed_by_namespace_alone_file_every_object_in_one_group() {
        let workflow = |ns: &str, name: &str| {
            Lenient::Decoded(Arc::new(
                serde_json::from_value::<flowline_core::crd::Workflow>(json!({
                    "apiVersion": "flowline.io/v1", "kind": "Workflow",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"name": name, "trigger": {"type": "manual"}, "steps": []},
                }))
                .unwrap(),
            ))
        };
        let mut index = NameIndex::new(by_namespace);
        index.apply(&watcher::Event::Apply(workflow("a", "wf-1")));
        index.apply(&watcher::Event::Apply(workflow("a", "wf-2")));
        index.apply(&watcher::Event::Apply(workflow("b", "wf-3")));
        index.apply(&watcher::Event::Delete(workflow("a", "wf-1")));
        let names: Vec<String> = index.names_in("a").iter().map(|n| n.to_string()).collect();
        assert_eq!(names, ["wf-2"]);
    }

    fn homes(index: &NameIndex<Run>, name: &str) -> Vec<String> {
        let mut homes: Vec<String> = index.homes_of(name).iter().map(|n| n.to_string()).collect();
        homes.sort();
        homes
    }

    #[test]
    fn a_name_is_found_in_every_namespace_that_holds_it_when_homes_are_kept() {
        let mut index = NameIndex::with_homes(by_workflow);
        index.apply(&watcher::Event::Init);
        for (ns, name) in [("a", "x"), ("b", "x"), ("a", "y"), ("c", "gone")] {
            index.apply(&watcher::Event::InitApply(run(ns, name, "wf")));
        }
        index.apply(&watcher::Event::InitDone);
        assert_eq!(homes(&index, "x"), ["a", "b"]);
        assert_eq!(homes(&index, "y"), ["a"]);
        index.apply(&watcher::Event::Delete(run("a", "x", "wf")));
        assert_eq!(homes(&index, "x"), ["b"]);
        index.apply(&watcher::Event::Apply(undecodable("b", "x")));
        assert!(
            homes(&index, "x").is_empty(),
            "undecodable: gone from the homes too"
        );
        // A relist without "gone" forgets it, and keeps homes in the fresh index.
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(run("a", "y", "wf")));
        index.apply(&watcher::Event::InitDone);
        assert!(homes(&index, "gone").is_empty());
        assert_eq!(homes(&index, "y"), ["a"]);
        index.apply(&watcher::Event::Apply(run("d", "y", "wf")));
        assert_eq!(homes(&index, "y"), ["a", "d"]);

        let mut plain = NameIndex::new(by_workflow);
        plain.apply(&watcher::Event::Apply(run("a", "x", "wf")));
        assert!(homes(&plain, "x").is_empty(), "kept only when asked for");
    }
}
