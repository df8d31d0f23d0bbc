//! What the run controller needs for concurrency control besides the pure
//! [`admission`] rules: the group of a run as its watch cache shows it, the wake-up of
//! queued runs when a run of their group finishes, and the `flowline_runs_queued` gauge.
//! The state itself is in the Runs' statuses, so it holds across restarts.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::admission::{self, Member, MemberState};
use crate::crd::{Run, RunPhase};
use crate::kubeutil::lenient::Lenient;

/// How often the queued-runs gauge is recomputed from the cache.
const GAUGE_INTERVAL: Duration = Duration::from_secs(1);

pub type RunRef = ObjectRef<Lenient<Run>>;

pub struct Queue {
    /// The run controller's watch cache, set when the controller starts.
    runs: OnceLock<Store<Lenient<Run>>>,
    wake_tx: mpsc::UnboundedSender<RunRef>,
    wake_rx: Mutex<Option<mpsc::UnboundedReceiver<RunRef>>>,
}

impl Default for Queue {
    fn default() -> Self {
        let (wake_tx, wake_rx) = mpsc::unbounded_channel();
        Queue {
            runs: OnceLock::new(),
            wake_tx,
            wake_rx: Mutex::new(Some(wake_rx)),
        }
    }
}

impl Queue {
    /// Connects the controller's cache; returns the stream of runs to reconcile because
    /// a slot of their group freed (once: a second call gets an empty stream).
    pub fn attach(
        &self,
        store: Store<Lenient<Run>>,
    ) -> impl futures::Stream<Item = RunRef> + Send + 'static {
        let _ = self.runs.set(store);
        let rx = self
            .wake_rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        futures::stream::unfold(rx, |rx| async move {
            let mut rx = rx?;
            let next = rx.recv().await?;
            Some((next, Some(rx)))
        })
    }

    /// The unfinished runs of the workflow of `run` (itself excluded), from the cache.
    fn siblings(&self, run: &Run) -> Vec<std::sync::Arc<Lenient<Run>>> {
        let Some(store) = self.runs.get() else {
            return Vec::new();
        };
        let namespace = run.namespace();
        let uid = run.uid();
        store
            .state()
            .into_iter()
            .filter(|o| {
                o.decoded().is_some_and(|r| {
                    r.spec.workflow_ref == run.spec.workflow_ref
                        && r.namespace() == namespace
                        && r.uid() != uid
                        && !r.phase().is_finished()
                })
            })
            .collect()
    }

    /// The other unfinished runs of `run`'s concurrency group `group`, as admission
    /// counts them; `executing(uid)` says whether this process executes a run.
    pub fn members(&self, run: &Run, group: &str, executing: impl Fn(&str) -> bool) -> Vec<Member> {
        self.siblings(run)
            .iter()
            .filter_map(|o| {
                let r = o.decoded()?;
                let state = admission::classify(r, executing(&r.uid().unwrap_or_default()))?;
                (admission::group_of(r).ok()? == group).then(|| Member {
                    order: admission::order_of(r),
                    state,
                })
            })
            .collect()
    }

    /// Reconciles the oldest waiting runs of the group `finished` belonged to, as many
    /// as its limit: the ones a freed slot may start. Others wait for their turn (or
    /// the periodic resync).
    pub fn wake_group(&self, finished: &Run) {
        let Some(concurrency) = finished
            .spec
            .workflow
            .as_ref()
            .and_then(|w| w.concurrency.as_ref())
        else {
            return;
        };
        let Ok(group) = admission::group_of(finished) else {
            return;
        };
        let mut waiting: Vec<(admission::Order, RunRef)> = self
            .siblings(finished)
            .iter()
            .filter_map(|o| {
                let r = o.decoded()?;
                (admission::classify(r, false)? == MemberState::Waiting
                    && admission::group_of(r).ok()? == group)
                    .then(|| (admission::order_of(r), ObjectRef::from_obj(&**o)))
            })
            .collect();
        waiting.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, object) in waiting.into_iter().take(concurrency.limit as usize) {
            // The receiver lives as long as the controller; after it, nothing to wake.
            let _ = self.wake_tx.send(object);
        }
    }

    /// Keeps `gauge` at the number of queued runs in the cache (adding this
    /// controller's share: each watched namespace has a controller of its own).
    pub async fn count_queued(&self, gauge: Gauge, shutdown: CancellationToken) {
        let mut counted = 0i64;
        loop {
            let now = self.runs.get().map_or(0, |store| {
                store
                    .state()
                    .iter()
                    .filter(|o| o.decoded().is_some_and(|r| r.phase() == RunPhase::Queued))
                    .count() as i64
            });
            gauge.inc_by(now - counted);
            counted = now;
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(GAUGE_INTERVAL) => {}
            }
        }
        gauge.dec_by(counted);
    }
}
