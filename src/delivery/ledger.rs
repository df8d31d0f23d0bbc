//! What a webhook still owes, kept as a watermark plus bounded exceptions, so that
//! acknowledging thousands of deliveries costs one status write instead of one write
//! per event (docs/delivery.md has the failure analysis). Pure: no I/O, no clock.
//!
//! An event is *settled* for a webhook when it was delivered or its retries ran out.
//! The persisted form is `deliveredThrough` (W) and `retrying`: every matching event
//! with a timestamp at or before W is settled, except those in `retrying`. Events
//! after W are tracked in memory only; after a restart they are delivered again
//! (at least once, never lost), which is what keeps the persisted part small.

use std::collections::{BTreeMap, HashMap};

use jiff::{SignedDuration, Timestamp};

use crate::crd::{RetryingEvent, WebhookStatus};

/// At most this many unsettled events are persisted below the watermark; beyond it the
/// watermark waits, which only widens the window re-sent after a restart.
pub const MAX_RETRYING: usize = 1000;

/// How far behind the clock the watermark stays. An event can become visible to the
/// worker after events stamped later than it (a write from another replica still in
/// flight at a leader change); the API server gives up on a request after 60 s, so an
/// event older than this is either visible already or was never written.
pub const SETTLE: SignedDuration = SignedDuration::from_mins(2);

const TICK: SignedDuration = SignedDuration::from_millis(1);

/// What to do with an event admitted for delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    /// Number of the next attempt (1 for a new event; more when a persisted series
    /// resumes after a restart).
    pub attempt: u32,
    /// Not before this time (a resumed series keeps its schedule).
    pub not_before: Option<Timestamp>,
}

#[derive(Debug, Clone)]
struct Open {
    timestamp: Timestamp,
    /// Failed attempts so far.
    failures: u32,
    next_attempt_at: Option<Timestamp>,
}

#[derive(Debug, Clone)]
pub struct Ledger {
    through: Timestamp,
    /// Persisted exceptions below the watermark not yet picked up again.
    parked: BTreeMap<String, RetryingEvent>,
    /// Events being worked on.
    open: HashMap<String, Open>,
    /// Settled events after the watermark.
    settled: HashMap<String, Timestamp>,
}

impl Ledger {
    /// The ledger a webhook's status describes; a webhook that never acknowledged
    /// anything owes the events after its creation (`created`), not older ones.
    pub fn from_status(status: Option<&WebhookStatus>, created: Timestamp) -> Self {
        let through = status.and_then(|s| s.delivered_through).unwrap_or(created);
        let parked = status
            .map(|s| {
                s.retrying
                    .iter()
                    .map(|r| (r.event_id.clone(), r.clone()))
                    .collect()
            })
            .unwrap_or_default();
        Ledger {
            through,
            parked,
            open: HashMap::new(),
            settled: HashMap::new(),
        }
    }

    pub fn through(&self) -> Timestamp {
        self.through
    }

    /// Starts tracking the event if this webhook still owes it and nobody is working
    /// on it yet.
    pub fn admit(&mut self, id: &str, timestamp: Timestamp) -> Option<Admission> {
        if self.open.contains_key(id) || self.settled.contains_key(id) {
            return None;
        }
        if let Some(parked) = self.parked.remove(id) {
            self.open.insert(
                id.to_string(),
                Open {
                    timestamp: parked.timestamp,
                    failures: parked.attempts,
                    next_attempt_at: Some(parked.next_attempt_at),
                },
            );
            return Some(Admission {
                attempt: parked.attempts + 1,
                not_before: Some(parked.next_attempt_at),
            });
        }
        if timestamp <= self.through {
            return None;
        }
        self.open.insert(
            id.to_string(),
            Open {
                timestamp,
                failures: 0,
                next_attempt_at: None,
            },
        );
        Some(Admission {
            attempt: 1,
            not_before: None,
        })
    }

    /// Records a failed attempt of an open event; the next one is due at `next_at`.
    pub fn failed(&mut self, id: &str, next_at: Timestamp) {
        if let Some(open) = self.open.get_mut(id) {
            open.failures += 1;
            open.next_attempt_at = Some(next_at);
        }
    }

    /// The event was delivered or its retries ran out.
    pub fn settle(&mut self, id: &str) {
        if let Some(open) = self.open.remove(id)
            && open.timestamp > self.through
        {
            self.settled.insert(id.to_string(), open.timestamp);
        }
    }

    /// Forgets an open event without settling it (its webhook stopped matching); it is
    /// owed again if it is admitted again.
    pub fn forget(&mut self, id: &str) {
        self.open.remove(id);
    }

    /// The newest event settled after the watermark (remembered in memory only).
    pub fn newest_settled(&self) -> Option<Timestamp> {
        self.settled.values().max().copied()
    }

    /// Moves the watermark as far as it safely goes: behind `now - SETTLE`, before any
    /// event written by this process but not yet seen (`unseen_floor`), before any
    /// event not yet attempted, and far enough back that at most [`MAX_RETRYING`]
    /// unsettled events lie below it. Returns whether it moved.
    pub fn advance(&mut self, now: Timestamp, unseen_floor: Option<Timestamp>) -> bool {
        let mut candidate = now - SETTLE;
        if let Some(floor) = unseen_floor {
            candidate = candidate.min(floor - TICK);
        }
        for open in self.open.values() {
            if open.failures == 0 {
                candidate = candidate.min(open.timestamp - TICK);
            }
        }
        let mut failing: Vec<Timestamp> = self
            .open
            .values()
            .filter(|o| o.failures > 0)
            .map(|o| o.timestamp)
            .chain(self.parked.values().map(|p| p.timestamp))
            .filter(|ts| *ts <= candidate)
            .collect();
        if failing.len() > MAX_RETRYING {
            failing.sort_unstable();
            candidate = candidate.min(failing[MAX_RETRYING] - TICK);
        }
        if candidate <= self.through {
            return false;
        }
        self.through = candidate;
        self.settled.retain(|_, ts| *ts > candidate);
        true
    }

    /// The persisted exceptions: unsettled events at or before the watermark, oldest
    /// first.
    pub fn retrying(&self) -> Vec<RetryingEvent> {
        let mut out: Vec<RetryingEvent> = self
            .parked
            .values()
            .cloned()
            .chain(
                self.open
                    .iter()
                    .filter(|(_, o)| o.timestamp <= self.through)
                    .map(|(id, o)| RetryingEvent {
                        event_id: id.clone(),
                        timestamp: o.timestamp,
                        attempts: o.failures,
                        next_attempt_at: o.next_attempt_at.unwrap_or(o.timestamp),
                    }),
            )
            .collect();
        out.sort_by(|a, b| (a.timestamp, &a.event_id).cmp(&(b.timestamp, &b.event_id)));
        out
    }

    /// Whether the event is settled as far as the persisted form goes (what a restarted
    /// worker would conclude).
    #[cfg(test)]
    pub fn persisted_settled(&self, id: &str, timestamp: Timestamp) -> bool {
        timestamp <= self.through && !self.retrying().iter().any(|r| r.event_id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn ledger() -> Ledger {
        Ledger::from_status(None, t(0))
    }

    #[test]
    fn events_before_the_webhook_existed_are_not_owed() {
        let mut l = ledger();
        assert_eq!(l.admit("old", t(-5)), None);
        assert_eq!(
            l.admit("new", t(5)),
            Some(Admission {
                attempt: 1,
                not_before: None
            })
        );
        assert_eq!(l.admit("new", t(5)), None, "already being worked on");
    }

    #[test]
    fn the_watermark_stays_behind_unattempted_events_and_the_settle_window() {
        let mut l = ledger();
        l.admit("a", t(10));
        l.admit("b", t(20));
        l.settle("a");
        assert!(l.advance(t(1000), None));
        assert_eq!(l.through(), t(20) - TICK, "b was never attempted");
        assert!(!l.persisted_settled("b", t(20)));
        assert!(l.persisted_settled("a", t(10)));
        l.settle("b");
        assert!(l.advance(t(1000), None));
        assert_eq!(l.through(), t(1000) - SETTLE);
        assert_eq!(
            l.admit("b", t(20)),
            None,
            "settled events are not owed again"
        );
    }

    #[test]
    fn recent_settled_events_are_remembered_in_memory_until_the_watermark_passes() {
        let mut l = ledger();
        l.admit("a", t(10));
        l.settle("a");
        assert!(!l.advance(t(30), None), "inside the settle window");
        assert_eq!(l.admit("a", t(10)), None);
        assert!(
            !l.persisted_settled("a", t(10)),
            "a restart would send it again"
        );
    }

    #[test]
    fn an_unseen_event_of_this_process_holds_the_watermark() {
        let mut l = ledger();
        l.advance(t(1000), Some(t(100)));
        assert_eq!(l.through(), t(100) - TICK);
    }

    #[test]
    fn failing_events_are_persisted_below_the_watermark_and_resume_their_series() {
        let mut l = ledger();
        l.admit("stuck", t(10));
        l.failed("stuck", t(5000));
        l.admit("ok", t(20));
        l.settle("ok");
        assert!(l.advance(t(1000), None));
        assert_eq!(l.through(), t(1000) - SETTLE);
        let retrying = l.retrying();
        assert_eq!(retrying.len(), 1);
        assert_eq!(
            (retrying[0].event_id.as_str(), retrying[0].attempts),
            ("stuck", 1)
        );

        let status = WebhookStatus {
            delivered_through: Some(l.through()),
            retrying,
            ..Default::default()
        };
        let mut restarted = Ledger::from_status(Some(&status), t(0));
        assert_eq!(restarted.admit("ok", t(20)), None);
        assert_eq!(
            restarted.admit("stuck", t(10)),
            Some(Admission {
                attempt: 2,
                not_before: Some(t(5000))
            })
        );
        restarted.settle("stuck");
        assert!(restarted.retrying().is_empty());
        assert!(restarted.persisted_settled("stuck", t(10)));
    }

    #[test]
    fn the_persisted_exceptions_are_bounded() {
        let mut l = ledger();
        for i in 0..(MAX_RETRYING as i64 + 10) {
            let id = format!("e{i}");
            l.admit(&id, t(1 + i));
            l.failed(&id, t(100_000));
        }
        l.advance(t(100_000), None);
        assert_eq!(l.retrying().len(), MAX_RETRYING);
        assert_eq!(l.through(), t(1 + MAX_RETRYING as i64) - TICK);
    }

    #[test]
    fn a_forgotten_event_is_owed_again() {
        let mut l = ledger();
        l.admit("a", t(10));
        l.forget("a");
        assert!(l.admit("a", t(10)).is_some());
    }
}
