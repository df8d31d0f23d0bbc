//! Whether this process leads: `flowline_leader` is 1 while it holds the
//! leader-election lease and runs the controllers, else 0. Summed over the controller
//! pods it must never exceed 1.

use prometheus_client::metrics::gauge::Gauge;

use super::metrics::Metrics;

#[derive(Clone, Default)]
pub struct LeaderGauge(Gauge);

impl LeaderGauge {
    /// Registers the gauge (at 0) in `metrics`.
    pub fn new(metrics: &Metrics) -> Self {
        let gauge = LeaderGauge::default();
        metrics.with_registry(|r| {
            r.register(
                "leader",
                "1 while this process holds the leader-election lease and runs the controllers",
                gauge.0.clone(),
            );
        });
        gauge
    }

    pub fn set(&self, leading: bool) {
        self.0.set(i64::from(leading));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauge_follows_leadership_on_metrics() {
        let metrics = Metrics::default();
        let gauge = LeaderGauge::new(&metrics);
        assert!(metrics.render().contains("\nflowline_leader 0\n"));
        gauge.set(true);
        assert!(metrics.render().contains("\nflowline_leader 1\n"));
        gauge.set(false);
        assert!(metrics.render().contains("\nflowline_leader 0\n"));
    }
}
