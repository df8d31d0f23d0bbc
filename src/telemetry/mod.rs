//! Operational surface: logs, Prometheus metrics, health and readiness.

pub mod health;
pub mod logging;
pub mod metrics;
