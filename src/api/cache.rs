//! Watch caches: every read of the API is served from these reflectors, never from
//! a round trip to the API server.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::auth::SECRET_TYPE;
use crate::crd::{Run, Webhook, Workflow};

/// Longest a write waits for its own result to reach the cache.
const READ_YOUR_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Caches {
    pub workflows: Store<Workflow>,
    pub runs: Store<Run>,
    pub webhooks: Store<Webhook>,
    pub api_keys: Store<Secret>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    synced: Arc<AtomicBool>,
}

fn spawn_reflector<K>(api: Api<K>, config: watcher::Config, shutdown: CancellationToken) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        let drain = stream.for_each(|event| {
            if let Err(err) = event {
                tracing::warn!(error = %err, kind = K::kind(&Default::default()).as_ref(), "watch error; retrying");
            }
            futures::future::ready(())
        });
        tokio::select! {
            _ = drain => {},
            _ = shutdown.cancelled() => {},
        }
    });
    reader
}

impl Caches {
    /// Starts the reflectors; `is_synced` turns true once every one has listed.
    pub fn start(client: Client, shutdown: CancellationToken) -> Caches {
        let keys_config = watcher::Config::default().fields(&format!("type={SECRET_TYPE}"));
        let caches = Caches {
            workflows: spawn_reflector(
                Api::all(client.clone()),
                Default::default(),
                shutdown.clone(),
            ),
            runs: spawn_reflector(
                Api::all(client.clone()),
                Default::default(),
                shutdown.clone(),
            ),
            webhooks: spawn_reflector(
                Api::all(client.clone()),
                Default::default(),
                shutdown.clone(),
            ),
            api_keys: spawn_reflector(Api::all(client.clone()), keys_config, shutdown.clone()),
            // Metadata only: the rate limiter needs just the plan annotations.
            namespaces: spawn_reflector(
                Api::all(client.clone()),
                Default::default(),
                shutdown.clone(),
            ),
            synced: Arc::new(AtomicBool::new(false)),
        };
        let waiting = caches.clone();
        tokio::spawn(async move {
            let all = async {
                waiting.workflows.wait_until_ready().await?;
                waiting.runs.wait_until_ready().await?;
                waiting.webhooks.wait_until_ready().await?;
                waiting.api_keys.wait_until_ready().await?;
                waiting.namespaces.wait_until_ready().await
            };
            if all.await.is_ok() {
                waiting.synced.store(true, Ordering::Release);
                tracing::info!("watch caches synced");
            }
        });
        caches
    }

    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}

/// Looks up one object of a namespace in a store.
pub fn get<K>(store: &Store<K>, namespace: &str, name: &str) -> Option<Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    store.get(&ObjectRef::new(name).within(namespace))
}

/// Every object of a namespace.
pub fn in_namespace<K>(store: &Store<K>, namespace: &str) -> Vec<Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    store
        .state()
        .into_iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
        .collect()
}

fn version(rv: Option<&str>) -> Option<u64> {
    rv.and_then(|v| v.parse().ok())
}

/// Waits (bounded) until the store holds `written` or something newer, so a client
/// that reads right after a write, on any connection, sees its write.
pub async fn await_write<K>(store: &Store<K>, written: &K)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (Some(ns), Some(target)) = (
        written.namespace(),
        version(written.resource_version().as_deref()),
    ) else {
        return;
    };
    let name = written.name_any();
    wait_until(|| {
        get(store, &ns, &name)
            .is_some_and(|o| version(o.resource_version().as_deref()) >= Some(target))
    })
    .await;
}

/// Waits (bounded) until the store no longer holds the object.
pub async fn await_delete<K>(store: &Store<K>, namespace: &str, name: &str)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    wait_until(|| get(store, namespace, name).is_none()).await;
}

async fn wait_until(mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + READ_YOUR_WRITE_TIMEOUT;
    while !done() {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                "write not visible in the watch cache after {READ_YOUR_WRITE_TIMEOUT:?}"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
