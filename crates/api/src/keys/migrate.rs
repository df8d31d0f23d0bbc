//! Moving API keys kept by earlier versions, as Secrets of type `flowline.io/api-key`,
//! to `ApiKey` objects: same namespace, same id (the object's name), same name, scopes,
//! hash and creation time. Run by `flowline migrate-keys` (the chart runs it after an
//! install or upgrade); the API itself never reads a Secret.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::plumbing::auth::{CREATED_AT, Scope};
use flowline_core::crd::{ApiKey, ApiKeySpec};

/// `type` of the Secrets earlier versions kept API keys in.
pub const LEGACY_TYPE: &str = "flowline.io/api-key";

/// The `ApiKey` a legacy key Secret becomes; `None` for a Secret that is not a
/// well-formed key (no hash, no scope it knows). Pure.
pub fn from_legacy(secret: &Secret) -> Option<ApiKey> {
    if secret.type_.as_deref() != Some(LEGACY_TYPE) {
        return None;
    }
    let field = |k: &str| flowline_delivery::secrets::text(secret, k);
    let mut scopes: Vec<Scope> = field("scopes")?
        .split(',')
        .filter_map(|s| Scope::parse(s.trim()))
        .collect();
    scopes.sort();
    scopes.dedup();
    let sha256 = field("sha256")?.trim().to_ascii_lowercase();
    if scopes.is_empty() || sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let name = field("name")
        .map(|n| n.trim().chars().take(200).collect::<String>())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| secret.name_any());
    let mut key = ApiKey::new(
        &secret.name_any(),
        ApiKeySpec {
            name,
            scopes,
            sha256,
        },
    );
    key.metadata.namespace = secret.namespace();
    key.metadata.labels = secret.metadata.labels.clone().map(|mut labels| {
        labels.remove(LEGACY_TYPE);
        labels
    });
    let created = field("created-at").or_else(|| {
        secret
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
    });
    if let Some(created) = created {
        key.annotations_mut().insert(CREATED_AT.into(), created);
    }
    Some(key)
}

/// What one namespace's migration did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Keys now kept as `ApiKey`s (their Secrets deleted).
    pub moved: Vec<String>,
    /// Secrets of the legacy type that are not well-formed keys: left alone.
    pub skipped: Vec<String>,
}

/// Moves the legacy key Secrets of `namespace` (every namespace when `None`). A key
/// already moved (its `ApiKey` exists with the same hash) only loses its Secret; one
/// whose `ApiKey` holds another hash is left for a person to look at.
pub async fn move_keys(client: &Client, namespace: Option<&str>) -> Result<Moved, kube::Error> {
    let secrets: Api<Secret> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let legacy = secrets
        .list(&ListParams::default().fields(&format!("type={LEGACY_TYPE}")))
        .await?;
    let mut done = Moved::default();
    for secret in legacy.items {
        let ns = secret.namespace().unwrap_or_default();
        let id = format!("{ns}/{}", secret.name_any());
        let Some(key) = from_legacy(&secret) else {
            done.skipped.push(id);
            continue;
        };
        let keys: Api<ApiKey> = Api::namespaced(client.clone(), &ns);
        match keys.create(&PostParams::default(), &key).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = keys.get(&key.name_any()).await?;
                if existing.spec.sha256 != key.spec.sha256 {
                    done.skipped.push(id);
                    continue;
                }
            }
            Err(e) => return Err(e),
        }
        let in_ns: Api<Secret> = Api::namespaced(client.clone(), &ns);
        match in_ns
            .delete(&secret.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
        done.moved.push(id);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plumbing::auth::hash_key;
    use serde_json::json;

    fn legacy(data: serde_json::Value) -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": "key-abc", "namespace": "team-a",
                         "labels": {"flowline.io/api-key": "true", "team": "x"},
                         "creationTimestamp": "2026-03-01T00:00:00Z"},
            "type": LEGACY_TYPE,
            "stringData": data,
        }))
        .unwrap()
    }

    #[test]
    fn a_legacy_key_keeps_its_id_name_scopes_hash_and_age() {
        let hash = hash_key("flk_x");
        let key = from_legacy(&legacy(json!({"name": "ci", "scopes": "execute,read,read",
            "sha256": hash, "created-at": "2026-02-01T00:00:00Z"})))
        .unwrap();
        assert_eq!(key.name_any(), "key-abc");
        assert_eq!(key.namespace().as_deref(), Some("team-a"));
        assert_eq!(key.spec.name, "ci");
        assert_eq!(key.spec.scopes, vec![Scope::Read, Scope::Execute]);
        assert_eq!(key.spec.sha256, hash);
        assert_eq!(key.annotations()[CREATED_AT], "2026-02-01T00:00:00Z");
        assert_eq!(
            key.labels().get("team").map(String::as_str),
            Some("x"),
            "other labels stay"
        );
        assert!(!key.labels().contains_key(LEGACY_TYPE));
    }

    #[test]
    fn only_well_formed_key_secrets_move() {
        let hash = hash_key("flk_x");
        type Row<'a> = (&'a str, serde_json::Value);
        let refused: Vec<Row> = vec![
            ("no hash", json!({"scopes": "read"})),
            (
                "no scope it knows",
                json!({"scopes": "root", "sha256": hash}),
            ),
            (
                "a hash that is not one",
                json!({"scopes": "read", "sha256": "abc"}),
            ),
        ];
        for (case, data) in refused {
            assert!(from_legacy(&legacy(data)).is_none(), "{case}");
        }
        let mut opaque = legacy(json!({"scopes": "read", "sha256": hash}));
        opaque.type_ = Some("Opaque".into());
        assert!(from_legacy(&opaque).is_none(), "another type");
        let unnamed = from_legacy(&legacy(json!({"scopes": "admin", "sha256": hash}))).unwrap();
        assert_eq!(unnamed.spec.name, "key-abc", "named after its id");
        assert_eq!(
            unnamed.annotations()[CREATED_AT],
            "2026-03-01T00:00:00Z",
            "made when its Secret was"
        );
    }
}
