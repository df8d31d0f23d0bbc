//! API keys and scopes. A key belongs to one namespace (the account) and is stored
//! only as its SHA-256, in an `ApiKey` object of that namespace.

use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use flowline_core::crd::ApiKey;
use kube::ResourceExt;
use rand::Rng;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// On an `ApiKey` moved from an earlier version's key Secret: when the key was made
/// (its own `creationTimestamp` is when it moved).
pub const CREATED_AT: &str = "flowline.io/created-at";
const KEY_PREFIX: &str = "flk_";
const KEY_RANDOM_CHARS: usize = 40;
const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

pub use flowline_core::crd::Scope;

/// The authenticated caller of a request. One shared allocation: the key index hands
/// it out, the handler's `Extension` and the access log clone it, for every request.
#[derive(Debug, Clone)]
pub struct Principal(Arc<Caller>);

/// What a [`Principal`] is.
#[derive(Debug)]
pub struct Caller {
    pub namespace: String,
    pub key_id: String,
    pub scopes: BTreeSet<Scope>,
}

impl std::ops::Deref for Principal {
    type Target = Caller;

    fn deref(&self) -> &Caller {
        &self.0
    }
}

impl flowline_telemetry::access_log::AccountName for Caller {
    fn account_name(&self) -> &str {
        &self.namespace
    }
}

impl Principal {
    pub fn new(namespace: String, key_id: String, scopes: BTreeSet<Scope>) -> Self {
        Principal(Arc::new(Caller {
            namespace,
            key_id,
            scopes,
        }))
    }

    /// For the access log: the account's name, shared.
    pub fn account(&self) -> flowline_telemetry::access_log::Account {
        flowline_telemetry::access_log::Account(self.0.clone())
    }

    pub fn require(&self, needed: Scope) -> Result<(), ApiError> {
        if self.scopes.iter().any(|s| s.grants(needed)) {
            Ok(())
        } else {
            Err(ApiError::InsufficientScope(needed.as_str()))
        }
    }
}

/// The scope an endpoint needs, as a type: `Authorized<needs::Write>`.
pub trait Needs: Send + Sync + 'static {
    const SCOPE: Scope;
}

/// The scopes as types, for [`Authorized`].
pub mod needs {
    use super::{Needs, Scope};

    pub struct Read;
    pub struct Write;
    pub struct Execute;
    pub struct Admin;

    impl Needs for Read {
        const SCOPE: Scope = Scope::Read;
    }
    impl Needs for Write {
        const SCOPE: Scope = Scope::Write;
    }
    impl Needs for Execute {
        const SCOPE: Scope = Scope::Execute;
    }
    impl Needs for Admin {
        const SCOPE: Scope = Scope::Admin;
    }
}

/// The caller of a request whose key holds the scope `S` needs: 403
/// `insufficient_scope` otherwise. An extractor, so a handler's signature says its
/// scope, and the scope is checked before any path lookup or body (put it before
/// [`super::json::Valid`]). Authentication itself is the middleware's: without a
/// principal (a route outside it) the request is `unauthenticated`.
pub struct Authorized<S: Needs>(pub Principal, PhantomData<S>);

impl<S: Needs> std::ops::Deref for Authorized<S> {
    type Target = Principal;

    fn deref(&self) -> &Principal {
        &self.0
    }
}

impl<S: Needs, St: Send + Sync> FromRequestParts<St> for Authorized<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &St) -> Result<Self, ApiError> {
        let who = parts
            .extensions
            .get::<Principal>()
            .ok_or(ApiError::Unauthenticated)?;
        who.require(S::SCOPE)?;
        Ok(Authorized(who.clone(), PhantomData))
    }
}

/// A fresh key value: `flk_` and 40 random base62 characters (~238 bits).
pub fn generate_key() -> String {
    let mut rng = rand::rng();
    let random: String = (0..KEY_RANDOM_CHARS)
        .map(|_| BASE62[rng.random_range(0..BASE62.len())] as char)
        .collect();
    format!("{KEY_PREFIX}{random}")
}

/// Lowercase hex SHA-256 of a key value: the only form in which keys are stored.
pub fn hash_key(key: &str) -> String {
    hash_key_hex(key).as_str().to_owned()
}

/// [`hash_key`] without a string of its own (the request path looks it up only).
pub fn hash_key_hex(key: &str) -> KeyHash {
    let mut hex = [0; 64];
    hex::encode_to_slice(Sha256::digest(key.as_bytes()), &mut hex)
        .expect("32 bytes are 64 hex digits");
    KeyHash(hex)
}

/// A key's SHA-256 in lowercase hex.
pub struct KeyHash([u8; 64]);

impl KeyHash {
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
    }
}

/// The parts of an `ApiKey` the API needs.
#[derive(Debug, Clone)]
pub struct KeyRecord {
    pub id: String,
    pub namespace: String,
    pub name: String,
    pub scopes: BTreeSet<Scope>,
    pub hash: String,
    pub created_at: Option<jiff::Timestamp>,
}

impl KeyRecord {
    /// Reads a key; None for one without a namespace (never the case of a stored one).
    pub fn from_key(key: &ApiKey) -> Option<KeyRecord> {
        let created_at = key
            .annotations()
            .get(CREATED_AT)
            .and_then(|t| t.parse().ok())
            .or_else(|| key.metadata.creation_timestamp.as_ref().map(|t| t.0));
        Some(KeyRecord {
            id: key.name_any(),
            namespace: key.namespace()?,
            name: key.spec.name.clone(),
            scopes: key.spec.scopes.iter().copied().collect(),
            hash: key.spec.sha256.clone(),
            created_at,
        })
    }

    /// Constant-time comparison against the hash of a presented key.
    pub fn matches(&self, presented_hash: &str) -> bool {
        self.hash.as_bytes().ct_eq(presented_hash.as_bytes()).into()
    }
}

/// The bearer token of an `Authorization` header value, if it has that form.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_include_each_other_as_the_contract_says() {
        use Scope::*;
        assert!(Write.grants(Read) && Execute.grants(Read));
        assert!(!Read.grants(Write) && !Read.grants(Execute));
        assert!(!Write.grants(Execute) && !Execute.grants(Write));
        assert!(Scope::ALL.iter().all(|s| Admin.grants(*s)));
        assert!(!Write.grants(Admin) && !Execute.grants(Admin));
    }

    #[test]
    fn keys_have_the_contract_shape_and_are_unique() {
        let a = generate_key();
        let b = generate_key();
        assert!(a.starts_with("flk_") && a.len() >= 4 + 32);
        assert!(a[4..].bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
        assert_eq!(hash_key(&a).len(), 64);
        assert_eq!(hash_key_hex(&a).as_str(), hex::encode(Sha256::digest(&a)));
        assert_ne!(hash_key(&a), hash_key(&b));
    }

    #[test]
    fn bearer_tokens_are_parsed_strictly() {
        assert_eq!(bearer_token("Bearer flk_x"), Some("flk_x"));
        assert_eq!(bearer_token("bearer  flk_x "), Some("flk_x"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("flk_x"), None);
    }

    #[test]
    fn key_records_read_the_key_and_when_it_was_made() {
        let key: ApiKey = serde_json::from_value(serde_json::json!({
            "apiVersion": "flowline.io/v1", "kind": "ApiKey",
            "metadata": {"name": "key-abc", "namespace": "team-a",
                         "creationTimestamp": "2026-11-28T00:00:00Z"},
            "spec": {"name": "ci", "scopes": ["read", "execute"], "sha256": hash_key("flk_x")}
        }))
        .unwrap();
        let record = KeyRecord::from_key(&key).unwrap();
        assert_eq!(record.namespace, "team-a");
        assert_eq!(record.scopes, BTreeSet::from([Scope::Read, Scope::Execute]));
        assert!(record.matches(&hash_key("flk_x")));
        assert!(!record.matches(&hash_key("flk_y")));
        assert_eq!(
            record.created_at,
            Some("2026-11-28T00:00:00Z".parse().unwrap())
        );
        let mut moved = key.clone();
        moved
            .annotations_mut()
            .insert(CREATED_AT.into(), "2025-01-02T03:04:05Z".into());
        assert_eq!(
            KeyRecord::from_key(&moved).unwrap().created_at,
            Some("2025-01-02T03:04:05Z".parse().unwrap())
        );
    }
}
