//! What a webhook still owes, kept as a watermark plus bounded lists, so that
//! acknowledging thousands of deliveries costs one status write instead of one write
//! per event (docs/design/delivery.md has the failure analysis). Pure: no I/O, no clock.
//!
//! An event is *settled* for a webhook when it was delivered or its retries ran out.
//! The persisted form, read by [`super::settled`], is the watermark W (`deliveredThrough`),
//! `retrying` (unsettled events at or before W, with their series) and `acknowledged`
//! (settled events after W). Every other event after W is owed: after a restart it is
//! delivered (again). So what a restart re-sends is what settled since the last status
//! write, plus what was in flight, plus what `acknowledged` had no room for.

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};

use super::settled::{Acknowledgements, Recorded};
use super::unseen::Cut;
use crate::crd::{RetryingEvent, WebhookStatus};

/// At most this many unsettled events are persisted below the watermark; beyond it the
/// watermark waits.
pub const MAX_RETRYING: usize = 1000;

/// At most this many settled events are persisted above the watermark (about 17 bytes
/// each in the status); beyond it the oldest are left out of the list and would be
/// delivered again after a restart: duplicates, never losses.
pub const MAX_ACKNOWLEDGED: usize = 2000;

/// How long after a worker starts its watermark stays this far behind the clock. A
/// previous leader's write carrying an event may still land late (the API server gives
/// up on a request after 60 s), and this process does not know those events; its own
/// it knows exactly ([`super::unseen`]). After the grace period the watermark trails
/// only what this process knows to be unsettled or unseen.
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
    /// The status as read at start, its watermark moved since; its `retrying` and
    /// `acknowledged` entries leave as the first scan of the events matches them, and
    /// what that scan does not match is orphaned ([`Ledger::synced`]).
    persisted: Acknowledgements,
    /// Events being worked on.
    open: HashMap<String, Open>,
    /// Settled events after the watermark.
    settled: HashMap<String, Timestamp>,
}

impl Ledger {
    /// The ledger a webhook's status describes (see [`Acknowledgements::from_status`]).
    pub fn from_status(status: Option<&WebhookStatus>, created: Timestamp) -> Self {
        Ledger {
            persisted: Acknowledgements::from_status(status, created),
            open: HashMap::new(),
            settled: HashMap::new(),
        }
    }

    pub fn through(&self) -> Timestamp {
        self.persisted.through
    }

    /// Starts tracking the event if this webhook still owes it and nobody is working
    /// on it yet.
    pub fn admit(&mut self, id: &str, timestamp: Timestamp) -> Option<Admission> {
        if self.open.contains_key(id) || self.settled.contains_key(id) {
            return None;
        }
        let (failures, next_attempt_at) = match self.persisted.recorded(id, timestamp) {
            Recorded::Settled => {
                // A restored acknowledgement learns its event's time here.
                if self.persisted.acknowledged.remove(id) && timestamp > self.through() {
                    self.settled.insert(id.to_string(), timestamp);
                }
                return None;
            }
            Recorded::Retrying {
                attempts,
                next_attempt_at,
            } => {
                self.persisted.retrying.remove(id);
                (attempts, Some(next_attempt_at))
            }
            Recorded::Owed => (0, None),
        };
        self.open.insert(
            id.to_string(),
            Open {
                timestamp,
                failures,
                next_attempt_at,
            },
        );
        Some(Admission {
            attempt: failures + 1,
            not_before: next_attempt_at,
        })
    }

    /// The worker has offered every event it holds (its stores are synced): restored
    /// entries nothing matched belong to events that no longer exist (their Run or
    /// Workflow was deleted) or that this webhook no longer subscribes to. Dropped, so
    /// they never pin anything. Returns whether any were.
    pub fn synced(&mut self) -> bool {
        let orphans = self.persisted.retrying.len() + self.persisted.acknowledged.len();
        self.persisted.retrying.clear();
        self.persisted.acknowledged.clear();
        orphans > 0
    }

    /// An attempt failed; the next is due at `next_attempt_at`.
    pub fn failed(&mut self, id: &str, next_attempt_at: Timestamp) {
        if let Some(open) = self.open.get_mut(id) {
            open.failures += 1;
            open.next_attempt_at = Some(next_attempt_at);
        }
    }

    /// The event was delivered or its retries ran out.
    pub fn settle(&mut self, id: &str) {
        if let Some(open) = self.open.remove(id)
            && open.timestamp > self.through()
        {
            self.settled.insert(id.to_string(), open.timestamp);
        }
    }

    /// Forgets an open event without settling it (its webhook stopped matching); it is
    /// owed again if it is admitted again.
    pub fn forget(&mut self, id: &str) {
        self.open.remove(id);
    }

    /// How far the watermark may go now: before any event of this process not yet
    /// seen (`cut.floor`), before any event not yet attempted, below anything stamped
    /// after the cut, during the grace period `SETTLE` behind the clock, and far
    /// enough back that at most [`MAX_RETRYING`] unsettled events lie below it.
    pub fn ceiling(&self, cut: Cut, in_grace: bool) -> Timestamp {
        let mut ceiling = cut.now - TICK;
        if in_grace {
            ceiling = ceiling.min(cut.now - SETTLE);
        }
        if let Some(floor) = cut.floor {
            ceiling = ceiling.min(floor - TICK);
        }
        for open in self.open.values() {
            if open.failures == 0 {
                ceiling = ceiling.min(open.timestamp - TICK);
            }
        }
        let mut failing: Vec<Timestamp> = self
            .open
            .values()
            .filter(|o| o.failures > 0)
            .map(|o| o.timestamp)
            .chain(self.persisted.retrying.values().map(|p| p.timestamp))
            .filter(|ts| *ts <= ceiling)
            .collect();
        if failing.len() > MAX_RETRYING {
            failing.sort_unstable();
            ceiling = ceiling.min(failing[MAX_RETRYING] - TICK);
        }
        ceiling
    }

    /// Whether moving the watermark now would drop remembered acknowledgements (a
    /// status write then shrinks `acknowledged`).
    pub fn can_compact(&self, cut: Cut, in_grace: bool) -> bool {
        let ceiling = self.ceiling(cut, in_grace);
        ceiling > self.through() && self.settled.values().any(|ts| *ts <= ceiling)
    }

    /// Moves the watermark to [`Ledger::ceiling`] if that is further. Returns whether
    /// it moved.
    pub fn advance(&mut self, cut: Cut, in_grace: bool) -> bool {
        let ceiling = self.ceiling(cut, in_grace);
        if ceiling <= self.through() {
            return false;
        }
        self.persisted.through = ceiling;
        self.settled.retain(|_, ts| *ts > ceiling);
        true
    }

    /// The persisted exceptions: unsettled events at or before the watermark, oldest
    /// first.
    pub fn retrying(&self) -> Vec<RetryingEvent> {
        let mut out: Vec<RetryingEvent> = self
            .persisted
            .retrying
            .values()
            .cloned()
            .chain(
                self.open
                    .iter()
                    .filter(|(_, o)| o.timestamp <= self.through())
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

    /// The persisted acknowledgements: settled events after the watermark, oldest
    /// first, the newest [`MAX_ACKNOWLEDGED`] of them. (Restored ids not yet matched
    /// by a scan, whose time is unknown, count as the oldest.)
    pub fn acknowledged(&self) -> Vec<String> {
        let mut settled: Vec<(&Timestamp, &String)> =
            self.settled.iter().map(|(id, ts)| (ts, id)).collect();
        settled.sort_unstable();
        let mut restored: Vec<&String> = self.persisted.acknowledged.iter().collect();
        restored.sort_unstable();
        let all: Vec<&String> = restored
            .into_iter()
            .chain(settled.into_iter().map(|(_, id)| id))
            .collect();
        let skip = all.len().saturating_sub(MAX_ACKNOWLEDGED);
        all[skip..].iter().map(|id| id.to_string()).collect()
    }

    /// The acknowledgement fields as a status records them.
    pub fn write_into(&self, status: &mut WebhookStatus) {
        status.delivered_through = Some(self.through());
        status.retrying = self.retrying();
        status.acknowledged = self.acknowledged();
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

    /// A cut at `now` with nothing unseen.
    fn at(now: Timestamp) -> Cut {
        Cut { now, floor: None }
    }

    fn status(l: &Ledger) -> WebhookStatus {
        let mut status = WebhookStatus::default();
        l.write_into(&mut status);
        status
    }

    /// Whether a worker restarted from the ledger's status would skip the event.
    fn persisted_settled(l: &Ledger, id: &str, timestamp: Timestamp) -> bool {
        Acknowledgements::from_status(Some(&status(l)), t(0)).recorded(id, timestamp)
            == Recorded::Settled
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
    fn after_the_grace_period_the_watermark_trails_only_unattempted_events() {
        let mut l = ledger();
        l.admit("a", t(10));
        l.admit("b", t(20));
        l.settle("a");
        assert!(l.advance(at(t(1000)), false));
        assert_eq!(l.through(), t(20) - TICK, "b was never attempted");
        assert!(!persisted_settled(&l, "b", t(20)));
        assert!(persisted_settled(&l, "a", t(10)));
        l.settle("b");
        assert!(l.advance(at(t(1000)), false));
        assert_eq!(
            l.through(),
            t(1000) - TICK,
            "no settle window: right behind the cut"
        );
        assert!(l.acknowledged().is_empty(), "the watermark covers them all");
        assert_eq!(
            l.admit("b", t(20)),
            None,
            "settled events are not owed again"
        );
    }

    #[test]
    fn during_the_grace_period_settled_events_are_acknowledged_by_id() {
        let mut l = ledger();
        l.admit("a", t(990));
        l.settle("a");
        l.admit("b", t(995));
        assert!(l.advance(at(t(1000)), true));
        assert_eq!(
            l.through(),
            t(1000) - SETTLE,
            "a previous leader's write may still land"
        );
        assert_eq!(l.acknowledged(), ["a"]);
        assert!(
            persisted_settled(&l, "a", t(990)),
            "a restart does not send it again"
        );
        assert!(!persisted_settled(&l, "b", t(995)), "b is in flight");
        assert!(!l.can_compact(at(t(1000)), true));
        assert!(
            l.can_compact(at(t(1000)), false),
            "once the grace period ends, a write can drop a from the list"
        );
        assert!(l.advance(at(t(1000)), false));
        assert_eq!(l.through(), t(995) - TICK);
        assert!(l.acknowledged().is_empty());
        assert!(persisted_settled(&l, "a", t(990)));
    }

    #[test]
    fn an_unseen_event_of_this_process_holds_the_watermark() {
        let mut l = ledger();
        let cut = Cut {
            now: t(1000),
            floor: Some(t(100)),
        };
        l.advance(cut, false);
        assert_eq!(l.through(), t(100) - TICK);
    }

    #[test]
    fn failing_events_are_persisted_below_the_watermark_and_resume_their_series() {
        let mut l = ledger();
        l.admit("stuck", t(10));
        l.failed("stuck", t(5000));
        l.admit("ok", t(20));
        l.settle("ok");
        assert!(l.advance(at(t(1000)), false));
        assert_eq!(
            l.through(),
            t(1000) - TICK,
            "a failing event does not hold it"
        );
        let retrying = l.retrying();
        assert_eq!(retrying.len(), 1);
        assert_eq!(
            (retrying[0].event_id.as_str(), retrying[0].attempts),
            ("stuck", 1)
        );

        let mut restarted = Ledger::from_status(Some(&status(&l)), t(0));
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
        assert!(persisted_settled(&restarted, "stuck", t(10)));
    }

    #[test]
    fn the_persisted_exceptions_are_bounded() {
        let mut l = ledger();
        for i in 0..(MAX_RETRYING as i64 + 10) {
            let id = format!("e{i}");
            l.admit(&id, t(1 + i));
            l.failed(&id, t(100_000));
        }
        l.advance(at(t(100_000)), false);
        assert_eq!(l.retrying().len(), MAX_RETRYING);
        assert_eq!(l.through(), t(1 + MAX_RETRYING as i64) - TICK);
    }

    #[test]
    fn the_acknowledged_list_keeps_the_newest_and_a_restart_skips_them() {
        let mut l = ledger();
        // An old event still in its first attempt holds the watermark.
        l.admit("slow", t(1));
        let n = MAX_ACKNOWLEDGED as i64 + 10;
        for i in 0..n {
            let id = format!("e{i}");
            l.admit(&id, t(10 + i));
            l.settle(&id);
        }
        l.advance(at(t(100_000)), false);
        assert_eq!(l.through(), t(1) - TICK);
        let acknowledged = l.acknowledged();
        assert_eq!(acknowledged.len(), MAX_ACKNOWLEDGED);
        assert_eq!(acknowledged[0], "e10", "the oldest ten were left out");
        assert_eq!(acknowledged.last().unwrap(), &format!("e{}", n - 1));
        assert!(
            !persisted_settled(&l, "e9", t(19)),
            "left out: sent again after a restart (a duplicate, not a loss)"
        );

        let mut restarted = Ledger::from_status(Some(&status(&l)), t(0));
        assert_eq!(restarted.admit("e10", t(20)), None);
        assert!(restarted.admit("e9", t(19)).is_some());
        assert!(restarted.admit("slow", t(1)).is_some());
    }

    #[test]
    fn orphaned_entries_are_dropped_once_every_event_was_offered() {
        let previous = WebhookStatus {
            delivered_through: Some(t(100)),
            retrying: ["gone", "alive"]
                .iter()
                .map(|id| RetryingEvent {
                    event_id: id.to_string(),
                    timestamp: t(50),
                    attempts: 2,
                    next_attempt_at: t(10_000),
                })
                .collect(),
            acknowledged: vec!["gone-too".into(), "alive-too".into()],
            ..Default::default()
        };
        let mut l = Ledger::from_status(Some(&previous), t(0));
        // The scan offers what still exists.
        assert!(l.admit("alive", t(50)).is_some());
        assert_eq!(l.admit("alive-too", t(150)), None);
        assert!(l.synced());
        assert!(!l.synced(), "nothing left to drop");
        let retrying: Vec<String> = l.retrying().into_iter().map(|r| r.event_id).collect();
        assert_eq!(retrying, ["alive"]);
        assert_eq!(l.acknowledged(), ["alive-too"]);
        // The orphan no longer holds anything: the watermark moves past its time.
        l.settle("alive");
        l.advance(at(t(1000)), false);
        assert_eq!(l.through(), t(1000) - TICK);
        assert!(l.retrying().is_empty());
    }

    #[test]
    fn a_forgotten_event_is_owed_again() {
        let mut l = ledger();
        l.admit("a", t(10));
        l.forget("a");
        assert!(l.admit("a", t(10)).is_some());
    }
}
