//! Events this process has created but the delivery worker has not yet seen in its
//! watch. The worker never moves a webhook's watermark past them: their status write
//! may still be in flight, or failing and about to be retried, and an event that
//! appeared below the watermark would count as delivered without ever being sent.
//!
//! Process-wide because the controllers that create events and the worker that
//! observes them run in the same (leader) process but share no other state.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use jiff::{SignedDuration, Timestamp};

/// An entry older than this belongs to a write that was abandoned (the run was
/// re-decided, the object deleted): it stops holding the watermark back.
const FORGET_AFTER: SignedDuration = SignedDuration::from_mins(15);

/// Engines running without a worker (benchmarks, tests) must not grow this forever.
const MAX_ENTRIES: usize = 100_000;

static UNSEEN: Mutex<BTreeMap<String, Timestamp>> = Mutex::new(BTreeMap::new());

fn lock() -> MutexGuard<'static, BTreeMap<String, Timestamp>> {
    UNSEEN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Called where an event is created, before the write that records it.
pub fn created(id: &str, timestamp: Timestamp) {
    let mut unseen = lock();
    if unseen.len() >= MAX_ENTRIES {
        let cutoff = Timestamp::now() - FORGET_AFTER;
        unseen.retain(|_, ts| *ts > cutoff);
        if unseen.len() >= MAX_ENTRIES {
            return;
        }
    }
    unseen.insert(id.to_string(), timestamp);
}

/// Called by the worker for every event it finds in an object it watches.
pub fn seen(id: &str) {
    let mut unseen = lock();
    if !unseen.is_empty() {
        unseen.remove(id);
    }
}

/// The oldest timestamp still unseen, if any.
pub fn floor(now: Timestamp) -> Option<Timestamp> {
    let mut unseen = lock();
    unseen.retain(|_, ts| *ts > now - FORGET_AFTER);
    unseen.values().min().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_holds_the_floor_until_seen_or_forgotten() {
        let now = Timestamp::now();
        let id = crate::engine::events::new_event_id();
        let old = crate::engine::events::new_event_id();
        created(&id, now - SignedDuration::from_mins(10));
        created(&old, now - SignedDuration::from_mins(20));
        // Other tests may register events concurrently, all newer than these.
        assert_eq!(floor(now), Some(now - SignedDuration::from_mins(10)));
        assert!(
            !lock().contains_key(&old),
            "an entry older than FORGET_AFTER is dropped"
        );
        seen(&id);
        assert!(!lock().contains_key(&id));
    }
}
