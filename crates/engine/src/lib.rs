//! Step execution: the runner that walks a run's graph, the built-in actions, Job steps,
//! Secrets for steps, and the writer of a run's status.
#![forbid(unsafe_code)]

pub mod actions;
pub mod call;
mod callback;
pub mod job;
pub mod nesting;
pub mod runner;
pub mod secrets;
pub mod status_writer;
