//! The three durations of leader election and the relation between them that keeps
//! two leaders from overlapping.

use std::time::Duration;

/// How long the process needs, at most, between its renewal deadline passing and no
/// leader work running any more: the watchdog thread wakes and exits the process.
/// The renew deadline must leave at least this much of the lease unused.
pub const STOP_BUDGET: Duration = Duration::from_millis(500);

/// Below this, the derived renew deadline would not leave [`STOP_BUDGET`] unused.
pub const MIN_LEASE: Duration = Duration::from_secs(2);

/// Client-go's proportions (15 s / 10 s / 2 s): the renew deadline is 2/3 of the
/// lease, the retry period 2/15 of it.
const RENEW_NUM: u32 = 2;
const RENEW_DEN: u32 = 3;
const RETRY_NUM: u32 = 2;
const RETRY_DEN: u32 = 15;

/// Retries are not exactly periodic (a slow request delays the next one); the renew
/// deadline must leave room for more than one of them, as client-go requires.
const RETRY_SLACK: f64 = 1.2;

/// Timing of one elector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a follower waits, on its own clock, without seeing the lease record
    /// change before it may take the lease.
    pub lease: Duration,
    /// How long the leader may go without a successful renewal before it stops
    /// (exits). Shorter than `lease` by at least [`STOP_BUDGET`].
    pub renew_deadline: Duration,
    /// Pause between two attempts to renew or acquire.
    pub retry_period: Duration,
}

/// A timing that could let two replicas lead at once, or could never renew.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TimingError {
    #[error("--leader-lease-seconds must be at least {MIN_LEASE:?}")]
    LeaseTooShort,
    #[error(
        "--leader-renew-deadline-seconds ({renew:?}) must end at least {STOP_BUDGET:?} before \
         --leader-lease-seconds ({lease:?}): a leader that cannot renew stops at its renew \
         deadline, and another replica may take over once the lease has expired"
    )]
    RenewDeadlineTooLong { renew: Duration, lease: Duration },
    #[error(
        "--leader-retry-period-seconds ({retry:?}, given or 2/15 of the lease) must be positive \
         and shorter than the renew deadline ({renew:?}) divided by {RETRY_SLACK}, so that a \
         leader gets more than one attempt to renew"
    )]
    RetryPeriodTooLong { retry: Duration, renew: Duration },
}

impl Timing {
    /// The timing for a lease of `lease`, with the renew deadline and retry period
    /// given or derived from it.
    pub fn new(
        lease: Duration,
        renew_deadline: Option<Duration>,
        retry_period: Option<Duration>,
    ) -> Result<Timing, TimingError> {
        if lease < MIN_LEASE {
            return Err(TimingError::LeaseTooShort);
        }
        let renew = renew_deadline.unwrap_or(lease * RENEW_NUM / RENEW_DEN);
        let retry = retry_period.unwrap_or(lease * RETRY_NUM / RETRY_DEN);
        if renew + STOP_BUDGET > lease {
            return Err(TimingError::RenewDeadlineTooLong { renew, lease });
        }
        if retry.is_zero() || retry.mul_f64(RETRY_SLACK) >= renew {
            return Err(TimingError::RetryPeriodTooLong { retry, renew });
        }
        Ok(Timing {
            lease,
            renew_deadline: renew,
            retry_period: retry,
        })
    }
}

/// Parses a flag value in (possibly fractional) seconds, e.g. `10` or `0.5`.
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("expected a number of seconds, got {s:?}"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is not a usable duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn defaults_follow_client_go() {
        let t = Timing::new(secs(15.0), None, None).unwrap();
        assert_eq!((t.renew_deadline, t.retry_period), (secs(10.0), secs(2.0)));
        let t = Timing::new(secs(6.0), None, None).unwrap();
        assert_eq!((t.renew_deadline, t.retry_period), (secs(4.0), secs(0.8)));
    }

    #[test]
    fn the_shortest_lease_still_validates_with_derived_durations() {
        // At 1 s the derived 666 ms deadline would leave less than STOP_BUDGET: refused
        // as too short a lease rather than with a complaint about a flag not given.
        assert_eq!(
            Timing::new(secs(1.0), None, None),
            Err(TimingError::LeaseTooShort)
        );
        assert!(Timing::new(MIN_LEASE, None, None).is_ok());
    }

    #[test]
    fn a_renew_deadline_that_reaches_the_expiry_is_refused() {
        assert!(Timing::new(secs(15.0), Some(secs(14.5)), None).is_ok());
        let err = Timing::new(secs(15.0), Some(secs(14.6)), None).unwrap_err();
        assert!(matches!(err, TimingError::RenewDeadlineTooLong { .. }));
        assert!(
            err.to_string()
                .contains("before --leader-lease-seconds (15s)"),
            "{err}"
        );
        assert!(Timing::new(secs(15.0), Some(secs(20.0)), None).is_err());
    }

    #[test]
    fn the_retry_period_must_fit_the_renew_deadline_more_than_once() {
        assert!(Timing::new(secs(15.0), None, Some(secs(8.0))).is_ok());
        for bad in [0.0, 8.4, 10.0, 30.0] {
            assert!(
                matches!(
                    Timing::new(secs(15.0), None, Some(secs(bad))),
                    Err(TimingError::RetryPeriodTooLong { .. })
                ),
                "retry {bad}"
            );
        }
    }

    #[test]
    fn seconds_parse_with_fractions() {
        assert_eq!(parse_seconds("0.5"), Ok(secs(0.5)));
        assert_eq!(parse_seconds("10"), Ok(secs(10.0)));
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("ten").is_err());
    }
}
