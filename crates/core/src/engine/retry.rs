//! Step retry backoff (exponential with jitter), and which attempt comes next. Pure.
//!
//! An attempt cut short because the process executing it stopped (a crash, a rollout, a
//! lost lease) is not the user's failure: it is executed again under the same number,
//! without using the retry budget. Steps are therefore at least once. A step that brings
//! the process down every time fails after [`MAX_INTERRUPTIONS`] re-executions.
//!
//! A step running in a Job is not cut short by the process stopping: the Job runs on.
//! Its attempt is re-attached (the Job found again by name, created only if it is gone),
//! which is neither a new attempt nor an interruption, so a long Job survives any number
//! of operator restarts.

use std::time::Duration;

use crate::crd::{RetryPolicy, StepPhase, StepRecord};

/// Re-executions of interrupted attempts one step may have before it fails.
pub const MAX_INTERRUPTIONS: u32 = 3;

/// What the executor does next for a step it is about to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextAttempt {
    /// Execute attempt `number`; `interrupted` when it re-executes one that was cut short.
    Run { number: u32, interrupted: bool },
    /// Wait again for attempt `number`, which runs in a Job that outlived the process.
    Reattach { number: u32 },
    /// The retry budget is spent: the step fails with its last attempt's error.
    Exhausted,
    /// Interrupted more than [`MAX_INTERRUPTIONS`] times: the step fails.
    TooManyInterruptions,
}

/// Decides from the step's record: an attempt that was started (`running`, no retry
/// scheduled) but is being decided again was interrupted — unless it runs `in_job`, in
/// which case it is re-attached.
pub fn next_attempt(record: &StepRecord, policy: &RetryPolicy, in_job: bool) -> NextAttempt {
    let in_flight = record.status == StepPhase::Running
        && record.attempts > 0
        && record.next_attempt_at.is_none();
    if in_flight && in_job {
        return NextAttempt::Reattach {
            number: record.attempts,
        };
    }
    if in_flight {
        return if record.interruptions >= MAX_INTERRUPTIONS {
            NextAttempt::TooManyInterruptions
        } else {
            NextAttempt::Run {
                number: record.attempts,
                interrupted: true,
            }
        };
    }
    let number = record.attempts + 1;
    if number > policy.max_attempts {
        NextAttempt::Exhausted
    } else {
        NextAttempt::Run {
            number,
            interrupted: false,
        }
    }
}

/// The error of a step failed by [`NextAttempt::TooManyInterruptions`].
pub fn interrupted_error(times: u32) -> String {
    format!(
        "the step was interrupted {times} times: the process executing it stopped during \
         each attempt (a crash, a rollout or a lost lease)"
    )
}

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

    fn record(status: StepPhase, attempts: u32, interruptions: u32, retry_due: bool) -> StepRecord {
        StepRecord {
            status,
            attempts,
            interruptions,
            next_attempt_at: retry_due.then(jiff::Timestamp::now),
            ..Default::default()
        }
    }

    #[test]
    fn a_fresh_step_runs_attempt_one_and_a_failed_one_retries_within_budget() {
        let p = policy(2);
        let run = |number| NextAttempt::Run {
            number,
            interrupted: false,
        };
        assert_eq!(
            next_attempt(&record(StepPhase::Pending, 0, 0, false), &p, false),
            run(1)
        );
        // Attempt 1 failed and attempt 2 is scheduled (also after a restart).
        assert_eq!(
            next_attempt(&record(StepPhase::Running, 1, 0, true), &p, false),
            run(2)
        );
        assert_eq!(
            next_attempt(&record(StepPhase::Running, 2, 0, true), &p, false),
            NextAttempt::Exhausted
        );
    }

    #[test]
    fn an_interrupted_attempt_runs_again_under_its_number_without_using_the_budget() {
        let p = policy(1);
        assert_eq!(
            next_attempt(&record(StepPhase::Running, 1, 0, false), &p, false),
            NextAttempt::Run {
                number: 1,
                interrupted: true
            }
        );
        assert_eq!(
            next_attempt(
                &record(StepPhase::Running, 1, MAX_INTERRUPTIONS - 1, false),
                &p,
                false
            ),
            NextAttempt::Run {
                number: 1,
                interrupted: true
            }
        );
        assert_eq!(
            next_attempt(
                &record(StepPhase::Running, 1, MAX_INTERRUPTIONS, false),
                &p,
                false
            ),
            NextAttempt::TooManyInterruptions
        );
        assert!(interrupted_error(MAX_INTERRUPTIONS + 1).contains("interrupted 4 times"));
    }

    #[test]
    fn a_job_attempt_in_flight_is_reattached_however_often_the_process_stopped() {
        let p = policy(1);
        for interruptions in [0, MAX_INTERRUPTIONS, MAX_INTERRUPTIONS + 5] {
            assert_eq!(
                next_attempt(
                    &record(StepPhase::Running, 1, interruptions, false),
                    &p,
                    true
                ),
                NextAttempt::Reattach { number: 1 }
            );
        }
        // A scheduled retry of a job step is a new attempt as usual.
        let p = policy(2);
        assert_eq!(
            next_attempt(&record(StepPhase::Running, 1, 0, true), &p, true),
            NextAttempt::Run {
                number: 2,
                interrupted: false
            }
        );
    }

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
