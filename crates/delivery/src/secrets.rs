//! Signing secrets: those sealed into the Webhook by the API
//! ([`flowline_core::delivery::signing_secrets`]), or the Secret a Webhook applied with
//! kubectl names; rotation with a grace period; and the worker's short-lived cache of
//! the keys a Secret holds.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client, Resource, ResourceExt};

use flowline_core::crd::Webhook;
use flowline_core::delivery::signing::generate_secret;
use flowline_core::delivery::signing_secrets::{ANNOTATION, SigningSecrets};
use flowline_core::sealed::SealKey;

/// Key of the current signing secret.
pub const SECRET_KEY: &str = "secret";
/// Key of the secret replaced by the last rotation.
pub const PREVIOUS_KEY: &str = "previous";
/// Key of the time (RFC 3339) until which the previous secret still signs.
pub const PREVIOUS_EXPIRES_KEY: &str = "previous-expires-at";
/// Type of the Secrets Flowline creates for webhooks.
pub const SECRET_TYPE: &str = "flowline.io/webhook-secret";
/// How long both secrets sign after a rotation.
pub const ROTATION_GRACE: SignedDuration = SignedDuration::from_hours(24);
/// Annotation the API bumps on the Webhook when it rotates the secret, so the worker
/// drops its cached keys at once.
pub const ROTATED_ANNOTATION: &str = "flowline.io/secret-rotated-at";

/// Without a rotation signal, keys edited directly in the Secret are picked up
/// within this time.
const CACHE_TTL: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("signing secret {0} has no `secret` key")]
    Missing(String),
    #[error("cannot read signing secret {name}: {source}")]
    Read { name: String, source: kube::Error },
    #[error(
        "Secret {0} is not a webhook signing secret: a secretRef must name a Secret of \
         type {SECRET_TYPE}"
    )]
    NotSigningSecret(String),
    #[error(
        "the signing secrets sealed into webhook {0} do not open with this installation's \
         seal key: rotate its secret"
    )]
    Unsealable(String),
}

/// A Webhook signs with, and rotation writes, only a Secret made for that: its type says
/// so. Without this, a Webhook applied with kubectl could name any Secret of its namespace
/// (another application's credentials, an API key) and have the API's rotation overwrite it.
pub fn check_signing_secret(secret: &Secret) -> Result<(), SecretError> {
    if secret.type_.as_deref() == Some(SECRET_TYPE) {
        Ok(())
    } else {
        Err(SecretError::NotSigningSecret(secret.name_any()))
    }
}

/// Name of the Secret holding the webhook's signing secret.
pub fn secret_name(hook: &Webhook) -> String {
    hook.spec
        .secret_ref
        .as_ref()
        .map(|r| r.name.clone())
        .unwrap_or_else(|| format!("{}-signing", hook.name_any()))
}

/// The non-empty text under `key`, from `data` or (not yet applied) `stringData`.
pub fn text(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key).cloned())
        })
        .filter(|v| !v.is_empty())
}

/// The keys to sign with at `now`, newest first: the current secret, and the previous
/// one while its grace period lasts.
pub fn signing_keys(secret: &Secret, now: Timestamp) -> Option<Vec<String>> {
    let current = text(secret, SECRET_KEY)?;
    let mut keys = vec![current];
    let previous_valid = text(secret, PREVIOUS_EXPIRES_KEY)
        .and_then(|t| t.parse::<Timestamp>().ok())
        .is_some_and(|until| now < until);
    if previous_valid && let Some(previous) = text(secret, PREVIOUS_KEY) {
        keys.push(previous);
    }
    Some(keys)
}

/// The `stringData` that rotates `current` to `new` at `now`.
pub fn rotation(current: &str, new: &str, now: Timestamp) -> BTreeMap<String, String> {
    BTreeMap::from([
        (SECRET_KEY.to_string(), new.to_string()),
        (PREVIOUS_KEY.to_string(), current.to_string()),
        (
            PREVIOUS_EXPIRES_KEY.to_string(),
            flowline_core::clock::format_ts(now + ROTATION_GRACE),
        ),
    ])
}

/// A new Secret for the webhook, owned by it (deleting the webhook deletes it).
pub fn owned_secret(hook: &Webhook, value: &str) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(secret_name(hook)),
            namespace: hook.namespace(),
            owner_references: hook.controller_owner_ref(&()).map(|o| vec![o]),
            labels: Some(BTreeMap::from([(
                "flowline.io/webhook".to_string(),
                hook.name_any(),
            )])),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.into()),
        string_data: Some(BTreeMap::from([(
            SECRET_KEY.to_string(),
            value.to_string(),
        )])),
        ..Default::default()
    }
}

type Key = (String, String);
/// Keys to sign with, and when they were read.
type Entries = HashMap<Key, (Arc<Vec<String>>, Instant)>;

/// The worker's cache of signing keys, one GET per webhook per [`CACHE_TTL`].
pub struct SecretCache {
    client: Client,
    /// Opens the signing secrets sealed into Webhooks.
    seal: Arc<SealKey>,
    // Read on every attempt from many tasks at once: a read lock does not make them wait
    // for each other.
    entries: RwLock<Entries>,
}

impl SecretCache {
    pub fn new(client: Client, seal: Arc<SealKey>) -> Self {
        SecretCache {
            client,
            seal,
            entries: RwLock::new(HashMap::new()),
        }
    }

    fn key(hook: &Webhook) -> Key {
        (hook.namespace().unwrap_or_default(), secret_name(hook))
    }

    pub fn invalidate(&self, hook: &Webhook) {
        self.write().remove(&Self::key(hook));
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Entries> {
        self.entries.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The keys to sign with, current first: those sealed into the Webhook (and its
    /// Secret's while a rotation's grace lasts), else its Secret's. A webhook applied
    /// with kubectl and no `secretRef` gets its Secret generated here, on first use.
    pub async fn keys(&self, hook: &Webhook) -> Result<Arc<Vec<String>>, SecretError> {
        let Some(sealed) = hook.annotations().get(ANNOTATION) else {
            return self.secret_keys(hook).await;
        };
        let (namespace, name) = (hook.namespace().unwrap_or_default(), hook.name_any());
        let secrets = SigningSecrets::open(&self.seal, &namespace, &name, sealed)
            .ok_or_else(|| SecretError::Unsealable(name.clone()))?;
        let now = Timestamp::now();
        let mut keys = secrets.keys(now);
        if secrets.secret_ref_signs(now)
            && let Ok(old) = self.secret_keys(hook).await
        {
            keys.extend(old.iter().cloned());
        }
        Ok(Arc::new(keys))
    }

    /// The keys the webhook's Secret holds.
    async fn secret_keys(&self, hook: &Webhook) -> Result<Arc<Vec<String>>, SecretError> {
        let key = Self::key(hook);
        if let Some((keys, at)) = self
            .entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            && at.elapsed() < CACHE_TTL
        {
            return Ok(keys.clone());
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &key.0);
        let read_error = |source| SecretError::Read {
            name: key.1.clone(),
            source,
        };
        let secret = match api.get_opt(&key.1).await.map_err(read_error)? {
            Some(secret) => secret,
            None if hook.spec.secret_ref.is_none() => {
                match api
                    .create(
                        &PostParams::default(),
                        &owned_secret(hook, &generate_secret()),
                    )
                    .await
                {
                    Ok(created) => created,
                    // Created concurrently (the API, another attempt): read theirs.
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        api.get(&key.1).await.map_err(read_error)?
                    }
                    Err(e) => return Err(read_error(e)),
                }
            }
            None => return Err(SecretError::Missing(key.1.clone())),
        };
        check_signing_secret(&secret)?;
        let keys = Arc::new(
            signing_keys(&secret, Timestamp::now())
                .ok_or_else(|| SecretError::Missing(key.1.clone()))?,
        );
        self.write().insert(key, (keys.clone(), Instant::now()));
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(data: BTreeMap<String, String>) -> Secret {
        Secret {
            string_data: Some(data),
            ..Default::default()
        }
    }

    #[test]
    fn both_secrets_sign_during_the_grace_period_newest_first() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let rotated = secret(rotation("whsec_old", "whsec_new", now));
        assert_eq!(
            signing_keys(&rotated, now + SignedDuration::from_hours(23)).unwrap(),
            vec!["whsec_new".to_string(), "whsec_old".to_string()]
        );
        assert_eq!(
            signing_keys(&rotated, now + SignedDuration::from_hours(25)).unwrap(),
            vec!["whsec_new".to_string()]
        );
    }

    #[test]
    fn a_secret_without_the_key_signs_nothing() {
        assert_eq!(
            signing_keys(&secret(BTreeMap::new()), Timestamp::now()),
            None
        );
        let hook: Webhook = serde_json::from_value(serde_json::json!({
            "apiVersion": "flowline.io/v1", "kind": "Webhook",
            "metadata": {"name": "wh", "namespace": "n", "uid": "u"},
            "spec": {"url": "https://example.com", "events": ["run.started"]}
        }))
        .unwrap();
        assert_eq!(secret_name(&hook), "wh-signing");
        let owned = owned_secret(&hook, "whsec_x");
        assert_eq!(owned.owner_references()[0].name, "wh");
    }

    #[test]
    fn only_secrets_of_the_signing_type_sign_or_rotate() {
        let hook: Webhook = serde_json::from_value(serde_json::json!({
            "apiVersion": "flowline.io/v1", "kind": "Webhook",
            "metadata": {"name": "wh", "namespace": "n", "uid": "u"},
            "spec": {"url": "https://example.com", "events": ["run.started"]}
        }))
        .unwrap();
        assert!(check_signing_secret(&owned_secret(&hook, "whsec_x")).is_ok());
        for type_ in [None, Some("Opaque"), Some("flowline.io/api-key")] {
            let mut other = secret(BTreeMap::from([(SECRET_KEY.into(), "v".into())]));
            other.metadata.name = Some("app-credentials".into());
            other.type_ = type_.map(Into::into);
            let err = check_signing_secret(&other).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("Secret app-credentials is not a webhook signing secret"),
                "{err}"
            );
        }
    }
}
