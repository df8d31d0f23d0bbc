//! What the run controller needs for concurrency control besides the pure
//! [`admission`] rules: the group of a run as its watch cache shows it (walked, or
//! summarized for the looks at queued runs: `group_summaries`), the hand-over of a
//! freed slot to the queued runs of its group, and the `flowline_runs_queued` gauge.
//! The state itself is in the Runs' statuses, so it holds across restarts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use flowline_core::admission::group_summaries::{Membership, Summaries};
use flowline_core::admission::unrecorded::{self, Unrecorded};
use flowline_core::admission::{self, Local, Member};
use flowline_core::crd::{QueuedFor, Run, RunPhase};
use flowline_kube::lenient::Lenient;
use flowline_kube::name_index::SharedNameIndex;
use flowline_telemetry::engine_metrics::QueuedForLabel;

/// How often the queued-runs gauge is recomputed from the cache.
const GAUGE_INTERVAL: Duration = Duration::from_secs(1);

pub type RunRef = ObjectRef<Lenient<Run>>;

pub struct Queue {
    /// The run controller's watch cache and its index by workflow, set when the
    /// controller starts.
    runs: OnceLock<(Store<Lenient<Run>>, SharedNameIndex<Run>)>,
    wake_tx: mpsc::UnboundedSender<RunRef>,
    wake_rx: Mutex<Option<mpsc::UnboundedReceiver<RunRef>>>,
    /// The groups' summaries, for the looks at queued runs.
    summaries: Summaries,
}

impl Default for Queue {
    fn default() -> Self {
        let (wake_tx, wake_rx) = mpsc::unbounded_channel();
        Queue {
            runs: OnceLock::new(),
            wake_tx,
            wake_rx: Mutex::new(Some(wake_rx)),
            summaries: Summaries::default(),
        }
    }
}

impl Queue {
    /// Connects the controller's cache and its index by workflow; returns the stream of
    /// runs to reconcile because a slot of their group freed (once: a second call gets
    /// an empty stream).
    pub fn attach(
        &self,
        store: Store<Lenient<Run>>,
        by_workflow: SharedNameIndex<Run>,
    ) -> impl futures::Stream<Item = RunRef> + Send + 'static {
        let _ = self.runs.set((store, by_workflow));
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

    /// Asks the controller to reconcile `run` again (a run that just parked: a decision
    /// that arrived while it executed is seen at once).
    pub fn wake(&self, run: &Run) {
        let _ = self
            .wake_tx
            .send(ObjectRef::new(&run.name_any()).within(&run.namespace().unwrap_or_default()));
    }

    /// The unfinished runs of `workflow` in `namespace`, from the cache, through its
    /// index by workflow: a namespace's history is not scanned for each admission.
    fn unfinished_of(&self, namespace: &str, workflow: &str) -> Vec<std::sync::Arc<Run>> {
        let Some((_, by_workflow)) = self.runs.get() else {
            return Vec::new();
        };
        by_workflow
            .filed_under(namespace, workflow, |name| self.cached(namespace, name))
            .into_iter()
            .filter(|r| !r.phase().is_finished())
            .collect()
    }

    /// Asks the controller to reconcile the run `name` of `namespace` (the parent of a
    /// child run that ended).
    pub fn wake_named(&self, namespace: &str, name: &str) {
        let _ = self.wake_tx.send(ObjectRef::new(name).within(namespace));
    }

    /// Whether the run `name` of `namespace` ended, as far as the cache knows: finished,
    /// or not there (deleted, or not seen yet; the step waiting for it then reads it
    /// from the API server, and waits again if it only lagged).
    pub fn ended(&self, namespace: &str, name: &str) -> bool {
        self.cached(namespace, name)
            .is_none_or(|run| run.phase().is_finished())
    }

    /// The run `name` of `namespace` as the cache holds it, if it can be decoded.
    pub fn cached(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<Run>> {
        let (store, _) = self.runs.get()?;
        store
            .get(&ObjectRef::new(name).within(namespace))?
            .decoded()
            .cloned()
    }

    /// Which group `r` belongs to and how it counts there, if it counts at all.
    fn membership(r: &Run, local: &impl Fn(&str) -> Local) -> Option<Membership> {
        let state = admission::classify(r, local(&r.uid().unwrap_or_default()))?;
        let group = admission::group_of(r).ok()?;
        let order = admission::order_of(r);
        Some((group, Member { order, state }))
    }

    /// How `r` counts in the group `group`, if it is a member.
    fn member(r: &Run, group: &str, local: &impl Fn(&str) -> Local) -> Option<Member> {
        Self::membership(r, local)
            .filter(|(g, _)| g == group)
            .map(|(_, member)| member)
    }

    /// The other unfinished runs of `run`'s concurrency group `group`, as admission
    /// counts them; `local(uid)` says what this process knows of a run beyond the cache.
    pub fn members(&self, run: &Run, group: &str, local: impl Fn(&str) -> Local) -> Vec<Member> {
        self.members_with_refs(run, group, local)
            .into_iter()
            .map(|(member, _)| member)
            .collect()
    }

    fn members_with_refs(
        &self,
        run: &Run,
        group: &str,
        local: impl Fn(&str) -> Local,
    ) -> Vec<(Member, RunRef)> {
        let uid = run.uid();
        self.unfinished_of(&run.namespace().unwrap_or_default(), &run.spec.workflow_ref)
            .iter()
            .filter(|r| r.uid() != uid)
            .filter_map(|r| {
                let member = Self::member(r, group, &local)?;
                Some((
                    member,
                    ObjectRef::new(&r.name_any()).within(&r.namespace()?),
                ))
            })
            .collect()
    }

    /// Whether `run`, waiting in `group` (not executing here), must go on waiting under
    /// `policy: queue` and `limit`: answered from the group's summary, built by one
    /// walk over the workflow's runs and then kept up to date run by run
    /// ([`Queue::touch`]).
    pub fn must_wait(
        &self,
        run: &Run,
        limit: u32,
        group: &str,
        local: impl Fn(&str) -> Local,
    ) -> bool {
        let namespace = run.namespace().unwrap_or_default();
        let workflow = run.spec.workflow_ref.as_str();
        let walk = || {
            self.unfinished_of(&namespace, workflow)
                .iter()
                .filter_map(|r| Some((r.name_any(), Self::membership(r, &local)?)))
                .collect()
        };
        let membership = |name: &str| {
            let r = self.cached(&namespace, name)?;
            if r.spec.workflow_ref != workflow || r.phase().is_finished() {
                return None;
            }
            Self::membership(&r, &local)
        };
        self.summaries.must_wait(
            (&namespace, workflow, group),
            limit,
            &admission::order_of(run),
            walk,
            membership,
        )
    }

    /// Says that the run `name` of `workflow` in `namespace` changed, in the cache or
    /// in what this process executes: it is counted again at the next look.
    pub fn touch(&self, namespace: &str, workflow: &str, name: &str) {
        self.summaries.touch(namespace, workflow, name);
    }

    /// Says that a run of `namespace` changed in a way that does not name its workflow
    /// (it can no longer be decoded): the summaries of that namespace are built again.
    pub fn touch_namespace(&self, namespace: &str) {
        self.summaries.touch_namespace(namespace);
    }

    /// Says that the cache was listed again: every summary is built again.
    pub fn touch_all(&self) {
        self.summaries.touch_all();
    }

    /// Hands the slot `freed` held on: reconciles the runs of its group that may start
    /// now ([`admission::hand_over`]). `local` corrects the cache with what this process
    /// knows, so a run finished or admitted a moment ago counts as what it is, not as
    /// what the cache still shows.
    pub fn wake_group(&self, freed: &Run, local: impl Fn(&str) -> Local) {
        let Some(concurrency) = freed
            .spec
            .workflow
            .as_ref()
            .and_then(|w| w.concurrency.as_ref())
        else {
            return;
        };
        let Ok(group) = admission::group_of(freed) else {
            return;
        };
        let (mut members, refs): (Vec<Member>, Vec<RunRef>) = self
            .members_with_refs(freed, &group, local)
            .into_iter()
            .unzip();
        let by_order: std::collections::HashMap<_, _> =
            members.iter().map(|m| m.order.clone()).zip(refs).collect();
        for order in admission::hand_over(concurrency, &mut members) {
            if let Some(object) = by_order.get(&order) {
                // The receiver lives as long as the controller; after it, nothing to wake.
                let _ = self.wake_tx.send(object.clone());
            }
        }
    }

    /// Adds to `gauge` the number of queued runs in the cache that `counts` (this
    /// process's shards: summed over the replicas, every queued run counts once; each
    /// watched namespace has a controller of its own and adds its share).
    pub async fn count_queued(
        &self,
        gauge: Family<QueuedForLabel, Gauge>,
        counts: impl Fn(&Run) -> bool,
        shutdown: CancellationToken,
    ) {
        // This controller's share of each count (the contexts of one process add up).
        let mut counted: HashMap<&'static str, i64> = HashMap::new();
        loop {
            let mut now: HashMap<&'static str, i64> = HashMap::new();
            if let Some((store, _)) = self.runs.get() {
                let state = store.state();
                let runs = state
                    .iter()
                    .filter_map(|o| o.decoded())
                    .filter(|r| counts(r));
                for waits_for in waiting(runs, flowline_core::clock::now_ms()) {
                    *now.entry(waits_for.as_str()).or_default() += 1;
                }
            }
            for reason in QueuedFor::ALL.map(QueuedFor::as_str) {
                let (before, after) = (
                    counted.get(reason).copied().unwrap_or(0),
                    now.get(reason).copied().unwrap_or(0),
                );
                gauge
                    .get_or_create(&QueuedForLabel { queued_for: reason })
                    .inc_by(after - before);
            }
            counted = now;
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(GAUGE_INTERVAL) => {}
            }
        }
        for (reason, count) in counted {
            gauge
                .get_or_create(&QueuedForLabel { queued_for: reason })
                .dec_by(count);
        }
    }
}

/// What each waiting run of `runs` waits for: a run recorded queued as its status
/// says (a status recorded before the field existed waited for a concurrency slot),
/// and one whose wait is not recorded yet as its admission says at `now`
/// ([`Unrecorded`], from its workflow's runs).
fn waiting<'a>(runs: impl Iterator<Item = &'a Arc<Run>>, now: Timestamp) -> Vec<QueuedFor> {
    let runs: Vec<&Run> = runs.map(|r| &**r).collect();
    let workflow_of = |r: &'a Run| {
        let namespace = r.metadata.namespace.as_deref().unwrap_or_default();
        (namespace, r.spec.workflow_ref.as_str())
    };
    let mut found: Vec<QueuedFor> = (runs.iter())
        .filter(|r| r.phase() == RunPhase::Queued)
        .map(|r| (r.status.as_ref()).and_then(|s| s.queued_for))
        .map(|q| q.unwrap_or(QueuedFor::Concurrency))
        .collect();
    // Only the workflows with a run whose wait may be unrecorded are looked at whole
    // (this runs every second over the whole cache).
    let mut concerned: HashMap<(&str, &str), Vec<&Run>> = (runs.iter())
        .filter(|r| unrecorded::may_wait_unrecorded(r))
        .map(|r| (workflow_of(r), Vec::new()))
        .collect();
    for run in &runs {
        if let Some(of_workflow) = concerned.get_mut(&workflow_of(run)) {
            of_workflow.push(run);
        }
    }
    for of_workflow in concerned.values() {
        let book = Unrecorded::of(of_workflow.iter().copied());
        found.extend(of_workflow.iter().filter_map(|r| book.waits_for(r, now)));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn run(name: &str, workflow: &str, settings: Value, status: Value) -> Arc<Run> {
        let mut version = json!({"generation": 1, "name": "W",
            "steps": [{"id": "a", "action": "delay", "with": {"ms": 1}}]});
        for (k, v) in settings.as_object().unwrap() {
            version[k] = v.clone();
        }
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "flowline.io/v1", "kind": "Run",
                "metadata": {"name": name, "namespace": "n", "uid": name,
                    "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"workflowRef": workflow, "workflow": version},
                "status": status,
            }))
            .unwrap(),
        )
    }

    /// The gauge counts a recorded wait by its status, and a wait not recorded yet as
    /// its admission decides it; a run that may start is not counted.
    #[test]
    fn waiting_runs_are_counted_recorded_or_not() {
        let limit = json!({"concurrency": {"limit": 1}});
        let runs = [
            run(
                "rated",
                "r",
                json!({}),
                json!({"phase": "queued", "queuedFor": "rate_limit"}),
            ),
            run("old", "q", json!({}), json!({"phase": "queued"})),
            run("holder", "l", limit.clone(), json!({"phase": "running"})),
            run("behind", "l", limit.clone(), Value::Null),
            run("free", "f", limit, Value::Null),
            run("plain", "p", json!({}), Value::Null),
        ];
        let mut found = waiting(runs.iter(), jiff::Timestamp::now());
        found.sort_by_key(|q| q.as_str());
        assert_eq!(
            found,
            [
                QueuedFor::Concurrency,
                QueuedFor::Concurrency,
                QueuedFor::RateLimit
            ]
        );
    }
}
