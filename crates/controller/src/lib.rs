//! Reconcilers (kube-runtime controllers). Each is split into pure decisions
//! (unit-tested with fixtures) and a thin layer that applies them.

pub mod backoff;
mod catch_up;
pub mod event;
mod freshness;
mod hook_secret;
pub mod leader;
pub mod queue;
pub mod run;
pub mod run_cache;
pub mod run_labels;
pub mod shard;
pub mod workflow;
