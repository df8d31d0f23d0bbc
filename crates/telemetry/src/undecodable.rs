//! Objects a watcher could not decode ([`Lenient::Undecodable`]): each is reported once
//! per resourceVersion with a log line and, where the process records Events (the
//! operator), a Warning Event `Undecodable` on the object; the gauge
//! `flowline_undecodable_objects{kind}` counts those currently stored.
//!
//! Several watchers of one process see the same objects (the API's caches, the
//! controllers, the delivery worker), so the bookkeeping is shared by the process; each
//! watcher tells it what it sees, and a relist tells it what is gone.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

use futures::{Stream, StreamExt};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::watcher;
use kube::{Client, Resource};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use flowline_core::limits::{MAX_EVENT_NOTE_BYTES, cap_to};
use flowline_kube::lenient::{Lenient, Undecodable};

/// Reason of the Event recorded on an undecodable object.
pub const EVENT_REASON: &str = "Undecodable";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Key {
    kind: String,
    namespace: Option<String>,
    name: String,
}

struct Known {
    resource_version: Option<String>,
    /// An Event was recorded for this resourceVersion.
    evented: bool,
}

/// What to do about an undecodable object just seen.
#[derive(Debug, PartialEq, Eq)]
struct Report {
    log: bool,
    event: bool,
}

/// The undecodable objects a process knows of.
#[derive(Default)]
pub struct Undecodables {
    known: Mutex<HashMap<Key, Known>>,
    gauge: Family<KindLabel, Gauge>,
}

static PROCESS: LazyLock<Arc<Undecodables>> = LazyLock::new(Default::default);

impl Undecodables {
    /// The bookkeeping of this process.
    pub fn process() -> Arc<Undecodables> {
        PROCESS.clone()
    }

    /// Adds the gauge to a registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "undecodable_objects",
            "Stored objects Flowline cannot decode and so ignores, by kind",
            self.gauge.clone(),
        );
    }

    /// How many undecodable objects of `kind` are known.
    pub fn count(&self, kind: &str) -> i64 {
        self.gauge
            .get_or_create(&KindLabel { kind: kind.into() })
            .get()
    }

    fn seen(&self, key: &Key, resource_version: Option<&str>, can_record_event: bool) -> Report {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let version = resource_version.map(str::to_owned);
        match known.get_mut(key) {
            Some(entry) if entry.resource_version == version => {
                let event = can_record_event && !entry.evented;
                entry.evented |= event;
                Report { log: false, event }
            }
            Some(entry) => {
                *entry = Known {
                    resource_version: version,
                    evented: can_record_event,
                };
                Report {
                    log: true,
                    event: can_record_event,
                }
            }
            None => {
                known.insert(
                    key.clone(),
                    Known {
                        resource_version: version,
                        evented: can_record_event,
                    },
                );
                self.kind_gauge(&key.kind).inc();
                Report {
                    log: true,
                    event: can_record_event,
                }
            }
        }
    }

    /// The object is decodable again, or gone.
    fn resolved(&self, key: &Key) {
        let removed = self
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        if removed.is_some() {
            self.kind_gauge(&key.kind).dec();
        }
    }

    fn kind_gauge(&self, kind: &str) -> Gauge {
        self.gauge
            .get_or_create(&KindLabel { kind: kind.into() })
            .clone()
    }
}

/// The reporting of one watcher: feed it every event of the watch stream.
pub struct WatchReport {
    objects: Arc<Undecodables>,
    recorder: Option<Recorder>,
    /// Undecodable objects this watcher saw last.
    held: HashSet<Key>,
    /// Undecodable objects seen since a relist began.
    relisted: Option<HashSet<Key>>,
}

impl WatchReport {
    /// Reports into the process's bookkeeping; Events are recorded through `client`
    /// when given (processes whose account may not create Events pass None).
    pub fn new(client: Option<Client>) -> Self {
        Self::with(
            Undecodables::process(),
            client.map(super::engine_metrics::recorder),
        )
    }

    fn with(objects: Arc<Undecodables>, recorder: Option<Recorder>) -> Self {
        WatchReport {
            objects,
            recorder,
            held: HashSet::new(),
            relisted: None,
        }
    }

    pub fn observe<K>(&mut self, event: &Result<watcher::Event<Lenient<K>>, watcher::Error>)
    where
        K: Resource<DynamicType = ()> + Clone,
    {
        match event {
            Ok(watcher::Event::Init) => self.relisted = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(object) | watcher::Event::Apply(object)) => {
                self.apply(object)
            }
            Ok(watcher::Event::Delete(object)) => self.forget(key_of(object)),
            Ok(watcher::Event::InitDone) => {
                // Objects deleted or fixed while the watch was down get no event of their own.
                if let Some(seen) = self.relisted.take() {
                    let gone: Vec<Key> = self.held.difference(&seen).cloned().collect();
                    for key in gone {
                        self.forget(key);
                    }
                }
            }
            Err(_) => {}
        }
    }

    fn apply<K: Resource<DynamicType = ()> + Clone>(&mut self, object: &Lenient<K>) {
        let Some(failure) = object.undecodable() else {
            // Nearly every event: touch the shared registry only when this watcher has
            // reported something that may now be fixed.
            if !self.held.is_empty() {
                self.forget(key_of(object));
            }
            return;
        };
        let key = key_of(object);
        if let Some(seen) = &mut self.relisted {
            seen.insert(key.clone());
        }
        self.held.insert(key.clone());
        let version = object.meta().resource_version.as_deref();
        let report = self.objects.seen(&key, version, self.recorder.is_some());
        if report.log {
            tracing::warn!(
                kind = %key.kind,
                namespace = key.namespace.as_deref().unwrap_or_default(),
                name = %key.name,
                resource_version = version.unwrap_or_default(),
                error = %failure.error,
                "object cannot be decoded; ignoring it until it changes"
            );
        }
        if let (true, Some(recorder)) = (report.event, &self.recorder) {
            let (recorder, reference) = (recorder.clone(), object.object_ref(&()));
            let event = undecodable_event(&key.kind, failure);
            tokio::spawn(async move {
                if let Err(err) = recorder.publish(&event, &reference).await {
                    tracing::debug!(error = %err, "could not record an Undecodable Event");
                }
            });
        }
    }

    fn forget(&mut self, key: Key) {
        self.held.remove(&key);
        self.objects.resolved(&key);
    }
}

/// Polls a watch stream until `shutdown` (the store it fills needs that), reporting its
/// undecodable objects (Events through `client` when given); `each` sees every event.
pub fn spawn_watch<K>(
    events: impl Stream<Item = Result<watcher::Event<Lenient<K>>, watcher::Error>> + Send + 'static,
    client: Option<Client>,
    shutdown: CancellationToken,
    mut each: impl FnMut(&Result<watcher::Event<Lenient<K>>, watcher::Error>) + Send + 'static,
) where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let mut report = WatchReport::new(client);
    tokio::spawn(async move {
        let drain = events.for_each(|event| {
            report.observe(&event);
            each(&event);
            futures::future::ready(())
        });
        tokio::select! {
            _ = drain => {},
            _ = shutdown.cancelled() => {},
        }
    });
}

fn key_of<K: Resource<DynamicType = ()> + Clone>(object: &Lenient<K>) -> Key {
    let meta = object.meta();
    Key {
        kind: Lenient::<K>::kind(&()).into_owned(),
        namespace: meta.namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

fn undecodable_event(kind: &str, failure: &Undecodable) -> Event {
    Event {
        type_: EventType::Warning,
        reason: EVENT_REASON.into(),
        note: Some(cap_to(
            format!(
                "this {kind} cannot be decoded, so Flowline ignores it until it is changed: {}",
                failure.error
            ),
            MAX_EVENT_NOTE_BYTES,
        )),
        action: "Decode".into(),
        secondary: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowline_core::crd::Run;

    fn run(name: &str, version: &str, decodable: bool) -> Lenient<Run> {
        let payload = if decodable {
            "{}".to_string()
        } else {
            format!("{}{}", "[".repeat(200), "]".repeat(200))
        };
        Lenient::from_json(&format!(
            r#"{{"apiVersion":"flowline.io/v1","kind":"Run",
                "metadata":{{"name":"{name}","namespace":"n","resourceVersion":"{version}"}},
                "spec":{{"workflowRef":"wf","payload":{payload}}}}}"#
        ))
    }

    fn feed(report: &mut WatchReport, event: watcher::Event<Lenient<Run>>) {
        report.observe(&Ok(event));
    }

    #[test]
    fn each_version_is_reported_once_and_counted_once_across_watchers() {
        let objects = Arc::new(Undecodables::default());
        let mut api = WatchReport::with(objects.clone(), None);
        let mut worker = WatchReport::with(objects.clone(), None);
        let key = key_of(&run("bad", "1", false));
        assert!(objects.seen(&key, Some("1"), false).log);
        assert!(!objects.seen(&key, Some("1"), false).log, "same version");
        assert!(objects.seen(&key, Some("2"), false).log, "new version");
        objects.resolved(&key);

        feed(&mut api, watcher::Event::Apply(run("bad", "1", false)));
        feed(&mut worker, watcher::Event::Apply(run("bad", "1", false)));
        feed(&mut api, watcher::Event::Apply(run("good", "1", true)));
        assert_eq!(objects.count("Run"), 1);
        // Fixed: decodable again.
        feed(&mut worker, watcher::Event::Apply(run("bad", "2", true)));
        assert_eq!(objects.count("Run"), 0);
        feed(&mut api, watcher::Event::Apply(run("bad", "3", false)));
        feed(&mut api, watcher::Event::Delete(run("bad", "3", false)));
        assert_eq!(objects.count("Run"), 0);
    }

    #[test]
    fn a_relist_forgets_objects_deleted_meanwhile() {
        let objects = Arc::new(Undecodables::default());
        let mut report = WatchReport::with(objects.clone(), None);
        feed(&mut report, watcher::Event::Apply(run("gone", "1", false)));
        feed(&mut report, watcher::Event::Apply(run("stays", "1", false)));
        assert_eq!(objects.count("Run"), 2);
        feed(&mut report, watcher::Event::Init);
        feed(
            &mut report,
            watcher::Event::InitApply(run("stays", "1", false)),
        );
        feed(&mut report, watcher::Event::InitDone);
        assert_eq!(objects.count("Run"), 1);
    }

    #[test]
    fn an_event_is_recorded_once_per_version_even_after_a_log_only_watcher() {
        let objects = Arc::new(Undecodables::default());
        let key = key_of(&run("bad", "1", false));
        assert_eq!(
            objects.seen(&key, Some("1"), false),
            Report {
                log: true,
                event: false
            },
            "the API's caches record no Events"
        );
        assert_eq!(
            objects.seen(&key, Some("1"), true),
            Report {
                log: false,
                event: true
            },
            "the operator's watcher still does"
        );
        assert_eq!(
            objects.seen(&key, Some("1"), true),
            Report {
                log: false,
                event: false
            }
        );
    }

    #[test]
    fn the_event_note_fits_what_kubernetes_accepts() {
        let failure = Undecodable {
            metadata: Default::default(),
            error: "x".repeat(flowline_core::limits::MAX_ERROR_BYTES),
        };
        let note = undecodable_event("Run", &failure).note.unwrap();
        assert!(note.len() <= MAX_EVENT_NOTE_BYTES, "{}", note.len());
        assert!(note.starts_with("this Run cannot be decoded"));
    }
}
