//! Watch caches: every read of the API is served from these reflectors, never from
//! a round trip to the API server.
//!
//! Objects are decoded one at a time ([`Lenient`]): one that cannot be decoded (a value
//! nested too deep, a field of the wrong type, stored with kubectl) is absent from the
//! caches, and so from lists and reads, and is reported; everything else is served.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::plumbing::idempotency;
use flowline_core::crd::{ApiKey, EventDetail, FlowlineEvent, Run, Webhook, Workflow};
use flowline_kube::lenient::{self, DecodedStore, Lenient};
use flowline_kube::name_index::{self, SharedNameIndex};
use flowline_kube::{WatchScope, scoped_api};
use flowline_telemetry::undecodable;

/// Longest a write waits for its own result to reach the cache.
const READ_YOUR_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// One kind's watch cache over the namespaces served: a single reflector for the
/// whole cluster, or one per listed namespace (what namespaced RBAC allows). Offers
/// the `Store` methods the API uses, and reads by namespace through each reflector's
/// index (`name_index`), so one account's list costs what that account holds.
pub struct ScopedStore<K: Resource + Clone + 'static>
where
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    parts: Arc<[DecodedStore<K>]>,
    /// Each part's index, fed by that part's own watch.
    indexes: Arc<[SharedNameIndex<K>]>,
}

impl<K: Resource + Clone + 'static> Clone for ScopedStore<K>
where
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    fn clone(&self) -> Self {
        ScopedStore {
            parts: self.parts.clone(),
            indexes: self.indexes.clone(),
        }
    }
}

impl<K> ScopedStore<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    /// The object `name` of `namespace` (None: a cluster-scoped one).
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        self.get_by(&lenient::store_key(namespace, name))
    }

    /// The object under this store key (one kept from an earlier lookup).
    pub fn get_by(&self, key: &ObjectRef<Lenient<K>>) -> Option<Arc<K>> {
        self.parts.iter().find_map(|p| p.get_by(key))
    }

    /// A version of everything the cache holds: it changes whenever an object does.
    /// None while a change is on its way into the cache. A read of the cache between
    /// two equal versions saw one state of it.
    pub fn version(&self) -> Option<u64> {
        let mut sum = 0u64;
        for index in self.indexes.iter() {
            let changes = index.changes();
            if changes % 2 == 1 {
                return None;
            }
            sum = sum.wrapping_add(changes);
        }
        Some(sum)
    }

    /// How many objects the cache holds, without copying them.
    pub fn len(&self) -> usize {
        self.parts.iter().map(DecodedStore::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every object of `namespace`: only that namespace's objects are read.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.indexes
            .iter()
            .flat_map(|index| index.in_namespace(namespace, |name| self.get(Some(namespace), name)))
            .collect()
    }

    /// The objects of `namespace` filed under `group` by the store's grouping (a
    /// workflow's runs): only those are read.
    pub fn filed_under(&self, namespace: &str, group: &str) -> Vec<Arc<K>> {
        self.indexes
            .iter()
            .flat_map(|index| {
                index.filed_under(namespace, group, |name| self.get(Some(namespace), name))
            })
            .collect()
    }

    /// The objects named `name`, in whichever namespaces served hold one: only those
    /// are read. Empty unless the store's index keeps names' namespaces (workflows').
    pub fn named(&self, name: &str) -> Vec<Arc<K>> {
        self.indexes
            .iter()
            .flat_map(|index| index.named(name, |namespace, name| self.get(Some(namespace), name)))
            .collect()
    }

    /// Every object of every namespace served (a pass over the whole cache).
    pub fn state(&self) -> Vec<Arc<K>> {
        match &*self.parts {
            [one] => one.state(),
            parts => parts.iter().flat_map(DecodedStore::state).collect(),
        }
    }

    pub async fn wait_until_ready(&self) -> Result<(), lenient::WriterDropped> {
        for part in self.parts.iter() {
            part.wait_until_ready().await?;
        }
        Ok(())
    }
}

/// Parts, each with the index its watch feeds.
impl<K: Resource + Clone + 'static> From<Vec<(DecodedStore<K>, SharedNameIndex<K>)>>
    for ScopedStore<K>
where
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    fn from(parts: Vec<(DecodedStore<K>, SharedNameIndex<K>)>) -> Self {
        let (parts, indexes): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
        ScopedStore {
            parts: parts.into(),
            indexes: indexes.into(),
        }
    }
}

/// One reflector per watch, each with its index (made by `new_index`) fed from its
/// own events.
fn spawn_scoped<K>(
    apis: Vec<(Api<Lenient<K>>, watcher::Config)>,
    compact: fn(&mut K),
    new_index: fn() -> SharedNameIndex<K>,
    shutdown: &CancellationToken,
) -> ScopedStore<K>
where
    K: flowline_kube::lenient::Watched,
{
    apis.into_iter()
        .map(|(api, config)| {
            let index = new_index();
            let (writer, settled) = (index.clone(), index.clone());
            let store = spawn_observed(
                api,
                config,
                compact,
                move |event| writer.apply(event),
                move || settled.settled(),
                shutdown.clone(),
            );
            (store, index)
        })
        .collect::<Vec<_>>()
        .into()
}

/// Keeps nothing out.
fn whole<K>(_: &mut K) {}

/// An index by namespace alone.
fn namespace_index<K: Resource + Clone>() -> SharedNameIndex<K> {
    SharedNameIndex::new(name_index::by_namespace)
}

/// The run cache holds summaries: what run lists, their filters, idempotency lookups
/// and event lookups read (metadata, the spec's references and key, phase and times,
/// event ids). A run's payload, pinned steps, step records and errors are read from
/// the API server by `GET /v1/runs/{id}`, so the cache stays small however large runs
/// and history grow (docs/api.md, "What the API caches").
/// On a cached run summary: its `approval` steps waiting for a decision, comma-separated.
pub const AWAITING_DECISION: &str = "flowline.io/awaiting-decision";

/// The ids of `run`'s approval steps waiting for a decision: from its step records, or,
/// in a cached summary (which has none), as [`summarize_run`] kept them.
pub fn awaiting_decision(run: &Run) -> Vec<String> {
    if run.status.as_ref().is_some_and(|s| !s.steps.is_empty()) {
        return run.awaiting_decision();
    }
    run.annotations()
        .get(AWAITING_DECISION)
        .map(|ids| ids.split(',').map(String::from).collect())
        .unwrap_or_default()
}

/// On a cached run summary: the generation of the workflow version it executes (the
/// pinned copy itself is dropped).
pub const WORKFLOW_GENERATION: &str = "flowline.io/workflow-generation";

/// The workflow generation `run` executes, from a whole run or a cached summary.
pub fn workflow_generation(run: &Run) -> Option<i64> {
    run.workflow_generation().or_else(|| {
        run.annotations()
            .get(WORKFLOW_GENERATION)
            .and_then(|g| g.parse().ok())
    })
}

/// [`summarize_run`], for the tests of what lists read from summaries.
#[cfg(test)]
pub(crate) fn summarize_for_tests(run: &mut Run) {
    summarize_run(run);
}

fn summarize_run(run: &mut Run) {
    // A kubectl-applied run's idempotency digest is that of its payload: keep the
    // digest, not the payload.
    if run.spec.idempotency_key.is_some() {
        let digest = idempotency::digest_of(run);
        run.annotations_mut()
            .insert(idempotency::DIGEST_ANNOTATION.into(), digest);
    }
    // What its step records say of approvals (the records are dropped): lists filter
    // on it.
    let awaiting = run.awaiting_decision();
    run.annotations_mut().remove(AWAITING_DECISION);
    if !awaiting.is_empty() {
        run.annotations_mut()
            .insert(AWAITING_DECISION.into(), awaiting.join(","));
    }
    if let Some(generation) = run.spec.workflow.as_ref().map(|w| w.generation) {
        run.annotations_mut()
            .insert(WORKFLOW_GENERATION.into(), generation.to_string());
    }
    // What tells whether a run not recorded `queued` yet waits (`runs::waiting`).
    let flow_control = flowline_core::admission::summarize(run);
    run.drop_details(EventDetail::IdentityOnly);
    run.spec.workflow = flow_control;
    // Callback tokens are credentials: the cache keeps their digests, which is all a
    // call's look-up compares.
    if let Some(status) = run.status.as_mut() {
        for t in &mut status.callback_tokens {
            t.token = flowline_core::engine::callback::digest(&t.token);
        }
    }
}

/// The event cache holds everything but payloads (up to 1 MiB each, kept for the
/// operator's retention): `GET /v1/events/{id}` reads the payload from the API server.
fn summarize_event(event: &mut FlowlineEvent) {
    event.spec.payload = None;
}

#[derive(Clone)]
pub struct Caches {
    pub workflows: ScopedStore<Workflow>,
    pub runs: ScopedStore<Run>,
    pub webhooks: ScopedStore<Webhook>,
    /// Inbound events (`/v1/events`), as summaries ([`summarize_event`]).
    pub events: ScopedStore<FlowlineEvent>,
    pub api_keys: ScopedStore<ApiKey>,
    pub namespaces: ScopedStore<PartialObjectMeta<Namespace>>,
    synced: Arc<AtomicBool>,
}

/// A reflector whose events are shown to `observe` before its store applies them
/// (see [`lenient::observed_reflector`]), and after each of which `settled` is called
/// once the store has applied it.
fn spawn_observed<K>(
    api: Api<Lenient<K>>,
    config: watcher::Config,
    compact: fn(&mut K),
    observe: impl FnMut(&watcher::Event<Lenient<K>>) + Send + 'static,
    mut settled: impl FnMut() + Send + 'static,
    shutdown: CancellationToken,
) -> DecodedStore<K>
where
    K: flowline_kube::lenient::Watched,
{
    let (reader, events) = lenient::observed_reflector(api, config, compact, observe);
    // The API's account records no Events: undecodable objects are logged and counted.
    undecodable::spawn_watch(events, None, shutdown, move |event| match event {
        Ok(_) => settled(),
        Err(err) => {
            tracing::warn!(error = %err, kind = K::kind(&()).as_ref(), "watch error; retrying");
        }
    });
    reader
}

impl Caches {
    /// Starts the reflectors over `scope`; `is_synced` turns true once every one has
    /// listed.
    pub fn start(client: Client, scope: &WatchScope, shutdown: CancellationToken) -> Caches {
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
            // Found by name across namespaces too: an inbound hook names only the
            // workflow.
            workflows: spawn_scoped(
                per_namespace(&client, &each, &plain),
                whole,
                || SharedNameIndex::with_homes(name_index::by_namespace),
                &shutdown,
            ),
            runs: spawn_scoped(
                per_namespace(&client, &each, &plain),
                summarize_run,
                || SharedNameIndex::new(name_index::by_workflow),
                &shutdown,
            ),
            webhooks: spawn_scoped(
                per_namespace(&client, &each, &plain),
                whole,
                namespace_index,
                &shutdown,
            ),
            events: spawn_scoped(
                per_namespace(&client, &each, &plain),
                summarize_event,
                namespace_index,
                &shutdown,
            ),
            api_keys: spawn_scoped(
                per_namespace(&client, &each, &plain),
                whole,
                namespace_index,
                &shutdown,
            ),
            // Metadata only: the rate limiter needs just the plan annotations. Cluster-
            // scoped, so its index files nothing.
            namespaces: spawn_scoped(namespace_watches, whole, namespace_index, &shutdown),
            synced: Arc::new(AtomicBool::new(false)),
        };
        let waiting = caches.clone();
        tokio::spawn(async move {
            let all = async {
                waiting.workflows.wait_until_ready().await?;
                waiting.runs.wait_until_ready().await?;
                waiting.webhooks.wait_until_ready().await?;
                waiting.events.wait_until_ready().await?;
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

    /// The cached runs of one workflow, in no particular order: only that workflow's
    /// runs are read (through the index), however many the cache holds.
    pub fn runs_of_workflow(&self, namespace: &str, workflow: &str) -> Vec<Arc<Run>> {
        self.runs.filed_under(namespace, workflow)
    }
}

#[cfg(test)]
impl Caches {
    /// Caches that have listed `objects` and nothing else, synced: the API's state for in-process tests
    /// (`crate::testing`), with no watch behind it. Each store keeps its objects as
    /// the watch would (runs as summaries), and its index is fed the same events.
    pub(crate) fn listed(
        workflows: Vec<Workflow>,
        runs: Vec<Run>,
        webhooks: Vec<Webhook>,
        events: Vec<FlowlineEvent>,
        api_keys: Vec<ApiKey>,
        namespaces: Vec<PartialObjectMeta<Namespace>>,
    ) -> Caches {
        fn listed<K: flowline_kube::lenient::Watched>(
            objects: Vec<K>,
            compact: fn(&mut K),
            index: SharedNameIndex<K>,
        ) -> ScopedStore<K> {
            let (reader, mut writer) = kube::runtime::reflector::store();
            let events = std::iter::once(watcher::Event::Init)
                .chain(objects.into_iter().map(|mut object| {
                    compact(&mut object);
                    watcher::Event::InitApply(Lenient::Decoded(Arc::new(object)))
                }))
                .chain(std::iter::once(watcher::Event::InitDone));
            for event in events {
                index.apply(&event);
                writer.apply_watcher_event(&event);
            }
            vec![(DecodedStore::from(reader), index)].into()
        }
        Caches {
            workflows: listed(
                workflows,
                whole,
                SharedNameIndex::with_homes(name_index::by_namespace),
            ),
            runs: listed(
                runs,
                summarize_run,
                SharedNameIndex::new(name_index::by_workflow),
            ),
            webhooks: listed(webhooks, whole, namespace_index()),
            events: listed(events, summarize_event, namespace_index()),
            api_keys: listed(api_keys, whole, namespace_index()),
            namespaces: listed(namespaces, whole, namespace_index()),
            synced: Arc::new(AtomicBool::new(true)),
        }
    }
}

/// Looks up one object of a namespace in a store.
pub fn get<K>(store: &ScopedStore<K>, namespace: &str, name: &str) -> Option<Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    store.get(Some(namespace), name)
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
    fn the_run_cache_keeps_a_summary() {
        let mut run: Run = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n", "labels": {"flowline.io/workflow": "wf"}},
            "spec": {"workflowRef": "wf", "idempotencyKey": "k-1", "payload": {"big": "x".repeat(1000)},
                "workflow": {"generation": 3, "name": "W", "steps": [
                {"id": "a", "name": "Fetch", "action": "http.request",
                 "with": {"url": "https://example.com", "body": "x".repeat(1000)}}]}},
            "status": {"phase": "failed", "startedAt": "2026-11-23T08:00:00Z", "error": "boom",
                "steps": [{"stepId": "a", "name": "Fetch", "status": "failed", "attempts": 1,
                           "output": {"body": "x".repeat(1000)}, "error": "boom"}],
                "pendingEvents": [{"id": "evt_1", "kind": "run.failed",
                    "timestamp": "2026-11-23T08:00:01Z", "data": {"error": "boom"}}],
                "conditions": [{"type": "Succeeded", "status": "False",
                "reason": "Failed", "lastTransitionTime": "2026-11-23T08:00:00Z"}]},
        }))
        .unwrap();
        let digest = idempotency::digest_of(&run);
        let listed = crate::runs::views::RunListItem::from(&run);
        summarize_run(&mut run);
        let summary = crate::runs::views::RunListItem::from(&run);
        assert_eq!(
            serde_json::to_value(&summary).unwrap(),
            serde_json::to_value(&listed).unwrap(),
            "a list shows the same"
        );
        assert_eq!(
            idempotency::digest_of(&run),
            digest,
            "same idempotency digest"
        );
        assert!(run.spec.payload.is_none() && run.spec.workflow.is_none());
        let status = run.status.as_ref().unwrap();
        assert!(status.steps.is_empty() && status.error.is_none() && status.conditions.is_empty());
        assert_eq!(
            status.pending_events[0].id, "evt_1",
            "event lookups still find it"
        );
        assert!(serde_json::to_vec(&run).unwrap().len() < 700);
    }
}
