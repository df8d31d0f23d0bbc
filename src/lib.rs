//! Flowline: Kubernetes-native workflow automation.
//!
//! The folders follow the architecture: `crd` (the state), `controller`
//! (reconcilers), `engine` (step execution), `delivery` (webhook events), `api`
//! (the `/v1` HTTP facade), `telemetry` (health, metrics, logs), `operator` (wiring).
//! `console` serves the web UI's embedded files (a client of `/v1`, like curl).
//! `clock` and `ids` sit at the bottom: helpers every layer needs. Layers never point
//! up: nothing below `api` imports it (`tests/layers.rs` checks).
#![forbid(unsafe_code)]

pub mod api_key_command;
pub mod cli;
pub mod console;
pub mod operator;
pub mod step_command;
