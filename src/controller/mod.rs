//! Reconcilers for Workflow and Run objects (kube-runtime controllers).
//!
//! Each reconciler is split into pure decisions (unit-tested with fixtures) and a
//! thin layer that applies them to the API server.
