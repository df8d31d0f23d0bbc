//! What the delivery worker reports: attempts by outcome, their latency, and how many
//! events wait for an attempt.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::metrics::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `delivered`, `http_error` (a non-2xx status), `transport_error` or `refused`.
    pub outcome: &'static str,
}

#[derive(Clone)]
pub struct DeliveryMetrics {
    pub attempts: Family<OutcomeLabel, Counter>,
    pub latency: Histogram,
    pub queue_depth: Gauge,
    pub status_writes: Counter,
}

impl DeliveryMetrics {
    pub fn new(metrics: &Metrics) -> Self {
        let m = DeliveryMetrics {
            attempts: Family::default(),
            // 1 ms to about 16 s (the attempt timeout is 10 s).
            latency: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            queue_depth: Gauge::default(),
            status_writes: Counter::default(),
        };
        metrics.with_registry(|r| {
            r.register(
                "webhook_deliveries",
                "Webhook delivery attempts, by outcome",
                m.attempts.clone(),
            );
            r.register(
                "webhook_delivery_duration_seconds",
                "Duration of webhook delivery attempts",
                m.latency.clone(),
            );
            r.register(
                "webhook_delivery_queue_depth",
                "Events waiting for a delivery attempt (due now or scheduled for a retry)",
                m.queue_depth.clone(),
            );
            r.register(
                "webhook_status_writes",
                "Webhook status writes (acknowledgements, attempts) made by the worker",
                m.status_writes.clone(),
            );
        });
        m
    }

    pub fn record(&self, outcome: &'static str, seconds: f64) {
        self.attempts.get_or_create(&OutcomeLabel { outcome }).inc();
        self.latency.observe(seconds);
    }
}
