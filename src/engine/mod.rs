//! The execution engine: templates, built-in actions, retries and executors
//! (inline tasks and Kubernetes Jobs).
