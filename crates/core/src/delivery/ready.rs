//! A Webhook's `Ready` condition, derived from its delivery state: `True` (reason
//! `Delivering`) while deliveries are enabled, `False` (reason `Disabled`, with why)
//! once they are not. Pure.

use jiff::Timestamp;

use crate::crd::{Condition, ConditionStatus, WebhookStatus, set_condition};

pub const READY: &str = "Ready";

/// Brings the status's `Ready` condition and observed generation up to date for a
/// write made `now`, for the Webhook at `generation`.
pub fn apply(status: &mut WebhookStatus, generation: Option<i64>, now: Timestamp) {
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
}

/// Whether the status was written for an older spec than `generation` (or never).
pub fn stale(status: &WebhookStatus, generation: Option<i64>) -> bool {
    status.observed_generation != generation || status.conditions.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_follows_whether_deliveries_are_enabled() {
        let at = |s| Timestamp::from_second(s).unwrap();
        let mut status = WebhookStatus::default();
        assert!(stale(&status, Some(1)), "never written");
        apply(&mut status, Some(1), at(10));
        assert!(!stale(&status, Some(1)));
        assert!(stale(&status, Some(2)), "spec changed since");
        let ready = &status.conditions[0];
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::True, "Delivering")
        );
        status.enabled = false;
        status.disabled_reason = Some("the receiver answered 410 Gone".into());
        apply(&mut status, Some(1), at(20));
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
