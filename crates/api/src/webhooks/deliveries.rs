//! `/v1/webhooks/{id}/deliveries` (the attempts the worker recorded in the Webhook's
//! status), redelivery requests, and secret rotation.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use kube::api::Patch;
use kube::{Api, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::find;
use super::views::{DeliveryView, RedeliveryAccepted, SecretRotated, WebhookView};
use crate::cache;
use crate::plumbing::auth::{Authorized, needs};
use crate::plumbing::error::{ApiError, ApiResult, Missing, not_found_as};
use crate::plumbing::pagination::{self, Page, SortKey};
use crate::plumbing::path::Path;
use crate::plumbing::time::ApiTime;
use crate::state::ApiState;
use flowline_core::clock::{format_ts, now_ms};
use flowline_core::crd::Webhook;
use flowline_core::delivery::outbox;
use flowline_core::delivery::signing::generate_secret;
use flowline_core::delivery::signing_secrets::{self, SigningSecrets};
use flowline_core::ids::new_token_id;
use flowline_delivery::secrets::ROTATED_ANNOTATION;
use flowline_delivery::worker::{REDELIVER_ANNOTATION, REDELIVERY_REQUESTS, redelivery_requests};

/// The routes, as the handlers' `#[utoipa::path]` declare them (one declaration
/// serves the router and the OpenAPI document).
pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(retry))
        .routes(routes!(rotate_secret))
}

#[utoipa::path(get, path = "/v1/webhooks/{id}/deliveries", operation_id = "webhooks.deliveries.list", summary = "List delivery attempts of a webhook", tag = "webhooks",
    description = "Scope: `read`. The most recent delivery attempts (the last 50), newest first.",
    params(("id" = String, Path, description = "Webhook id"), crate::openapi::PageQuery),
    responses((status = 200, description = "A page of delivery attempts", body = Page<DeliveryView>),
              (status = 400, description = "Bad limit or cursor"),
              (status = 404, description = "No such webhook")))]
async fn list(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Page<DeliveryView>>> {
    let q = pagination::parse_query(query.as_deref(), None)?;
    let hook = find(&state, &who.namespace, &id)?;
    let items = hook
        .status
        .iter()
        .flat_map(|s| s.recent_attempts.iter())
        .map(|a| (SortKey::new(a.at, &a.id), DeliveryView::from(a)))
        .collect();
    Ok(Json(pagination::paginate(items, &q)))
}

#[utoipa::path(post, path = "/v1/webhooks/{id}/deliveries/{delivery_id}/retry", operation_id = "webhooks.deliveries.retry", summary = "Deliver an event again", tag = "webhooks",
    description = "Scope: `write`. Sends the event of this delivery once more (a new attempt with the same event id).",
    params(("id" = String, Path, description = "Webhook id"),
           ("delivery_id" = String, Path, description = "Delivery attempt id")),
    responses((status = 202, description = "Queued", body = RedeliveryAccepted),
              (status = 404, description = "No such webhook or delivery"),
              (status = 409, description = "The event is no longer stored")))]
async fn retry(
    State(state): State<ApiState>,
    who: Authorized<needs::Write>,
    Path((id, delivery_id)): Path<(String, String)>,
) -> ApiResult<(StatusCode, Json<RedeliveryAccepted>)> {
    let hook = find(&state, &who.namespace, &id)?;
    let attempt = hook
        .status
        .iter()
        .flat_map(|s| s.recent_attempts.iter())
        .find(|a| a.id == delivery_id)
        .cloned()
        .ok_or(ApiError::NotFound(Missing::Delivery))?;
    if !event_stored(&state, &who.namespace, &attempt.event_id) {
        return Err(ApiError::EventExpired);
    }
    let request_id = new_token_id("rdl");
    let hooks: Api<Webhook> = Api::namespaced(state.client.clone(), &who.namespace);
    // Appended under optimistic concurrency: two requests at once must both survive.
    for _ in 0..5 {
        let current = hooks
            .get(&id)
            .await
            .map_err(|e| not_found_as(e, Missing::Webhook))?;
        let mut requests: Vec<serde_json::Value> = redelivery_requests(&current)
            .into_iter()
            .map(|r| json!({"id": r.id, "delivery": r.delivery}))
            .collect();
        requests.push(json!({"id": request_id, "delivery": delivery_id}));
        let excess = requests.len().saturating_sub(REDELIVERY_REQUESTS);
        requests.drain(..excess);
        let patch = json!({"metadata": {
            "resourceVersion": current.resource_version(),
            "annotations": {REDELIVER_ANNOTATION: serde_json::Value::Array(requests).to_string()},
        }});
        match hooks
            .patch(&id, &ApiState::patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                return Ok((
                    StatusCode::ACCEPTED,
                    Json(RedeliveryAccepted {
                        id: request_id,
                        delivery_id,
                        event_id: attempt.event_id,
                        event: attempt.event,
                        status: "queued",
                    }),
                ));
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(not_found_as(e, Missing::Webhook)),
        }
    }
    Err(ApiError::Unavailable)
}

/// Whether a Run or Workflow of the namespace still holds the event.
fn event_stored(state: &ApiState, namespace: &str, event_id: &str) -> bool {
    let runs = state.caches.runs.in_namespace(namespace);
    let workflows = state.caches.workflows.in_namespace(namespace);
    outbox::find(
        runs.iter().map(|r| &**r),
        workflows.iter().map(|w| &**w),
        event_id,
    )
    .is_some()
}

#[utoipa::path(post, path = "/v1/webhooks/{id}/rotate-secret", operation_id = "webhooks.rotateSecret", summary = "Rotate a webhook's signing secret", tag = "webhooks",
    description = "Scope: `write`. Replaces the signing secret. For 24 hours deliveries carry signatures with both secrets (two `v1,` entries in `webhook-signature`); `X-Service-Signature` uses the new one.",
    params(("id" = String, Path, description = "Webhook id")),
    responses((status = 200, description = "The new secret (shown only here)", body = SecretRotated),
              (status = 404, description = "No such webhook")))]
async fn rotate_secret(
    State(state): State<ApiState>,
    who: Authorized<needs::Write>,
    Path(id): Path<String>,
) -> ApiResult<Json<SecretRotated>> {
    let new = generate_secret();
    let now = now_ms();
    let hooks: Api<Webhook> = Api::namespaced(state.client.clone(), &who.namespace);
    // The secrets sealed into the Webhook (none yet: it signed with its Secret, which
    // the API does not read; that one then signs on for the grace period), rotated and
    // written back under the version read, so two rotations never lose one.
    let mut hook = find(&state, &who.namespace, &id)?;
    let mut updated = None;
    for _ in 0..5 {
        let current = hook
            .annotations()
            .get(signing_secrets::ANNOTATION)
            .and_then(|sealed| SigningSecrets::open(&state.seal, &who.namespace, &id, sealed));
        let rotated = SigningSecrets::rotated(current.as_ref(), &new, now);
        let patch = json!({"metadata": {
            "resourceVersion": hook.resource_version(),
            "annotations": {
                signing_secrets::ANNOTATION: rotated.seal(&state.seal, &who.namespace, &id),
                // Tells the worker to drop the keys it cached.
                ROTATED_ANNOTATION: format_ts(now),
            },
        }});
        match hooks
            .patch(&id, &ApiState::patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => {
                updated = Some(written);
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                hook = Arc::new(
                    hooks
                        .get(&id)
                        .await
                        .map_err(|e| not_found_as(e, Missing::Webhook))?,
                );
            }
            Err(e) => return Err(not_found_as(e, Missing::Webhook)),
        }
    }
    let updated = updated.ok_or(ApiError::Unavailable)?;
    cache::await_write(&state.caches.webhooks, &updated).await;
    Ok(Json(SecretRotated {
        webhook: WebhookView::from(&updated),
        secret: new,
        previous_secret_expires_at: ApiTime(now + signing_secrets::ROTATION_GRACE),
    }))
}
