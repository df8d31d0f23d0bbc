//! What the workflow controller keeps for webhook delivery: a Workflow's events until
//! they are settled (its event cap evicts only settled ones), and finished Runs whose
//! events are not (retention waits for them). Settledness is read from the webhooks'
//! statuses by [`crate::delivery::settled`]. Pure.

use std::time::Duration;

use crate::crd::PendingEvent;

/// Events a Workflow keeps once they are settled; beyond this the oldest settled ones
/// are evicted.
pub const MAX_PENDING_EVENTS: usize = 50;

/// Events a Workflow holds at most, settled or not. Each is under 1.3 KiB (a workflow
/// name of at most 200 characters, id and states), so the list stays under 260 KiB.
/// While this many are unsettled, a further state change is not recorded yet: it is
/// recorded (with the time it is recorded) once some have settled. No event is ever
/// dropped before it settled.
pub const MAX_HELD_EVENTS: usize = 200;

/// While something waits for deliveries to settle, the controller looks again this
/// often (webhook status changes do not wake workflows; the check is in memory).
pub const RECHECK: Duration = Duration::from_secs(10);

/// Evicts the oldest settled events until `incoming` more fit within
/// [`MAX_PENDING_EVENTS`] (or no settled one is left). Returns the evicted ids.
pub fn evict_settled(
    events: &mut Vec<PendingEvent>,
    incoming: usize,
    settled: impl Fn(&PendingEvent) -> bool,
) -> Vec<String> {
    let mut excess = (events.len() + incoming).saturating_sub(MAX_PENDING_EVENTS);
    let mut evicted = Vec::new();
    // Events are appended as they happen: the front is the oldest.
    events.retain(|e| {
        if excess > 0 && settled(e) {
            excess -= 1;
            evicted.push(e.id.clone());
            false
        } else {
            true
        }
    });
    evicted
}

/// Whether one more event may be recorded.
pub fn room_for_one(events: &[PendingEvent]) -> bool {
    events.len() < MAX_HELD_EVENTS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::EventKind;

    fn events(n: usize) -> Vec<PendingEvent> {
        (0..n)
            .map(|i| PendingEvent {
                id: format!("e{i}"),
                kind: EventKind::WorkflowPaused,
                timestamp: jiff::Timestamp::from_second(1_800_000_000 + i as i64).unwrap(),
                data: serde_json::json!({}),
            })
            .collect()
    }

    fn ids(events: &[PendingEvent]) -> Vec<&str> {
        events.iter().map(|e| e.id.as_str()).collect()
    }

    #[test]
    fn the_oldest_settled_events_go_first_and_unsettled_ones_stay() {
        let mut held = events(MAX_PENDING_EVENTS);
        // e0 and e2 are not settled yet.
        let settled = |e: &PendingEvent| e.id != "e0" && e.id != "e2";
        let evicted = evict_settled(&mut held, 2, settled);
        assert_eq!(evicted, ["e1", "e3"]);
        assert_eq!(held.len(), MAX_PENDING_EVENTS - 2);
        assert_eq!(&ids(&held)[..3], ["e0", "e2", "e4"]);
    }

    #[test]
    fn nothing_is_evicted_below_the_cap_or_when_nothing_settled() {
        let mut held = events(10);
        assert!(evict_settled(&mut held, 1, |_| true).is_empty());
        let mut full = events(MAX_PENDING_EVENTS + 5);
        assert!(evict_settled(&mut full, 1, |_| false).is_empty());
        assert_eq!(
            full.len(),
            MAX_PENDING_EVENTS + 5,
            "kept beyond the soft cap"
        );
        assert!(room_for_one(&full));
        assert!(!room_for_one(&events(MAX_HELD_EVENTS)));
    }
}
