//! Reconcilers (kube-runtime controllers). Each is split into pure decisions
//! (unit-tested with fixtures) and a thin layer that applies them.

pub mod account_bound;
pub mod admission;
mod group_summaries;
pub mod leader;
pub mod queue;
pub mod run;
pub mod run_cache;
pub mod run_labels;
pub mod schedule;
pub mod shard;
pub mod undelivered;
pub mod workflow;
