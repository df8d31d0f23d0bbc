//! Operational surface: logs, Prometheus metrics, traces (OTLP, off by default),
//! health and readiness.

pub mod access_line;
pub mod access_log;
pub mod build_info;
#[cfg(test)]
pub(crate) mod captured;
pub mod delivery_metrics;
pub mod engine_metrics;
pub mod health;
pub mod http_metrics;
pub mod leader_metrics;
pub mod log_writer;
pub mod logging;
pub mod metrics;
pub mod runtime_metrics;
pub mod timestamp;
pub mod traces;
pub mod undecodable;
