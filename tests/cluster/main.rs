//! Tests against a real kube-apiserver. They are `#[ignore]`d for a plain
//! `cargo test`; `make test` starts the local control plane and runs them.

mod api;
mod chaos;
mod delivery;
mod durable;
mod engine;
mod foundation;
mod hostile;
mod replicas;
mod support;
mod workflows;
