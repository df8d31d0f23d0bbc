//! The installation's seal key ([`flowline_core::sealed`]): 32 random bytes in one
//! Secret of the install namespace, which the API and the controller read by name
//! (the chart grants `get` on that name only, and makes the Secret).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client};

use flowline_core::sealed::{KEY_LEN, SealKey};

/// The key of the Secret's data holding the seal key.
pub const DATA_KEY: &str = "seal-key";
/// The Secret's type: a `flowline.io/…` type, which workflow templates may never read.
pub const SECRET_TYPE: &str = "flowline.io/seal-key";

/// Why the seal key cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum SealKeyError {
    #[error("reading (or, missing, making) the seal key Secret {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error(
        "the seal key Secret {namespace}/{name} holds no {DATA_KEY} of {KEY_LEN} bytes; \
         delete it to have a new one made (inbound hook secrets sealed with the old one \
         must then be rotated)"
    )]
    Malformed { namespace: String, name: String },
}

/// Reads the seal key from the Secret `name` of `namespace`; when the Secret is
/// missing, makes one with a fresh key (two processes racing both end with the one
/// stored first). The chart makes the Secret, and grants no `create`.
pub async fn load(client: &Client, namespace: &str, name: &str) -> Result<SealKey, SealKeyError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let failed = |source| SealKeyError::Api {
        namespace: namespace.into(),
        name: name.into(),
        source,
    };
    let secret = match api.get_opt(name).await.map_err(failed)? {
        Some(secret) => secret,
        None => {
            let fresh = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                type_: Some(SECRET_TYPE.into()),
                data: Some(BTreeMap::from([(
                    DATA_KEY.to_string(),
                    ByteString(SealKey::generate().to_vec()),
                )])),
                ..Default::default()
            };
            match api.create(&PostParams::default(), &fresh).await {
                Ok(created) => created,
                Err(kube::Error::Api(e)) if e.code == 409 => api.get(name).await.map_err(failed)?,
                Err(e) => return Err(failed(e)),
            }
        }
    };
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(DATA_KEY))
        .and_then(|bytes| SealKey::new(&bytes.0).ok())
        .ok_or_else(|| SealKeyError::Malformed {
            namespace: namespace.into(),
            name: name.into(),
        })
}
