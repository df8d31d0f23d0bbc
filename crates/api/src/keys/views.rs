//! What `/v1/api-keys` answers (never a key's value, but once, when it is made).

use serde::Serialize;
use utoipa::ToSchema;

use crate::plumbing::auth::{KeyRecord, Scope};
use crate::plumbing::time::ApiTime;

/// An API key (never its value).
#[derive(Serialize, ToSchema)]
pub struct ApiKeyView {
    pub id: String,
    pub name: String,
    pub scopes: Vec<Scope>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub created_at: Option<ApiTime>,
}

impl From<&KeyRecord> for ApiKeyView {
    fn from(record: &KeyRecord) -> Self {
        ApiKeyView {
            id: record.id.clone(),
            name: record.name.clone(),
            scopes: record.scopes.iter().copied().collect(),
            created_at: record.created_at.map(ApiTime),
        }
    }
}

/// An API key just created, with its value (shown only here).
#[derive(Serialize, ToSchema)]
pub struct ApiKeyCreated {
    #[serde(flatten)]
    pub api_key: ApiKeyView,
    pub key: String,
}
