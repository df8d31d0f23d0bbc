//! Delivery retry schedule and the outcome rules around it. Pure: the caller supplies the
//! clock and the jitter sample, so every decision is reproducible in tests.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// Attempt 1 plus eight retries.
pub const MAX_ATTEMPTS: u32 = 9;

/// A response must arrive within this time to count as a success.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// An endpoint failing for this long without a success is disabled.
pub const DISABLE_AFTER: SignedDuration = SignedDuration::from_hours(5 * 24);

const MIN: u64 = 60;
const HOUR: u64 = 60 * MIN;

/// Base delay before attempts 2..=9; index 0 is attempt 2.
const BASE_DELAYS: [Duration; (MAX_ATTEMPTS - 1) as usize] = [
    Duration::ZERO,
    Duration::from_secs(5),
    Duration::from_secs(5 * MIN),
    Duration::from_secs(30 * MIN),
    Duration::from_secs(2 * HOUR),
    Duration::from_secs(5 * HOUR),
    Duration::from_secs(10 * HOUR),
    Duration::from_secs(10 * HOUR),
];

/// Upper bound for any single wait, before scaling.
const MAX_DELAY: Duration = Duration::from_secs(10 * HOUR);

/// Jitter spreads retries by ±20% so endpoints recovering from an outage are not hit by
/// every queued delivery in the same second.
const JITTER_SPREAD: f64 = 0.2;

#[derive(Debug, Clone, PartialEq)]
pub struct RetrySchedule {
    base: [Duration; (MAX_ATTEMPTS - 1) as usize],
    scale: f64,
}

impl Default for RetrySchedule {
    fn default() -> Self {
        Self::standard()
    }
}

impl RetrySchedule {
    /// 0 s, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h before attempts 2..=9 (≈ 27 h 35 min
    /// in total, before jitter).
    pub fn standard() -> Self {
        Self::scaled(1.0)
    }

    /// Every delay (including the Retry-After clamp and the 10 h cap) multiplied by
    /// `factor`, so tests and benchmarks can compress time without changing any decision.
    /// A negative, NaN or infinite factor falls back to 1.0: a bad flag must never turn
    /// retries into a hot loop against a failing endpoint.
    pub fn scaled(factor: f64) -> Self {
        let scale = if factor.is_finite() && factor >= 0.0 {
            factor
        } else {
            1.0
        };
        Self {
            base: BASE_DELAYS,
            scale,
        }
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Delay before attempt `next_attempt` (2..=[`MAX_ATTEMPTS`]) after the previous attempt
    /// failed; `None` when no attempts remain (or `next_attempt` < 2), meaning the series
    /// is recorded as failed.
    ///
    /// `jitter` is a uniform sample in [0, 1) mapping linearly onto 80%..120% of the base
    /// delay; out-of-range samples are clamped and NaN means no jitter.
    ///
    /// Retry-After rule: the result is
    /// `max(jittered, min(retry_after, 2 × base, 10 h))`, all scaled by the same factor
    /// (Retry-After included, so compressed runs make the same choices as real ones).
    /// A hint can therefore only lengthen the wait, by at most twice the scheduled delay,
    /// and never beyond 10 h; a receiver cannot park a delivery indefinitely. The
    /// immediate retry (attempt 2) has a base of 0, so it ignores Retry-After.
    pub fn delay_before(
        &self,
        next_attempt: u32,
        retry_after: Option<Duration>,
        jitter: f64,
    ) -> Option<Duration> {
        let index = usize::try_from(next_attempt.checked_sub(2)?).ok()?;
        let base = self.base.get(index)?.as_secs_f64() * self.scale;
        let jittered = base * jitter_factor(jitter);
        let delay = match retry_after {
            Some(hint) => {
                let ceiling = (2.0 * base).min(MAX_DELAY.as_secs_f64() * self.scale);
                let honoured = (hint.as_secs_f64() * self.scale).min(ceiling);
                jittered.max(honoured)
            }
            None => jittered,
        };
        Some(saturating_secs(delay))
    }
}

fn jitter_factor(sample: f64) -> f64 {
    let sample = if sample.is_nan() {
        0.5
    } else {
        sample.clamp(0.0, 1.0)
    };
    1.0 - JITTER_SPREAD + 2.0 * JITTER_SPREAD * sample
}

fn saturating_secs(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
}

/// Parses a `Retry-After` value: delta-seconds or an HTTP-date (IMF-fixdate, e.g.
/// `Sun, 06 Nov 1994 08:49:37 GMT`). A date in the past yields zero. Delta-seconds too
/// large for `u64` saturate, since they still mean "a very long time" and are clamped later.
/// The date parser accepts RFC 2822 generally (numeric offsets, wrong weekday) because
/// rejecting a well-meant hint helps nobody.
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs));
    }
    static PARSER: jiff::fmt::rfc2822::DateTimeParser =
        jiff::fmt::rfc2822::DateTimeParser::new().relaxed_weekday(true);
    let at = PARSER.parse_timestamp(value).ok()?;
    let wait = at.duration_since(now);
    Some(Duration::try_from(wait).unwrap_or(Duration::ZERO))
}

/// Any 2xx (received within [`ATTEMPT_TIMEOUT`]) is a success; redirects are not followed
/// and count as failures.
pub fn status_is_success(code: u16) -> bool {
    (200..300).contains(&code)
}

/// 410 Gone is the receiver saying the endpoint is permanently removed: stop retrying and
/// disable the webhook instead of spending the rest of the schedule on it.
pub fn disables_endpoint(code: u16) -> bool {
    code == 410
}

/// True once an endpoint has been failing for at least [`DISABLE_AFTER`] (5 days). A
/// `failing_since` in the future (clock skew) never disables.
pub fn should_disable_after_failures(failing_since: Timestamp, now: Timestamp) -> bool {
    now.duration_since(failing_since) >= DISABLE_AFTER
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_JITTER: f64 = 0.5;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn standard_schedule_every_step() {
        let s = RetrySchedule::standard();
        let expected = [
            (2, 0),
            (3, 5),
            (4, 5 * MIN),
            (5, 30 * MIN),
            (6, 2 * HOUR),
            (7, 5 * HOUR),
            (8, 10 * HOUR),
            (9, 10 * HOUR),
        ];
        for (attempt, delay) in expected {
            assert_eq!(
                s.delay_before(attempt, None, NO_JITTER),
                Some(secs(delay)),
                "{attempt}"
            );
        }
    }

    #[test]
    fn no_delay_outside_retry_attempts() {
        let s = RetrySchedule::standard();
        for attempt in [0, 1, MAX_ATTEMPTS + 1, u32::MAX] {
            assert_eq!(s.delay_before(attempt, None, NO_JITTER), None, "{attempt}");
        }
    }

    #[test]
    fn total_schedule_is_about_27_and_a_half_hours() {
        let s = RetrySchedule::standard();
        let total: Duration = (2..=MAX_ATTEMPTS)
            .filter_map(|a| s.delay_before(a, None, NO_JITTER))
            .sum();
        assert_eq!(total, secs(27 * HOUR + 35 * MIN + 5));
    }

    #[test]
    fn scaling_compresses_every_delay() {
        let s = RetrySchedule::scaled(0.001);
        assert_eq!(s.delay_before(2, None, NO_JITTER), Some(Duration::ZERO));
        assert_eq!(
            s.delay_before(3, None, NO_JITTER),
            Some(Duration::from_millis(5))
        );
        assert_eq!(
            s.delay_before(4, None, NO_JITTER),
            Some(Duration::from_millis(300))
        );
        assert_eq!(s.delay_before(9, None, NO_JITTER), Some(secs(36)));
        assert_eq!(
            RetrySchedule::scaled(0.0).delay_before(9, None, 0.9),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn bad_scale_factors_fall_back_to_real_time() {
        for factor in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(
                RetrySchedule::scaled(factor),
                RetrySchedule::standard(),
                "{factor}"
            );
        }
    }

    #[test]
    fn huge_scale_saturates_instead_of_panicking() {
        let s = RetrySchedule::scaled(f64::MAX);
        assert_eq!(
            s.delay_before(9, Some(Duration::MAX), 0.99),
            Some(Duration::MAX)
        );
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        let s = RetrySchedule::standard();
        for attempt in 3..=MAX_ATTEMPTS {
            let base = s.delay_before(attempt, None, NO_JITTER).unwrap();
            let low = s.delay_before(attempt, None, 0.0).unwrap();
            let high = s.delay_before(attempt, None, 0.999_999).unwrap();
            assert_eq!(low, base.mul_f64(0.8), "{attempt}");
            assert!(
                high < base.mul_f64(1.2) && high > base.mul_f64(1.19),
                "{attempt}"
            );
            for i in 0..100 {
                let d = s.delay_before(attempt, None, f64::from(i) / 100.0).unwrap();
                assert!(d >= low && d <= high, "{attempt} {i}");
            }
        }
    }

    #[test]
    fn jitter_keeps_zero_at_zero_and_tolerates_bad_samples() {
        let s = RetrySchedule::standard();
        assert_eq!(s.delay_before(2, None, 0.99), Some(Duration::ZERO));
        assert_eq!(s.delay_before(3, None, f64::NAN), Some(secs(5)));
        assert_eq!(s.delay_before(3, None, -3.0), Some(Duration::from_secs(4)));
        assert_eq!(s.delay_before(3, None, f64::INFINITY), Some(secs(6)));
    }

    #[test]
    fn smaller_retry_after_is_ignored() {
        let s = RetrySchedule::standard();
        assert_eq!(
            s.delay_before(4, Some(secs(10)), NO_JITTER),
            Some(secs(5 * MIN))
        );
        assert_eq!(
            s.delay_before(4, Some(Duration::ZERO), 0.0),
            Some(secs(4 * MIN))
        );
    }

    #[test]
    fn larger_retry_after_is_honoured_up_to_twice_the_delay() {
        let s = RetrySchedule::standard();
        assert_eq!(
            s.delay_before(4, Some(secs(7 * MIN)), NO_JITTER),
            Some(secs(7 * MIN))
        );
        assert_eq!(
            s.delay_before(4, Some(secs(HOUR)), NO_JITTER),
            Some(secs(10 * MIN))
        );
        // Honoured even when jitter alone would have produced a shorter wait.
        assert_eq!(s.delay_before(3, Some(secs(8)), 0.0), Some(secs(8)));
    }

    #[test]
    fn retry_after_never_shortens_the_jittered_delay() {
        let s = RetrySchedule::standard();
        let jittered = s.delay_before(9, None, 0.99).unwrap();
        assert!(jittered > secs(11 * HOUR));
        assert_eq!(
            s.delay_before(9, Some(secs(24 * HOUR)), 0.99),
            Some(jittered)
        );
    }

    #[test]
    fn huge_retry_after_is_capped_at_ten_hours() {
        let s = RetrySchedule::standard();
        assert_eq!(
            s.delay_before(7, Some(Duration::MAX), NO_JITTER),
            Some(secs(10 * HOUR))
        );
        assert_eq!(
            s.delay_before(9, Some(Duration::MAX), 0.0),
            Some(secs(10 * HOUR))
        );
        let scaled = RetrySchedule::scaled(0.001);
        assert_eq!(
            scaled.delay_before(7, Some(Duration::MAX), NO_JITTER),
            Some(secs(36))
        );
    }

    #[test]
    fn immediate_retry_ignores_retry_after() {
        let s = RetrySchedule::standard();
        assert_eq!(
            s.delay_before(2, Some(secs(120)), NO_JITTER),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn retry_after_is_scaled_with_the_schedule() {
        let s = RetrySchedule::scaled(0.001);
        assert_eq!(
            s.delay_before(4, Some(secs(7 * MIN)), NO_JITTER),
            Some(Duration::from_millis(420))
        );
        assert_eq!(
            s.delay_before(4, Some(secs(MIN)), NO_JITTER),
            Some(Duration::from_millis(300))
        );
    }

    #[test]
    fn parse_retry_after_seconds() {
        let now = ts(1_700_000_000);
        assert_eq!(parse_retry_after("120", now), Some(secs(120)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("007", now), Some(secs(7)));
        assert_eq!(
            parse_retry_after("99999999999999999999999999", now),
            Some(secs(u64::MAX))
        );
    }

    #[test]
    fn parse_retry_after_http_date() {
        // 1994-11-06T08:49:37Z is 784111777.
        let now = ts(784_111_777 - 90);
        let date = "Sun, 06 Nov 1994 08:49:37 GMT";
        assert_eq!(parse_retry_after(date, now), Some(secs(90)));
        assert_eq!(
            parse_retry_after(date, ts(784_111_777 + 5)),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("Mon, 06 Nov 1994 08:49:37 GMT", now),
            Some(secs(90))
        );
    }

    #[test]
    fn parse_retry_after_rejects_garbage() {
        let now = ts(1_700_000_000);
        let garbage = [
            "",
            "   ",
            "-5",
            "+5",
            "1.5",
            "5s",
            "soon",
            "Sun, 06 Nov 1994 08:49:37 GMT trailing",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "1994-11-06T08:49:37Z",
            "٣",
        ];
        for value in garbage {
            assert_eq!(parse_retry_after(value, now), None, "{value:?}");
        }
    }

    #[test]
    fn success_is_any_2xx() {
        for code in [200, 201, 202, 204, 299] {
            assert!(status_is_success(code), "{code}");
        }
        for code in [
            0,
            100,
            199,
            300,
            301,
            304,
            400,
            410,
            429,
            500,
            503,
            u16::MAX,
        ] {
            assert!(!status_is_success(code), "{code}");
        }
    }

    #[test]
    fn only_gone_disables_endpoint() {
        assert!(disables_endpoint(410));
        for code in [200, 400, 401, 403, 404, 429, 500] {
            assert!(!disables_endpoint(code), "{code}");
        }
    }

    #[test]
    fn disable_after_five_days_of_failures() {
        let since = ts(1_700_000_000);
        let five_days = 5 * 24 * 3600;
        assert!(!should_disable_after_failures(since, since));
        assert!(!should_disable_after_failures(
            since,
            ts(1_700_000_000 + five_days - 1)
        ));
        assert!(should_disable_after_failures(
            since,
            ts(1_700_000_000 + five_days)
        ));
        assert!(should_disable_after_failures(
            since,
            ts(1_700_000_000 + 10 * five_days)
        ));
        assert!(!should_disable_after_failures(ts(1_800_000_000), since));
        assert!(!should_disable_after_failures(
            Timestamp::MAX,
            Timestamp::MIN
        ));
        assert!(should_disable_after_failures(
            Timestamp::MIN,
            Timestamp::MAX
        ));
    }
}
