//! The run timeout: how long a run may still execute. Measured from the start recorded
//! in the Run's status, so an operator that resumes a run after a restart enforces the
//! time that is left instead of starting the clock again. Pure.

use std::time::Duration;

use jiff::Timestamp;

/// How long a run that started at `started_at` with a timeout of `timeout_ms` may
/// still execute at `now`: zero once the deadline has passed, `None` without a timeout.
pub fn remaining(
    started_at: Timestamp,
    timeout_ms: Option<u64>,
    now: Timestamp,
) -> Option<Duration> {
    let timeout_ms = timeout_ms?;
    let deadline = started_at
        .as_millisecond()
        .saturating_add(i64::try_from(timeout_ms).unwrap_or(i64::MAX));
    let left = deadline.saturating_sub(now.as_millisecond()).max(0);
    Some(Duration::from_millis(left as u64))
}

/// The error of a run stopped by its timeout.
pub fn timed_out_error(timeout_ms: u64) -> String {
    format!("run timed out after {timeout_ms} ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).unwrap()
    }

    #[test]
    fn no_timeout_no_deadline() {
        assert_eq!(remaining(at(0), None, at(5)), None);
    }

    #[test]
    fn the_clock_runs_from_the_recorded_start() {
        // A fresh start has the whole timeout.
        assert_eq!(
            remaining(at(1_000), Some(500), at(1_000)),
            Some(Duration::from_millis(500))
        );
        // A run resumed after a restart keeps only what is left...
        assert_eq!(
            remaining(at(1_000), Some(500), at(1_300)),
            Some(Duration::from_millis(200))
        );
        // ...and nothing once the deadline has passed, however long ago.
        assert_eq!(
            remaining(at(1_000), Some(500), at(1_500)),
            Some(Duration::ZERO)
        );
        assert_eq!(
            remaining(at(1_000), Some(500), at(90_000)),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn a_start_recorded_in_the_future_counts_from_that_start() {
        // Clock skew between the writer of startedAt and this process: the deadline
        // stays where the recorded start puts it.
        assert_eq!(
            remaining(at(2_000), Some(500), at(1_000)),
            Some(Duration::from_millis(1_500))
        );
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        assert!(remaining(at(0), Some(u64::MAX), at(1)).is_some());
        assert_eq!(timed_out_error(250), "run timed out after 250 ms");
    }
}
