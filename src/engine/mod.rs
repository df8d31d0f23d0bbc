//! The execution engine: templates, `when` conditions, built-in actions, retries,
//! output caps, coalesced status writes that always land and the inline executor.

pub mod actions;
pub mod events;
pub mod expr;
pub mod job;
pub mod output;
pub mod retry;
pub mod runner;
pub mod status_writer;
pub mod template;
pub mod write_failure;
