//! The engine's pure parts: templates, expressions, the step graph and lifecycle, spec
//! checks, retry, outputs, waiting, sub-workflow calls and the write-failure decisions. The parts that talk
//! to the cluster are in flowline-engine.

pub mod callback;
pub mod concurrency_key;
pub mod deadline;
pub mod events;
pub mod expr;
pub mod graph;
pub mod iterations;
pub mod lifecycle;
pub mod output;
pub mod redact;
pub mod retry;
pub mod reuse;
pub mod run_condition;
pub mod run_context;
pub mod spec_check;
pub mod step_pod;
pub mod subworkflow;
pub mod template;
pub mod waiting;
pub mod write_failure;
