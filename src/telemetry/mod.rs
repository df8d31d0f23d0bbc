//! Operational surface: logs, Prometheus metrics, health and readiness.

pub mod delivery_metrics;
pub mod engine_metrics;
pub mod health;
pub mod leader_metrics;
pub mod logging;
pub mod metrics;
pub mod undecodable;
