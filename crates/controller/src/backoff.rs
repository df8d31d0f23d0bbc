//! When a failed reconcile is tried again: per object, 1 s doubling to 5 min, so an
//! object whose reconcile keeps failing (an API server refusing a write, a webhook
//! denying it) costs a request every 5 minutes, not every few seconds, while one that
//! failed once (a conflict, a blip) is retried at once. One object's failures never
//! slow another's retries.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The wait after an object's first failure.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait.
pub const MAX_RETRY: Duration = Duration::from_secs(300);
/// How long beyond twice its wait an object may go without failing before its series
/// counts as over. Only a controller that cannot report successes relies on it (the
/// run controller resets on success); the margin covers a slow reconcile, so an
/// object failing slowly still backs off.
const QUIET: Duration = Duration::from_secs(30);

/// The wait after the `failures`th failure in a row (1, 2, …): [`FIRST_RETRY`]
/// doubled each time, at most [`MAX_RETRY`]. Pure.
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

/// The failures in a row of each object (by `namespace/name`).
#[derive(Debug, Default)]
pub struct ReconcileBackoff {
    failing: Mutex<HashMap<String, Series>>,
}

#[derive(Debug, Clone, Copy)]
struct Series {
    failures: u32,
    last: Instant,
}

impl Series {
    /// Whether the object has not failed for so long that it must have succeeded
    /// meanwhile (it was retried after its wait and did not fail again).
    fn is_over(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last) > 2 * delay(self.failures) + QUIET
    }
}

impl ReconcileBackoff {
    /// Records that reconciling `key` failed at `now`; returns how long to wait before
    /// trying again. Forgets the series that are over, so objects deleted while
    /// failing do not accumulate.
    pub fn failed(&self, key: &str, now: Instant) -> Duration {
        let mut failing = self.lock();
        failing.retain(|_, series| !series.is_over(now));
        let series = failing.entry(key.to_string()).or_insert(Series {
            failures: 0,
            last: now,
        });
        series.failures = series.failures.saturating_add(1);
        series.last = now;
        delay(series.failures)
    }

    /// Records that reconciling `key` succeeded: its next failure waits
    /// [`FIRST_RETRY`] again.
    pub fn succeeded(&self, key: &str) {
        let mut failing = self.lock();
        // Most reconciles succeed with nothing recorded: no allocation for them.
        if !failing.is_empty() {
            failing.remove(key);
        }
    }

    /// Runs one reconcile of `key` and ends its series when it succeeds.
    pub async fn track<T, E>(
        &self,
        key: &str,
        reconcile: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let result = reconcile.await;
        if result.is_ok() {
            self.succeeded(key);
        }
        result
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Series>> {
        self.failing.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The key of an object in logs and in [`ReconcileBackoff`]: `namespace/name`.
pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_wait_doubles_from_one_second_to_five_minutes() {
        let rows = [
            ("no failure yet counts as the first", 0, secs(1)),
            ("first failure", 1, secs(1)),
            ("second", 2, secs(2)),
            ("third", 3, secs(4)),
            ("ninth: 256 s", 9, secs(256)),
            ("tenth: capped", 10, secs(300)),
            ("the shift cannot overflow", 64, secs(300)),
            ("nor can the count", u32::MAX, secs(300)),
        ];
        for (name, failures, expected) in rows {
            assert_eq!(delay(failures), expected, "{name}");
        }
    }

    #[test]
    fn failures_in_a_row_back_off_per_object() {
        let backoff = ReconcileBackoff::default();
        let t0 = Instant::now();
        let waits: Vec<Duration> = (0..10)
            .map(|i| backoff.failed("n/a", t0 + secs(i)))
            .collect();
        assert_eq!(waits[..4], [secs(1), secs(2), secs(4), secs(8)]);
        assert_eq!(waits[9], secs(300));
        // Another object starts its own series.
        assert_eq!(backoff.failed("n/b", t0 + secs(10)), secs(1));
        assert_eq!(backoff.failed("m/a", t0 + secs(10)), secs(1));
    }

    #[test]
    fn a_success_resets_the_series() {
        let backoff = ReconcileBackoff::default();
        let t0 = Instant::now();
        backoff.failed("n/a", t0);
        backoff.failed("n/a", t0 + secs(1));
        backoff.succeeded("n/a");
        assert_eq!(backoff.failed("n/a", t0 + secs(2)), secs(1));
        // A success of an object that never failed records nothing.
        backoff.succeeded("n/never");
        assert_eq!(backoff.lock().len(), 1);
    }

    #[test]
    fn a_quiet_object_starts_over_and_is_forgotten() {
        let backoff = ReconcileBackoff::default();
        let t0 = Instant::now();
        assert_eq!(backoff.failed("n/a", t0), secs(1));
        assert_eq!(backoff.failed("n/a", t0 + secs(1)), secs(2));
        // Failing again within twice its wait and the margin: the series goes on.
        assert_eq!(backoff.failed("n/a", t0 + secs(20)), secs(4));
        // Quiet for longer: it must have succeeded meanwhile.
        let later = t0 + secs(20) + 2 * secs(4) + QUIET + secs(1);
        assert_eq!(backoff.failed("n/a", later), secs(1));
        // An object deleted while failing is forgotten once its series is over.
        backoff.failed("n/gone", later);
        backoff.failed("n/a", later + secs(600));
        assert_eq!(
            backoff.lock().keys().collect::<Vec<_>>(),
            [&"n/a".to_string()]
        );
    }

    #[test]
    fn objects_are_named_namespace_slash_name() {
        assert_eq!(object_key(Some("team"), "wf"), "team/wf");
        assert_eq!(object_key(None, "wf"), "wf");
    }
}
