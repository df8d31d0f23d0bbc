//! Prometheus metrics. Labels are bounded enums, never object names.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

/// The process-wide registry; components register their metric families at start-up.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<std::sync::Mutex<Registry>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("flowline");
        // Every process's watchers report into the same bookkeeping.
        super::undecodable::Undecodables::process().register(&mut registry);
        super::log_writer::register(&mut registry);
        Metrics {
            registry: Arc::new(std::sync::Mutex::new(registry)),
        }
    }
}

impl Metrics {
    /// Lets a component register its metrics.
    pub fn with_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        let mut registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut registry)
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.with_registry(|r| encode(&mut out, r))
            .expect("writing to a String cannot fail");
        out
    }
}
