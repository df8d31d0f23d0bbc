//! `/v1/events`: posting events (fanned out to subscribed workflows by the operator's
//! event controller) and reading what they did. An event is a `FlowlineEvent` object in
//! the account's namespace, named after the client's `id` when there is one
//! (`flowline_core::fanout`), so a repeated post within 24 h finds the first event
//! instead of fanning out again.

pub mod input;
pub mod views;

#[cfg(test)]
mod error_paths;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kube::Api;
use kube::api::{DeleteParams, Preconditions};
use serde_json::Map;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use self::input::EventCreate;
use self::views::{EventAccepted, EventListItem, EventView};
use crate::cache;
use crate::plumbing::auth::{Authorized, needs};
use crate::plumbing::error::{ApiError, ApiResult, Missing, write_error};
use crate::plumbing::json::Valid;
use crate::plumbing::pagination::{self, Page, SortKey};
use crate::plumbing::path::Path;
use crate::state::ApiState;
use flowline_core::clock::now_ms;
use flowline_core::crd::{
    EVENT_NAME_RULE, FlowlineEvent, FlowlineEventSpec, event_object_name, valid_event_name,
};
use flowline_core::fanout::{self, Repeat};
use flowline_kube::lenient::Lenient;

/// The routes, as the handlers' `#[utoipa::path]` declare them.
pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list, post))
        .routes(routes!(show))
}

/// Query parameters of `GET /v1/events`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct EventListQuery {
    /// Items per page, 1 to 100 (default 20).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Only events with this name.
    #[param(pattern = "^[a-z0-9][a-z0-9._-]{0,127}$")]
    name: Option<String>,
}

#[utoipa::path(post, path = "/v1/events", operation_id = "events.create", summary = "Post an event", tag = "events",
    description = "Scope: `execute`. Every active workflow of the account with an `event` trigger \
        of this name whose `filter` holds starts one run. With an `id`, a repeated post within \
        24 h answers the first event with 200 and starts nothing.",
    request_body(content = EventCreate, content_type = "application/json"),
    responses((status = 202, description = "Accepted: the runs start shortly", body = EventAccepted),
              (status = 200, description = "An event with this `id` was posted within 24 h: that event", body = EventView)))]
async fn post(
    State(state): State<ApiState>,
    who: Authorized<needs::Execute>,
    Valid(body): Valid<EventCreate>,
) -> ApiResult<Response> {
    let name = fanout::object_name_for(body.id.as_deref());
    let event = FlowlineEvent::new(
        &name,
        FlowlineEventSpec {
            name: body.name,
            payload: Some(serde_json::Value::Object(
                body.payload.unwrap_or_else(Map::new),
            )),
            client_id: body.id,
            received_at: now_ms(),
        },
    );
    let api: Api<FlowlineEvent> = Api::namespaced(state.client.clone(), &who.namespace);
    // Without a client id the name is random: a conflict is an error like any other.
    // With one, the name is taken by the same id's event: within the window that is
    // the answer; after it, the old event makes room. Two rounds cover a post that
    // races another one replacing the same old event.
    for _ in 0..2 {
        match api.create(&ApiState::post_params(), &event).await {
            Ok(created) => {
                cache::await_write(&state.caches.events, &created).await;
                let accepted = EventAccepted { id: created.id() };
                return Ok((StatusCode::ACCEPTED, Json(accepted)).into_response());
            }
            Err(kube::Error::Api(s)) if s.code == 409 && event.spec.client_id.is_some() => {}
            Err(e) => return Err(write_error(e)),
        }
        let Some(existing) = api.get_opt(&name).await? else {
            continue; // deleted meanwhile (retention): create it again
        };
        match fanout::repeat(&existing, now_ms()) {
            Repeat::Same => {
                return Ok((StatusCode::OK, Json(EventView::from(&existing))).into_response());
            }
            Repeat::Replace => {
                // Only that object: if another post replaced it already, this delete
                // fails its precondition and the next round finds the new one.
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: existing.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match api.delete(&name, &params).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Err(ApiError::Unavailable)
}

#[utoipa::path(get, path = "/v1/events", operation_id = "events.list", summary = "List events", tag = "events",
    description = "Scope: `read`. Newest first (by `received_at`, then id). Items have no payload.",
    params(EventListQuery),
    responses((status = 200, description = "A page of events", body = Page<EventListItem>),
              (status = 400, description = "Bad limit, cursor or name")))]
async fn list(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Page<EventListItem>>> {
    let q = pagination::parse_query(query.as_deref(), None)?;
    let name = name_filter(query.as_deref())?;
    let events = state
        .caches
        .events
        .in_namespace(&who.namespace)
        .into_iter()
        .filter(|e| name.as_deref().is_none_or(|n| e.spec.name == n))
        .map(|e| (SortKey::new(e.spec.received_at, &e.id()), e))
        .collect();
    let page = pagination::paginate(events, &q);
    Ok(Json(Page {
        data: page
            .data
            .iter()
            .map(|e| EventListItem::from(&**e))
            .collect(),
        next_cursor: page.next_cursor,
    }))
}

/// The `name` filter of a list: an event name, or a 400 naming `name`.
fn name_filter(query: Option<&str>) -> ApiResult<Option<String>> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|_| ApiError::field("query", "the query string is malformed"))?;
    match pairs.into_iter().find(|(k, _)| k == "name") {
        None => Ok(None),
        Some((_, name)) if valid_event_name(&name) => Ok(Some(name)),
        Some(_) => Err(ApiError::field("name", EVENT_NAME_RULE)),
    }
}

#[utoipa::path(get, path = "/v1/events/{id}", operation_id = "events.get", summary = "Get an event", tag = "events", description = "Scope: `read`.",
    params(("id" = String, Path, description = "Event id (`evt_…`)")),
    responses((status = 200, description = "The event, with the runs it started", body = EventView),
              (status = 404, description = "No such event (`event_not_found`)")))]
async fn show(
    State(state): State<ApiState>,
    who: Authorized<needs::Read>,
    Path(id): Path<String>,
) -> ApiResult<Json<EventView>> {
    Ok(Json(EventView::from(
        &read_whole(&state, &who.namespace, &id).await?,
    )))
}

/// The whole event from the API server (the cache drops payloads). Only ids the
/// account's cache knows reach the API server: any other is not found without a request.
async fn read_whole(state: &ApiState, namespace: &str, id: &str) -> ApiResult<FlowlineEvent> {
    let missing = ApiError::NotFound(Missing::Event);
    let Some(name) = event_object_name(id) else {
        return Err(missing);
    };
    if cache::get(&state.caches.events, namespace, &name).is_none() {
        return Err(missing);
    }
    let api: Api<Lenient<FlowlineEvent>> = Api::namespaced(state.client.clone(), namespace);
    match api.get_opt(&name).await? {
        Some(Lenient::Decoded(event)) => Ok(std::sync::Arc::unwrap_or_clone(event)),
        _ => Err(missing),
    }
}
