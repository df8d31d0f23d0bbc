//! Objects decoded one at a time, so that one object Flowline cannot decode is skipped
//! instead of failing the list (and so the watch) it arrives in.
//!
//! kubectl and GitOps can store anything the API server accepts, including values nested
//! deeper than serde_json's recursion limit (128 levels, counted from the start of the
//! document, so a list's own levels count too) or fields of the wrong type. Typed as
//! `Api<Workflow>`, one such object makes every LIST of its kind fail, and a watcher that
//! cannot list never becomes ready. Typed as `Api<Lenient<Workflow>>`, each object is first
//! captured as raw JSON text (serde_json skips over a value iteratively, without a depth
//! limit), then decoded on its own; what cannot be decoded keeps only its envelope (kind,
//! name, namespace, uid, resourceVersion, labels, owners) and the error.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// An object of kind `K` as read from the API server: decoded, or not decodable.
pub enum Lenient<K> {
    Decoded(Arc<K>),
    Undecodable(Arc<Undecodable>),
}

/// What is known of an object that could not be decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Undecodable {
    /// The envelope: identity, version, labels, annotations, owners (never managedFields,
    /// which mirror the object's own nesting).
    pub metadata: ObjectMeta,
    /// Why it could not be decoded (capped like every stored error).
    pub error: String,
}

impl<K> Lenient<K> {
    /// The decoded object, if it could be decoded.
    pub fn decoded(&self) -> Option<&Arc<K>> {
        match self {
            Lenient::Decoded(object) => Some(object),
            Lenient::Undecodable(_) => None,
        }
    }

    /// Why the object could not be decoded, if it could not.
    pub fn undecodable(&self) -> Option<&Undecodable> {
        match self {
            Lenient::Decoded(_) => None,
            Lenient::Undecodable(failure) => Some(failure),
        }
    }

    /// Decodes one object from its JSON text; never fails.
    pub fn from_json(text: &str) -> Self
    where
        K: DeserializeOwned,
    {
        match serde_json::from_str::<K>(text) {
            Ok(object) => Lenient::Decoded(Arc::new(object)),
            Err(err) => Lenient::Undecodable(Arc::new(Undecodable::from_json(text, &err))),
        }
    }
}

impl Undecodable {
    fn from_json(text: &str, err: &serde_json::Error) -> Self {
        // Fields other than the envelope's are skipped without being decoded, so this
        // succeeds for any nesting; only a malformed envelope (which the API server never
        // sends) leaves the metadata empty.
        let (metadata, envelope_error) = match serde_json::from_str::<Envelope>(text) {
            Ok(envelope) => (envelope.metadata.into(), None),
            Err(e) => (ObjectMeta::default(), Some(e)),
        };
        let error = match envelope_error {
            None => err.to_string(),
            Some(e) => format!("{err} (and its metadata cannot be read either: {e})"),
        };
        Undecodable {
            metadata,
            error: flowline_core::limits::cap_error(error),
        }
    }
}

/// The part of an object read when the whole cannot be.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    metadata: EnvelopeMeta,
}

/// `ObjectMeta` without `managedFields`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct EnvelopeMeta {
    name: Option<String>,
    generate_name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    finalizers: Option<Vec<String>>,
}

impl From<EnvelopeMeta> for ObjectMeta {
    fn from(m: EnvelopeMeta) -> Self {
        ObjectMeta {
            name: m.name,
            generate_name: m.generate_name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            generation: m.generation,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: m.deletion_timestamp,
            labels: m.labels,
            annotations: m.annotations,
            owner_references: m.owner_references,
            finalizers: m.finalizers,
            ..ObjectMeta::default()
        }
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Capturing raw text skips the value iteratively: no recursion limit applies, and
        // the object is then decoded with a depth count of its own.
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Ok(Lenient::from_json(raw.get()))
    }
}

impl<K> Clone for Lenient<K> {
    fn clone(&self) -> Self {
        match self {
            Lenient::Decoded(object) => Lenient::Decoded(object.clone()),
            Lenient::Undecodable(failure) => Lenient::Undecodable(failure.clone()),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for Lenient<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lenient::Decoded(object) => f.debug_tuple("Decoded").field(object).finish(),
            Lenient::Undecodable(failure) => f.debug_tuple("Undecodable").field(failure).finish(),
        }
    }
}

/// Same kind, same URLs: an `Api<Lenient<K>>` reads exactly what an `Api<K>` reads.
impl<K: Resource + Clone> Resource for Lenient<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn metadata_api() -> bool {
        K::metadata_api()
    }
    fn url_path(dt: &Self::DynamicType, namespace: Option<&str>) -> String {
        K::url_path(dt, namespace)
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Lenient::Decoded(object) => object.meta(),
            Lenient::Undecodable(failure) => &failure.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Lenient::Decoded(object) => Arc::make_mut(object).meta_mut(),
            Lenient::Undecodable(failure) => &mut Arc::make_mut(failure).metadata,
        }
    }
}

impl<K: Resource + Clone> Lenient<K>
where
    K::DynamicType: Default,
{
    /// The store key of the object, as the decoded kind's key.
    pub fn key(&self) -> ObjectRef<K> {
        let meta = self.meta();
        let key = ObjectRef::new(meta.name.as_deref().unwrap_or_default());
        match &meta.namespace {
            Some(namespace) => key.within(namespace),
            None => key,
        }
    }
}

/// The store key of the object `name` of `namespace` (None: a cluster-scoped one).
pub fn store_key<K>(namespace: Option<&str>, name: &str) -> ObjectRef<Lenient<K>>
where
    K: Resource + Clone,
    K::DynamicType: Default,
{
    let key = ObjectRef::new(name);
    match namespace {
        Some(namespace) => key.within(namespace),
        None => key,
    }
}

/// The watch feeding a store stopped before the store was first filled.
#[derive(Debug, thiserror::Error)]
#[error("the watch stopped before its store was filled")]
pub struct WriterDropped;

/// A reflector's store that shows only the objects that could be decoded; the others
/// are as absent as deleted ones.
pub struct DecodedStore<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    inner: Store<Lenient<K>>,
    /// Readiness kept beside a store several tasks wait on (a shared watch's): the
    /// store's own wakes only the last waiter.
    ready: Option<tokio::sync::watch::Receiver<bool>>,
}

impl<K: Resource + Clone + 'static> Clone for DecodedStore<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        DecodedStore {
            inner: self.inner.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl<K> DecodedStore<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        self.get_by(&key.clone().into_kind_unchecked(key.dyntype.clone()))
    }

    /// [`DecodedStore::get`] by a key of the store's own kind ([`store_key`]): no copy
    /// of the key per lookup (the request path asks several stores with one key).
    pub fn get_by(&self, key: &ObjectRef<Lenient<K>>) -> Option<Arc<K>> {
        self.inner.get(key).and_then(|o| o.decoded().cloned())
    }

    pub fn state(&self) -> Vec<Arc<K>> {
        self.inner
            .state()
            .iter()
            .filter_map(|o| o.decoded().cloned())
            .collect()
    }

    pub async fn wait_until_ready(&self) -> Result<(), WriterDropped> {
        match &self.ready {
            Some(ready) => ready
                .clone()
                .wait_for(|ready| *ready)
                .await
                .map(|_| ())
                .map_err(|_| WriterDropped),
            None => self
                .inner
                .wait_until_ready()
                .await
                .map_err(|_| WriterDropped),
        }
    }

    /// `inner`, ready when `ready` turns true (a shared watch's store).
    pub fn shared(inner: Store<Lenient<K>>, ready: tokio::sync::watch::Receiver<bool>) -> Self {
        DecodedStore {
            inner,
            ready: Some(ready),
        }
    }

    /// How many objects the store holds, undecodable ones included, without copying them.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }
}

impl<K: Resource + Clone + 'static> From<Store<Lenient<K>>> for DecodedStore<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn from(inner: Store<Lenient<K>>) -> Self {
        DecodedStore { inner, ready: None }
    }
}

/// A kind Flowline watches (its CRDs, Secrets, Namespace metadata): what a lenient
/// reflector and its reporting need, named once.
pub trait Watched:
    Resource<DynamicType = ()> + Clone + fmt::Debug + DeserializeOwned + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()> + Clone + fmt::Debug + DeserializeOwned + Send + Sync + 'static
{
}

/// The watch events of a reflector over `api`, and its store. The events must be
/// polled for the store to fill; they carry undecodable objects too, for reporting.
pub fn reflector<K>(
    api: Api<Lenient<K>>,
    config: watcher::Config,
) -> (
    DecodedStore<K>,
    impl Stream<Item = Result<watcher::Event<Lenient<K>>, watcher::Error>> + Send + 'static,
)
where
    K: Watched,
{
    compact_reflector(api, config, |_| {})
}

/// [`reflector`] whose store keeps each decoded object as `compact` leaves it: a cache
/// drops what its reader never serves, so memory follows what is served. Every store
/// drops managedFields but for the last spec write time
/// ([`flowline_core::crd::timestamps::compact_managed_fields`]).
pub fn compact_reflector<K>(
    api: Api<Lenient<K>>,
    config: watcher::Config,
    compact: fn(&mut K),
) -> (
    DecodedStore<K>,
    impl Stream<Item = Result<watcher::Event<Lenient<K>>, watcher::Error>> + Send + 'static,
)
where
    K: Watched,
{
    observed_reflector(api, config, compact, |_| {})
}

/// [`compact_reflector`] that shows every watch event to `observe` before its store
/// applies it: an index kept beside the store (the API's runs by workflow) then never
/// lags it — whatever the store holds, the index has seen.
pub fn observed_reflector<K>(
    api: Api<Lenient<K>>,
    config: watcher::Config,
    compact: fn(&mut K),
    mut observe: impl FnMut(&watcher::Event<Lenient<K>>) + Send + 'static,
) -> (
    DecodedStore<K>,
    impl Stream<Item = Result<watcher::Event<Lenient<K>>, watcher::Error>> + Send + 'static,
)
where
    K: Watched,
{
    let (reader, writer) = reflector::store();
    let watch = compact_watch(api, config, compact).inspect(move |event| {
        if let Ok(event) = event {
            observe(event);
        }
    });
    let events = reflector::reflector(writer, watch).default_backoff();
    (DecodedStore::from(reader), events)
}

/// The watch events of `api`, each decoded object as `compact` leaves it (and without
/// managedFields but for the last spec write time): for a store of compact objects
/// that is not a [`DecodedStore`], such as a controller's.
pub fn compact_watch<K>(
    api: Api<Lenient<K>>,
    config: watcher::Config,
    compact: fn(&mut K),
) -> impl Stream<Item = Result<watcher::Event<Lenient<K>>, watcher::Error>> + Send + 'static
where
    K: Watched,
{
    watcher(api, config).modify(move |object| {
        if let Lenient::Decoded(decoded) = object {
            // Freshly decoded, so not shared: no copy is made.
            let decoded = Arc::make_mut(decoded);
            flowline_core::crd::timestamps::compact_managed_fields(decoded.meta_mut());
            compact(decoded);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowline_core::crd::{Run, Workflow};
    use kube::ResourceExt;
    use kube::core::ObjectList;
    use serde_json::json;

    fn nested(levels: usize) -> String {
        format!("{}1{}", r#"{"a":"#.repeat(levels), "}".repeat(levels))
    }

    fn run_json(name: &str, payload: &str) -> String {
        format!(
            r#"{{"apiVersion":"flowline.io/v1","kind":"Run",
                "metadata":{{"name":"{name}","namespace":"n","uid":"u-{name}","resourceVersion":"7",
                             "labels":{{"flowline.io/workflow":"wf"}},
                             "managedFields":[{{"manager":"kubectl","fieldsV1":{payload}}}]}},
                "spec":{{"workflowRef":"wf","payload":{payload}}}}}"#
        )
    }

    #[test]
    fn good_objects_decode() {
        let run: Lenient<Run> = serde_json::from_str(&run_json("ok", r#"{"x":[1,2]}"#)).unwrap();
        let decoded = run.decoded().expect("decodes");
        assert_eq!(decoded.spec.payload, Some(json!({"x": [1, 2]})));
        assert_eq!(run.name_any(), "ok");
        assert_eq!(run.key(), ObjectRef::<Run>::new("ok").within("n"));
    }

    #[test]
    fn a_200_deep_object_keeps_its_envelope_and_error() {
        let run: Lenient<Run> = serde_json::from_str(&run_json("deep", &nested(200))).unwrap();
        let failure = run.undecodable().expect("too deep to decode");
        assert!(
            failure.error.contains("recursion limit"),
            "{}",
            failure.error
        );
        assert_eq!(failure.metadata.name.as_deref(), Some("deep"));
        assert_eq!(failure.metadata.namespace.as_deref(), Some("n"));
        assert_eq!(failure.metadata.uid.as_deref(), Some("u-deep"));
        assert_eq!(failure.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(run.labels()["flowline.io/workflow"], "wf");
        assert!(failure.metadata.managed_fields.is_none());
    }

    #[test]
    fn a_wrong_typed_object_keeps_its_envelope_and_a_capped_error() {
        let huge = "x".repeat(100_000);
        let text = json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "wrong", "namespace": "n"},
            "spec": {"name": "W", "steps": huge},
        })
        .to_string();
        let wf: Lenient<Workflow> = serde_json::from_str(&text).unwrap();
        let failure = wf.undecodable().expect("steps must be a list");
        assert!(failure.error.contains("invalid type"), "{}", failure.error);
        assert!(failure.error.len() <= flowline_core::limits::MAX_ERROR_BYTES);
        assert_eq!(wf.name_any(), "wrong");
    }

    #[test]
    fn a_list_of_mixed_objects_decodes_as_a_whole() {
        let list = format!(
            r#"{{"apiVersion":"flowline.io/v1","kind":"RunList","metadata":{{"resourceVersion":"9"}},
                "items":[{},{},{}]}}"#,
            run_json("a", "{}"),
            run_json("deep", &nested(126)),
            run_json("b", "{}"),
        );
        // Typed as the kind itself, the list fails as a whole: the reason for Lenient.
        assert!(serde_json::from_str::<ObjectList<Run>>(&list).is_err());
        let list: ObjectList<Lenient<Run>> = serde_json::from_str(&list).unwrap();
        let outcome: Vec<(String, bool)> = list
            .items
            .iter()
            .map(|o| (o.name_any(), o.decoded().is_some()))
            .collect();
        assert_eq!(
            outcome,
            [
                ("a".into(), true),
                ("deep".into(), false),
                ("b".into(), true)
            ]
        );
    }

    #[test]
    fn watch_events_carry_undecodable_objects() {
        use kube::api::WatchEvent;
        let line = format!(
            r#"{{"type":"MODIFIED","object":{}}}"#,
            run_json("deep", &nested(300))
        );
        let event: WatchEvent<Lenient<Run>> = serde_json::from_str(&line).unwrap();
        let WatchEvent::Modified(run) = event else {
            panic!("a modification")
        };
        assert!(run.undecodable().is_some());
        assert_eq!(run.name_any(), "deep");
    }
}
