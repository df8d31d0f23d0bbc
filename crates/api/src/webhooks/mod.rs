//! `/v1/webhooks`: event subscriptions, with their delivery attempts, redeliveries and
//! signing-secret rotation ([`deliveries`]).

pub mod deliveries;
pub mod input;
pub mod views;

#[cfg(test)]
mod error_paths;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use self::input::WebhookCreate;
use self::views::{WebhookCreated, WebhookView};
use crate::cache;
use crate::plumbing::auth::{Authorized, needs};
use crate::plumbing::error::{ApiError, ApiResult, Missing, not_found_as, write_error};
use crate::plumbing::json::Valid;
use crate::plumbing::pagination::{self, Page, SortKey};
use crate::plumbing::path::Path;
use crate::state::ApiState;
use crate::workflows::{find as find_workflow, location};
use flowline_core::clock::now_ms;
use flowline_core::crd::timestamps::{created_at, creation_annotations};
use flowline_core::crd::{Webhook, WebhookSpec};
use flowline_core::delivery::signing::generate_secret;
use flowline_core::delivery::signing_secrets::{self, SigningSecrets};
use flowline_core::ids::new_id;

/// The routes, as the handlers' `#[utoipa::path]` declare them (one declaration
/// serves the router and the OpenAPI document).
pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(show, remove))
        .merge(deliveries::router())
}

pub(crate) fn find(
    state: &ApiState,
    namespace: &str,
    id: &str,
) -> ApiResult<std::sync::Arc<Webhook>> {
    cache::get(&state.caches.webhooks, namespace, id).ok_or(ApiError::NotFound(Missing::Webhook))
}

#[utoipa::path(get, path = "/v1/webhooks", operation_id = "webhooks.list", summary = "List webhooks", tag = "webhooks", description = "Scope: `read`.",
    params(crate::openapi::PageQuery),
    responses((status = 200, description = "A page of webhooks", body = Page<WebhookView>),
              (status = 400, description = "Bad limit or cursor")))]
async fn list(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Page<WebhookView>>> {
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

#[utoipa::path(get, path = "/v1/webhooks/{id}", operation_id = "webhooks.get", summary = "Get a webhook", tag = "webhooks", description = "Scope: `read`.",
    params(("id" = String, Path, description = "Webhook id")),
    responses((status = 200, description = "The webhook", body = WebhookView),
              (status = 404, description = "No such webhook")))]
async fn show(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
    Path(id): Path<String>,
) -> ApiResult<Json<WebhookView>> {
    Ok(Json(WebhookView::from(&*find(
        &state,
        &who.namespace,
        &id,
    )?)))
}

#[utoipa::path(post, path = "/v1/webhooks", operation_id = "webhooks.create", summary = "Create a webhook", tag = "webhooks", description = "Scope: `write`.",
    request_body = WebhookCreate,
    responses((status = 201, description = "Created; the secret is shown only here", body = WebhookCreated,
               headers(("Location" = String, description = "Path of the new webhook"))),
              (status = 404, description = "No such workflow (workflow_id)")))]
async fn create(
    State(state): State<ApiState>,
    who: Authorized<needs::Write>,
    Valid(body): Valid<WebhookCreate>,
) -> ApiResult<impl IntoResponse> {
    if let Some(wf) = &body.workflow_id {
        find_workflow(&state, &who.namespace, wf)?;
    }
    let id = new_id("wh");
    let url = body.normalized_url();
    let mut hook = Webhook::new(
        &id,
        WebhookSpec {
            allow_insecure_http: url.starts_with("http://"),
            url,
            events: body.events,
            workflow_ref: body.workflow_id,
            secret_ref: None,
        },
    );
    // The signing secret is sealed into the Webhook itself: no Secret is made.
    let value = generate_secret();
    let mut annotations = creation_annotations(now_ms());
    annotations.insert(
        signing_secrets::ANNOTATION.into(),
        SigningSecrets::new(&value).seal(&state.seal, &who.namespace, &id),
    );
    hook.metadata.annotations = Some(annotations);
    let hooks: Api<Webhook> = Api::namespaced(state.client.clone(), &who.namespace);
    let created = hooks
        .create(&ApiState::post_params(), &hook)
        .await
        .map_err(write_error)?;
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

#[utoipa::path(delete, path = "/v1/webhooks/{id}", operation_id = "webhooks.delete", summary = "Delete a webhook", tag = "webhooks", description = "Scope: `write`.",
    params(("id" = String, Path, description = "Webhook id")),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such webhook")))]
async fn remove(
    State(state): State<ApiState>,
    who: Authorized<needs::Write>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    find(&state, &who.namespace, &id)?;
    let hooks: Api<Webhook> = Api::namespaced(state.client.clone(), &who.namespace);
    hooks
        .delete(&id, &DeleteParams::background())
        .await
        .map_err(|e| not_found_as(e, Missing::Webhook))?;
    cache::await_delete(&state.caches.webhooks, &who.namespace, &id).await;
    Ok(StatusCode::NO_CONTENT)
}
