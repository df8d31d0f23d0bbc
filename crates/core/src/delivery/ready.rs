//! A Webhook's `Ready` condition, derived from its delivery state: `True` (reason
//! `Delivering`) while deliveries are enabled, `False` (reason `Disabled`, with why)
//! once they are not. Pure.

use jiff::Timestamp;

use crate::crd::{Condition, ConditionStatus, EventKind, WebhookStatus, set_condition};

pub const READY: &str = "Ready";

/// Brings the status's `Ready` condition, observed generation and `subscribed` list up
/// to date for a write made `now`, for the Webhook at `generation` subscribed to `events`.
pub fn apply(
    status: &mut WebhookStatus,
    events: &[EventKind],
    generation: Option<i64>,
    now: Timestamp,
) {
    let (condition_status, reason, message) = if status.enabled {
        (ConditionStatus::True, "Delivering", String::new())
    } else {
        (
            ConditionStatus::False,
            "Disabled",
            status.disabled_reason.clone().unwrap_or_default(),
        )
    };
    set_condition(
        &mut status.conditions,
        Condition::new(READY, condition_status, reason, message, generation, now),
    );
    status.observed_generation = generation;
    status.subscribed = subscribed(events);
}

/// Whether the status was written for an older spec than `generation` (or never, or
/// before it listed the subscribed kinds).
pub fn stale(status: &WebhookStatus, events: &[EventKind], generation: Option<i64>) -> bool {
    status.observed_generation != generation
        || status.conditions.is_empty()
        || status.subscribed != subscribed(events)
}

/// `run.failed,run.succeeded`: the kinds as a column shows them.
fn subscribed(events: &[EventKind]) -> String {
    events
        .iter()
        .map(|e| e.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_follows_whether_deliveries_are_enabled() {
        let at = |s| Timestamp::from_second(s).unwrap();
        let events = [EventKind::RunFailed, EventKind::RunSucceeded];
        let mut status = WebhookStatus::default();
        assert!(stale(&status, &events, Some(1)), "never written");
        apply(&mut status, &events, Some(1), at(10));
        assert!(!stale(&status, &events, Some(1)));
        assert_eq!(status.subscribed, "run.failed,run.succeeded");
        assert!(stale(&status, &events, Some(2)), "spec changed since");
        status.subscribed.clear();
        assert!(
            stale(&status, &events, Some(1)),
            "written by a version without the list"
        );
        apply(&mut status, &events, Some(1), at(10));
        let ready = &status.conditions[0];
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::True, "Delivering")
        );
        status.enabled = false;
        status.disabled_reason = Some("the receiver answered 410 Gone".into());
        apply(&mut status, &events, Some(1), at(20));
        let ready = &status.conditions[0];
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::False, "Disabled")
        );
        assert_eq!(ready.message, "the receiver answered 410 Gone");
        assert_eq!(ready.last_transition_time, at(20));
        assert_eq!(status.conditions.len(), 1);
    }
}
