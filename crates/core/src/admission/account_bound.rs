//! How many runs one account (namespace) may execute at once in this process, and how
//! many every account together may (`--max-runs-per-account`, `--max-running-runs`):
//! bounds that keep one account from holding the tasks, connections and file
//! descriptors every account's runs share. A run that would pass either waits
//! `queued`, by priority then creation order within its account. When a place frees,
//! a waiting run is woken, and no newer run may take the place before it comes (for at
//! most [`WOKEN_GRACE`]: a woken run that was deleted meanwhile holds nobody up for
//! longer):
//! - under the per-account bound alone, the oldest waiting run of the account whose
//!   execution ended;
//! - under the operator-wide bound, the oldest waiting run of the account that holds
//!   the fewest places (executing or on their way), and among equals the one served
//!   longest ago: places go round the accounts with waiting runs, so an account with a
//!   long backlog never makes another wait more than a turn.
//!
//! The bounds apply whenever a run is to execute: when it starts, and when it resumes
//! (after a restart, or woken from parking, which frees its place), so parking cannot
//! be used to run more at once than the bound. The caller keeps a started run's status
//! while it waits: a run never goes back from `running` to `queued`. The counts are
//! this process's: with shards, each replica bounds the runs it executes.
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
    /// Runs every account together may execute at once here; [`UNBOUNDED`] for none.
    total: AtomicU32,
    state: Mutex<State>,
}

#[derive(Default, Debug)]
struct State {
    accounts: HashMap<String, Account>,
    /// Places handed out by turn so far (each account remembers its last).
    turns: u64,
}

impl State {
    /// Places held: executing, or woken runs on their way.
    fn held(&self) -> usize {
        self.accounts.values().map(Account::held).sum()
    }
}

/// One account's executions and waiting runs.
#[derive(Default, Debug)]
struct Account {
    executing: u32,
    /// Runs refused by a bound, in start order (priority, creation, name).
    waiting: BTreeSet<Order>,
    /// Runs woken for a free place that have not come for it yet, and when.
    woken: BTreeMap<Order, Instant>,
    /// The turn in which it was last handed a place by the operator-wide bound.
    served: u64,
}

impl Account {
    fn idle(&self) -> bool {
        self.executing == 0 && self.waiting.is_empty() && self.woken.is_empty()
    }

    fn held(&self) -> usize {
        self.executing as usize + self.woken.len()
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
    /// A bound is reached, or older runs of its account wait: it waits, and is woken
    /// in its turn.
    Wait,
}

impl AccountBound {
    pub fn set_limit(&self, limit: u32) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Sets the operator-wide bound (`--max-running-runs`).
    pub fn set_total(&self, total: u32) {
        self.total.store(total, Ordering::Relaxed);
    }

    pub fn total(&self) -> u32 {
        self.total.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn full(&self, account: &Account) -> bool {
        let limit = self.limit();
        limit != UNBOUNDED && account.executing >= limit
    }

    /// Whether every place of the operator-wide bound is held.
    fn all_held(&self, state: &State) -> bool {
        let total = self.total();
        total != UNBOUNDED && state.held() >= total as usize
    }

    /// Whether a run of `namespace` at `order` may not take a place now: none is free
    /// (its account's, or the operator's), or an older run of the account waits for one
    /// (places go in start order within an account).
    fn blocked(&self, state: &State, namespace: &str, order: &Order) -> bool {
        let Some(account) = state.accounts.get(namespace) else {
            return self.all_held(state);
        };
        self.full(account) || account.older_waits(order) || self.all_held(state)
    }

    /// Whether a run of `namespace` that has not started would wait now; one that
    /// would is recorded as waiting (so it is woken in its turn), at no request. A woken
    /// run that must wait after all gives its place up: the caller wakes the next.
    pub fn must_wait(&self, namespace: &str, order: &Order, now: Instant) -> bool {
        let mut state = self.lock();
        if let Some(account) = state.accounts.get_mut(namespace) {
            account.prune(now);
        } else if !self.all_held(&state) {
            return false;
        }
        // A woken run's own place, held for it, does not block it: it keeps the place
        // until it takes it, unless it must wait after all.
        let woken = state
            .accounts
            .get_mut(namespace)
            .and_then(|account| account.woken.remove_entry(order));
        let blocked = self.blocked(&state, namespace, order);
        let account = state.accounts.entry(namespace.to_string()).or_default();
        if !blocked {
            account.woken.extend(woken);
            return false;
        }
        account.waiting.insert(order.clone());
        true
    }

    /// A place for a run of `namespace` about to execute: taken if one is free and no
    /// older run of the account waits for it; else the run waits.
    pub fn take(&self, namespace: &str, order: &Order, now: Instant) -> Take {
        let mut state = self.lock();
        let account = state.accounts.entry(namespace.to_string()).or_default();
        account.prune(now);
        // Woken, it comes for the place held for it: that place is its own now.
        account.woken.remove(order);
        let blocked = self.blocked(&state, namespace, order);
        let account = state.accounts.entry(namespace.to_string()).or_default();
        if blocked {
            account.waiting.insert(order.clone());
            Take::Wait
        } else {
            account.waiting.remove(order);
            account.executing += 1;
            Take::Taken
        }
    }

    /// Forgets a run of `namespace` that waits for something else now (its workflow's
    /// own limit, a rate limit): it holds no place in its account's turn.
    pub fn forget(&self, namespace: &str, order: &Order) {
        let mut state = self.lock();
        if let Some(account) = state.accounts.get_mut(namespace) {
            account.waiting.remove(order);
            account.woken.remove(order);
            if account.idle() {
                state.accounts.remove(namespace);
            }
        }
    }

    /// Frees the place an execution of `namespace` held (the caller then wakes
    /// [`AccountBound::next_waiting`]).
    pub fn release(&self, namespace: &str) {
        let mut state = self.lock();
        if let Some(account) = state.accounts.get_mut(namespace) {
            account.executing = account.executing.saturating_sub(1);
            if account.idle() {
                state.accounts.remove(namespace);
            }
        }
    }

    /// The next waiting run to wake for a free place, as (namespace, name), after an
    /// execution of `namespace` ended or a run of it left its turn: under the
    /// operator-wide bound the turn's account's oldest waiting run, else `namespace`'s.
    /// It is recorded as woken (newer runs may not take the place before it comes) and
    /// returned, for the caller to wake; None while no place is free.
    pub fn next_waiting(&self, namespace: &str, now: Instant) -> Option<(String, String)> {
        let mut state = self.lock();
        let limit = self.limit();
        let room = |account: &Account| limit == UNBOUNDED || account.held() < limit as usize;
        let namespace = if self.total() == UNBOUNDED {
            let account = state.accounts.get_mut(namespace)?;
            account.prune(now);
            if !room(account) {
                return None;
            }
            namespace.to_string()
        } else {
            for account in state.accounts.values_mut() {
                account.prune(now);
            }
            if self.all_held(&state) {
                return None;
            }
            let (turn, _) = state
                .accounts
                .iter()
                .filter(|(_, a)| !a.waiting.is_empty() && room(a))
                .min_by_key(|(name, a)| (a.held(), a.served, name.as_str()))?;
            turn.clone()
        };
        state.turns += 1;
        let turns = state.turns;
        let account = state.accounts.get_mut(&namespace)?;
        let next = account.waiting.pop_first()?;
        account.woken.insert(next.clone(), now);
        account.served = turns;
        Some((namespace, next.name))
    }

    /// How many runs of `namespace` execute here now (tests, metrics).
    pub fn executing(&self, namespace: &str) -> u32 {
        self.lock()
            .accounts
            .get(namespace)
            .map_or(0, |a| a.executing)
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

    fn woke(namespace: &str, name: &str) -> Option<(String, String)> {
        Some((namespace.into(), name.into()))
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
        assert_eq!(b.next_waiting("a", now), woke("a", "run-3"));
        assert_eq!(b.next_waiting("a", now), None, "run-3 is on its way");
        assert_eq!(b.take("a", &order(3), now), Take::Taken);
        b.release("a");
        assert_eq!(b.next_waiting("a", now), woke("a", "run-4"));
    }

    #[test]
    fn a_newer_run_never_takes_the_place_an_older_one_waits_for() {
        let (b, now) = (bound(1), Instant::now());
        b.take("a", &order(1), now);
        assert_eq!(b.take("a", &order(2), now), Take::Wait);
        assert_eq!(b.take("a", &order(3), now), Take::Wait);
        b.release("a");
        assert_eq!(b.next_waiting("a", now), woke("a", "run-2"));
        // Woken, run-2 is on its way: run-3 and a new run-4 must not overtake it.
        assert!(b.must_wait("a", &order(4), now));
        assert_eq!(b.take("a", &order(3), now), Take::Wait);
        assert_eq!(b.take("a", &order(2), now), Take::Taken);
        b.release("a");
        assert_eq!(b.next_waiting("a", now), woke("a", "run-3"));
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
        assert_eq!(b.next_waiting("a", now), woke("a", "run-2"));
        (b, now)
    }

    #[test]
    fn a_woken_run_is_not_held_up_by_the_place_kept_for_it() {
        let (b, now) = (bound(UNBOUNDED), Instant::now());
        b.set_total(1);
        assert_eq!(b.take("a", &order(1), now), Take::Taken);
        assert!(b.must_wait("a", &order(2), now));
        assert!(b.must_wait("a", &order(3), now));
        b.release("a");
        assert_eq!(b.next_waiting("a", now), woke("a", "run-2"));
        // Looked at before it comes for the place: it need not wait, and the place
        // stays its own.
        assert!(!b.must_wait("a", &order(2), now));
        assert!(b.must_wait("a", &order(3), now), "run-3 still waits");
        assert_eq!(b.take("a", &order(3), now), Take::Wait);
        assert_eq!(b.take("a", &order(2), now), Take::Taken);
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
        assert_eq!(b.next_waiting("a", now), woke("a", "run-3"));
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
        assert!(
            b.lock().accounts.is_empty(),
            "an idle account leaves no entry"
        );
    }

    fn order_of(namespace: &str, seconds: i64) -> Order {
        Order {
            name: format!("{namespace}-{seconds}"),
            ..order(seconds)
        }
    }

    #[test]
    fn the_operator_wide_bound_hands_places_round_the_accounts_that_wait() {
        let (b, now) = (bound(UNBOUNDED), Instant::now());
        b.set_total(2);
        // Account a fills both places and queues a long backlog.
        for i in 0..100 {
            let taken = b.take("a", &order_of("a", i), now);
            assert_eq!(taken == Take::Taken, i < 2, "a-{i}");
        }
        // Account b arrives later: it waits too, but only for the next free place.
        assert!(b.must_wait("b", &order_of("b", 500), now));
        assert_eq!(b.take("b", &order_of("b", 501), now), Take::Wait);
        b.release("a");
        assert_eq!(
            b.next_waiting("a", now),
            woke("b", "b-500"),
            "b holds fewer places"
        );
        assert_eq!(
            b.next_waiting("a", now),
            None,
            "the place is on its way to b-500"
        );
        assert_eq!(
            b.take("a", &order_of("a", 2), now),
            Take::Wait,
            "a may not take it"
        );
        assert_eq!(b.take("b", &order_of("b", 500), now), Take::Taken);
        // One place each now: the next goes to the account served longest ago.
        b.release("a");
        assert_eq!(b.next_waiting("a", now), woke("a", "a-2"));
        assert_eq!(b.take("a", &order_of("a", 2), now), Take::Taken);
        b.release("b");
        assert_eq!(b.next_waiting("b", now), woke("b", "b-501"));
    }

    #[test]
    fn both_bounds_hold_and_a_full_account_does_not_take_the_operators_turn() {
        let (b, now) = (bound(1), Instant::now());
        b.set_total(3);
        assert_eq!(b.take("a", &order_of("a", 1), now), Take::Taken);
        assert_eq!(
            b.take("a", &order_of("a", 2), now),
            Take::Wait,
            "a's own bound"
        );
        assert_eq!(b.take("b", &order_of("b", 3), now), Take::Taken);
        assert_eq!(b.take("c", &order_of("c", 4), now), Take::Taken);
        assert_eq!(
            b.take("d", &order_of("d", 5), now),
            Take::Wait,
            "the operator's bound"
        );
        b.release("c");
        // a waits longer, but its own bound is full: d gets the place.
        assert_eq!(b.next_waiting("c", now), woke("d", "d-5"));
        assert_eq!(b.take("d", &order_of("d", 5), now), Take::Taken);
        b.release("a");
        assert_eq!(b.next_waiting("a", now), woke("a", "a-2"));
    }
}
