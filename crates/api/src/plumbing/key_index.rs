//! `ApiKey`s by the SHA-256 they hold, so that authenticating a request is one map
//! lookup, whether the key exists or not: an unknown key never costs a pass over every
//! key.
//!
//! The index maps a hash to the key that held it when the index was built; every
//! hit is checked against the watch cache's current copy of that key, so a deleted
//! or edited key stops working as soon as the cache sees it. A miss rebuilds the index
//! only when the cache may hold keys the index has not seen: its number of keys
//! changed (a key made or revoked), or the index is older than [`REBUILD_AFTER`] (a key
//! replaced by another within that time). A flood of unknown keys therefore costs at
//! most one rebuild per [`REBUILD_AFTER`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use flowline_core::crd::ApiKey;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::auth::{KeyRecord, Principal};
use crate::cache::ScopedStore;
use flowline_kube::lenient::{self, Lenient};

/// Longest a miss trusts an index built from a cache of the same size.
pub const REBUILD_AFTER: Duration = Duration::from_secs(1);

/// A key as the index saw it, and the principal it made of it.
#[derive(Clone)]
struct Entry {
    key: ObjectRef<Lenient<ApiKey>>,
    /// The cached copy it was read from: while the cache still holds this very copy
    /// (the same `Arc`: a reflector replaces it on every change), `principal` is what
    /// reading it again would give, so a request does not read the key again.
    seen: Arc<ApiKey>,
    principal: Principal,
}

struct Snapshot {
    by_hash: HashMap<String, Entry>,
    /// Keys in the cache when this was built.
    cache_len: usize,
    built: Instant,
}

pub struct KeyIndex {
    current: RwLock<Arc<Snapshot>>,
    /// Held while rebuilding: concurrent misses use the current snapshot meanwhile.
    rebuilding: Mutex<()>,
    rebuilds: AtomicU64,
}

impl Default for KeyIndex {
    fn default() -> Self {
        KeyIndex {
            current: RwLock::new(Arc::new(Snapshot {
                by_hash: HashMap::new(),
                cache_len: 0,
                // Stale from the start: the first miss builds it.
                built: Instant::now()
                    .checked_sub(REBUILD_AFTER)
                    .unwrap_or_else(Instant::now),
            })),
            rebuilding: Mutex::new(()),
            rebuilds: AtomicU64::new(0),
        }
    }
}

impl KeyIndex {
    /// The principal of the key whose SHA-256 is `hash`, if the key exists.
    pub fn resolve(&self, keys: &ScopedStore<ApiKey>, hash: &str) -> Option<Principal> {
        let snapshot = self.snapshot();
        if let Some(principal) = lookup(&snapshot, keys, hash) {
            return Some(principal);
        }
        if !self.may_miss_keys(&snapshot, keys) {
            return None;
        }
        // One request rebuilds; the others answer from the snapshot they have.
        let Ok(_guard) = self.rebuilding.try_lock() else {
            return None;
        };
        self.rebuilds.fetch_add(1, Ordering::Relaxed);
        let fresh = Arc::new(build(keys));
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = fresh.clone();
        lookup(&fresh, keys, hash)
    }

    /// How many times the index was rebuilt (each one a pass over the keys).
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::Relaxed)
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn may_miss_keys(&self, snapshot: &Snapshot, keys: &ScopedStore<ApiKey>) -> bool {
        snapshot.cache_len != keys.len() || snapshot.built.elapsed() >= REBUILD_AFTER
    }
}

/// A hit only if the cache's current copy of the key still holds this hash. The
/// map lookup itself is not constant-time, but it is keyed by the SHA-256 of the
/// presented value, and learning about hashes does not help find a key.
fn lookup(snapshot: &Snapshot, keys: &ScopedStore<ApiKey>, hash: &str) -> Option<Principal> {
    let entry = snapshot.by_hash.get(hash)?;
    // Always the cache's current copy: a deleted key fails here.
    let stored = keys.get_by(&entry.key)?;
    if Arc::ptr_eq(&stored, &entry.seen) {
        return Some(entry.principal.clone());
    }
    // Changed since the index was built: read what it says now.
    let (record, principal) = read(&stored)?;
    record.matches(hash).then_some(principal)
}

/// The key record of a key and the principal it authenticates.
fn read(key: &ApiKey) -> Option<(KeyRecord, Principal)> {
    let record = KeyRecord::from_key(key)?;
    let principal = Principal::new(
        record.namespace.clone(),
        record.id.clone(),
        record.scopes.clone(),
    );
    Some((record, principal))
}

fn build(keys: &ScopedStore<ApiKey>) -> Snapshot {
    // The length first: a key added during the pass makes the next miss rebuild again.
    let cache_len = keys.len();
    let by_hash = keys
        .state()
        .into_iter()
        .filter_map(|stored| {
            let (record, principal) = read(&stored)?;
            let entry = Entry {
                key: lenient::store_key(stored.namespace().as_deref(), &stored.name_any()),
                seen: stored,
                principal,
            };
            Some((record.hash, entry))
        })
        .collect();
    Snapshot {
        by_hash,
        cache_len,
        built: Instant::now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plumbing::auth::{Scope, hash_key};
    use flowline_kube::lenient::{DecodedStore, Lenient};
    use flowline_kube::name_index::{self, SharedNameIndex};
    use kube::runtime::reflector::{self, store::Writer};
    use kube::runtime::watcher::Event;

    fn api_key(name: &str, value: &str, version: &str) -> ApiKey {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "flowline.io/v1", "kind": "ApiKey",
            "metadata": {"name": name, "namespace": "team-a", "resourceVersion": version},
            "spec": {"name": name, "scopes": ["read"], "sha256": hash_key(value)}
        }))
        .unwrap()
    }

    fn lenient(key: ApiKey) -> Lenient<ApiKey> {
        Lenient::Decoded(Arc::new(key))
    }

    fn cache_with(keys: &[ApiKey]) -> (ScopedStore<ApiKey>, Writer<Lenient<ApiKey>>) {
        let (reader, mut writer) = reflector::store();
        for k in keys {
            writer.apply_watcher_event(&Event::Apply(lenient(k.clone())));
        }
        // The index goes unfed: the key index reads the cache by key and whole.
        let index = SharedNameIndex::new(name_index::by_namespace);
        (
            ScopedStore::from(vec![(DecodedStore::from(reader), index)]),
            writer,
        )
    }

    #[test]
    fn known_keys_resolve_and_unknown_keys_cost_no_pass_over_the_keys() {
        let many: Vec<ApiKey> = (0..500)
            .map(|i| api_key(&format!("key-{i}"), &format!("flk_{i}"), "1"))
            .collect();
        let (keys, _writer) = cache_with(&many);
        let index = KeyIndex::default();
        let who = index.resolve(&keys, &hash_key("flk_42")).unwrap();
        assert_eq!(
            (who.namespace.as_str(), who.key_id.as_str()),
            ("team-a", "key-42")
        );
        assert_eq!(who.scopes, [Scope::Read].into());
        assert_eq!(index.rebuilds(), 1, "the first lookup builds the index");
        for i in 0..10_000 {
            assert!(
                index
                    .resolve(&keys, &hash_key(&format!("flk_unknown_{i}")))
                    .is_none()
            );
        }
        assert_eq!(
            index.rebuilds(),
            1,
            "unknown keys are answered from the index"
        );
        assert!(index.resolve(&keys, &hash_key("flk_499")).is_some());
        assert_eq!(index.rebuilds(), 1);
    }

    #[test]
    fn a_new_key_works_at_once_and_a_revoked_or_edited_one_stops() {
        let (keys, mut writer) = cache_with(&[api_key("key-a", "flk_a", "1")]);
        let index = KeyIndex::default();
        assert!(index.resolve(&keys, &hash_key("flk_a")).is_some());
        // A key made after the index was built: the cache grew, so the miss rebuilds.
        writer.apply_watcher_event(&Event::Apply(lenient(api_key("key-b", "flk_b", "2"))));
        assert!(index.resolve(&keys, &hash_key("flk_b")).is_some());
        assert_eq!(index.rebuilds(), 2);
        // Edited in place to hold another hash: the old value stops at once.
        writer.apply_watcher_event(&Event::Apply(lenient(api_key("key-a", "flk_a2", "3"))));
        assert!(index.resolve(&keys, &hash_key("flk_a")).is_none());
        // Revoked: gone from the cache, gone for the index.
        writer.apply_watcher_event(&Event::Delete(lenient(api_key("key-b", "flk_b", "2"))));
        assert!(index.resolve(&keys, &hash_key("flk_b")).is_none());
    }

    #[test]
    fn a_key_replaced_within_the_same_count_is_found_once_the_index_is_old() {
        let (keys, mut writer) = cache_with(&[api_key("key-a", "flk_a", "1")]);
        let index = KeyIndex::default();
        assert!(index.resolve(&keys, &hash_key("flk_a")).is_some());
        writer.apply_watcher_event(&Event::Delete(lenient(api_key("key-a", "flk_a", "1"))));
        writer.apply_watcher_event(&Event::Apply(lenient(api_key("key-c", "flk_c", "2"))));
        assert!(
            index.resolve(&keys, &hash_key("flk_c")).is_none(),
            "same number of keys, fresh index: not rebuilt"
        );
        // Time passes: the index is older than REBUILD_AFTER.
        let by_hash = index.snapshot().by_hash.clone();
        *index.current.write().unwrap() = Arc::new(Snapshot {
            by_hash,
            cache_len: keys.len(),
            built: Instant::now() - REBUILD_AFTER,
        });
        assert!(index.resolve(&keys, &hash_key("flk_c")).is_some());
    }
}
