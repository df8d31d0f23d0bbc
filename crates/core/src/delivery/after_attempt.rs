//! What the delivery worker does after an attempt to deliver an event to a webhook:
//! settle it, try it again later, disable the webhook, or give the event up. Pure: the
//! caller supplies the clock and the jitter sample, so every decision is reproducible
//! in tests; the worker (`flowline_delivery::worker`) applies it.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::schedule::{self, RetrySchedule};

/// Why a webhook that answered 410 Gone is disabled.
pub const GONE: &str = "the endpoint answered 410 Gone";
/// Why a webhook whose deliveries all failed for [`schedule::DISABLE_AFTER`] is
/// disabled.
pub const FAILING_TOO_LONG: &str = "every delivery failed for 5 days";

/// What the worker knows after an attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attempt {
    /// The receiver's answer; None when none came (refused by policy, a transport
    /// error, a timeout).
    pub status_code: Option<u16>,
    /// The receiver's `Retry-After`, parsed.
    pub retry_after: Option<Duration>,
    /// This attempt's number in the event's series (1 for the first).
    pub number: u32,
    /// Sent on request through the API: one attempt outside the event's series.
    pub redelivery: bool,
    /// Since when every attempt to this webhook failed, before this one (None: the
    /// last one succeeded, or none was made).
    pub failing_since: Option<Timestamp>,
    pub now: Timestamp,
    /// A uniform sample in [0, 1) that spreads retries ([`RetrySchedule::delay_before`]).
    pub jitter: f64,
}

/// What to do after an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Delivered: the webhook's run of failures ends. `settle`: the event is settled
    /// (not for a redelivery, which is outside the event's series: the series may be
    /// settled already, or still retrying on its own schedule).
    Delivered { settle: bool },
    /// Failed, and the webhook is disabled for this reason: its other deliveries stop
    /// too. The event is left owed: re-enabling the webhook sends it again.
    Disable(&'static str),
    /// Failed: try the event again as attempt `attempt`, after `wait` (due `at`, which
    /// the ledger persists so a restart keeps the schedule).
    Retry {
        attempt: u32,
        wait: Duration,
        at: Timestamp,
    },
    /// Failed, and the retries are spent: the series failed, the event is settled.
    GiveUp,
    /// A redelivery failed: the attempt is recorded, nothing more (it is no part of a
    /// series, so nothing is retried or settled).
    Recorded,
}

impl Decision {
    /// Whether the attempt counts as a failure of the webhook (its
    /// `consecutiveFailures` and `failingSince`).
    pub fn is_failure(&self) -> bool {
        !matches!(self, Decision::Delivered { .. })
    }
}

/// Decides after `attempt` on the retry `schedule`. A 410 and five days of failures
/// disable the webhook whatever the attempt (a redelivery too); only then does the
/// schedule say whether the event is tried again.
pub fn decide(attempt: &Attempt, schedule: &RetrySchedule) -> Decision {
    if attempt.status_code.is_some_and(schedule::status_is_success) {
        return Decision::Delivered {
            settle: !attempt.redelivery,
        };
    }
    let failing_since = attempt.failing_since.unwrap_or(attempt.now);
    if attempt.status_code.is_some_and(schedule::disables_endpoint) {
        return Decision::Disable(GONE);
    }
    if schedule::should_disable_after_failures(failing_since, attempt.now) {
        return Decision::Disable(FAILING_TOO_LONG);
    }
    if attempt.redelivery {
        return Decision::Recorded;
    }
    let next = attempt.number.saturating_add(1);
    match schedule.delay_before(next, attempt.retry_after, attempt.jitter) {
        Some(wait) => Decision::Retry {
            attempt: next,
            wait,
            at: due_at(attempt.now, wait),
        },
        None => Decision::GiveUp,
    }
}

/// `now + wait`, at the end of the calendar when that is beyond it (a schedule
/// scaled up enormously): never a panic.
fn due_at(now: Timestamp, wait: Duration) -> Timestamp {
    SignedDuration::try_from(wait)
        .ok()
        .and_then(|wait| now.checked_add(wait).ok())
        .unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::schedule::MAX_ATTEMPTS;

    const NOW: i64 = 1_800_000_000;
    const DAY: i64 = 24 * 3600;
    /// The jitter sample that leaves the base delay as it is.
    const NO_JITTER: f64 = 0.5;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Attempt `number` of an event answered `code` (None: no answer), the webhook
    /// failing for `failing_for` seconds before it.
    fn attempt(code: Option<u16>, number: u32, failing_for: Option<i64>) -> Attempt {
        Attempt {
            status_code: code,
            retry_after: None,
            number,
            redelivery: false,
            failing_since: failing_for.map(|s| at(NOW - s)),
            now: at(NOW),
            jitter: NO_JITTER,
        }
    }

    fn redelivery(code: Option<u16>, failing_for: Option<i64>) -> Attempt {
        Attempt {
            redelivery: true,
            ..attempt(code, 4, failing_for)
        }
    }

    fn retry(attempt: u32, wait: u64) -> Decision {
        Decision::Retry {
            attempt,
            wait: secs(wait),
            at: at(NOW + wait as i64),
        }
    }

    #[test]
    fn decide_after_each_kind_of_attempt() {
        let standard = RetrySchedule::standard();
        let rows: Vec<(&str, Attempt, Decision)> = vec![
            (
                "a 2xx settles the event",
                attempt(Some(204), 1, None),
                Decision::Delivered { settle: true },
            ),
            (
                "a 2xx after days of failures settles it too",
                attempt(Some(200), 7, Some(4 * DAY)),
                Decision::Delivered { settle: true },
            ),
            (
                "a delivered redelivery settles nothing",
                redelivery(Some(200), None),
                Decision::Delivered { settle: false },
            ),
            (
                "a first failure is retried at once",
                attempt(Some(500), 1, None),
                retry(2, 0),
            ),
            (
                "no answer is retried like an error",
                attempt(None, 2, Some(1)),
                retry(3, 5),
            ),
            (
                "a redirect is a failure",
                attempt(Some(301), 3, Some(10)),
                retry(4, 300),
            ),
            (
                "Retry-After lengthens the wait",
                Attempt {
                    retry_after: Some(secs(420)),
                    ..attempt(Some(429), 3, Some(10))
                },
                retry(4, 420),
            ),
            (
                "the last attempt failing gives the event up",
                attempt(Some(503), MAX_ATTEMPTS, Some(DAY)),
                Decision::GiveUp,
            ),
            (
                "410 Gone disables the webhook",
                attempt(Some(410), 1, None),
                Decision::Disable(GONE),
            ),
            (
                "410 Gone disables it on a redelivery too",
                redelivery(Some(410), None),
                Decision::Disable(GONE),
            ),
            (
                "five days of failures disable the webhook",
                attempt(Some(500), 3, Some(5 * DAY)),
                Decision::Disable(FAILING_TOO_LONG),
            ),
            (
                "five days of failures disable it on a redelivery too",
                redelivery(None, Some(6 * DAY)),
                Decision::Disable(FAILING_TOO_LONG),
            ),
            (
                "just under five days is retried",
                attempt(Some(500), 3, Some(5 * DAY - 1)),
                retry(4, 300),
            ),
            (
                "a failed redelivery is only recorded",
                redelivery(Some(500), Some(60)),
                Decision::Recorded,
            ),
            (
                "a failing-since in the future (clock skew) never disables",
                attempt(Some(500), 2, Some(-DAY)),
                retry(3, 5),
            ),
        ];
        for (name, facts, expected) in rows {
            assert_eq!(decide(&facts, &standard), expected, "{name}");
        }
    }

    #[test]
    fn only_a_delivery_ends_the_webhooks_failures() {
        assert!(!Decision::Delivered { settle: false }.is_failure());
        for failed in [
            Decision::Disable(GONE),
            retry(2, 0),
            Decision::GiveUp,
            Decision::Recorded,
        ] {
            assert!(failed.is_failure(), "{failed:?}");
        }
    }

    /// A bug fixed with the extraction: `now + wait` panicked (jiff's `Add`) when the
    /// retry fell beyond the calendar, which `--delivery-time-scale` can ask for, and a
    /// wait too long for a signed duration was recorded as due now.
    #[test]
    fn a_retry_beyond_the_calendar_is_due_at_its_end() {
        let huge = RetrySchedule::scaled(1e9);
        match decide(&attempt(Some(500), 3, Some(1)), &huge) {
            Decision::Retry { attempt, at, .. } => {
                assert_eq!((attempt, at), (4, Timestamp::MAX));
            }
            other => panic!("expected a retry, got {other:?}"),
        }
        assert_eq!(due_at(at(NOW), Duration::MAX), Timestamp::MAX);
        assert_eq!(due_at(at(NOW), secs(5)), at(NOW + 5));
    }
}
