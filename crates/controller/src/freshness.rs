//! What the run controller knows of its cached runs beyond the runs themselves, for
//! [`flowline_core::cached_read`]: which runs without a status came from a list rather
//! than being born while watched, which shards it held before its watch began, and
//! which runs it wrote a status for that its cache has not shown yet.

use std::collections::HashSet;
use std::sync::Mutex;

use flowline_core::cached_read::Freshness;
use flowline_core::crd::Run;
use flowline_kube::lenient::Lenient;
use kube::ResourceExt;
use kube::runtime::watcher;

use super::shard::{Shards, of_run};

/// The run controller's record (one per context). Every call is short; no request is
/// made under its lock.
#[derive(Default)]
pub struct FreshRecord {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The shards held when the watch's current list began (a bit each).
    held_at_list: u64,
    /// Runs without a status that the current list delivered (by uid).
    listed: HashSet<String>,
    /// Runs without a status whose first watch event came after the list (by uid).
    /// Recorded on positive evidence only: a run whose event is not recorded yet
    /// when it is decided is read afresh.
    born: HashSet<String>,
    /// Runs this process wrote a status for that the cache has not shown (by uid).
    touched: HashSet<String>,
}

impl FreshRecord {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records what the run watch's `event` says (`shards`: this process's), called
    /// before the next event is read.
    pub fn observe(&self, event: &watcher::Event<Lenient<Run>>, shards: &Shards) {
        match event {
            watcher::Event::Init => self.list_begins(shards),
            watcher::Event::InitApply(run) => {
                run.decoded().into_iter().for_each(|r| self.listed(r))
            }
            watcher::Event::Apply(run) => run.decoded().into_iter().for_each(|r| self.changed(r)),
            watcher::Event::Delete(run) => self.deleted(&run.uid().unwrap_or_default()),
            watcher::Event::InitDone => {}
        }
    }

    /// The watch begins a list (at start, or after a gap): called before its request
    /// is sent. Runs it delivers were not born watched; shards held now were held
    /// before any run the watch shows next was created.
    pub fn list_begins(&self, shards: &Shards) {
        let mut inner = self.lock();
        inner.held_at_list = shards.held_mask();
        inner.listed.clear();
        inner.born.clear();
    }

    /// The list delivered `run`.
    pub fn listed(&self, run: &Run) {
        if run.status.is_none()
            && let Some(uid) = run.uid()
        {
            self.lock().listed.insert(uid);
        }
    }

    /// A watch event (not a list's) shows `run` as it is now.
    pub fn changed(&self, run: &Run) {
        let Some(uid) = run.uid() else { return };
        let mut inner = self.lock();
        if run.status.is_some() {
            inner.listed.remove(&uid);
            inner.born.remove(&uid);
            inner.touched.remove(&uid);
        } else if !inner.listed.contains(&uid) {
            inner.born.insert(uid);
        }
    }

    /// The run `uid` is gone.
    pub fn deleted(&self, uid: &str) {
        let mut inner = self.lock();
        inner.listed.remove(uid);
        inner.born.remove(uid);
        inner.touched.remove(uid);
    }

    /// This process is about to write a status for the run `uid` (it executes it,
    /// records it `queued` or ends it).
    pub fn touch(&self, uid: &str) {
        self.lock().touched.insert(uid.to_string());
    }

    /// What is known of the cached `run`, of a shard among `shards`.
    pub fn of(&self, run: &Run, shards: &Shards) -> Freshness {
        let inner = self.lock();
        let uid = run.uid().unwrap_or_default();
        let shard = of_run(run, shards.count());
        Freshness {
            born_watched: inner.born.contains(&uid),
            shard_held_before_watch: inner.held_at_list & (1 << shard) != 0,
            touched_here: inner.touched.contains(&uid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn run(uid: &str, status: Value) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": format!("r-{uid}"), "namespace": "n", "uid": uid},
            "spec": {"workflowRef": "wf"}, "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_run_is_born_watched_unless_listed_and_untouched_until_its_cache_shows_a_status() {
        let shards = Shards::all();
        let record = FreshRecord::default();
        let new = run("a", Value::Null);
        record.changed(&new);
        assert!(
            !record.of(&new, &shards).shard_held_before_watch,
            "before any list, no shard was held before the watch"
        );

        record.list_begins(&shards);
        let listed = run("b", Value::Null);
        record.listed(&listed);
        record.listed(&run("c", json!({"phase": "running"})));
        assert!(
            !record.of(&new, &shards).born_watched,
            "no event since the list: no evidence"
        );
        record.changed(&new);
        record.changed(&listed);
        let fresh = record.of(&new, &shards);
        assert!(fresh.born_watched && fresh.shard_held_before_watch && !fresh.touched_here);
        assert!(
            !record.of(&listed, &shards).born_watched,
            "listed, then changed: still listed"
        );

        record.touch("a");
        assert!(record.of(&new, &shards).touched_here);
        record.changed(&new);
        assert!(
            record.of(&new, &shards).touched_here,
            "still no status in the cache"
        );
        record.changed(&run("a", json!({"phase": "queued"})));
        let queued = record.of(&new, &shards);
        assert!(!queued.touched_here && !queued.born_watched);

        // A run listed without a status that gets one is no longer remembered; one
        // deleted neither.
        record.changed(&run("b", json!({"phase": "running"})));
        record.touch("d");
        record.changed(&run("d", Value::Null));
        record.deleted("d");
        let inner = record.lock();
        assert!(inner.listed.is_empty() && inner.touched.is_empty() && inner.born.is_empty());
    }

    #[test]
    fn a_new_list_forgets_the_last_and_counts_only_the_shards_held_when_it_began() {
        let shards = Shards::new(2);
        let record = FreshRecord::default();
        let in_shard = |shard| {
            (0..64)
                .map(|i| run(&format!("u{i}"), Value::Null))
                .find(|r| of_run(r, 2) == shard)
                .unwrap()
        };
        let (in_0, in_1) = (in_shard(0), in_shard(1));
        shards.gain(0);
        record.list_begins(&shards);
        record.listed(&in_0);
        shards.gain(1);
        assert!(record.of(&in_0, &shards).shard_held_before_watch);
        assert!(!record.of(&in_1, &shards).shard_held_before_watch);

        record.changed(&in_1);
        assert!(record.of(&in_1, &shards).born_watched);

        record.list_begins(&shards);
        assert!(
            !record.of(&in_1, &shards).born_watched,
            "what was born before a new list is listed again, not born"
        );
        assert!(record.of(&in_1, &shards).shard_held_before_watch);
    }
}
