//! A workflow's time-based flow control: `rateLimit` (at most N starts per key in any
//! window) and `debounce` (only the newest of a burst of runs per key starts). Both
//! hold runs `queued` before they start; the decisions are
//! [`crate::admission::timing`]'s.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Most runs of one key a rate limit lets start in a window.
pub const MAX_RATE_LIMIT: u32 = 10_000;
/// Shortest rate limit window: 1 second.
pub const MIN_RATE_PERIOD_MS: u64 = 1_000;
/// Longest rate limit window: 24 hours.
pub const MAX_RATE_PERIOD_MS: u64 = 86_400_000;
/// Shortest debounce period: 1 second.
pub const MIN_DEBOUNCE_MS: u64 = 1_000;
/// Longest debounce period and `maxWaitMs`: 7 days.
pub const MAX_DEBOUNCE_MS: u64 = 604_800_000;
const _: () = assert!(
    MAX_RATE_LIMIT == 10_000
        && MIN_RATE_PERIOD_MS == 1_000
        && MAX_RATE_PERIOD_MS == 86_400_000
        && MIN_DEBOUNCE_MS == 1_000
        && MAX_DEBOUNCE_MS == 604_800_000,
    "keep the schema bounds of rateLimit and debounce in step"
);

/// At most `limit` runs of one key start in any window of `periodMs`; the others wait
/// `queued` (by priority, then creation order) and start as the window allows. None is
/// dropped.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateLimit {
    /// Template over the trigger naming a run's key, e.g.
    /// `{{ trigger.payload.customer }}`; unset = one key for the whole workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 500))]
    pub key: Option<String>,
    /// Runs of one key that may start in a window (1 to 10,000).
    #[schemars(range(min = 1, max = 10_000))]
    pub limit: u32,
    /// The window, in milliseconds (1 second to 24 hours).
    #[schemars(range(min = 1_000, max = 86_400_000))]
    pub period_ms: u64,
}

/// A new run waits `queued` for `periodMs`; a newer run of the same key cancels it
/// (error `superseded by <run id>`) and waits in its place. The newest run starts once
/// `periodMs` passed without a newer one, or once `maxWaitMs` passed since the first
/// run of the burst.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.maxWaitMs) || self.maxWaitMs >= self.periodMs").message("debounce.maxWaitMs must be at least debounce.periodMs"))]
pub struct Debounce {
    /// Template over the trigger naming a run's key; unset = one key for the whole
    /// workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 500))]
    pub key: Option<String>,
    /// How long a run waits for a newer one, in milliseconds (1 second to 7 days).
    #[schemars(range(min = 1_000, max = 604_800_000))]
    pub period_ms: u64,
    /// The longest a burst may hold its newest run back, in milliseconds from the
    /// burst's first run (at least `periodMs`, at most 7 days); unset: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1_000, max = 604_800_000))]
    pub max_wait_ms: Option<u64>,
}
