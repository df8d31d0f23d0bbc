//! `/v1/webhooks`.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use k8s_openapi::api::core::v1::Secret;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use serde_json::Value;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::pagination::Page;
use super::views::{WebhookCreated, WebhookView};

use super::auth::{Principal, Scope};
use super::cache;
use super::error::{ApiError, ApiResult, Missing, not_found_as, write_error};
use super::input;
use super::json::ApiJson;
use super::pagination::{self, SortKey};
use super::state::ApiState;
use super::workflows::{find as find_workflow, location};
use flowline_core::clock::now_ms;
use flowline_core::crd::timestamps::{created_at, creation_annotations};
use flowline_core::crd::{SecretReference, Webhook, WebhookSpec};
use flowline_core::delivery::signing::generate_secret;
use flowline_core::ids::new_id;

/// The routes, as the handlers' `#[utoipa::path]` declare them (one declaration
/// serves the router and the OpenAPI document).
pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(show, remove))
}

pub(crate) fn find(
    state: &ApiState,
    namespace: &str,
    id: &str,
) -> ApiResult<std::sync::Arc<Webhook>> {
    cache::get(&state.caches.webhooks, namespace, id).ok_or(ApiError::NotFound(Missing::Webhook))
}

#[utoipa::path(get, path = "/v1/webhooks", operation_id = "webhooks.list", tag = "webhooks", description = "Scope: `read`.",
    params(crate::openapi::PageQuery),
    responses((status = 200, description = "A page of webhooks", body = crate::pagination::Page<WebhookView>),
              (status = 400, description = "Bad limit or cursor")))]
async fn list(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Page<WebhookView>>> {
    who.require(Scope::Read)?;
    let q = pagination::parse_query(query.as_deref(), None)?;
    let items = state
        .caches
        .webhooks
        .in_namespace(&who.namespace)
        .into_iter()
        .map(|h| {
            (
                SortKey::new(created_at(&h.metadata), &h.name_any()),
                WebhookView::from(&*h),
            )
        })
        .collect();
    Ok(Json(pagination::paginate(items, &q)))
}

#[utoipa::path(get, path = "/v1/webhooks/{id}", operation_id = "webhooks.get", tag = "webhooks", description = "Scope: `read`.",
    params(("id" = String, Path, description = "Webhook id")),
    responses((status = 200, description = "The webhook", body = WebhookView),
              (status = 404, description = "No such webhook")))]
async fn show(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<WebhookView>> {
    who.require(Scope::Read)?;
    Ok(Json(WebhookView::from(&*find(
        &state,
        &who.namespace,
        &id,
    )?)))
}

#[utoipa::path(post, path = "/v1/webhooks", operation_id = "webhooks.create", tag = "webhooks", description = "Scope: `write`.",
    request_body = crate::input::WebhookCreate,
    responses((status = 201, description = "Created; the secret is shown only here", body = WebhookCreated,
               headers(("Location" = String, description = "Path of the new webhook"))),
              (status = 404, description = "No such workflow (workflow_id)")))]
async fn create(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    who.require(Scope::Write)?;
    let req = input::create_webhook(body, state.config.allow_http_webhooks)?;
    if let Some(wf) = &req.workflow_id {
        find_workflow(&state, &who.namespace, wf)?;
    }
    let id = new_id("wh");
    let secret_name = format!("{id}-signing");
    let mut hook = Webhook::new(
        &id,
        WebhookSpec {
            allow_insecure_http: req.url.starts_with("http://"),
            url: req.url,
            events: req.events,
            workflow_ref: req.workflow_id,
            secret_ref: Some(SecretReference {
                name: secret_name.clone(),
            }),
        },
    );
    hook.metadata.annotations = Some(creation_annotations(now_ms()));
    let hooks: Api<Webhook> = Api::namespaced(state.client.clone(), &who.namespace);
    let created = hooks
        .create(&ApiState::post_params(), &hook)
        .await
        .map_err(write_error)?;

    // The Secret is owned by the Webhook, so deleting the webhook deletes it.
    let value = generate_secret();
    let secret = flowline_delivery::secrets::owned_secret(&created, &value);
    let secrets: Api<Secret> = Api::namespaced(state.client.clone(), &who.namespace);
    if let Err(err) = secrets.create(&ApiState::post_params(), &secret).await {
        // Leave nothing half-made behind.
        let _ = hooks.delete(&id, &DeleteParams::background()).await;
        return Err(err.into());
    }
    cache::await_write(&state.caches.webhooks, &created).await;
    Ok((
        StatusCode::CREATED,
        location(format!("/v1/webhooks/{id}")),
        Json(WebhookCreated {
            webhook: WebhookView::from(&created),
            secret: value.clone(),
        }),
    ))
}

#[utoipa::path(delete, path = "/v1/webhooks/{id}", operation_id = "webhooks.delete", tag = "webhooks", description = "Scope: `write`.",
    params(("id" = String, Path, description = "Webhook id")),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such webhook")))]
async fn remove(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    who.require(Scope::Write)?;
    find(&state, &who.namespace, &id)?;
    let hooks: Api<Webhook> = Api::namespaced(state.client.clone(), &who.namespace);
    hooks
        .delete(&id, &DeleteParams::background())
        .await
        .map_err(|e| not_found_as(e, Missing::Webhook))?;
    cache::await_delete(&state.caches.webhooks, &who.namespace, &id).await;
    Ok(StatusCode::NO_CONTENT)
}
