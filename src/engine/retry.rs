//! Step retry backoff: exponential with jitter. Pure.

use std::time::Duration;

use crate::crd::RetryPolicy;

/// Delay before attempt `next` (2, 3, …) of a step, or None when the policy allows
/// no further attempt. `jitter` is a sample in [0, 1); the delay varies ±20%.
pub fn delay_before(policy: &RetryPolicy, next: u32, jitter: f64) -> Option<Duration> {
    if next < 2 || next > policy.max_attempts {
        return None;
    }
    let exponent = i32::try_from(next - 2).unwrap_or(i32::MAX);
    let base = policy.backoff_ms as f64 * policy.backoff_factor.max(1.0).powi(exponent);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.5
    };
    let ms = (base * (0.8 + 0.4 * jitter)).min(24.0 * 3600.0 * 1000.0);
    Some(Duration::from_millis(ms as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts: max,
            backoff_ms: 1000,
            backoff_factor: 2.0,
        }
    }

    #[test]
    fn delays_grow_exponentially_within_the_jitter_band() {
        let p = policy(4);
        assert_eq!(delay_before(&p, 2, 0.5), Some(Duration::from_millis(1000)));
        assert_eq!(delay_before(&p, 3, 0.5), Some(Duration::from_millis(2000)));
        assert_eq!(delay_before(&p, 4, 0.5), Some(Duration::from_millis(4000)));
        assert_eq!(delay_before(&p, 2, 0.0), Some(Duration::from_millis(800)));
        assert_eq!(delay_before(&p, 2, 1.0), Some(Duration::from_millis(1200)));
    }

    #[test]
    fn no_delay_beyond_the_last_attempt() {
        assert_eq!(delay_before(&policy(3), 4, 0.5), None);
        assert_eq!(delay_before(&policy(1), 2, 0.5), None);
        assert_eq!(delay_before(&policy(3), 1, 0.5), None);
    }

    #[test]
    fn hostile_values_do_not_panic() {
        let p = RetryPolicy {
            max_attempts: u32::MAX,
            backoff_ms: u64::MAX,
            backoff_factor: 10.0,
        };
        assert_eq!(
            delay_before(&p, 1000, f64::NAN),
            Some(Duration::from_millis(24 * 3600 * 1000))
        );
    }
}
