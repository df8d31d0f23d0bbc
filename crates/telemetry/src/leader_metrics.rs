//! Whether this process leads: `flowline_leader` is 1 while it holds the
//! leader-election lease (shard 0: schedules, deliveries, and shard 0's runs), else
//! 0; summed over the controller pods it must never exceed 1. With `--shards`,
//! `flowline_shards_held` counts the shards whose runs this process executes;
//! summed over the pods it never exceeds the number of shards.

use prometheus_client::metrics::gauge::Gauge;

use super::metrics::Metrics;

#[derive(Clone, Default)]
pub struct LeaderGauge {
    leader: Gauge,
    shards: Gauge,
}

impl LeaderGauge {
    /// Registers the gauge (at 0) in `metrics`.
    pub fn new(metrics: &Metrics) -> Self {
        let gauge = LeaderGauge::default();
        metrics.with_registry(|r| {
            r.register(
                "leader",
                "1 while this process holds the leader-election lease and runs the controllers",
                gauge.leader.clone(),
            );
            r.register(
                "shards_held",
                "Shards of the runs this process holds the Lease of and executes",
                gauge.shards.clone(),
            );
        });
        gauge
    }

    pub fn set(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    pub fn set_shards(&self, held: usize) {
        self.shards.set(i64::try_from(held).unwrap_or(i64::MAX));
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
        gauge.set_shards(2);
        assert!(metrics.render().contains("\nflowline_shards_held 2\n"));
    }
}
