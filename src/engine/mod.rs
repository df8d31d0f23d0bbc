//! The execution engine: templates, `when` conditions, built-in actions, retries,
//! output caps, coalesced status writes that always land, the inline and job executors,
//! and the one path by which steps read Secrets (with redaction of what they read).

pub mod actions;
pub mod concurrency_key;
pub mod deadline;
pub mod events;
pub mod expr;
pub mod graph;
pub mod job;
pub mod nesting;
pub mod output;
pub mod redact;
pub mod retry;
pub mod reuse;
pub mod run_condition;
pub mod runner;
pub mod secrets;
pub mod spec_check;
pub mod status_writer;
pub mod template;
pub mod waiting;
pub mod write_failure;
