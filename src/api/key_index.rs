//! Resolved keys by hash, so authenticating a request is one map lookup instead of
//! a pass over every key Secret. Each entry is re-validated against the watch cache
//! (same Secret, same resourceVersion) on use, so a deleted or edited key stops
//! working as soon as the cache sees it.

use std::collections::HashMap;
use std::sync::RwLock;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::auth::{KeyRecord, Principal};

/// Above this many entries the index starts over (only valid keys are ever added).
const MAX_ENTRIES: usize = 10_000;

struct Entry {
    secret: ObjectRef<Secret>,
    resource_version: Option<String>,
    principal: Principal,
}

#[derive(Default)]
pub struct KeyIndex {
    entries: RwLock<HashMap<String, Entry>>,
}

impl KeyIndex {
    /// The principal of the key whose SHA-256 is `hash`, if the key exists.
    pub fn resolve(
        &self,
        keys: &super::cache::ScopedStore<Secret>,
        hash: &str,
    ) -> Option<Principal> {
        if let Some(entry) = self
            .entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(hash)
        {
            let current = keys.get(&entry.secret)?;
            if current.resource_version() == entry.resource_version {
                return Some(entry.principal.clone());
            }
        }
        let secret = keys.state().into_iter().find(|s| {
            s.data
                .as_ref()
                .and_then(|d| d.get("sha256"))
                .is_some_and(|h| {
                    subtle::ConstantTimeEq::ct_eq(h.0.as_slice(), hash.as_bytes()).into()
                })
        })?;
        let record = KeyRecord::from_secret(&secret)?;
        let principal = Principal {
            namespace: record.namespace,
            key_id: record.id,
            scopes: record.scopes,
        };
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(
            hash.to_string(),
            Entry {
                secret: ObjectRef::from_obj(&*secret),
                resource_version: secret.resource_version(),
                principal: principal.clone(),
            },
        );
        Some(principal)
    }
}
