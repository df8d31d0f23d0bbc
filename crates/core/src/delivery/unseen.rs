//! Events this process has created but the delivery worker has not yet seen in its
//! watch, per namespace. The worker never moves a webhook's watermark past one of its
//! namespace's: its write may still be in flight, or failing and about to be retried,
//! and an event that appeared below the watermark would count as delivered without
//! ever being sent.
//!
//! Process-wide because the controllers that create events and the worker that
//! observes them run in the same (leader) process but share no other state. Per
//! namespace because a webhook only receives its own namespace's events: one
//! namespace's slow write holds back only that namespace's webhooks.
//!
//! An entry leaves only when nothing can be missed any more (never after a fixed time):
//! - the worker saw the event in its watch ([`seen`]);
//! - the object holding it is gone: its writer was answered 404 or the worker saw it
//!   deleted ([`gone`]), or a fresh list no longer has it ([`relisted`]);
//! - its writer could not tell whether the write landed ([`write_failed`]): it holds
//!   until the API server's request timeout has passed, after which it cannot land;
//! - no webhook needs it: its controller evicted it ([`forget`]).
//!
//! Timestamps are handed out under the same lock the worker reads its [`Cut`] under,
//! so an event registered after a cut is stamped at or after the cut's time: the
//! watermark may pass the cut time minus a tick without skipping anything of this
//! process that is not listed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The API server gives up on a request after 60 s: a write its writer lost track of
/// has landed by then or never will.
pub const REQUEST_TIMEOUT: SignedDuration = SignedDuration::from_secs(60);

/// Entries kept per namespace no worker of this process watches (engines running
/// without a worker: benchmarks, tests). Nobody reads them, so beyond this the oldest
/// are dropped; a namespace a worker watches is never trimmed.
pub const MAX_UNWATCHED: usize = 50_000;

/// Which kind of object holds an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HolderKind {
    Run,
    Workflow,
}

/// The object an event is written into, by kind, name and uid (a name can be reused).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Holder {
    pub kind: HolderKind,
    pub name: String,
    pub uid: String,
}

impl Holder {
    pub fn new(kind: HolderKind, meta: &ObjectMeta) -> Self {
        Holder {
            kind,
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
        }
    }
}

/// What the worker may rely on at one instant for one namespace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cut {
    /// Events registered after the cut are stamped at or after this time.
    pub now: Timestamp,
    /// The oldest timestamp of an event registered before the cut and not yet seen.
    pub floor: Option<Timestamp>,
}

#[derive(Debug)]
struct Entry {
    timestamp: Timestamp,
    holder: Holder,
    /// Registration order, to tell entries registered before a list began.
    seq: u64,
    /// Set when the writer lost track of the write: it cannot land after this.
    expires: Option<Timestamp>,
}

#[derive(Debug, Default)]
struct Namespace {
    entries: HashMap<String, Entry>,
    /// `(timestamp, id)` of every entry, for the oldest.
    order: BTreeSet<(Timestamp, String)>,
}

impl Namespace {
    fn remove(&mut self, id: &str) {
        if let Some(entry) = self.entries.remove(id) {
            self.order.remove(&(entry.timestamp, id.to_string()));
        }
    }

    fn remove_where(&mut self, doomed: impl Fn(&Entry) -> bool) {
        let ids: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| doomed(e))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            self.remove(&id);
        }
    }
}

/// The registry; one per process ([`created`] and the other free functions), separate
/// ones in unit tests.
#[derive(Debug, Default)]
pub struct Registry {
    namespaces: BTreeMap<String, Namespace>,
    seq: u64,
    /// Scopes workers of this process watch (`None`: the whole cluster), one entry each.
    watched: Vec<Option<String>>,
}

impl Registry {
    fn watched(&self, ns: &str) -> bool {
        self.watched
            .iter()
            .any(|scope| scope.as_deref().is_none_or(|s| s == ns))
    }

    pub fn created(&mut self, ns: &str, holder: &Holder, id: &str, now: Timestamp) -> Timestamp {
        self.seq += 1;
        let trim = !self.watched(ns);
        let space = self.namespaces.entry(ns.to_string()).or_default();
        space.remove(id);
        space.entries.insert(
            id.to_string(),
            Entry {
                timestamp: now,
                holder: holder.clone(),
                seq: self.seq,
                expires: None,
            },
        );
        space.order.insert((now, id.to_string()));
        while trim && space.entries.len() > MAX_UNWATCHED {
            let Some((_, oldest)) = space.order.first().cloned() else {
                break;
            };
            space.remove(&oldest);
        }
        now
    }

    fn in_namespace(&mut self, ns: &str, f: impl FnOnce(&mut Namespace)) {
        if let Some(space) = self.namespaces.get_mut(ns) {
            f(space);
            if space.entries.is_empty() {
                self.namespaces.remove(ns);
            }
        }
    }

    pub fn seen(&mut self, ns: &str, id: &str) {
        self.in_namespace(ns, |space| space.remove(id));
    }

    pub fn forget(&mut self, ns: &str, id: &str) {
        self.seen(ns, id);
    }

    pub fn gone(&mut self, ns: &str, holder: &Holder) {
        self.in_namespace(ns, |space| space.remove_where(|e| e.holder == *holder));
    }

    pub fn write_failed(&mut self, ns: &str, id: &str, now: Timestamp) {
        self.in_namespace(ns, |space| {
            if let Some(entry) = space.entries.get_mut(id) {
                entry.expires = Some(now + REQUEST_TIMEOUT);
            }
        });
    }

    pub fn cut(&mut self, ns: &str, now: Timestamp) -> Cut {
        let mut floor = None;
        self.in_namespace(ns, |space| {
            // Only the oldest matters; an expired entry behind it waits its turn.
            while let Some((ts, id)) = space.order.first().cloned() {
                let expired = space.entries[&id].expires.is_some_and(|at| at <= now);
                if !expired {
                    floor = Some(ts);
                    break;
                }
                space.remove(&id);
            }
        });
        Cut { now, floor }
    }

    /// The registration count so far: entries registered up to now have a `seq` at
    /// most this.
    pub fn mark(&self) -> u64 {
        self.seq
    }

    /// After a fresh list of `kind` in `scope` that began at `mark`: an entry registered
    /// before the list began names an object that existed then, so if the list does
    /// not have it (`present` says no), it was deleted and its event can never be seen.
    pub fn relisted(
        &mut self,
        scope: Option<&str>,
        kind: HolderKind,
        mark: u64,
        present: impl Fn(&str, &Holder) -> bool,
    ) {
        let namespaces: Vec<String> = self
            .namespaces
            .keys()
            .filter(|ns| scope.is_none_or(|s| s == ns.as_str()))
            .cloned()
            .collect();
        for ns in namespaces {
            self.in_namespace(&ns, |space| {
                space.remove_where(|e| {
                    e.seq <= mark && e.holder.kind == kind && !present(&ns, &e.holder)
                })
            });
        }
    }

    pub fn attach(&mut self, scope: Option<String>) {
        self.watched.push(scope);
    }

    pub fn detach(&mut self, scope: &Option<String>) {
        if let Some(at) = self.watched.iter().position(|s| s == scope) {
            self.watched.remove(at);
        }
    }

    #[cfg(test)]
    fn len(&self, ns: &str) -> usize {
        self.namespaces.get(ns).map_or(0, |s| s.entries.len())
    }
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    namespaces: BTreeMap::new(),
    seq: 0,
    watched: Vec::new(),
});

fn lock() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Called where an event is created, before the write that records it; returns the
/// event's timestamp (taken under the registry's lock, see the module docs).
pub fn created(ns: &str, holder: &Holder, id: &str) -> Timestamp {
    let mut registry = lock();
    let now = crate::clock::now_ms();
    registry.created(ns, holder, id, now)
}

/// Called by the worker for every event it finds in an object it watches.
pub fn seen(ns: &str, id: &str) {
    lock().seen(ns, id);
}

/// The event's holder evicted it because no webhook needs it any more.
pub fn forget(ns: &str, id: &str) {
    lock().forget(ns, id);
}

/// The object is deleted: none of its events still unseen can be seen any more.
pub fn gone(ns: &str, holder: &Holder) {
    lock().gone(ns, holder);
}

/// The write carrying the event failed in a way that leaves open whether it landed;
/// its writer will not send it again. It holds until it can no longer land.
pub fn write_failed(ns: &str, id: &str) {
    lock().write_failed(ns, id, Timestamp::now());
}

/// The time and the floor of `ns`, read together (see the module docs).
pub fn cut(ns: &str) -> Cut {
    let mut registry = lock();
    let now = crate::clock::now_ms();
    registry.cut(ns, now)
}

/// See [`Registry::mark`]; taken when a list begins.
pub fn mark() -> u64 {
    lock().mark()
}

/// See [`Registry::relisted`].
pub fn relisted(
    scope: Option<&str>,
    kind: HolderKind,
    mark: u64,
    present: impl Fn(&str, &Holder) -> bool,
) {
    lock().relisted(scope, kind, mark, present);
}

/// A worker watches `scope` from now until the guard is dropped: its namespaces are
/// never trimmed.
pub struct Watching(Option<String>);

pub fn watching(scope: Option<String>) -> Watching {
    lock().attach(scope.clone());
    Watching(scope)
}

impl Drop for Watching {
    fn drop(&mut self) {
        lock().detach(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn run(name: &str) -> Holder {
        Holder {
            kind: HolderKind::Run,
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    /// A registry holding events `(namespace, run, id, seconds)`.
    fn registry(events: &[(&str, &str, &str, i64)]) -> Registry {
        let mut r = Registry::default();
        for (ns, holder, id, secs) in events {
            r.created(ns, &run(holder), id, t(*secs));
        }
        r
    }

    #[test]
    fn an_event_holds_its_namespace_only_until_seen() {
        let mut r = registry(&[
            ("a", "r1", "e1", 10),
            ("a", "r2", "e2", 20),
            ("b", "r3", "e3", 5),
        ]);
        assert_eq!(r.cut("a", t(100)).floor, Some(t(10)));
        assert_eq!(r.cut("b", t(100)).floor, Some(t(5)), "namespaces are apart");
        r.seen("a", "e1");
        assert_eq!(r.cut("a", t(100)).floor, Some(t(20)));
        r.seen("a", "e2");
        assert_eq!(
            r.cut("a", t(100_000)),
            Cut {
                now: t(100_000),
                floor: None
            }
        );
        assert_eq!(
            r.cut("b", t(100_000)).floor,
            Some(t(5)),
            "no time limit: an entry waits for its event to be seen"
        );
    }

    #[test]
    fn a_gone_object_releases_its_events() {
        let mut r = registry(&[
            ("a", "r1", "e1", 10),
            ("a", "r1", "e2", 11),
            ("a", "r2", "e3", 12),
        ]);
        let workflow = Holder {
            kind: HolderKind::Workflow,
            ..run("r1")
        };
        r.gone("a", &workflow);
        assert_eq!(r.len("a"), 3, "another kind of the same name");
        let recreated = Holder {
            uid: "another".into(),
            ..run("r1")
        };
        r.gone("a", &recreated);
        assert_eq!(r.len("a"), 3, "another object of the same name");
        r.gone("a", &run("r1"));
        assert_eq!(r.cut("a", t(100)).floor, Some(t(12)));
    }

    #[test]
    fn a_write_of_unknown_outcome_holds_until_it_can_no_longer_land() {
        let mut r = Registry::default();
        r.created("a", &run("r1"), "e1", t(10));
        r.write_failed("a", "e1", t(20));
        assert_eq!(
            r.cut(
                "a",
                t(20) + REQUEST_TIMEOUT - SignedDuration::from_millis(1)
            )
            .floor,
            Some(t(10))
        );
        assert_eq!(r.cut("a", t(20) + REQUEST_TIMEOUT).floor, None);
        assert_eq!(r.len("a"), 0);
    }

    #[test]
    fn a_relist_releases_events_of_objects_deleted_before_it() {
        let mut r = registry(&[
            ("a", "deleted", "e1", 10),
            ("a", "kept", "e2", 11),
            ("b", "other-scope", "e3", 11),
        ]);
        let mark = r.mark();
        // Registered after the list began: its object may be newer than the list.
        r.created("a", &run("new"), "e4", t(12));
        let present = |_: &str, h: &Holder| h.name == "kept";
        r.relisted(Some("a"), HolderKind::Workflow, mark, present);
        assert_eq!(r.len("a"), 3, "only the relisted kind");
        r.relisted(Some("a"), HolderKind::Run, mark, present);
        assert_eq!(r.cut("a", t(100)).floor, Some(t(11)));
        assert_eq!(r.len("a"), 2, "kept and new remain");
        assert_eq!(r.len("b"), 1, "outside the scope");
    }

    #[test]
    fn only_namespaces_no_worker_watches_are_trimmed() {
        let mut r = Registry::default();
        for i in 0..(MAX_UNWATCHED as i64 + 5) {
            r.created("alone", &run("r"), &format!("e{i}"), t(i));
        }
        assert_eq!(r.len("alone"), MAX_UNWATCHED);
        assert_eq!(r.cut("alone", t(0)).floor, Some(t(5)), "the oldest went");
        r.attach(Some("watched".into()));
        for i in 0..(MAX_UNWATCHED as i64 + 5) {
            r.created("watched", &run("r"), &format!("e{i}"), t(i));
        }
        assert_eq!(r.len("watched"), MAX_UNWATCHED + 5);
        r.detach(&Some("watched".into()));
        r.attach(None);
        r.created("any", &run("r"), "x", t(0));
        assert!(
            r.watched("any"),
            "a cluster-wide worker watches every namespace"
        );
    }

    #[test]
    fn the_process_registry_stamps_under_its_lock() {
        let ns = format!("ns-{}", crate::ids::new_token_id("t"));
        let cut = cut(&ns);
        let ts = created(&ns, &run("r"), "e1");
        assert!(
            ts >= cut.now,
            "registered after the cut: stamped at or after it"
        );
        assert_eq!(super::cut(&ns).floor, Some(ts));
        seen(&ns, "e1");
        assert_eq!(super::cut(&ns).floor, None);
    }
}
