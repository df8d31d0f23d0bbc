//! How many runs one account (namespace) may execute at once in this process: a bound
//! that keeps one account from holding the tasks, connections and file descriptors
//! every account's runs share. A run that would pass it waits `queued`, in creation
//! order within its account; when one of the account's executions ends (or parks), the
//! oldest waiting run is woken, and no newer run may take the place before it comes
//! (for at most [`WOKEN_GRACE`]: a woken run that was deleted meanwhile holds nobody
//! up for longer).
//!
//! The bound applies whenever a run is to execute: when it starts, and when it resumes
//! (after a restart, or woken from parking, which frees its place), so parking cannot
//! be used to run more at once than the bound. The caller keeps a started run's status
//! while it waits: a run never goes back from `running` to `queued`. The count is this
//! process's: with shards, each replica bounds the runs it executes.
//!
//! Pure bookkeeping under one lock (the caller passes the time); the run controller
//! calls it under its registry's lock (order: registry, then this).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::admission::Order;

/// No bound.
pub const UNBOUNDED: u32 = 0;

/// How long a woken run keeps its place against newer runs before it comes for it.
pub const WOKEN_GRACE: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct AccountBound {
    /// Runs an account may execute at once here; [`UNBOUNDED`] for no bound.
    limit: AtomicU32,
    accounts: Mutex<HashMap<String, Account>>,
}

/// One account's executions and waiting runs.
#[derive(Default, Debug)]
struct Account {
    executing: u32,
    /// Runs refused by the bound, oldest first (by creation, then name).
    waiting: BTreeSet<Order>,
    /// Runs woken for a free place that have not come for it yet, and when.
    woken: BTreeMap<Order, Instant>,
}

impl Account {
    fn idle(&self) -> bool {
        self.executing == 0 && self.waiting.is_empty() && self.woken.is_empty()
    }

    /// Forgets woken runs that did not come within [`WOKEN_GRACE`].
    fn prune(&mut self, now: Instant) {
        self.woken
            .retain(|_, at| now.saturating_duration_since(*at) < WOKEN_GRACE);
    }

    /// Whether an older run than `order` waits, or was woken and is on its way.
    fn older_waits(&self, order: &Order) -> bool {
        self.waiting.first().is_some_and(|first| first < order)
            || self.woken.keys().next().is_some_and(|first| first < order)
    }
}

/// What [`AccountBound::take`] says of a run about to start.
#[derive(Debug, PartialEq, Eq)]
pub enum Take {
    /// It holds one of its account's places until [`AccountBound::release`].
    Taken,
    /// Its account is at the bound, or older runs wait: it waits, and is woken in
    /// its turn.
    Wait,
}

impl AccountBound {
    pub fn set_limit(&self, limit: u32) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Account>> {
        self.accounts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn full(&self, account: &Account) -> bool {
        let limit = self.limit();
        limit != UNBOUNDED && account.executing >= limit
    }

    /// Whether a run at `order` may not take a place now: none is free, or an older
    /// run of the account waits for one (places go oldest first).
    fn blocked(&self, account: &Account, order: &Order) -> bool {
        self.full(account) || account.older_waits(order)
    }

    /// Whether a run of `namespace` that has not started would wait now; one that
    /// would is recorded as waiting (so it is woken in its turn), at no request.
    pub fn must_wait(&self, namespace: &str, order: &Order, now: Instant) -> bool {
        let mut accounts = self.lock();
        let Some(account) = accounts.get_mut(namespace) else {
            return false;
        };
        account.prune(now);
        if !self.blocked(account, order) {
            return false;
        }
        account.woken.remove(order);
        account.waiting.insert(order.clone());
        true
    }

    /// A place for a run of `namespace` about to execute: taken if one is free and no
    /// older run of the account waits for it; else the run waits.
    pub fn take(&self, namespace: &str, order: &Order, now: Instant) -> Take {
        let mut accounts = self.lock();
        let account = match accounts.get_mut(namespace) {
            Some(account) => account,
            None => accounts.entry(namespace.to_string()).or_default(),
        };
        account.prune(now);
        account.woken.remove(order);
        if !self.blocked(account, order) {
            account.waiting.remove(order);
            account.executing += 1;
            Take::Taken
        } else {
            account.waiting.insert(order.clone());
            Take::Wait
        }
    }

    /// Forgets a run of `namespace` that waits for something else now (its workflow's
    /// own limit): it holds no place in its account's turn.
    pub fn forget(&self, namespace: &str, order: &Order) {
        let mut accounts = self.lock();
        if let Some(account) = accounts.get_mut(namespace) {
            account.waiting.remove(order);
            account.woken.remove(order);
            if account.idle() {
                accounts.remove(namespace);
            }
        }
    }

    /// Frees the place an execution of `namespace` held (the caller then wakes
    /// [`AccountBound::next_waiting`]).
    pub fn release(&self, namespace: &str) {
        let mut accounts = self.lock();
        if let Some(account) = accounts.get_mut(namespace) {
            account.executing = account.executing.saturating_sub(1);
            if account.idle() {
                accounts.remove(namespace);
            }
        }
    }

    /// The oldest waiting run of `namespace`, if a place is free that no woken run is
    /// on its way to: it is recorded as woken (newer runs may not take the place
    /// before it comes) and returned, for the caller to wake.
    pub fn next_waiting(&self, namespace: &str, now: Instant) -> Option<String> {
        let mut accounts = self.lock();
        let account = accounts.get_mut(namespace)?;
        account.prune(now);
        let limit = self.limit();
        let taken = account.executing as usize + account.woken.len();
        if limit != UNBOUNDED && taken >= limit as usize {
            return None;
        }
        let next = account.waiting.pop_first()?;
        account.woken.insert(next.clone(), now);
        Some(next.name)
    }

    /// How many runs of `namespace` execute here now (tests, metrics).
    pub fn executing(&self, namespace: &str) -> u32 {
        self.lock().get(namespace).map_or(0, |a| a.executing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(seconds: i64) -> Order {
        Order {
            priority: crate::crd::DEFAULT_PRIORITY,
            created: jiff::Timestamp::from_second(seconds).unwrap(),
            name: format!("run-{seconds}"),
        }
    }

    fn bound(limit: u32) -> AccountBound {
        let bound = AccountBound::default();
        bound.set_limit(limit);
        bound
    }

    #[test]
    fn an_account_executes_at_most_the_bound_and_others_are_not_held_up() {
        let (b, now) = (bound(2), Instant::now());
        assert_eq!(b.take("a", &order(1), now), Take::Taken);
        assert_eq!(b.take("a", &order(2), now), Take::Taken);
        assert!(b.must_wait("a", &order(3), now));
        assert_eq!(b.take("a", &order(4), now), Take::Wait);
        assert_eq!(b.executing("a"), 2);
        // Another account is not held up.
        assert!(!b.must_wait("b", &order(5), now));
        assert_eq!(b.take("b", &order(5), now), Take::Taken);
        // Nothing is woken while the account is full.
        assert_eq!(b.next_waiting("a", now), None);
        // A place frees: the oldest waiting run is woken, one per free place.
        b.release("a");
        assert_eq!(b.next_waiting("a", now).as_deref(), Some("run-3"));
        assert_eq!(b.next_waiting("a", now), None, "run-3 is on its way");
        assert_eq!(b.take("a", &order(3), now), Take::Taken);
        b.release("a");
        assert_eq!(b.next_waiting("a", now).as_deref(), Some("run-4"));
    }

    #[test]
    fn a_newer_run_never_takes_the_place_an_older_one_waits_for() {
        let (b, now) = (bound(1), Instant::now());
        b.take("a", &order(1), now);
        assert_eq!(b.take("a", &order(2), now), Take::Wait);
        assert_eq!(b.take("a", &order(3), now), Take::Wait);
        b.release("a");
        assert_eq!(b.next_waiting("a", now).as_deref(), Some("run-2"));
        // Woken, run-2 is on its way: run-3 and a new run-4 must not overtake it.
        assert!(b.must_wait("a", &order(4), now));
        assert_eq!(b.take("a", &order(3), now), Take::Wait);
        assert_eq!(b.take("a", &order(2), now), Take::Taken);
        b.release("a");
        assert_eq!(b.next_waiting("a", now).as_deref(), Some("run-3"));
        assert_eq!(b.take("a", &order(4), now), Take::Wait);
        assert_eq!(b.take("a", &order(3), now), Take::Taken);
    }

    /// Bound 1: run-1 executed and ended, run-2 (woken) and run-3 wait.
    fn run_2_woken() -> (AccountBound, Instant) {
        let (b, now) = (bound(1), Instant::now());
        b.take("a", &order(1), now);
        b.take("a", &order(2), now);
        b.take("a", &order(3), now);
        b.release("a");
        assert_eq!(b.next_waiting("a", now).as_deref(), Some("run-2"));
        (b, now)
    }

    #[test]
    fn a_woken_run_that_does_not_come_holds_nobody_up_past_the_grace() {
        let (b, now) = run_2_woken();
        // run-2 was deleted and never comes.
        assert_eq!(b.take("a", &order(3), now), Take::Wait);
        let later = now + WOKEN_GRACE;
        assert_eq!(b.take("a", &order(3), later), Take::Taken);
    }

    #[test]
    fn a_woken_run_that_waits_for_its_workflow_leaves_the_place_to_the_next() {
        let (b, now) = run_2_woken();
        b.forget("a", &order(2));
        assert_eq!(b.next_waiting("a", now).as_deref(), Some("run-3"));
        assert_eq!(b.take("a", &order(3), now), Take::Taken);
    }

    #[test]
    fn unbounded_never_waits_and_keeps_nothing() {
        let (b, now) = (bound(UNBOUNDED), Instant::now());
        for i in 0..100 {
            assert!(!b.must_wait("a", &order(i), now));
            assert_eq!(b.take("a", &order(i), now), Take::Taken);
        }
        for _ in 0..100 {
            b.release("a");
        }
        assert!(b.lock().is_empty(), "an idle account leaves no entry");
    }
}
