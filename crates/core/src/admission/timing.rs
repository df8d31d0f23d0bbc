//! Time-based flow control: whether a run that has not started may start now under its
//! workflow version's `rateLimit` and `debounce`, given the other runs of its key.
//!
//! The decisions are pure ([`rate_gate`], [`debounce_gate`]). What they need is kept by
//! the [`Ledger`], fed by the run controller from its watch (every run of a workflow
//! under either setting falls in one shard, so one replica sees all of a key) and by
//! its own admissions:
//! - a rate limit counts the starts recorded in the runs' statuses (`startedAt` of a
//!   run that executed), plus the runs this process admitted whose status is on its
//!   way. Starts are state in the Runs, so a new leader counts what the old one
//!   started: a run is recorded `running` within the status writer's first-write grace
//!   (50 ms); one killed inside it never counted and starts again, as any run does;
//! - a debounce looks at the key's waiting runs (the newest supersedes the others) and
//!   at the burst's first run (the oldest run of the key created after the key's last
//!   run that started), for `maxWaitMs`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::Order;
use crate::crd::{QueuedFor, Run, RunPhase};
use crate::engine::concurrency_key;

/// What flow control says of a run that has not started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// It may start now (as far as time goes: concurrency may still hold it).
    Open,
    /// It waits `queued`; not before this time can it start (it is looked at then).
    Until(Timestamp),
    /// A newer run of its debounce key (this one) takes its place: it is cancelled.
    Superseded { by: String },
}

/// How far behind a run that left a rate limit's queue the runs it may move up are
/// woken; further ones are looked at by their periodic look.
const MAX_BEHIND: usize = 100_000;

/// How long before its gate opens a waiting run is looked at, read and held ready: it
/// then starts when the gate opens, not a read's round trip later.
pub const LEAD: std::time::Duration = std::time::Duration::from_millis(250);

/// Whether a gate opening at `opens_at` opens within [`LEAD`] of `now`.
pub fn imminent(opens_at: Timestamp, now: Timestamp) -> bool {
    opens_at.duration_since(now) <= SignedDuration::try_from(LEAD).unwrap_or_default()
}

/// A rate limit of `limit` starts per `period_ms` for a run with `ahead` runs of its key
/// waiting before it, given `window` (the key's starts within the last `period_ms`,
/// oldest first). It starts when the starts in the window and the runs ahead leave a
/// place; otherwise it waits until enough of those starts have left the window (a
/// start at `s` stops counting at `s + period`). A run behind `ahead >= limit` waiting
/// runs is the `ahead + 1`-th start from now, and no `limit + 1` starts fit in a
/// period: it waits at least `ahead / limit` periods (so the runs deep in a long queue
/// are not looked at every period).
pub fn rate_gate(
    limit: u32,
    period_ms: u64,
    window: &[Timestamp],
    ahead: usize,
    now: Timestamp,
) -> Gate {
    let limit = limit.max(1) as usize;
    let used = window.len() + ahead;
    if used < limit {
        return Gate::Open;
    }
    let period = millis(period_ms);
    // This many of the window's starts must leave before a place is free.
    let leaving = used - limit + 1;
    Gate::Until(match window.get(leaving - 1) {
        Some(start) => *start + period,
        None => {
            let periods = i32::try_from(ahead / limit).unwrap_or(i32::MAX);
            period
                .checked_mul(periods)
                .and_then(|wait| now.checked_add(wait).ok())
                .unwrap_or(Timestamp::MAX)
        }
    })
}

/// A debounce of `period_ms` (and `max_wait_ms`) for the run created at `this`, given
/// the newest other waiting run of its key (`newest`) and the creation of its burst's
/// first run (`first`). A newer waiting run supersedes it; otherwise it starts
/// `period_ms` after its creation, or `max_wait_ms` after the burst's first run if
/// that comes sooner.
pub fn debounce_gate(
    period_ms: u64,
    max_wait_ms: Option<u64>,
    this: (Timestamp, &str),
    newest: Option<(Timestamp, &str)>,
    first: Timestamp,
    now: Timestamp,
) -> Gate {
    if let Some(newer) = newest.filter(|n| *n > this) {
        return Gate::Superseded {
            by: newer.1.to_string(),
        };
    }
    let mut due = this.0 + millis(period_ms);
    if let Some(max_wait) = max_wait_ms {
        due = due.min(first.min(this.0) + millis(max_wait));
    }
    if now >= due {
        Gate::Open
    } else {
        Gate::Until(due)
    }
}

fn millis(ms: u64) -> SignedDuration {
    SignedDuration::from_millis(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// Where the run controller's compact cache keeps what the ledger reads of a finished
/// run whose steps and payload it dropped (see [`super::compact_for_cache`]).
pub(super) const CACHED_RATE_KEY: &str = "flowline.io/cached-rate-key";
pub(super) const CACHED_DEBOUNCE_KEY: &str = "flowline.io/cached-debounce-key";
pub(super) const CACHED_START: &str = "flowline.io/cached-start";

/// When `run` started executing, if it did: its recorded `startedAt` once it ran. A
/// run still waiting has none; a run cancelled before any of its steps started (a
/// superseded or cancelled queued run) never started, although its status carries a
/// start time for the API.
pub fn execution_start(run: &Run) -> Option<Timestamp> {
    let status = run.status.as_ref()?;
    if super::is_compacted(run)
        && let Some(cached) = run.annotations().get(CACHED_START)
    {
        return cached.parse().ok();
    }
    let started = match status.phase {
        RunPhase::Queued => false,
        RunPhase::Cancelled => status.steps.iter().any(|s| s.started_at.is_some()),
        _ => true,
    };
    started.then_some(status.started_at?)
}

/// The two settings, as the ledger files their keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    RateLimit,
    Debounce,
}

/// The rendered keys of `run`'s pinned version's settings (the cached ones for a
/// finished run of the compact cache).
pub fn keys_of(run: &Run) -> Vec<(Kind, Result<String, String>)> {
    let Some(version) = run.spec.workflow.as_ref() else {
        return Vec::new();
    };
    let cached = |annotation: &str| {
        super::is_compacted(run)
            .then(|| run.annotations().get(annotation).cloned())
            .flatten()
    };
    let mut keys = Vec::new();
    if let Some(limit) = &version.rate_limit {
        let key = cached(CACHED_RATE_KEY).map(Ok).unwrap_or_else(|| {
            concurrency_key::render_as("rate_limit key", limit.key.as_deref(), run)
        });
        keys.push((Kind::RateLimit, key));
    }
    if let Some(debounce) = &version.debounce {
        let key = cached(CACHED_DEBOUNCE_KEY).map(Ok).unwrap_or_else(|| {
            concurrency_key::render_as("debounce key", debounce.key.as_deref(), run)
        });
        keys.push((Kind::Debounce, key));
    }
    keys
}

/// How a run counts for its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// Not started, and it may still start.
    Waiting(Order),
    /// It started executing at `at`.
    Started { at: Timestamp, created: Timestamp },
    /// It ended (or is being cancelled) without starting.
    Unstarted { created: Timestamp },
}

fn stage_of(run: &Run) -> Stage {
    let order = super::order_of(run);
    match execution_start(run) {
        Some(at) => Stage::Started {
            at,
            created: order.created,
        },
        None if run.phase().is_finished() || run.spec.cancel => Stage::Unstarted {
            created: order.created,
        },
        None => Stage::Waiting(order),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct KeyId {
    namespace: String,
    workflow: String,
    kind: Kind,
    key: String,
}

/// One key's runs as the gates read them.
#[derive(Debug, Default)]
struct Book {
    /// Starts, by time (then run name).
    starts: BTreeSet<(Timestamp, String)>,
    /// Runs waiting to start, in start order.
    waiting: BTreeSet<Order>,
    /// The creation of the newest run of the key that started.
    last_started: Option<Timestamp>,
    /// Runs that ended without starting, by creation (a burst's superseded runs).
    unstarted: BTreeSet<(Timestamp, String)>,
}

impl Book {
    fn add(&mut self, name: &str, stage: &Stage) {
        match stage {
            Stage::Waiting(order) => {
                self.waiting.insert(order.clone());
            }
            Stage::Started { at, created } => {
                self.starts.insert((*at, name.to_string()));
                if self.last_started.is_none_or(|last| last < *created) {
                    self.last_started = Some(*created);
                    // Runs before it belong to bursts that are over.
                    self.unstarted = self.unstarted.split_off(&(*created, String::new()));
                }
            }
            Stage::Unstarted { created } => {
                if self.last_started.is_none_or(|last| last < *created) {
                    self.unstarted.insert((*created, name.to_string()));
                }
            }
        }
    }

    fn remove(&mut self, name: &str, stage: &Stage) {
        match stage {
            Stage::Waiting(order) => {
                self.waiting.remove(order);
            }
            Stage::Started { at, .. } => {
                self.starts.remove(&(*at, name.to_string()));
            }
            Stage::Unstarted { created } => {
                self.unstarted.remove(&(*created, name.to_string()));
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.starts.is_empty() && self.waiting.is_empty() && self.unstarted.is_empty()
    }

    /// Forgets starts older than any window (24 hours).
    fn prune(&mut self, now: Timestamp) {
        let horizon = now - millis(crate::crd::MAX_RATE_PERIOD_MS);
        self.starts = self.starts.split_off(&(horizon, String::new()));
    }

    /// The starts within `period_ms` before `now`, oldest first.
    fn window(&self, period_ms: u64, now: Timestamp) -> Vec<Timestamp> {
        let cutoff = now - millis(period_ms);
        self.starts
            .range((cutoff, String::new())..)
            .map(|(at, _)| *at)
            .filter(|at| *at > cutoff)
            .collect()
    }

    /// The newest waiting run by creation, other than `this`.
    fn newest_waiting(&self, this: &Order) -> Option<(Timestamp, &str)> {
        self.waiting
            .iter()
            .filter(|o| *o != this)
            .map(|o| (o.created, o.name.as_str()))
            .max()
    }

    /// The creation of the current burst's first run, if it has others than `this`.
    fn burst_start(&self) -> Option<Timestamp> {
        let after = |t: &Timestamp| self.last_started.is_none_or(|last| *t > last);
        let unstarted = self.unstarted.iter().map(|(t, _)| *t).find(after);
        let waiting = self.waiting.iter().map(|o| o.created).filter(after).min();
        unstarted.into_iter().chain(waiting).min()
    }
}

/// The keys' books of the runs a run controller watches. One lock; every call is
/// short (no request is made under it).
#[derive(Default)]
pub struct Ledger {
    books: Mutex<Books>,
}

#[derive(Default)]
struct Books {
    keys: HashMap<KeyId, Book>,
    /// What each run (namespace, name) was filed as.
    runs: HashMap<(String, String), Vec<(KeyId, Stage)>>,
}

impl Books {
    fn unfile(&mut self, namespace: &str, name: &str, keep_history: bool) {
        let Some(entries) = self.runs.remove(&(namespace.to_string(), name.to_string())) else {
            return;
        };
        for (id, stage) in entries {
            if keep_history && !matches!(stage, Stage::Waiting(_)) {
                continue;
            }
            if let Some(book) = self.keys.get_mut(&id) {
                book.remove(name, &stage);
                if book.is_empty() {
                    self.keys.remove(&id);
                }
            }
        }
    }

    fn file(&mut self, namespace: &str, name: &str, entries: Vec<(KeyId, Stage)>) {
        for (id, stage) in &entries {
            self.keys.entry(id.clone()).or_default().add(name, stage);
        }
        if !entries.is_empty() {
            self.runs
                .insert((namespace.to_string(), name.to_string()), entries);
        }
    }
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn entries(run: &Run, stage: &Stage) -> Vec<(KeyId, Stage)> {
        keys_of(run)
            .into_iter()
            .filter_map(|(kind, key)| {
                Some((
                    KeyId {
                        namespace: run.namespace().unwrap_or_default(),
                        workflow: run.spec.workflow_ref.clone(),
                        kind,
                        key: key.ok()?,
                    },
                    stage.clone(),
                ))
            })
            .collect()
    }

    /// Files `run` as the watch shows it now. Returns the names of the runs to look at
    /// again because of the change: the older waiting runs of its debounce key when it
    /// newly waits there (each is superseded), and the next waiting runs of its rate
    /// limit key when it leaves the queue without starting (they may start sooner than
    /// they were told).
    pub fn observe(&self, run: &Run) -> Vec<String> {
        // A run's pinned version never changes: one without either setting (or not
        // pinned yet) was never filed.
        if run
            .spec
            .workflow
            .as_ref()
            .is_none_or(|v| v.rate_limit.is_none() && v.debounce.is_none())
        {
            return Vec::new();
        }
        let (namespace, name) = (run.namespace().unwrap_or_default(), run.name_any());
        let stage = stage_of(run);
        let entries = Self::entries(run, &stage);
        let mut books = self.lock();
        let filed = books.runs.get(&(namespace.clone(), name.clone()));
        let was_waiting =
            filed.is_some_and(|e| e.iter().any(|(_, s)| matches!(s, Stage::Waiting(_))));
        // A run never goes back to waiting once it started: an older watch event (its
        // `queued` status) arriving after this process admitted it leaves its start.
        let started =
            filed.is_some_and(|e| e.iter().any(|(_, s)| matches!(s, Stage::Started { .. })));
        if started && matches!(stage, Stage::Waiting(_)) {
            return Vec::new();
        }
        books.unfile(&namespace, &name, false);
        let mut wake = Vec::new();
        if let Stage::Waiting(order) = &stage
            && !was_waiting
        {
            for (id, _) in entries.iter().filter(|(id, _)| id.kind == Kind::Debounce) {
                if let Some(book) = books.keys.get(id) {
                    wake.extend(
                        book.waiting
                            .iter()
                            .filter(|o| (o.created, &o.name) < (order.created, &order.name))
                            .map(|o| o.name.clone()),
                    );
                }
            }
        }
        if was_waiting && matches!(stage, Stage::Unstarted { .. }) {
            wake.extend(Self::behind(&books, run, &entries));
        }
        books.file(&namespace, &name, entries);
        wake
    }

    /// The waiting runs behind `run` in its rate limit's queue that may start sooner
    /// than they were told now that it left the queue without starting (it is no
    /// longer filed there). [`rate_gate`] told a run `p` places from the head a time
    /// from the window's starts when `p < limit`, else `p / limit` periods from its
    /// look: one place less changes that for the first `limit` runs, and for a run
    /// whose `p` was a multiple of `limit`. Those are woken (as far as
    /// [`MAX_BEHIND`] runs behind it).
    fn behind(books: &Books, run: &Run, entries: &[(KeyId, Stage)]) -> Vec<String> {
        let Some(limit) = run
            .spec
            .workflow
            .as_ref()
            .and_then(|v| v.rate_limit.as_ref())
        else {
            return Vec::new();
        };
        let limit = limit.limit.max(1) as usize;
        let gone = super::order_of(run);
        let mut wake = Vec::new();
        for book in entries
            .iter()
            .filter(|(id, _)| id.kind == Kind::RateLimit)
            .filter_map(|(id, _)| books.keys.get(id))
        {
            let before = book.waiting.range(..&gone).count();
            let after = book.waiting.range(&gone..).take(MAX_BEHIND);
            for (i, order) in after.enumerate() {
                // Its place before `run` left.
                let was = before + i + 1;
                if was <= limit || was.is_multiple_of(limit) {
                    wake.push(order.name.clone());
                }
            }
        }
        wake
    }

    /// The run `name` of `namespace` is gone: it waits no more. Its start (or its
    /// place in a burst) stays: it happened. Returns the runs to look at again, as
    /// [`Ledger::observe`] does for a run that leaves the queue.
    pub fn forget(&self, run: &Run) -> Vec<String> {
        let (namespace, name) = (run.namespace().unwrap_or_default(), run.name_any());
        let mut books = self.lock();
        let Some(entries) = books.runs.get(&(namespace.clone(), name.clone())).cloned() else {
            return Vec::new();
        };
        books.unfile(&namespace, &name, true);
        if entries.iter().any(|(_, s)| matches!(s, Stage::Waiting(_))) {
            Self::behind(&books, run, &entries)
        } else {
            Vec::new()
        }
    }

    /// The watch listed every run again: waiting runs are filed again as they come
    /// (one deleted meanwhile must not hold the others back); starts stay.
    pub fn relisted(&self) {
        let mut books = self.lock();
        books.runs.clear();
        for book in books.keys.values_mut() {
            book.waiting.clear();
        }
        books.keys.retain(|_, book| !book.is_empty());
    }

    /// This process admitted `run` at `now`: its start counts from now, before its
    /// status shows it.
    pub fn started_here(&self, run: &Run, now: Timestamp) {
        let (namespace, name) = (run.namespace().unwrap_or_default(), run.name_any());
        let stage = Stage::Started {
            at: now,
            created: super::order_of(run).created,
        };
        let entries = Self::entries(run, &stage);
        let mut books = self.lock();
        books.unfile(&namespace, &name, false);
        books.file(&namespace, &name, entries);
    }

    /// What the debounce and rate limit of `run`'s pinned version say of it now (it has
    /// not started). An error when a key cannot be rendered (the run fails).
    pub fn gate(&self, run: &Run, now: Timestamp) -> Result<Gate, String> {
        self.gate_for(run, now).map(|(gate, _)| gate)
    }

    /// [`Ledger::gate`], and with `Gate::Until` which of the two it waits for (the one
    /// that opens last).
    pub fn gate_for(&self, run: &Run, now: Timestamp) -> Result<(Gate, Option<QueuedFor>), String> {
        let Some(version) = run.spec.workflow.as_ref() else {
            return Ok((Gate::Open, None));
        };
        if (version.rate_limit.is_none() && version.debounce.is_none()) || run.has_started() {
            return Ok((Gate::Open, None));
        }
        let this = super::order_of(run);
        let namespace = run.namespace().unwrap_or_default();
        let mut books = self.lock();
        let mut gate = Gate::Open;
        let mut waits_for = None;
        for (kind, key) in keys_of(run) {
            let id = KeyId {
                namespace: namespace.clone(),
                workflow: run.spec.workflow_ref.clone(),
                kind,
                key: key?,
            };
            let book = books.keys.entry(id.clone()).or_default();
            let said = match kind {
                Kind::Debounce => {
                    let Some(d) = &version.debounce else { continue };
                    let first = book.burst_start().unwrap_or(this.created);
                    debounce_gate(
                        d.period_ms,
                        d.max_wait_ms,
                        (this.created, &this.name),
                        book.newest_waiting(&this),
                        first,
                        now,
                    )
                }
                Kind::RateLimit => {
                    let Some(r) = &version.rate_limit else {
                        continue;
                    };
                    book.prune(now);
                    let ahead = book.waiting.range(..&this).take(MAX_BEHIND).count();
                    rate_gate(
                        r.limit,
                        r.period_ms,
                        &book.window(r.period_ms, now),
                        ahead,
                        now,
                    )
                }
            };
            // A key none of whose runs is filed yet (its watch event still on its way)
            // leaves no entry behind.
            if book.is_empty() {
                books.keys.remove(&id);
            }
            let for_this = match kind {
                Kind::Debounce => QueuedFor::Debounce,
                Kind::RateLimit => QueuedFor::RateLimit,
            };
            gate = match (gate, said) {
                (Gate::Superseded { by }, _) | (_, Gate::Superseded { by }) => {
                    Gate::Superseded { by }
                }
                (Gate::Until(a), Gate::Until(b)) => {
                    if b > a {
                        waits_for = Some(for_this);
                    }
                    Gate::Until(a.max(b))
                }
                (Gate::Until(t), Gate::Open) => Gate::Until(t),
                (Gate::Open, Gate::Until(t)) => {
                    waits_for = Some(for_this);
                    Gate::Until(t)
                }
                (Gate::Open, Gate::Open) => Gate::Open,
            };
        }
        let waits_for = matches!(gate, Gate::Until(_))
            .then_some(waits_for)
            .flatten();
        Ok((gate, waits_for))
    }
}

/// Drops the annotations [`cache_keys`] files, whoever set them.
pub(super) fn forget_cached(run: &mut Run) {
    for annotation in [CACHED_RATE_KEY, CACHED_DEBOUNCE_KEY, CACHED_START] {
        run.annotations_mut().remove(annotation);
    }
}

/// Files in `run`'s annotations what [`keys_of`] and [`execution_start`] read of it
/// once its payload and steps are dropped ([`super::compact_for_cache`],
/// [`super::summarize`]).
pub(super) fn cache_keys(run: &mut Run) {
    let start = execution_start(run);
    for (kind, key) in keys_of(run) {
        if let Ok(key) = key {
            let annotation = match kind {
                Kind::RateLimit => CACHED_RATE_KEY,
                Kind::Debounce => CACHED_DEBOUNCE_KEY,
            };
            run.annotations_mut().insert(annotation.into(), key);
        }
    }
    if let Some(start) = start {
        run.annotations_mut()
            .insert(CACHED_START.into(), start.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What, limit, window starts, runs ahead, now, gate.
    type RateRow = (&'static str, u32, &'static [i64], usize, i64, Gate);
    /// What, this run's creation, the newest other waiting run, the burst's first, max
    /// wait, now, gate.
    type DebounceRow = (&'static str, i64, Option<i64>, i64, Option<u64>, i64, Gate);

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).unwrap()
    }

    #[test]
    fn a_rate_limit_opens_when_the_window_and_the_runs_ahead_leave_a_place() {
        // (limit, window starts, runs ahead, now) → gate; period 1,000 ms.
        let rows: [RateRow; 8] = [
            ("empty window", 1, &[], 0, 5_000, Gate::Open),
            ("a place left", 3, &[4_200, 4_500], 0, 5_000, Gate::Open),
            (
                "full: the oldest start leaves first",
                2,
                &[4_200, 4_500],
                0,
                5_000,
                Gate::Until(at(5_200)),
            ),
            (
                "one ahead: the second start must leave too",
                2,
                &[4_200, 4_500],
                1,
                5_000,
                Gate::Until(at(5_500)),
            ),
            (
                "ahead fill the window: a period at least",
                2,
                &[4_200],
                2,
                5_000,
                Gate::Until(at(6_000)),
            ),
            ("runs ahead alone", 2, &[], 2, 5_000, Gate::Until(at(6_000))),
            ("a place behind one ahead", 2, &[], 1, 5_000, Gate::Open),
            (
                "deep in the queue: a period per limit ahead",
                2,
                &[4_200, 4_500],
                5,
                5_000,
                Gate::Until(at(7_000)),
            ),
        ];
        for (what, limit, window, ahead, now, gate) in rows {
            let window: Vec<Timestamp> = window.iter().map(|ms| at(*ms)).collect();
            assert_eq!(
                rate_gate(limit, 1_000, &window, ahead, at(now)),
                gate,
                "{what}"
            );
        }
    }

    #[test]
    fn a_debounce_starts_the_newest_run_after_its_period_or_the_bursts_max_wait() {
        // (this created, newest other waiting, burst's first, max wait, now) → gate;
        // period 1,000 ms.
        let rows: [DebounceRow; 6] = [
            (
                "alone, too early",
                0,
                None,
                0,
                None,
                999,
                Gate::Until(at(1_000)),
            ),
            ("alone, due", 0, None, 0, None, 1_000, Gate::Open),
            (
                "a newer run supersedes it",
                500,
                Some(900),
                0,
                None,
                5_000,
                Gate::Superseded { by: "r900".into() },
            ),
            (
                "an older waiting run does not",
                900,
                Some(500),
                0,
                None,
                1_000,
                Gate::Until(at(1_900)),
            ),
            (
                "max wait cuts the period short",
                2_500,
                None,
                0,
                Some(3_000),
                2_900,
                Gate::Until(at(3_000)),
            ),
            (
                "max wait passed",
                2_500,
                None,
                0,
                Some(3_000),
                3_000,
                Gate::Open,
            ),
        ];
        for (what, this, newest, first, max_wait, now, gate) in rows {
            let (this_name, newest_name) = (format!("r{this}"), newest.map(|n| format!("r{n}")));
            let newest = newest
                .zip(newest_name.as_deref())
                .map(|(n, name)| (at(n), name));
            assert_eq!(
                debounce_gate(
                    1_000,
                    max_wait,
                    (at(this), &this_name),
                    newest,
                    at(first),
                    at(now)
                ),
                gate,
                "{what}"
            );
        }
    }

    fn run(
        name: &str,
        created_ms: i64,
        status: serde_json::Value,
        version: serde_json::Value,
    ) -> Run {
        let created = at(created_ms).to_string();
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": name, "namespace": "acme", "uid": name, "creationTimestamp": created,
                         "annotations": {"flowline.io/created-at": created}},
            "spec": {"workflowRef": "wf", "payload": {"c": "x"},
                     "workflow": version},
            "status": status,
        }))
        .unwrap()
    }

    fn limited() -> serde_json::Value {
        json!({"generation": 1, "name": "W", "steps": [],
               "rateLimit": {"key": "{{ trigger.payload.c }}", "limit": 2, "periodMs": 1000}})
    }

    fn started(ms: i64) -> serde_json::Value {
        json!({"phase": "succeeded", "startedAt": at(ms).to_string()})
    }

    #[test]
    fn the_ledger_counts_recorded_and_local_starts_and_the_runs_ahead() {
        let ledger = Ledger::default();
        ledger.observe(&run("a", 0, started(100), limited()));
        let b = run("b", 10, serde_json::Value::Null, limited());
        let c = run("c", 20, serde_json::Value::Null, limited());
        ledger.observe(&b);
        ledger.observe(&c);
        assert_eq!(
            ledger.gate(&b, at(500)),
            Ok(Gate::Open),
            "one start, none ahead"
        );
        assert_eq!(
            ledger.gate(&c, at(500)),
            Ok(Gate::Until(at(1_100))),
            "b is ahead"
        );
        assert_eq!(
            ledger.gate_for(&c, at(500)).map(|(_, waits_for)| waits_for),
            Ok(Some(QueuedFor::RateLimit)),
            "it waits for the rate limit"
        );
        assert_eq!(
            ledger.gate_for(&b, at(500)).map(|(_, waits_for)| waits_for),
            Ok(None),
            "an open gate waits for nothing"
        );
        ledger.started_here(&b, at(500));
        assert_eq!(
            ledger.gate(&c, at(600)),
            Ok(Gate::Until(at(1_100))),
            "b counts at once"
        );
        // Its `queued` status seen late does not undo its start.
        ledger.observe(&run("b", 10, json!({"phase": "queued"}), limited()));
        let counted = |name: &str| {
            let books = ledger.lock();
            books
                .keys
                .values()
                .any(|b| b.starts.iter().any(|(_, n)| n == name))
        };
        assert!(counted("b"));
        assert_eq!(
            ledger.gate(&c, at(1_100)),
            Ok(Gate::Open),
            "a left the window"
        );
        // The watch shows b's recorded start: it replaces the local one.
        ledger.observe(&run("b", 10, started(510), limited()));
        ledger.started_here(&c, at(1_100));
        let d = run("d", 30, serde_json::Value::Null, limited());
        ledger.observe(&d);
        assert_eq!(ledger.gate(&d, at(1_200)), Ok(Gate::Until(at(1_510))));
        // d leaves the queue without starting (cancelled): the next waiting runs of its
        // key are looked at again; deleted, the same.
        let e = run("e", 40, serde_json::Value::Null, limited());
        ledger.observe(&e);
        assert_eq!(
            ledger.observe(&run("d", 30, json!({"phase": "cancelled"}), limited())),
            vec!["e".to_string()]
        );
        assert_eq!(ledger.forget(&e), Vec::<String>::new(), "none behind it");
        // A relist forgets waiting runs that may be gone, not starts.
        ledger.relisted();
        assert_eq!(
            ledger.gate(&d, at(1_200)),
            Ok(Gate::Until(at(1_510))),
            "starts survive a relist"
        );
    }

    #[test]
    fn a_run_leaving_the_queue_wakes_the_runs_it_moves_up_a_period() {
        let ledger = Ledger::default();
        let queue: Vec<Run> = (0..6)
            .map(|i| run(&format!("w{i}"), i, serde_json::Value::Null, limited()))
            .collect();
        for r in &queue {
            ledger.observe(r);
        }
        // Limit 2: w2 is told a time from the window (2 ahead, then 1); w4, 4 ahead, two
        // periods, then one; w3 and w5 keep theirs (3 / 2 = 2 / 2, 5 / 2 = 4 / 2).
        let cancelled = run("w1", 1, json!({"phase": "cancelled"}), limited());
        assert_eq!(
            ledger.observe(&cancelled),
            vec!["w2".to_string(), "w4".to_string()]
        );
        assert_eq!(
            ledger.gate(&queue[5], at(0)),
            Ok(Gate::Until(at(2_000))),
            "4 ahead, none started: at least two periods"
        );
    }

    #[test]
    fn a_run_cancelled_before_it_started_is_no_start() {
        let cancelled = json!({"phase": "cancelled", "startedAt": at(5).to_string(),
                               "steps": [{"stepId": "s", "name": "s", "status": "cancelled"}]});
        assert_eq!(execution_start(&run("a", 0, cancelled, limited())), None);
        let ran = json!({"phase": "cancelled", "startedAt": at(5).to_string(),
                         "steps": [{"stepId": "s", "name": "s", "status": "cancelled", "startedAt": at(6).to_string()}]});
        let mut ran = run("a", 0, ran, limited());
        assert_eq!(execution_start(&ran), Some(at(5)));
        // The compact cache keeps it (and the key) when it drops the steps and payload.
        super::super::compact_for_cache(&mut ran);
        ran.spec.payload = None;
        assert_eq!(execution_start(&ran), Some(at(5)));
        assert_eq!(keys_of(&ran), vec![(Kind::RateLimit, Ok("x".to_string()))]);
        assert_eq!(
            execution_start(&run("q", 0, json!({"phase": "queued"}), limited())),
            None
        );
    }

    fn debounced() -> serde_json::Value {
        json!({"generation": 1, "name": "W", "steps": [],
               "debounce": {"periodMs": 1000, "maxWaitMs": 2500}})
    }

    #[test]
    fn a_burst_hands_its_place_to_the_newest_run_until_max_wait() {
        let ledger = Ledger::default();
        let a = run("a", 0, serde_json::Value::Null, debounced());
        assert!(ledger.observe(&a).is_empty());
        let b = run("b", 800, serde_json::Value::Null, debounced());
        assert_eq!(
            ledger.observe(&b),
            vec!["a".to_string()],
            "a is looked at again"
        );
        assert_eq!(
            ledger.gate(&a, at(900)),
            Ok(Gate::Superseded { by: "b".into() })
        );
        ledger.observe(&run("a", 0, json!({"phase": "cancelled"}), debounced()));
        assert_eq!(
            ledger.gate_for(&b, at(900)),
            Ok((Gate::Until(at(1_800)), Some(QueuedFor::Debounce)))
        );
        let c = run("c", 1_700, serde_json::Value::Null, debounced());
        ledger.observe(&c);
        ledger.observe(&run("b", 800, json!({"phase": "cancelled"}), debounced()));
        assert_eq!(
            ledger.gate(&c, at(1_800)),
            Ok(Gate::Until(at(2_500))),
            "max wait from a"
        );
        ledger.started_here(&c, at(2_500));
        // A later run begins a new burst.
        let d = run("d", 3_000, serde_json::Value::Null, debounced());
        ledger.observe(&d);
        assert_eq!(ledger.gate(&d, at(3_100)), Ok(Gate::Until(at(4_000))));
    }

    #[test]
    fn a_key_that_cannot_be_rendered_is_an_error() {
        let version = json!({"generation": 1, "name": "W", "steps": [],
                             "rateLimit": {"key": "{{ trigger.payload.missing }}", "limit": 1, "periodMs": 1000}});
        let r = run("a", 0, serde_json::Value::Null, version);
        assert!(
            Ledger::default()
                .gate(&r, at(0))
                .unwrap_err()
                .contains("rate_limit key")
        );
    }
}
