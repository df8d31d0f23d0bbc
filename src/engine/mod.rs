//! The execution engine: templates, `when` conditions, built-in actions, retries
//! and executors (inline tasks and Kubernetes Jobs).

pub mod expr;
pub mod template;
