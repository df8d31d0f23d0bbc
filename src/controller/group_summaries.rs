//! The concurrency groups' summaries ([`GroupSummary`]) the run controller keeps
//! between its looks at queued runs. Every queued run is looked at again every few
//! seconds; judging each against a walk over its group would cost n × n for n queued
//! runs of one group, with nothing changing (3,000 queued runs kept a core busy). A
//! summary is built by one walk and kept until the runs of its workflow change (a watch
//! event, after the store holds it) or this process starts or ends one of them, and
//! at most [`MAX_AGE`], a bound on staleness should a change ever go unreported.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::admission::GroupSummary;

/// The longest a summary is kept, changes or not.
pub const MAX_AGE: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct Summaries {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Hands each workflow's entry an epoch never used before.
    next_epoch: u64,
    /// By namespace, then workflow.
    workflows: HashMap<String, HashMap<String, Entry>>,
}

/// The summaries of one workflow's groups, all built since its last change.
struct Entry {
    epoch: u64,
    groups: HashMap<String, (Instant, Arc<GroupSummary>)>,
}

impl Summaries {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The summary of `group` of `workflow` in `namespace`: the one kept, if its
    /// workflow has not changed since and it is younger than [`MAX_AGE`]; else the one
    /// `build` makes, kept unless the workflow changed while it was being built.
    pub fn get(
        &self,
        namespace: &str,
        workflow: &str,
        group: &str,
        build: impl FnOnce() -> GroupSummary,
    ) -> Arc<GroupSummary> {
        let epoch = {
            let mut inner = self.lock();
            let Inner {
                next_epoch,
                workflows,
            } = &mut *inner;
            let entry = workflows
                .entry(namespace.to_string())
                .or_default()
                .entry(workflow.to_string())
                .or_insert_with(|| {
                    *next_epoch += 1;
                    Entry {
                        epoch: *next_epoch,
                        groups: HashMap::new(),
                    }
                });
            if let Some((built, summary)) = entry.groups.get(group)
                && built.elapsed() < MAX_AGE
            {
                return summary.clone();
            }
            entry.epoch
        };
        let summary = Arc::new(build());
        let mut inner = self.lock();
        if let Some(entry) = inner
            .workflows
            .get_mut(namespace)
            .and_then(|w| w.get_mut(workflow))
            && entry.epoch == epoch
        {
            entry
                .groups
                .insert(group.to_string(), (Instant::now(), summary.clone()));
        }
        summary
    }

    /// Forgets the summaries of `workflow` in `namespace`: one of its runs changed in
    /// the cache, or this process started or ended one.
    pub fn touch(&self, namespace: &str, workflow: &str) {
        let mut inner = self.lock();
        if let Some(workflows) = inner.workflows.get_mut(namespace) {
            workflows.remove(workflow);
            if workflows.is_empty() {
                inner.workflows.remove(namespace);
            }
        }
    }

    /// Forgets the summaries of every workflow in `namespace` (a run there changed in
    /// a way that does not name its workflow: it can no longer be decoded).
    pub fn touch_namespace(&self, namespace: &str) {
        self.lock().workflows.remove(namespace);
    }

    /// Forgets every summary (the cache was listed again).
    pub fn touch_all(&self) {
        self.lock().workflows.clear();
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;
    use crate::controller::admission::{Member, MemberState, Order};

    fn summary(waiting: usize) -> GroupSummary {
        GroupSummary::of((0..waiting).map(|i| Member {
            order: Order {
                created: Timestamp::from_millisecond(i as i64).unwrap(),
                name: format!("r{i}"),
            },
            state: MemberState::Waiting,
        }))
    }

    #[test]
    fn a_summary_is_built_once_until_its_workflow_is_touched() {
        let summaries = Summaries::default();
        let builds = std::cell::Cell::new(0);
        let get = |workflow: &str, group: &str| {
            summaries.get("ns", workflow, group, || {
                builds.set(builds.get() + 1);
                summary(builds.get())
            })
        };
        assert_eq!(*get("wf", "g"), summary(1));
        assert_eq!(*get("wf", "g"), summary(1), "kept");
        assert_eq!(builds.get(), 1);
        get("other", "g");
        get("wf", "h");
        assert_eq!(builds.get(), 3, "one per workflow and group");
        summaries.touch("ns", "other");
        assert_eq!(*get("wf", "g"), summary(1), "another workflow's change");
        summaries.touch("ns", "wf");
        assert_eq!(*get("wf", "g"), summary(4), "rebuilt after its own");
        get("wf", "h");
        assert_eq!(builds.get(), 5, "every group of the workflow was forgotten");
        summaries.touch_namespace("elsewhere");
        get("wf", "h");
        assert_eq!(builds.get(), 5, "another namespace's change");
        summaries.touch_namespace("ns");
        get("wf", "h");
        assert_eq!(builds.get(), 6, "its namespace's");
        summaries.touch_all();
        get("other", "g");
        assert_eq!(builds.get(), 7);
    }

    #[test]
    fn a_summary_built_across_a_change_is_not_kept() {
        let summaries = Summaries::default();
        // The change lands while the walk runs: what the walk saw may predate it.
        let stale = summaries.get("ns", "wf", "g", || {
            summaries.touch("ns", "wf");
            summary(1)
        });
        assert_eq!(*stale, summary(1), "answered from the walk");
        let fresh = summaries.get("ns", "wf", "g", || summary(2));
        assert_eq!(
            *fresh,
            summary(2),
            "built again, not the one built across the change"
        );
        // And while another caller already made a new entry for the workflow.
        summaries.get("ns", "wf2", "g", || {
            summaries.touch("ns", "wf2");
            summaries.get("ns", "wf2", "g", || summary(3));
            summary(4)
        });
        assert_eq!(*summaries.get("ns", "wf2", "g", || summary(5)), summary(3));
    }
}
