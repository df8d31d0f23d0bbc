//! `POST /v1/hooks/{workflow_id}`: inbound webhooks. No API key: the request is
//! verified with the Standard Webhooks scheme ([`verify`]) against the workflow's
//! inbound secret ([`secret`]), and a verified request starts a run.
//!
//! Everything before the run is created is answered from the watch caches, so a flood
//! of bad requests costs a cache lookup and one HMAC each and never reaches the API
//! server. The per-address budget of unauthenticated requests applies (see
//! `plumbing::middleware::limit_by_address`).

pub mod input;
pub mod secret;
pub mod verify;
pub mod views;

#[cfg(test)]
mod error_paths;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use kube::{Api, ResourceExt};
use serde_json::Value;
use sha2::{Digest, Sha256};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use self::verify::{SignedHeaders, VerifyError};
use self::views::HookAccepted;
use crate::cache;
use crate::plumbing::error::{ApiError, ApiResult, write_error};
use crate::plumbing::json::read_body_any_type;
use crate::plumbing::path::Path;
use crate::state::ApiState;
use flowline_core::clock::now_ms;
use flowline_core::crd::{Run, RunTrigger, TriggerType, Workflow, WorkflowState};
use flowline_telemetry::access_log::in_request;

/// Request headers a webhook run records as `trigger.headers`. Only headers that say
/// what sent the request and how: never credentials (`authorization`, cookies) nor
/// the signature.
pub const RECORDED_HEADERS: [&str; 4] = [
    "content-type",
    "user-agent",
    "webhook-id",
    "webhook-timestamp",
];
/// Longest recorded header value; longer values are cut.
const MAX_HEADER_VALUE: usize = 512;

/// The routes, as the handlers' `#[utoipa::path]` declare them (one declaration
/// serves the router and the OpenAPI document).
pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(receive))
}

/// The workflow a hook addresses: the one workflow with this id in the namespaces
/// served, if its trigger is `webhook` and it is active. Ids made by the API are
/// random; a name that kubectl users gave workflows in several namespaces addresses
/// none of them. Found through the workflow cache's index of names (the namespaces
/// each name is found in), so an unauthenticated request costs one look-up per
/// workflow of that name, not one per account.
fn hook_workflow(state: &ApiState, id: &str) -> Option<Arc<Workflow>> {
    let mut found = state.caches.workflows.named(id).into_iter();
    let wf = found.next()?;
    let usable = found.next().is_none()
        && wf.spec.trigger.type_ == TriggerType::Webhook
        && wf.spec.state == WorkflowState::Active;
    usable.then_some(wf)
}

/// The name of the run a hook starts, derived from the workflow and the `webhook-id`,
/// so two deliveries of one message race for one name and the API server lets exactly
/// one create it. `run-` and 10 base-36 characters, the shape of every run id.
pub fn run_name(namespace: &str, workflow: &str, webhook_id: &str) -> String {
    let digest = Sha256::new()
        .chain_update(namespace)
        .chain_update([0])
        .chain_update(workflow)
        .chain_update([0])
        .chain_update(webhook_id)
        .finalize();
    let mut n = u64::from_be_bytes(digest[..8].try_into().unwrap_or_default());
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let tail: String = (0..10)
        .map(|_| {
            let c = ALPHABET[(n % 36) as usize] as char;
            n /= 36;
            c
        })
        .collect();
    format!("run-{tail}")
}

/// The allow-listed headers of a request, lowercase names, values cut to
/// `MAX_HEADER_VALUE` bytes; values that are not visible ASCII are left out.
pub fn recorded_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    RECORDED_HEADERS
        .iter()
        .filter_map(|name| {
            let value = headers.get(*name)?.to_str().ok()?;
            // `to_str` admits visible ASCII only, so any byte is a character boundary.
            let end = value.len().min(MAX_HEADER_VALUE);
            Some((name.to_string(), value[..end].to_string()))
        })
        .collect()
}

#[utoipa::path(post, path = "/v1/hooks/{workflow_id}", operation_id = "hooks.receive", summary = "Start a run from a signed inbound hook", tag = "hooks",
    description = "No API key: signed with the workflow's inbound secret (Standard Webhooks: \
        `webhook-id`, `webhook-timestamp`, `webhook-signature`). Starts a run of an active \
        webhook-triggered workflow with the body (a JSON object) as `trigger.payload`. A repeated \
        `webhook-id` answers with the first run's id and starts nothing. Counts against the \
        per-address budget of unauthenticated requests.",
    security(()),
    params(("workflow_id" = String, Path, description = "Workflow id"),
           ("webhook-id" = String, Header, description = "Message id; the idempotency key"),
           ("webhook-timestamp" = i64, Header, description = "Unix seconds; within 5 minutes of the server's clock"),
           ("webhook-signature" = String, Header, description = "Space-separated `v1,<base64 HMAC-SHA256>` entries")),
    request_body(content = HashMap<String, Value>, content_type = "application/json", description = "Any JSON object, at most 1 MiB, nested at most 32 deep"),
    responses((status = 202, description = "A run started (or had started for this webhook-id)", body = HookAccepted),
              (status = 400, description = "The body is not a JSON object, or nested too deep"),
              (status = 401, description = "`invalid_signature`: headers missing, timestamp out of tolerance, or no signature matches"),
              (status = 404, description = "`hook_not_found`: no active webhook-triggered workflow has this id"),
              (status = 413, description = "The body is larger than 1 MiB"),
              (status = 429, description = "The address's budget of unauthenticated requests is spent")))]
async fn receive(
    State(state): State<ApiState>,
    Path(workflow_id): Path<String>,
    req: Request,
) -> ApiResult<(StatusCode, Json<HookAccepted>)> {
    let wf = hook_workflow(&state, &workflow_id).ok_or(ApiError::HookNotFound)?;
    let namespace = wf.namespace().unwrap_or_default();
    let headers = req.headers().clone();
    let body = read_body_any_type(req).await?;
    let Some(secret) = secret::current(&state.seal, &wf) else {
        // Answered like a wrong signature: the sender cannot fix this, the owner can.
        in_request(
            || tracing::warn!(%namespace, workflow = %workflow_id, "webhook refused: the workflow has no inbound secret (rotate it to make one)"),
        );
        return Err(VerifyError::NoMatch.into());
    };
    let now = jiff::Timestamp::now().as_second();
    let verified = verify::verify(SignedHeaders::from_map(&headers), &secret, &body, now)?;
    let payload = Value::Object(input::payload(&body)?);
    let name = run_name(&namespace, &workflow_id, verified.id);
    let mut run = Run::of_workflow(&wf, &name, RunTrigger::Webhook, Some(payload), now_ms());
    run.spec.headers = Some(recorded_headers(&headers));
    crate::runs::check_spec_size(
        &run,
        "body",
        "the body and the workflow's steps together",
        "send a smaller body or make the steps' inputs smaller",
    )?;
    let api: Api<Run> = Api::namespaced(state.client.clone(), &namespace);
    match api.create(&ApiState::post_params(), &run).await {
        Ok(created) => {
            cache::await_write(&state.caches.runs, &created).await;
            Ok(accepted(created.name_any()))
        }
        // The same webhook-id again (a retry, or a concurrent duplicate): the run that
        // exists is the answer, provided it is this workflow's.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = api.get(&name).await.map_err(write_error)?;
            if existing.spec.workflow_ref != workflow_id {
                return Err(ApiError::Internal(anyhow::anyhow!(
                    "run {name} exists and belongs to workflow {}",
                    existing.spec.workflow_ref
                )));
            }
            Ok(accepted(name))
        }
        Err(e) => Err(write_error(e)),
    }
}

fn accepted(run_id: String) -> (StatusCode, Json<HookAccepted>) {
    (StatusCode::ACCEPTED, Json(HookAccepted { run_id }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_are_stable_distinct_and_shaped_like_run_ids() {
        let a = run_name("team", "wf-1", "msg_1");
        assert_eq!(a, run_name("team", "wf-1", "msg_1"));
        assert_eq!(a.len(), 14);
        assert!(
            a[4..]
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        );
        for other in [
            run_name("team", "wf-1", "msg_2"),
            run_name("team", "wf-2", "msg_1"),
            run_name("other", "wf-1", "msg_1"),
            // The separator keeps the parts apart.
            run_name("team", "wf-1m", "sg_1"),
        ] {
            assert_ne!(a, other);
        }
    }

    #[test]
    fn only_allow_listed_headers_are_recorded() {
        let mut headers = HeaderMap::new();
        for (k, v) in [
            ("content-type", "application/json"),
            ("authorization", "Bearer flk_secret"),
            ("cookie", "session=1"),
            ("webhook-signature", "v1,abc"),
            ("webhook-id", "msg_1"),
        ] {
            headers.insert(k, v.parse().unwrap());
        }
        headers.insert("user-agent", "a".repeat(600).parse().unwrap());
        let recorded = recorded_headers(&headers);
        assert_eq!(
            recorded.keys().collect::<Vec<_>>(),
            ["content-type", "user-agent", "webhook-id"]
        );
        assert_eq!(recorded["user-agent"].len(), 512, "long values are cut");
    }
}
