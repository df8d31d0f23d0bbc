//! Watch caches: every read of the API is served from these reflectors, never from
//! a round trip to the API server.
//!
//! Objects are decoded one at a time ([`Lenient`]): one that cannot be decoded (a value
//! nested too deep, a field of the wrong type, stored with kubectl) is absent from the
//! caches, and so from lists and reads, and is reported; everything else is served.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::auth::SECRET_TYPE;
use crate::crd::{Run, Webhook, Workflow};
use crate::kubeutil::lenient::{self, DecodedStore, Lenient};
use crate::kubeutil::{WatchScope, scoped_api};
use crate::telemetry::undecodable;

/// Longest a write waits for its own result to reach the cache.
const READ_YOUR_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// One kind's watch cache over the namespaces served: a single reflector for the
/// whole cluster, or one per listed namespace (what namespaced RBAC allows). Offers
/// the `Store` methods the API uses.
pub struct ScopedStore<K: Resource + Clone + 'static>
where
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    parts: Arc<[DecodedStore<K>]>,
}

impl<K: Resource + Clone + 'static> Clone for ScopedStore<K>
where
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    fn clone(&self) -> Self {
        ScopedStore {
            parts: self.parts.clone(),
        }
    }
}

impl<K> ScopedStore<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        self.parts.iter().find_map(|p| p.get(key))
    }

    /// How many objects the cache holds, without copying them.
    pub fn len(&self) -> usize {
        self.parts.iter().map(DecodedStore::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn state(&self) -> Vec<Arc<K>> {
        match &*self.parts {
            [one] => one.state(),
            parts => parts.iter().flat_map(DecodedStore::state).collect(),
        }
    }

    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        for part in self.parts.iter() {
            part.wait_until_ready().await?;
        }
        Ok(())
    }
}

impl<K: Resource + Clone + 'static> From<Vec<DecodedStore<K>>> for ScopedStore<K>
where
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    fn from(parts: Vec<DecodedStore<K>>) -> Self {
        ScopedStore {
            parts: parts.into(),
        }
    }
}

fn spawn_scoped<K>(
    apis: Vec<(Api<Lenient<K>>, watcher::Config)>,
    compact: fn(&mut K),
    shutdown: &CancellationToken,
) -> ScopedStore<K>
where
    K: crate::kubeutil::lenient::Watched,
{
    ScopedStore {
        parts: apis
            .into_iter()
            .map(|(api, config)| spawn_reflector(api, config, compact, shutdown.clone()))
            .collect(),
    }
}

/// Keeps nothing out.
fn whole<K>(_: &mut K) {}

/// The API shows a run's pinned workflow version only as its generation and the steps'
/// ids, names and actions: the step definitions (`with`, `when`, retry, timeout) stay
/// in the API server, out of the cache. Nor does it serve the Kubernetes conditions
/// (they restate the phase and error for kubectl).
fn outline_run(run: &mut Run) {
    if let Some(status) = run.status.as_mut() {
        status.conditions = Vec::new();
    }
    if let Some(pinned) = run.spec.workflow.as_mut() {
        for step in &mut pinned.steps {
            step.with = None;
            step.when = None;
            step.retry = None;
            step.timeout_ms = None;
        }
    }
}

#[derive(Clone)]
pub struct Caches {
    pub workflows: ScopedStore<Workflow>,
    pub runs: ScopedStore<Run>,
    pub webhooks: ScopedStore<Webhook>,
    pub api_keys: ScopedStore<Secret>,
    /// Inbound secrets of webhook-triggered workflows (type `flowline.io/hook-secret`).
    pub hook_secrets: ScopedStore<Secret>,
    pub namespaces: ScopedStore<PartialObjectMeta<Namespace>>,
    synced: Arc<AtomicBool>,
}

fn spawn_reflector<K>(
    api: Api<Lenient<K>>,
    config: watcher::Config,
    compact: fn(&mut K),
    shutdown: CancellationToken,
) -> DecodedStore<K>
where
    K: crate::kubeutil::lenient::Watched,
{
    let (reader, events) = lenient::compact_reflector(api, config, compact);
    // The API's account records no Events: undecodable objects are logged and counted.
    undecodable::spawn_watch(events, None, shutdown, |event| {
        if let Err(err) = event {
            tracing::warn!(error = %err, kind = K::kind(&()).as_ref(), "watch error; retrying");
        }
    });
    reader
}

impl Caches {
    /// Starts the reflectors over `scope`; `is_synced` turns true once every one has
    /// listed.
    pub fn start(client: Client, scope: &WatchScope, shutdown: CancellationToken) -> Caches {
        let keys_config = watcher::Config::default().fields(&format!("type={SECRET_TYPE}"));
        let hook_config =
            watcher::Config::default().fields(&format!("type={}", super::hook_secret::SECRET_TYPE));
        let each = scope.each();
        fn per_namespace<K>(
            client: &Client,
            each: &[Option<String>],
            config: &watcher::Config,
        ) -> Vec<(Api<Lenient<K>>, watcher::Config)>
        where
            K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope> + Clone,
        {
            each.iter()
                .map(|ns| (scoped_api(client, ns.as_deref()), config.clone()))
                .collect()
        }
        let plain = watcher::Config::default();
        // Namespace objects are cluster-scoped: in a namespace list, watch each by name
        // (RBAC can grant exactly those with resourceNames).
        let namespace_watches = each
            .iter()
            .map(|ns| {
                let config = match ns {
                    Some(name) => {
                        watcher::Config::default().fields(&format!("metadata.name={name}"))
                    }
                    None => watcher::Config::default(),
                };
                (Api::all(client.clone()), config)
            })
            .collect();
        let caches = Caches {
            workflows: spawn_scoped(per_namespace(&client, &each, &plain), whole, &shutdown),
            runs: spawn_scoped(
                per_namespace(&client, &each, &plain),
                outline_run,
                &shutdown,
            ),
            webhooks: spawn_scoped(per_namespace(&client, &each, &plain), whole, &shutdown),
            api_keys: spawn_scoped(
                per_namespace(&client, &each, &keys_config),
                whole,
                &shutdown,
            ),
            hook_secrets: spawn_scoped(
                per_namespace(&client, &each, &hook_config),
                whole,
                &shutdown,
            ),
            // Metadata only: the rate limiter needs just the plan annotations.
            namespaces: spawn_scoped(namespace_watches, whole, &shutdown),
            synced: Arc::new(AtomicBool::new(false)),
        };
        let waiting = caches.clone();
        tokio::spawn(async move {
            let all = async {
                waiting.workflows.wait_until_ready().await?;
                waiting.runs.wait_until_ready().await?;
                waiting.webhooks.wait_until_ready().await?;
                waiting.api_keys.wait_until_ready().await?;
                waiting.hook_secrets.wait_until_ready().await?;
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
pub fn get<K>(store: &ScopedStore<K>, namespace: &str, name: &str) -> Option<Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    store.get(&ObjectRef::new(name).within(namespace))
}

/// Every object of a namespace.
pub fn in_namespace<K>(store: &ScopedStore<K>, namespace: &str) -> Vec<Arc<K>>
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
pub async fn await_write<K>(store: &ScopedStore<K>, written: &K)
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
pub async fn await_delete<K>(store: &ScopedStore<K>, namespace: &str, name: &str)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_run_cache_keeps_an_outline_of_the_pinned_steps_and_no_conditions() {
        let mut run: Run = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n"},
            "spec": {"workflowRef": "wf", "workflow": {"generation": 3, "name": "W", "steps": [
                {"id": "a", "name": "Fetch", "action": "http.request", "when": "true",
                 "timeoutMs": 5, "retry": {"maxAttempts": 2},
                 "with": {"url": "https://example.com", "body": "x".repeat(1000)}}]}},
            "status": {"phase": "running", "conditions": [{"type": "Succeeded", "status": "Unknown",
                "reason": "Running", "lastTransitionTime": "2026-11-23T08:00:00Z"}]},
        }))
        .unwrap();
        outline_run(&mut run);
        let pinned = run.spec.workflow.as_ref().unwrap();
        assert_eq!(pinned.generation, 3);
        let step = &pinned.steps[0];
        assert_eq!((step.id.as_str(), step.display_name()), ("a", "Fetch"));
        assert_eq!(step.action, crate::crd::Action::HttpRequest);
        assert!(step.with.is_none() && step.when.is_none());
        assert!(step.retry.is_none() && step.timeout_ms.is_none());
        assert!(run.status.unwrap().conditions.is_empty());
    }
}
