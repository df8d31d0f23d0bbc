//! Fixed-window rate limits: per account for authenticated requests, per client
//! address for the rest (docs/api.md, "Rate limits"). Each API replica counts on its
//! own; the docs say so.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Mutex;

use clap::ValueEnum;

pub const PLAN_ANNOTATION: &str = "flowline.io/plan";
pub const RPM_ANNOTATION: &str = "flowline.io/requests-per-minute";

/// Plans and their requests per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Plan {
    Free,
    Pro,
    Enterprise,
}

/// How an account's limit is decided when its namespace does not say.
#[derive(Debug, Clone, Copy)]
pub struct PlanDefaults {
    pub plan: Plan,
    /// Requests per window of the enterprise plan when the annotation is missing.
    pub enterprise_requests: u32,
}

pub const FREE_REQUESTS: u32 = 60;
pub const PRO_REQUESTS: u32 = 600;

impl PlanDefaults {
    /// The limit of an account, from its namespace's annotations.
    pub fn limit_for(&self, annotations: Option<&BTreeMap<String, String>>) -> u32 {
        let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
        let plan = match get(PLAN_ANNOTATION) {
            Some("free") => Plan::Free,
            Some("pro") => Plan::Pro,
            Some("enterprise") => Plan::Enterprise,
            _ => self.plan,
        };
        match plan {
            Plan::Free => FREE_REQUESTS,
            Plan::Pro => PRO_REQUESTS,
            Plan::Enterprise => get(RPM_ANNOTATION)
                .and_then(|v| v.trim().parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or(self.enterprise_requests),
        }
    }
}

/// The outcome of counting one request, with what the headers report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    /// Unix seconds at which the window ends.
    pub reset: u64,
}

impl Decision {
    pub fn retry_after(&self, now: u64) -> u64 {
        self.reset.saturating_sub(now).max(1)
    }
}

/// Counts requests per key (an account, or a client address) in fixed windows.
///
/// Only the current window is kept: when a request arrives in a new window the whole
/// table is swapped for an empty one (and the old one dropped outside the lock), so
/// pruning costs O(1) per request, amortised, never a scan. The table holds at most
/// `capacity` keys; once it is full, keys it does not hold yet share one overflow
/// budget (`limit` requests in all) until the window ends. Memory stays bounded
/// under a flood of distinct keys, and the flood cannot buy itself more requests.
pub struct RateLimiter<K> {
    window_secs: u64,
    capacity: usize,
    table: Mutex<Window<K>>,
}

struct Window<K> {
    index: u64,
    counts: HashMap<K, u32>,
    /// Requests of keys that found the table full.
    overflow: u32,
}

impl<K> Window<K> {
    fn empty(index: u64) -> Self {
        Window {
            index,
            counts: HashMap::new(),
            overflow: 0,
        }
    }
}

/// Keys one limiter tracks per window when the caller does not say.
pub const DEFAULT_CAPACITY: usize = 100_000;

impl<K: Hash + Eq + Clone> RateLimiter<K> {
    pub fn new(window_secs: u64) -> Self {
        Self::with_capacity(window_secs, DEFAULT_CAPACITY)
    }

    pub fn with_capacity(window_secs: u64, capacity: usize) -> Self {
        RateLimiter {
            window_secs: window_secs.max(1),
            capacity: capacity.max(1),
            table: Mutex::new(Window::empty(0)),
        }
    }

    /// Counts a request of `key` at `now` (Unix seconds) against `limit`.
    pub fn check(&self, key: K, limit: u32, now: u64) -> Decision {
        self.check_borrowed(&key, limit, now)
    }

    /// [`check`](Self::check) by a borrowed key (an account's `&str`): the key is
    /// copied only when it is new in the window, not for every request.
    pub fn check_borrowed<Q>(&self, key: &Q, limit: u32, now: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let index = now / self.window_secs;
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        // A request that read the clock just before another moved the window on
        // counts in the newer window.
        let index = index.max(table.index);
        let past =
            (index != table.index).then(|| std::mem::replace(&mut *table, Window::empty(index)));
        let window = &mut *table;
        let count = if window.counts.contains_key(key) {
            window.counts.get_mut(key).expect("just found")
        } else if window.counts.len() < self.capacity {
            window.counts.entry(key.to_owned()).or_insert(0)
        } else {
            &mut window.overflow
        };
        let allowed = *count < limit;
        if allowed {
            *count += 1;
        }
        let remaining = limit - (*count).min(limit);
        drop(table);
        drop(past);
        Decision {
            allowed,
            limit,
            remaining,
            reset: (index + 1) * self.window_secs,
        }
    }

    /// Keys tracked in the current window.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.table.lock().unwrap().counts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_allows_exactly_the_limit_then_resets() {
        let limiter = RateLimiter::<&str>::new(60);
        let t0 = 1_200; // start of a window
        for i in 0..3 {
            let d = limiter.check("ns", 3, t0 + i);
            assert!(d.allowed);
            assert_eq!(d.remaining, 2 - i as u32);
            assert_eq!(d.reset, 1_260);
        }
        let refused = limiter.check("ns", 3, t0 + 10);
        assert!(!refused.allowed);
        assert_eq!((refused.remaining, refused.retry_after(t0 + 10)), (0, 50));
        assert!(
            limiter.check("other", 3, t0 + 10).allowed,
            "accounts are counted apart"
        );
        let next = limiter.check("ns", 3, 1_260);
        assert!(next.allowed && next.remaining == 2 && next.reset == 1_320);
    }

    #[test]
    fn a_borrowed_key_counts_as_its_owned_form() {
        let limiter = RateLimiter::<String>::new(60);
        assert!(limiter.check_borrowed("ns", 2, 0).allowed);
        assert!(limiter.check("ns".to_string(), 2, 1).allowed);
        assert!(!limiter.check_borrowed("ns", 2, 2).allowed);
        assert_eq!(limiter.tracked(), 1);
    }

    #[test]
    fn a_new_window_drops_every_key_of_the_past_one() {
        let limiter = RateLimiter::new(60);
        for client in 0..1_000u32 {
            assert!(limiter.check(client, 1, 100).allowed);
        }
        assert_eq!(limiter.tracked(), 1_000);
        assert!(!limiter.check(7, 1, 119).allowed, "spent in this window");
        let next = limiter.check(7, 1, 120);
        assert!(next.allowed, "a fresh budget in the next window");
        assert_eq!(
            limiter.tracked(),
            1,
            "only the key seen in the new window is kept"
        );
        assert!(
            limiter.check(8, 1, 119).allowed && !limiter.check(8, 1, 119).allowed,
            "a late request (clock read before the window moved) counts in the newer window"
        );
        assert_eq!(limiter.tracked(), 2);
    }

    #[test]
    fn a_flood_of_distinct_keys_shares_one_overflow_budget() {
        let limiter = RateLimiter::with_capacity(60, 100);
        for client in 0..100u32 {
            assert!(limiter.check(client, 2, 0).allowed);
        }
        // The table is full: newcomers share one budget of 2 for the window.
        assert!(limiter.check(1_000, 2, 1).allowed);
        assert!(limiter.check(1_001, 2, 1).allowed);
        let refused = limiter.check(1_002, 2, 1);
        assert!(!refused.allowed && refused.remaining == 0);
        assert!(!limiter.check(1_000, 2, 1).allowed);
        assert_eq!(limiter.tracked(), 100, "memory stays at the cap");
        // Keys already tracked keep their own budget.
        assert!(limiter.check(5, 2, 2).allowed);
        assert!(!limiter.check(5, 2, 2).allowed);
        // The next window starts empty, overflow included.
        assert!(limiter.check(1_002, 2, 60).allowed);
        assert_eq!(limiter.tracked(), 1);
    }

    #[test]
    fn plans_come_from_namespace_annotations() {
        let defaults = PlanDefaults {
            plan: Plan::Free,
            enterprise_requests: 5_000,
        };
        let ann = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(defaults.limit_for(None), 60);
        assert_eq!(
            defaults.limit_for(Some(&ann(&[(PLAN_ANNOTATION, "pro")]))),
            600
        );
        assert_eq!(
            defaults.limit_for(Some(&ann(&[
                (PLAN_ANNOTATION, "enterprise"),
                (RPM_ANNOTATION, "12000")
            ]))),
            12_000
        );
        assert_eq!(
            defaults.limit_for(Some(&ann(&[(PLAN_ANNOTATION, "enterprise")]))),
            5_000
        );
        assert_eq!(
            defaults.limit_for(Some(&ann(&[(PLAN_ANNOTATION, "gold")]))),
            60,
            "unknown plan → default"
        );
        let pro_default = PlanDefaults {
            plan: Plan::Pro,
            enterprise_requests: 5_000,
        };
        assert_eq!(pro_default.limit_for(None), 600);
    }
}
