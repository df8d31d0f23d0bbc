//! One watch of a kind shared by several consumers of the same process: one LIST and
//! WATCH against the API server, one decoded and compacted copy of each object in one
//! store, and every watch event shown to each consumer.
//!
//! The operator's run controller, workflow controller and delivery worker each read
//! every Run of a namespace. With a watch each, a process held three copies of every
//! Run (history included), listed every Run three times at start-up and decoded each
//! change three times. Shared, it holds one copy, compacted to what the three together
//! read (see `controller::run_cache`).
//!
//! A consumer subscribes with an observer that is called, inside the watch's task, for
//! every event after the store has applied it: whatever an observer is told, a read of
//! the store already shows. Called in order, before the next event is read, so a
//! consumer that must act at the moment a list begins (the delivery worker's mark of
//! events not yet seen) does, before the list's first request is sent.
//!
//! A consumer that subscribes after the watch has begun its first list missed part of
//! the events, so the watch lists again: every consumer sees a re-list, which each
//! already handles (the API server forces one whenever a watch falls too far behind).
//! This happens when a replica gains the leader's shard later than its first one.

use std::sync::{Arc, Mutex, MutexGuard};

use futures::{Stream, StreamExt};
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::lenient::{self, DecodedStore, Lenient, Watched};

/// One watch event as the observers see it (errors included, for their logs).
pub type Observed<K> = Result<watcher::Event<Lenient<K>>, watcher::Error>;

type Observer<K> = Box<dyn FnMut(&Observed<K>) + Send>;

/// A watch shared by the consumers of one process (see the module docs).
pub struct SharedWatch<K: Watched> {
    store: Store<Lenient<K>>,
    /// True from the end of the first list. A `Store`'s own readiness wakes only the
    /// last of several tasks waiting on it (kube-runtime 5 keeps one waker), and a
    /// shared store has several.
    ready: watch::Receiver<bool>,
    subscribers: Arc<Subscribers<K>>,
}

impl<K: Watched> Clone for SharedWatch<K> {
    fn clone(&self) -> Self {
        SharedWatch {
            store: self.store.clone(),
            ready: self.ready.clone(),
            subscribers: self.subscribers.clone(),
        }
    }
}

struct Subscribers<K> {
    inner: Mutex<Inner<K>>,
    /// Lets the watch's task send its first request ([`SharedWatch::begin`]).
    begin: Notify,
    /// Wakes the watch's task when a late subscriber needs a list.
    relist: Notify,
}

struct Inner<K> {
    observers: Vec<Observer<K>>,
    /// Late observers, shown events from the next list on.
    waiting: Vec<Observer<K>>,
    /// The watch has shown its first event: an observer added now missed some.
    started: bool,
}

impl<K> Subscribers<K> {
    fn lock(&self) -> MutexGuard<'_, Inner<K>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<K: Watched> SharedWatch<K> {
    /// Prepares a watch of `api` that runs from [`SharedWatch::begin`] until `shutdown`:
    /// the consumers that start with it subscribe in between, so one list serves them
    /// all. Each decoded object is kept as `compact` leaves it. `before_store` sees every
    /// event before the store applies it (an index kept beside the store then never lags
    /// it: whatever the store holds, the index has seen).
    pub fn start(
        api: Api<Lenient<K>>,
        config: watcher::Config,
        compact: fn(&mut K),
        mut before_store: impl FnMut(&watcher::Event<Lenient<K>>) + Send + 'static,
        shutdown: CancellationToken,
    ) -> Self {
        let (store, mut writer) = reflector::store();
        let (ready_tx, ready) = watch::channel(false);
        let subscribers = Arc::new(Subscribers {
            inner: Mutex::new(Inner {
                observers: Vec::new(),
                waiting: Vec::new(),
                started: false,
            }),
            begin: Notify::new(),
            relist: Notify::new(),
        });
        let shared = subscribers.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = shared.begin.notified() => {}
            }
            loop {
                // A new watcher begins with a list: the late observers' first, a
                // re-list for the store and the observers already there.
                {
                    let mut inner = shared.lock();
                    let waiting = std::mem::take(&mut inner.waiting);
                    inner.observers.extend(waiting);
                }
                let mut events = lenient::compact_watch(api.clone(), config.clone(), compact)
                    .default_backoff()
                    .boxed();
                loop {
                    let next = tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = shared.relist.notified() => break,
                        next = events.next() => next,
                    };
                    let Some(event) = next else { return };
                    if let Ok(event) = &event {
                        before_store(event);
                        writer.apply_watcher_event(event);
                        if matches!(event, watcher::Event::InitDone) {
                            ready_tx.send_replace(true);
                        }
                    }
                    let mut inner = shared.lock();
                    inner.started = true;
                    for observe in &mut inner.observers {
                        observe(&event);
                    }
                }
            }
        });
        SharedWatch {
            store,
            ready,
            subscribers,
        }
    }

    /// Sends the watch's first request (once; later calls do nothing).
    pub fn begin(&self) {
        // A stored permit: the task may not be waiting yet.
        self.subscribers.begin.notify_one();
    }

    /// Shows every event from now on to `observe`, starting with a list: the first one
    /// if it has not begun yet, else a new one (see the module docs).
    pub fn subscribe(&self, observe: impl FnMut(&Observed<K>) + Send + 'static) {
        let mut inner = self.subscribers.lock();
        if inner.started {
            inner.waiting.push(Box::new(observe));
            // Kept if the task is busy with an event: it lists again at its next look.
            self.subscribers.relist.notify_one();
        } else {
            inner.observers.push(Box::new(observe));
        }
    }

    /// The events `pick` selects, as a stream, subscribed now ([`SharedWatch::subscribe`]).
    pub fn select<T, P>(&self, mut pick: P) -> impl Stream<Item = T> + Send + 'static + use<K, T, P>
    where
        T: Send + 'static,
        P: FnMut(&Observed<K>) -> Option<T> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.subscribe(move |event| {
            if let Some(item) = pick(event) {
                // The consumer stopped: only at shutdown.
                let _ = tx.send(item);
            }
        });
        futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })
    }

    /// The store every event is applied to, undecodable objects included (what a
    /// `kube::runtime::Controller` is built on).
    pub fn store(&self) -> Store<Lenient<K>> {
        self.store.clone()
    }

    /// The store, showing decoded objects only; its readiness is the watch's.
    pub fn decoded(&self) -> DecodedStore<K> {
        DecodedStore::shared(self.store.clone(), self.ready.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock_api;
    use flowline_core::crd::Run;
    use serde_json::json;
    use std::time::Duration;

    fn run(name: &str) -> serde_json::Value {
        json!({"apiVersion": "flowline.io/v1", "kind": "Run",
               "metadata": {"name": name, "namespace": "n", "uid": format!("u-{name}"),
                            "resourceVersion": "5"},
               "spec": {"workflowRef": "wf", "payload": {"big": "x"}}})
    }

    /// What an observer saw, as short names: `init`, `+name`, `done`, `-name`.
    type Seen = Arc<Mutex<Vec<String>>>;

    fn recorder() -> (Seen, impl FnMut(&Observed<Run>) + Send + 'static) {
        let seen: Seen = Arc::default();
        let log = seen.clone();
        let observe = move |event: &Observed<Run>| {
            use kube::ResourceExt;
            let entry = match event {
                Ok(watcher::Event::Init) => "init".to_string(),
                Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => {
                    format!("+{}", o.name_any())
                }
                Ok(watcher::Event::InitDone) => "done".to_string(),
                Ok(watcher::Event::Delete(o)) => format!("-{}", o.name_any()),
                Err(_) => return,
            };
            log.lock().unwrap().push(entry);
        };
        (seen, observe)
    }

    async fn until(what: &str, check: impl Fn() -> bool) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !check() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    }

    #[tokio::test]
    async fn one_list_feeds_the_store_and_every_observer_and_a_late_one_gets_a_list() {
        // Lists answer two runs; watches end at once (the watcher then watches again).
        let (client, log) = mock_api::client(|seen| {
            if seen.query.contains("watch=true") {
                (200, json!({}))
            } else {
                (
                    200,
                    json!({"apiVersion": "flowline.io/v1", "kind": "RunList",
                       "metadata": {"resourceVersion": "9"},
                       "items": [run("a"), run("b")]}),
                )
            }
        });
        let lists = move || {
            mock_api::seen(&log)
                .iter()
                .filter(|s| s.method == "GET" && !s.query.contains("watch=true"))
                .count()
        };
        let shutdown = CancellationToken::new();
        let compacted = |run: &mut Run| run.spec.payload = None;
        let before: Arc<Mutex<usize>> = Arc::default();
        let counted = before.clone();
        let watch = SharedWatch::<Run>::start(
            Api::namespaced(client, "n"),
            watcher::Config::default(),
            compacted,
            move |_| *counted.lock().unwrap() += 1,
            shutdown.clone(),
        );
        let (first, observe) = recorder();
        watch.subscribe(observe);
        let (second, observe) = recorder();
        watch.subscribe(observe);
        // Several tasks wait for the store at once (the workflow controller and the
        // delivery worker do): every one of them is woken.
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let store = watch.decoded();
                tokio::spawn(async move { store.wait_until_ready().await.is_ok() })
            })
            .collect();
        tokio::task::yield_now().await;
        assert_eq!(lists(), 0, "nothing is read before begin");
        watch.begin();
        for waiter in waiters {
            let ready = tokio::time::timeout(Duration::from_secs(10), waiter).await;
            assert!(matches!(ready, Ok(Ok(true))), "a waiter was not woken");
        }
        until("the first list", || first.lock().unwrap().len() >= 4).await;
        assert_eq!(first.lock().unwrap()[..4], ["init", "+a", "+b", "done"]);
        assert_eq!(second.lock().unwrap()[..4], ["init", "+a", "+b", "done"]);
        assert_eq!(lists(), 1, "both observers were fed by one list");
        assert!(*before.lock().unwrap() >= 4);
        let cached = watch.decoded().state();
        assert_eq!(cached.len(), 2);
        assert!(
            cached.iter().all(|r| r.spec.payload.is_none()),
            "the store keeps what compact leaves"
        );

        // Subscribed after the first list: the watch lists again, for everyone.
        let (late, observe) = recorder();
        watch.subscribe(observe);
        until("the late observer's list", || {
            late.lock().unwrap().len() >= 4
        })
        .await;
        assert_eq!(late.lock().unwrap()[..4], ["init", "+a", "+b", "done"]);
        assert_eq!(lists(), 2);
        until("the re-list reaching the first observer", || {
            first
                .lock()
                .unwrap()
                .iter()
                .filter(|e| *e == "init")
                .count()
                == 2
        })
        .await;
        assert_eq!(watch.decoded().state().len(), 2);
        shutdown.cancel();
    }
}
