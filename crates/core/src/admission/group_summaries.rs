//! The concurrency groups' summaries ([`GroupSummary`]) the run controller keeps for
//! its looks at queued runs. Every queued run is looked at again every few seconds;
//! judging each against a walk over its group would cost n × n for n queued runs of one
//! group with nothing changing (3,000 queued runs kept a core busy), and a burst of n
//! arrivals, each changing the group, as much again. So the summaries of a workflow's
//! groups are built by one walk over its unfinished runs, then kept up to date run by
//! run: a run that changed in the cache (a watch event, once the store holds it) or
//! that this process started or ended is marked, and counted out and in again at the
//! next look. A workflow's summaries are built again after [`MAX_AGE`], a bound on
//! staleness should a change ever go unreported, and when more of its runs changed
//! than patching would save.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::admission::{GroupSummary, Member, Order};

/// The longest a workflow's summaries go without being built again.
const MAX_AGE: Duration = Duration::from_secs(10);

/// A run as its group counts it: the group, and how it counts.
pub type Membership = (String, Member);

#[derive(Default)]
pub struct Summaries {
    /// By namespace, then workflow. One lock for looks and marks: a look never sees a
    /// run the store has changed without also seeing it marked.
    workflows: Mutex<HashMap<String, HashMap<String, Entry>>>,
}

/// One workflow's unfinished runs, by name, and its groups' summaries.
struct Entry {
    built: Instant,
    members: HashMap<String, Membership>,
    groups: HashMap<String, GroupSummary>,
    /// Runs changed since they were last counted.
    changed: HashSet<String>,
}

impl Entry {
    fn build(runs: Vec<(String, Membership)>) -> Self {
        let mut entry = Entry {
            built: Instant::now(),
            members: HashMap::with_capacity(runs.len()),
            groups: HashMap::new(),
            changed: HashSet::new(),
        };
        for (name, membership) in runs {
            entry.set(&name, Some(membership));
        }
        entry
    }

    /// Counts the run `name` out, then in again as `now` says (None: not a member).
    fn set(&mut self, name: &str, now: Option<Membership>) {
        if let Some((group, member)) = self.members.remove(name)
            && let Some(summary) = self.groups.get_mut(&group)
        {
            summary.remove(&member);
            if summary.is_empty() {
                self.groups.remove(&group);
            }
        }
        if let Some((group, member)) = now {
            self.groups
                .entry(group.clone())
                .or_default()
                .add(member.clone());
            self.members.insert(name.to_string(), (group, member));
        }
    }

    /// Whether patching the changed runs would cost about as much as a walk.
    fn overrun(&self) -> bool {
        self.changed.len() > self.members.len() / 2 + 16
    }
}

impl Summaries {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Entry>>> {
        self.workflows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the waiting run at `this` in `group` of `workflow` in `namespace` must go
    /// on waiting under `limit` ([`GroupSummary::must_wait`]). `walk` lists the
    /// workflow's unfinished runs with their memberships, for a build; `membership`
    /// says what the run `name` is now, for a patch.
    pub fn must_wait(
        &self,
        (namespace, workflow, group): (&str, &str, &str),
        limit: u32,
        this: &Order,
        walk: impl FnOnce() -> Vec<(String, Membership)>,
        membership: impl Fn(&str) -> Option<Membership>,
    ) -> bool {
        let mut namespaces = self.lock();
        let workflows = namespaces.entry(namespace.to_string()).or_default();
        let fresh = workflows
            .get(workflow)
            .is_some_and(|e| e.built.elapsed() < MAX_AGE && !e.overrun());
        if !fresh {
            // Workflows not looked at for a while are dropped on the way.
            workflows.retain(|_, e| e.built.elapsed() < MAX_AGE);
            workflows.insert(workflow.to_string(), Entry::build(walk()));
        }
        let entry = workflows.get_mut(workflow).expect("inserted above");
        for name in std::mem::take(&mut entry.changed) {
            let now = membership(&name);
            entry.set(&name, now);
        }
        entry
            .groups
            .get(group)
            .unwrap_or(&GroupSummary::default())
            .must_wait(limit, this)
    }

    /// Marks the run `name` of `workflow` in `namespace` as changed: it changed in the
    /// cache, or this process started or ended it.
    pub fn touch(&self, namespace: &str, workflow: &str, name: &str) {
        let mut namespaces = self.lock();
        let Some(workflows) = namespaces.get_mut(namespace) else {
            return;
        };
        if let Some(entry) = workflows.get_mut(workflow) {
            entry.changed.insert(name.to_string());
            // A workflow nobody looks at any more would collect names forever.
            if entry.overrun() {
                workflows.remove(workflow);
            }
        }
    }

    /// Forgets the summaries of every workflow in `namespace` (a run there changed in
    /// a way that does not name its workflow: it can no longer be decoded).
    pub fn touch_namespace(&self, namespace: &str) {
        self.lock().remove(namespace);
    }

    /// Forgets every summary (the cache was listed again).
    pub fn touch_all(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;
    use crate::admission::MemberState;
    use crate::admission::tests::order;

    fn member(n: i64, state: MemberState) -> (String, Membership) {
        (
            format!("r{n}"),
            (
                "g".to_string(),
                Member {
                    order: order(n),
                    state,
                },
            ),
        )
    }

    const ACTIVE: MemberState = MemberState::Active {
        cancel_requested: false,
    };

    /// A workflow's runs as a test store: name → membership.
    struct Store {
        runs: RefCell<HashMap<String, Membership>>,
        walks: Cell<usize>,
    }

    impl Store {
        fn new(runs: impl IntoIterator<Item = (String, Membership)>) -> Self {
            Store {
                runs: RefCell::new(runs.into_iter().collect()),
                walks: Cell::new(0),
            }
        }

        fn must_wait(&self, summaries: &Summaries, limit: u32, this: i64) -> bool {
            summaries.must_wait(
                ("ns", "wf", "g"),
                limit,
                &order(this),
                || {
                    self.walks.set(self.walks.get() + 1);
                    self.runs
                        .borrow()
                        .iter()
                        .map(|(n, m)| (n.clone(), m.clone()))
                        .collect()
                },
                |name| self.runs.borrow().get(name).cloned(),
            )
        }

        fn set(&self, summaries: &Summaries, run: (String, Membership)) {
            let name = run.0.clone();
            self.runs.borrow_mut().insert(run.0, run.1);
            summaries.touch("ns", "wf", &name);
        }

        fn remove(&self, summaries: &Summaries, name: &str) {
            self.runs.borrow_mut().remove(name);
            summaries.touch("ns", "wf", name);
        }
    }

    #[test]
    fn looks_are_answered_from_one_walk_patched_run_by_run() {
        let summaries = Summaries::default();
        let store = Store::new([
            member(1, ACTIVE),
            member(2, MemberState::Waiting),
            member(3, MemberState::Waiting),
        ]);
        assert!(store.must_wait(&summaries, 1, 2));
        assert!(store.must_wait(&summaries, 2, 3), "r1 active, r2 ahead");
        assert!(!store.must_wait(&summaries, 3, 3));
        assert_eq!(store.walks.get(), 1, "one walk for every look");

        // r1 ends: r2 may start under limit 1, r3 still waits behind r2.
        store.remove(&summaries, "r1");
        assert!(!store.must_wait(&summaries, 1, 2));
        assert!(store.must_wait(&summaries, 1, 3));
        // r2 starts, r4 arrives, r0 arrives (created earlier: ahead of r3).
        store.set(&summaries, member(2, ACTIVE));
        store.set(&summaries, member(4, MemberState::Waiting));
        store.set(&summaries, member(0, MemberState::Waiting));
        assert!(store.must_wait(&summaries, 2, 3), "r2 active, r0 ahead");
        assert!(!store.must_wait(&summaries, 3, 3));
        assert!(
            store.must_wait(&summaries, 3, 4),
            "r2 active, r0 and r3 ahead"
        );
        assert_eq!(store.walks.get(), 1, "patched, not walked again");

        // Another workflow's marks and looks leave this one alone.
        summaries.touch("ns", "other", "r3");
        summaries.touch("elsewhere", "wf", "r3");
        assert!(store.must_wait(&summaries, 2, 3));
        assert_eq!(store.walks.get(), 1);
    }

    #[test]
    fn a_summary_is_walked_again_when_patching_would_not_pay_or_it_was_forgotten() {
        let summaries = Summaries::default();
        let store = Store::new((0..4).map(|n| member(n, MemberState::Waiting)));
        store.must_wait(&summaries, 1, 0);
        assert_eq!(store.walks.get(), 1);
        // More changed runs than the workflow has, by far: walked again.
        for n in 4..40 {
            store.set(&summaries, member(n, MemberState::Waiting));
        }
        assert!(store.must_wait(&summaries, 36, 39), "36 waiting ahead");
        assert!(!store.must_wait(&summaries, 40, 39));
        assert_eq!(store.walks.get(), 2);
        summaries.touch_namespace("elsewhere");
        store.must_wait(&summaries, 1, 0);
        assert_eq!(store.walks.get(), 2, "another namespace forgotten");
        summaries.touch_namespace("ns");
        store.must_wait(&summaries, 1, 0);
        assert_eq!(store.walks.get(), 3);
        summaries.touch_all();
        store.must_wait(&summaries, 1, 0);
        assert_eq!(store.walks.get(), 4);
    }

    #[test]
    fn every_look_answers_as_a_fresh_walk_would() {
        // A scripted history of arrivals, starts, ends and cancels: after each change
        // every waiting run gets the answer of a summary built from scratch.
        let summaries = Summaries::default();
        let store = Store::new([]);
        let mut step = 0u64;
        for n in 0..60i64 {
            step = step
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let pick = (step >> 33) as i64;
            match pick % 4 {
                0 | 1 => store.set(&summaries, member(n, MemberState::Waiting)),
                2 => store.set(&summaries, member(pick % (n + 1), ACTIVE)),
                _ => store.remove(&summaries, &format!("r{}", pick % (n + 1))),
            }
            let truth = GroupSummary::of(store.runs.borrow().values().map(|(_, m)| m.clone()));
            let waiting: Vec<i64> = (0..=n)
                .filter(|k| {
                    store
                        .runs
                        .borrow()
                        .get(&format!("r{k}"))
                        .is_some_and(|(_, m)| m.state == MemberState::Waiting)
                })
                .collect();
            // Every limit from 1 to one more than the runs: each boundary is crossed.
            let most = store.runs.borrow().len() as u32 + 1;
            for k in waiting {
                for limit in 1..=most {
                    assert_eq!(
                        store.must_wait(&summaries, limit, k),
                        truth.must_wait(limit, &order(k)),
                        "after change {n}, run r{k}, limit {limit}"
                    );
                }
            }
        }
    }
}
