//! `/v1/api-keys` (admin scope), and key creation shared with the CLI.

pub mod input;
pub mod migrate;
pub mod views;

#[cfg(test)]
mod error_paths;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use self::input::ApiKeyCreate;
use self::views::{ApiKeyCreated, ApiKeyView};
use crate::cache;
use crate::plumbing::auth::{Authorized, KeyRecord, Scope, generate_key, hash_key, needs};
use crate::plumbing::error::{ApiError, ApiResult, Missing, not_found_as};
use crate::plumbing::json::Valid;
use crate::plumbing::pagination::{self, Page, SortKey};
use crate::plumbing::path::Path;
use crate::state::{ApiState, FIELD_MANAGER};
use crate::workflows::location;
use flowline_core::crd::{ApiKey, ApiKeySpec};
use flowline_core::ids::new_id;

/// The routes, as the handlers' `#[utoipa::path]` declare them (one declaration
/// serves the router and the OpenAPI document).
pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(remove))
        .routes(routes!(current))
}

/// A key just created: its object, its record, and its value (shown once).
pub struct CreatedKey {
    pub key: ApiKey,
    pub record: KeyRecord,
    pub value: String,
}

/// Creates a key in `namespace`.
pub async fn create_key(
    client: Client,
    namespace: &str,
    name: &str,
    scopes: &[Scope],
) -> Result<CreatedKey, kube::Error> {
    let value = generate_key();
    let key = ApiKey::new(
        &new_id("key"),
        ApiKeySpec {
            name: name.to_string(),
            scopes: scopes.to_vec(),
            sha256: hash_key(&value),
        },
    );
    let api: Api<ApiKey> = Api::namespaced(client, namespace);
    let params = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    let created = api.create(&params, &key).await?;
    let record = KeyRecord::from_key(&created).ok_or_else(|| {
        kube::Error::Service("the API server returned a key without a namespace".into())
    })?;
    Ok(CreatedKey {
        key: created,
        record,
        value,
    })
}

/// Keys of a namespace straight from the API server (for the CLI).
pub async fn list_keys(client: Client, namespace: &str) -> Result<Vec<KeyRecord>, kube::Error> {
    let api: Api<ApiKey> = Api::namespaced(client, namespace);
    let list = api.list(&kube::api::ListParams::default()).await?;
    Ok(list.items.iter().filter_map(KeyRecord::from_key).collect())
}

fn find(state: &ApiState, namespace: &str, id: &str) -> ApiResult<KeyRecord> {
    cache::get(&state.caches.api_keys, namespace, id)
        .and_then(|k| KeyRecord::from_key(&k))
        .ok_or(ApiError::NotFound(Missing::ApiKey))
}

#[utoipa::path(get, path = "/v1/api-keys", operation_id = "apiKeys.list", summary = "List API keys", tag = "api-keys", description = "Scope: `admin`. Never shows key values.",
    params(crate::openapi::PageQuery),
    responses((status = 200, description = "A page of keys", body = Page<ApiKeyView>),
              (status = 400, description = "Bad limit or cursor")))]
async fn list(
    State(state): State<ApiState>,
    who: Authorized<needs::Admin>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Page<ApiKeyView>>> {
    let q = pagination::parse_query(query.as_deref(), None)?;
    let items = state
        .caches
        .api_keys
        .in_namespace(&who.namespace)
        .into_iter()
        .filter_map(|k| KeyRecord::from_key(&k))
        .map(|k| {
            let at = k.created_at.unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            (SortKey::new(at, &k.id), ApiKeyView::from(&k))
        })
        .collect();
    Ok(Json(pagination::paginate(items, &q)))
}

#[utoipa::path(post, path = "/v1/api-keys", operation_id = "apiKeys.create", summary = "Create an API key", tag = "api-keys", description = "Scope: `admin`.",
    request_body = ApiKeyCreate,
    responses((status = 201, description = "Created; the value is shown only here", body = ApiKeyCreated,
               headers(("Location" = String, description = "Path of the new key")))))]
async fn create(
    State(state): State<ApiState>,
    who: Authorized<needs::Admin>,
    Valid(body): Valid<ApiKeyCreate>,
) -> ApiResult<impl IntoResponse> {
    let key = create_key(
        state.client.clone(),
        &who.namespace,
        &body.name,
        &body.scopes(),
    )
    .await?;
    cache::await_write(&state.caches.api_keys, &key.key).await;
    let location = location(format!("/v1/api-keys/{}", key.record.id));
    Ok((
        StatusCode::CREATED,
        location,
        Json(ApiKeyCreated {
            api_key: ApiKeyView::from(&key.record),
            key: key.value.clone(),
        }),
    ))
}

#[utoipa::path(get, path = "/v1/me", operation_id = "apiKeys.current", summary = "The calling key", tag = "api-keys",
    description = "Scope: `read` (every scope includes it). The key the request is made with — its id, name and scopes, never its value — so a client can tell what it may do without trying.",
    responses((status = 200, description = "The calling key", body = ApiKeyView)))]
async fn current(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
) -> ApiResult<Json<ApiKeyView>> {
    let key = find(&state, &who.namespace, &who.key_id)?;
    Ok(Json(ApiKeyView::from(&key)))
}

#[utoipa::path(delete, path = "/v1/api-keys/{id}", operation_id = "apiKeys.delete", summary = "Revoke an API key", tag = "api-keys", description = "Scope: `admin`. Revokes the key.",
    params(("id" = String, Path, description = "Key id")),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such key")))]
async fn remove(
    State(state): State<ApiState>,
    who: Authorized<needs::Admin>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    find(&state, &who.namespace, &id)?;
    let api: Api<ApiKey> = Api::namespaced(state.client.clone(), &who.namespace);
    api.delete(&id, &DeleteParams::background())
        .await
        .map_err(|e| not_found_as(e, Missing::ApiKey))?;
    cache::await_delete(&state.caches.api_keys, &who.namespace, &id).await;
    Ok(StatusCode::NO_CONTENT)
}
