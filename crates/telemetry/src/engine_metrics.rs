//! What the controllers and the engine report: Prometheus metrics with bounded
//! labels (run status, action, controller name — never object names) and Kubernetes
//! Events on the objects.

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::metrics::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    pub status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    pub action: &'static str,
}

/// What queued runs wait for (`concurrency`, `rate_limit`, `debounce`, `account`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueuedForLabel {
    pub queued_for: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: &'static str,
}

fn step_histogram() -> Histogram {
    // 1 ms to about 65 s.
    Histogram::new(exponential_buckets(0.001, 4.0, 9))
}

/// Observes how long a reconcile takes, whatever it returns.
pub struct ReconcileTimer(Histogram);

impl ReconcileTimer {
    pub async fn time<T>(self, reconcile: impl std::future::Future<Output = T>) -> T {
        let start = std::time::Instant::now();
        let out = reconcile.await;
        self.0.observe(start.elapsed().as_secs_f64());
        out
    }
}

/// Records Kubernetes Events as Flowline (this pod's name as the instance).
pub fn recorder(client: Client) -> Recorder {
    Recorder::new(
        client,
        Reporter {
            controller: "flowline".into(),
            instance: std::env::var("HOSTNAME").ok(),
        },
    )
}

/// Metric families and the event recorder of the controllers.
#[derive(Clone)]
pub struct EngineTelemetry {
    pub runs_finished: Family<StatusLabel, Counter>,
    pub step_duration: Family<ActionLabel, Histogram, fn() -> Histogram>,
    pub reconcile_errors: Family<ControllerLabel, Counter>,
    pub reconcile_duration: Family<ControllerLabel, Histogram, fn() -> Histogram>,
    /// Runs this process is executing now.
    pub runs_in_progress: Gauge,
    /// Runs waiting `queued`, by what they wait for, as the leader's cache shows them
    /// (0 on followers, which run no controller).
    pub runs_queued: Family<QueuedForLabel, Gauge>,
    /// Posted events whose fan-out was recorded.
    pub events_fanned_out: Counter,
    /// Runs posted events started (`action="started"`), cancelled (`action="cancelled"`)
    /// and resumed (`action="resumed"`: a `wait_for_event` step completed).
    pub event_runs: Family<ActionLabel, Counter>,
    recorder: Option<Recorder>,
}

impl EngineTelemetry {
    /// Registers the families in `metrics`; events are recorded through `client`
    /// when given.
    pub fn new(metrics: &Metrics, client: Option<Client>) -> Self {
        let telemetry = EngineTelemetry {
            runs_finished: Family::default(),
            step_duration: Family::new_with_constructor(step_histogram),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(step_histogram),
            runs_in_progress: Gauge::default(),
            runs_queued: Family::default(),
            events_fanned_out: Counter::default(),
            event_runs: Family::default(),
            recorder: client.map(recorder),
        };
        metrics.with_registry(|r| {
            r.register(
                "runs_finished",
                "Runs that reached a final status",
                telemetry.runs_finished.clone(),
            );
            r.register(
                "step_attempt_duration_seconds",
                "Duration of step attempts, by action",
                telemetry.step_duration.clone(),
            );
            r.register(
                "reconcile_errors",
                "Failed reconciles, by controller",
                telemetry.reconcile_errors.clone(),
            );
            r.register(
                "reconcile_duration_seconds",
                "Duration of reconciles, by controller",
                telemetry.reconcile_duration.clone(),
            );
            r.register(
                "runs_in_progress",
                "Runs this process is executing",
                telemetry.runs_in_progress.clone(),
            );
            r.register(
                "runs_queued",
                "Runs waiting to start, by what they wait for",
                telemetry.runs_queued.clone(),
            );
            r.register(
                "events_fanned_out",
                "Posted events whose fan-out was recorded",
                telemetry.events_fanned_out.clone(),
            );
            r.register(
                "event_runs",
                "Runs posted events started or cancelled, by action",
                telemetry.event_runs.clone(),
            );
        });
        telemetry
    }

    /// Times reconciles of `controller` into `flowline_reconcile_duration_seconds`.
    pub fn reconcile_timer(&self, controller: &'static str) -> ReconcileTimer {
        ReconcileTimer(
            self.reconcile_duration
                .get_or_create(&ControllerLabel { controller })
                .clone(),
        )
    }

    /// Telemetry that counts but records no Kubernetes Events (tests, tools).
    pub fn detached() -> Self {
        Self::new(&Metrics::default(), None)
    }

    /// Records a Kubernetes Event on `object`, its note capped at [`flowline_core::limits::MAX_EVENT_NOTE_BYTES`]
    /// (a note is often a run's error, as long as a server's answer or a `fail`
    /// message); failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(flowline_core::limits::cap_to(
                note,
                flowline_core::limits::MAX_EVENT_NOTE_BYTES,
            )),
            action: reason.into(),
            secondary: None,
        };
        if let Err(err) = recorder.publish(&event, &object.object_ref(&())).await {
            tracing::debug!(error = %err, "could not record a Kubernetes Event");
        }
    }
}
