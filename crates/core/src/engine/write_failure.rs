//! What to do after a status write failed. Pure.
//!
//! A run's status must always land — above all its final phase — so no failure is
//! dropped: the write is retried after a capped exponential backoff, written again
//! smaller when the API server found it too large, and abandoned only when the Run no
//! longer exists.

use std::time::Duration;

use crate::crd::RetryPolicy;

/// First wait before a retry; doubled after each failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Why the API server (or the way to it) refused a write, as far as the next step cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The Run is gone: nothing left to write to.
    Gone,
    /// The object would be too large.
    TooLarge,
    /// Anything else: overload, timeouts, throttling, conflicts, a denial that may
    /// be lifted. Worth trying again.
    Transient,
}

/// What the writer does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The run is gone; stop writing.
    Stop,
    /// Write again at once, at this (higher) shrink level.
    Shrink { level: u32 },
    /// Write again after this wait.
    Retry { after: Duration },
}

/// Classifies an HTTP status code and message of a failed write. Size is recognised
/// by code (413) and by the words etcd and the API server use for it, whatever the
/// code: etcd's "request is too large" can arrive as a 500, a length rule as a 422
/// "Too long". Any other 422 (an admission policy's denial, say) is not about size:
/// shrinking would cut outputs for nothing, so it is retried as it is.
pub fn classify_status(code: u16, message: &str) -> Rejection {
    let message = message.to_ascii_lowercase();
    let about_size = ["too large", "too long", "exceeds", "larger than"]
        .iter()
        .any(|words| message.contains(words));
    match code {
        404 => Rejection::Gone,
        413 => Rejection::TooLarge,
        _ if about_size => Rejection::TooLarge,
        _ => Rejection::Transient,
    }
}

/// Classifies a failed write: an answer from the server (its status code and message)
/// by its status, no answer (connection refused or reset, a timeout, an unreadable
/// answer) as transient.
pub fn classify(answer: Option<(u16, &str)>) -> Rejection {
    match answer {
        Some((code, message)) => classify_status(code, message),
        None => Rejection::Transient,
    }
}

/// The `n`th wait (1, 2, …) before writing a status again:
/// exponential from [`FIRST_BACKOFF`], ±20% `jitter` (a sample in [0, 1)) so many
/// runs do not retry in step, at most [`MAX_BACKOFF`].
pub fn backoff(n: u32, jitter: f64) -> Duration {
    let policy = RetryPolicy {
        max_attempts: u32::MAX,
        backoff_ms: FIRST_BACKOFF.as_millis() as u64,
        backoff_factor: 2.0,
    };
    super::retry::delay_before(&policy, n.saturating_add(1).max(2), jitter)
        .unwrap_or(MAX_BACKOFF)
        .min(MAX_BACKOFF)
}

/// After a failed write: `shrink` is the level the write was made at, `waited` how
/// many times the writer already waited for this status (shrinking costs no wait).
pub fn decide(rejection: Rejection, shrink: u32, waited: u32, jitter: f64) -> Next {
    match rejection {
        Rejection::Gone => Next::Stop,
        Rejection::TooLarge if shrink < super::output::MAX_SHRINK => {
            Next::Shrink { level: shrink + 1 }
        }
        // Even the least status was refused (or the refusal was never about size):
        // wait, and try again until it lands.
        Rejection::TooLarge | Rejection::Transient => Next::Retry {
            after: backoff(waited.saturating_add(1), jitter),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::output::MAX_SHRINK;

    #[test]
    fn the_run_being_gone_stops_the_writes() {
        assert_eq!(
            classify_status(404, "runs \"r\" not found"),
            Rejection::Gone
        );
        assert_eq!(decide(Rejection::Gone, 0, 1, 0.5), Next::Stop);
        assert_eq!(decide(Rejection::Gone, MAX_SHRINK, 9, 0.5), Next::Stop);
    }

    #[test]
    fn size_is_recognised_by_code_and_by_message() {
        for (code, message) in [
            (413, "Request entity too large: limit is 3145728"),
            (413, ""),
            (
                422,
                "status.error: Too long: may not be more than 4096 bytes",
            ),
            (500, "etcdserver: request is too large"),
            (500, "rpc error: trying to send message larger than max"),
            (400, "the object exceeds the maximum size"),
            (403, "Too long: may not be more than 1572864 bytes"),
        ] {
            assert_eq!(
                classify_status(code, message),
                Rejection::TooLarge,
                "{message}"
            );
        }
    }

    #[test]
    fn everything_else_is_transient() {
        for (code, message) in [
            (500, "Internal error occurred"),
            (503, "the server is currently unable to handle the request"),
            (504, "Timeout: request did not complete within 60s"),
            (429, "Too many requests, please try again later"),
            (409, "the object has been modified"),
            (403, "denied request: status updates are frozen"),
            (
                422,
                "ValidatingAdmissionPolicy 'p' with binding 'b' denied request",
            ),
            (401, "Unauthorized"),
        ] {
            assert_eq!(
                classify_status(code, message),
                Rejection::Transient,
                "{message}"
            );
        }
    }

    #[test]
    fn too_large_shrinks_level_by_level_then_keeps_retrying() {
        let mut level = 0;
        loop {
            match decide(Rejection::TooLarge, level, 0, 0.5) {
                Next::Shrink { level: next } => {
                    assert_eq!(next, level + 1, "one level at a time");
                    level = next;
                }
                Next::Retry { after } => {
                    assert_eq!(after, FIRST_BACKOFF, "shrinking cost no wait");
                    break;
                }
                Next::Stop => panic!("a run that exists is never given up"),
            }
        }
        assert_eq!(
            level, MAX_SHRINK,
            "the least status was tried before waiting"
        );
    }

    #[test]
    fn transient_failures_back_off_exponentially_up_to_a_cap() {
        let waits: Vec<Duration> = (0..12)
            .map(
                |waited| match decide(Rejection::Transient, 0, waited, 0.5) {
                    Next::Retry { after } => after,
                    other => panic!("{other:?}"),
                },
            )
            .collect();
        assert_eq!(waits[0], Duration::from_millis(250));
        assert_eq!(waits[1], Duration::from_millis(500));
        assert_eq!(waits[2], Duration::from_secs(1));
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert_eq!(*waits.last().unwrap(), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX, f64::NAN), MAX_BACKOFF, "no overflow");
        let low = backoff(1, 0.0);
        let high = backoff(1, 0.999);
        assert!(
            low < high && low >= Duration::from_millis(200) && high <= Duration::from_millis(300)
        );
    }

    #[test]
    fn no_answer_is_transient_and_an_answer_goes_by_its_status() {
        assert_eq!(classify(None), Rejection::Transient);
        assert_eq!(
            classify(Some((404, "runs \"r\" not found"))),
            Rejection::Gone
        );
    }
}
