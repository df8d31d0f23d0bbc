//! Fixed-window rate limits per account (CONTRACT §5). Each API replica counts on
//! its own; the docs say so.

use std::collections::{BTreeMap, HashMap};
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

pub struct RateLimiter {
    window_secs: u64,
    counts: Mutex<HashMap<String, (u64, u32)>>,
}

/// Above this many tracked keys, entries of past windows are dropped.
const PRUNE_ABOVE: usize = 10_000;

impl RateLimiter {
    pub fn new(window_secs: u64) -> Self {
        RateLimiter {
            window_secs: window_secs.max(1),
            counts: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a request of `key` at `now` (Unix seconds) against `limit`.
    pub fn check(&self, key: &str, limit: u32, now: u64) -> Decision {
        let window = now / self.window_secs;
        let reset = (window + 1) * self.window_secs;
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if counts.len() > PRUNE_ABOVE {
            counts.retain(|_, (w, _)| *w == window);
        }
        let entry = counts.entry(key.to_string()).or_insert((window, 0));
        if entry.0 != window {
            *entry = (window, 0);
        }
        let allowed = entry.1 < limit;
        if allowed {
            entry.1 += 1;
        }
        Decision {
            allowed,
            limit,
            remaining: limit - entry.1.min(limit),
            reset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_allows_exactly_the_limit_then_resets() {
        let limiter = RateLimiter::new(60);
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
