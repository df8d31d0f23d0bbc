//! Tests against a real kube-apiserver. They are `#[ignore]`d for a plain
//! `cargo test`; `make test` starts the local control plane and runs them. (Tests of
//! the harness's own tools, which need no cluster, are not ignored.)

mod api;
mod approvals;
#[path = "../support/builders.rs"]
mod builders;
mod bulk;
mod callbacks;
mod chaos;
mod cli;
mod console;
mod containers;
mod delivery;
mod durable;
mod engine;
mod events;
mod flow_control;
mod foundation;
mod graphs;
mod hooks;
mod hostile;
mod idempotency;
mod kubernetes_surface;
mod leader;
mod observability;
mod otel;
mod ownership;
mod replicas;
mod retry;
mod schedules;
mod shards;
mod spec_errors;
#[path = "../support/stall_proxy.rs"]
mod stall_proxy;
mod subworkflows;
mod support;
mod time_control;
mod workflow_output;
mod workflows;
