//! `flowline_runtime_tasks_alive` and `flowline_runtime_workers`: the async runtime's
//! live tasks and worker threads, read at each scrape. A task count that keeps growing
//! under steady load is a leak that memory alone shows late.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use tokio::runtime::Handle;

use super::metrics::Metrics;

#[derive(Debug)]
struct RuntimeCollector(Handle);

impl Collector for RuntimeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let m = self.0.metrics();
        let gauges = [
            (
                "runtime_tasks_alive",
                "Tasks of the async runtime not yet finished",
                m.num_alive_tasks(),
            ),
            (
                "runtime_workers",
                "Worker threads of the async runtime",
                m.num_workers(),
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}

/// Registers the gauges of the runtime `handle` in `metrics`.
pub fn register(metrics: &Metrics, handle: Handle) {
    metrics.with_registry(|r| r.register_collector(Box::new(RuntimeCollector(handle))));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_gauges_count_live_tasks_and_workers() {
        let metrics = Metrics::default();
        register(&metrics, Handle::current());
        let value = |name: &str| -> i64 {
            let text = metrics.render();
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("flowline_{name} ")))
                .unwrap_or_else(|| panic!("{name} missing from {text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert_eq!(value("runtime_workers"), 2);
        let before = value("runtime_tasks_alive");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = stopped.await;
        });
        assert_eq!(value("runtime_tasks_alive"), before + 1);
        stop.send(()).unwrap();
        task.await.unwrap();
        // The count drops when the runtime releases the task, just after its output.
        for _ in 0..1000 {
            if value("runtime_tasks_alive") == before {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(value("runtime_tasks_alive"), before);
    }
}
