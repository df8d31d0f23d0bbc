//! Body of `POST /v1/api-keys`.

use serde::Deserialize;
use utoipa::ToSchema;

use crate::plumbing::auth::Scope;
use crate::plumbing::validation::{MAX_NAME, Problems, Validate, text};
use crate::state::ApiConfig;

/// Body of `POST /v1/api-keys`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"name": "ci", "scopes": ["read", "execute"]})))]
pub struct ApiKeyCreate {
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: String,
    #[schema(min_items = 1)]
    pub scopes: Vec<Scope>,
}

impl Validate for ApiKeyCreate {
    fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
        let mut p = Problems::default();
        text(&self.name, "name", MAX_NAME, true, &mut p);
        if self.scopes.is_empty() {
            p.add(
                "scopes",
                "must be a non-empty array of read, write, execute, admin",
            );
        }
        p.finish()
    }
}

impl ApiKeyCreate {
    /// The scopes, each once, in the order first given.
    pub fn scopes(&self) -> Vec<Scope> {
        let mut seen = Vec::new();
        for scope in &self.scopes {
            if !seen.contains(scope) {
                seen.push(*scope);
            }
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plumbing::error::ApiError;
    use crate::plumbing::validation::accept;
    use serde_json::{Value, json};

    fn fields(err: ApiError) -> Vec<String> {
        match err {
            ApiError::Validation { details, .. } => details.into_iter().map(|d| d.field).collect(),
            other => panic!("expected a validation error, got {other:?}"),
        }
    }

    /// The key as created: its scopes each once.
    fn create_api_key(body: Value) -> Result<ApiKeyCreate, ApiError> {
        accept::<ApiKeyCreate>(&body, &ApiConfig::default()).map(|k| ApiKeyCreate {
            scopes: k.scopes(),
            name: k.name,
        })
    }

    #[test]
    fn api_keys_need_a_name_and_known_scopes() {
        let ok = create_api_key(json!({"name": "ci", "scopes": ["read", "execute"]})).unwrap();
        assert_eq!(ok.scopes, [Scope::Read, Scope::Execute]);
        assert_eq!(
            fields(
                create_api_key(json!({"name": "ci", "scopes": ["root"]}))
                    .err()
                    .unwrap()
            ),
            ["scopes[0]"]
        );
        assert_eq!(
            fields(create_api_key(json!({"scopes": ["read"]})).err().unwrap()),
            ["name"]
        );
        let deduped = create_api_key(json!({"name": "ci", "scopes": ["read", "read"]})).unwrap();
        assert_eq!(deduped.scopes, [Scope::Read]);
        assert_eq!(
            fields(
                create_api_key(json!({"name": "ci", "scopes": []}))
                    .err()
                    .unwrap()
            ),
            ["scopes"]
        );
    }
}
