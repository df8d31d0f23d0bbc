//! How many runs one account (namespace) may execute at once in this process: a bound
//! that keeps one account from holding the tasks, connections and file descriptors
//! every account's runs share. A run that would pass it waits `queued`, in creation
//! order within its account; when one of the account's executions ends (or parks), the
//! oldest waiting run is woken.
//!
//! The bound applies when a run starts. A run that has already started (resumed after
//! a restart, or woken from parking) takes its place whatever the count, so a run
//! never goes back from `running` to `queued`. The count is this process's: with
//! shards, each replica bounds the runs it executes.
//!
//! Pure bookkeeping under one lock; the run controller calls it under its registry's
//! lock (order: registry, then this).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use super::admission::Order;

/// No bound.
pub const UNBOUNDED: u32 = 0;

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
}

/// What [`AccountBound::take`] says of a run about to start.
#[derive(Debug, PartialEq, Eq)]
pub enum Take {
    /// It holds one of its account's places until [`AccountBound::release`].
    Taken,
    /// Its account is at the bound: it waits, and is woken when a place frees.
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

    /// Whether a run of `namespace` that has not started would wait now; one that
    /// would is recorded as waiting (so it is woken), at no request.
    pub fn must_wait(&self, namespace: &str, order: &Order) -> bool {
        let mut accounts = self.lock();
        let Some(account) = accounts.get_mut(namespace) else {
            return false;
        };
        if !self.full(account) {
            return false;
        }
        account.waiting.insert(order.clone());
        true
    }

    /// A place for a run of `namespace` about to execute: taken if the account is
    /// under the bound or the run has `started` already (it resumes), else the run
    /// waits.
    pub fn take(&self, namespace: &str, order: &Order, started: bool) -> Take {
        let mut accounts = self.lock();
        let account = match accounts.get_mut(namespace) {
            Some(account) => account,
            None => accounts.entry(namespace.to_string()).or_default(),
        };
        if started || !self.full(account) {
            account.waiting.remove(order);
            account.executing += 1;
            Take::Taken
        } else {
            account.waiting.insert(order.clone());
            Take::Wait
        }
    }

    /// Frees the place an execution of `namespace` held (the caller then wakes
    /// [`AccountBound::next_waiting`]).
    pub fn release(&self, namespace: &str) {
        let mut accounts = self.lock();
        if let Some(account) = accounts.get_mut(namespace) {
            account.executing = account.executing.saturating_sub(1);
            if account.executing == 0 && account.waiting.is_empty() {
                accounts.remove(namespace);
            }
        }
    }

    /// Takes the oldest waiting run of `namespace` off its list, if the account has a
    /// free place: the one to wake. A run woken that cannot start after all (its
    /// workflow's own limit, a newer run that took the place first) is recorded again
    /// when it is refused.
    pub fn next_waiting(&self, namespace: &str) -> Option<String> {
        let mut accounts = self.lock();
        let account = accounts.get_mut(namespace)?;
        if self.full(account) {
            return None;
        }
        let next = account.waiting.pop_first()?;
        if account.executing == 0 && account.waiting.is_empty() {
            accounts.remove(namespace);
        }
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
        let b = bound(2);
        assert_eq!(b.take("a", &order(1), false), Take::Taken);
        assert_eq!(b.take("a", &order(2), false), Take::Taken);
        assert!(b.must_wait("a", &order(3)));
        assert_eq!(b.take("a", &order(4), false), Take::Wait);
        assert_eq!(b.executing("a"), 2);
        // Another account is not held up.
        assert!(!b.must_wait("b", &order(5)));
        assert_eq!(b.take("b", &order(5), false), Take::Taken);
        // Nothing is woken while the account is full.
        assert_eq!(b.next_waiting("a"), None);
        // A place frees: the oldest waiting run is woken first, one per place.
        b.release("a");
        assert_eq!(b.next_waiting("a").as_deref(), Some("run-3"));
        assert_eq!(b.take("a", &order(3), false), Take::Taken);
        assert_eq!(b.next_waiting("a"), None, "full again");
        b.release("a");
        assert_eq!(b.next_waiting("a").as_deref(), Some("run-4"));
    }

    #[test]
    fn a_run_that_started_already_takes_its_place_whatever_the_count() {
        let b = bound(1);
        assert_eq!(b.take("a", &order(1), false), Take::Taken);
        assert_eq!(b.take("a", &order(2), true), Take::Taken);
        assert_eq!(b.executing("a"), 2);
        b.release("a");
        assert_eq!(
            b.take("a", &order(3), false),
            Take::Wait,
            "still at the bound: one of its two places freed"
        );
        b.release("a");
        assert_eq!(b.next_waiting("a").as_deref(), Some("run-3"));
    }

    #[test]
    fn a_woken_run_that_loses_its_place_waits_in_its_turn_again() {
        let b = bound(1);
        b.take("a", &order(1), false);
        assert_eq!(b.take("a", &order(2), false), Take::Wait);
        assert_eq!(b.take("a", &order(3), false), Take::Wait);
        b.release("a");
        assert_eq!(b.next_waiting("a").as_deref(), Some("run-2"));
        // A new run takes the place before the woken one gets to it.
        assert_eq!(b.take("a", &order(4), false), Take::Taken);
        assert_eq!(b.take("a", &order(2), false), Take::Wait);
        b.release("a");
        assert_eq!(
            b.next_waiting("a").as_deref(),
            Some("run-2"),
            "oldest first"
        );
    }

    #[test]
    fn unbounded_never_waits_and_keeps_nothing() {
        let b = bound(UNBOUNDED);
        for i in 0..100 {
            assert!(!b.must_wait("a", &order(i)));
            assert_eq!(b.take("a", &order(i), false), Take::Taken);
        }
        for _ in 0..100 {
            b.release("a");
        }
        assert!(b.lock().is_empty(), "an idle account leaves no entry");
    }
}
