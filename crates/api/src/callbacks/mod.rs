//! `POST /v1/callbacks/{token}`: completes a `callback` step. No API key: the token in
//! the URL is the credential (`flowline_core::engine::callback`).
//!
//! A token names its run, so the look-up is one read of the watch cache, which keeps
//! only digests of tokens; a made-up token never reaches the API server. Only a token
//! that matches is followed by a read of the whole run and one conditional write of
//! the body into its `spec.callbacks`, which the engine reads as the step's output.
//! The per-address budget of unauthenticated requests applies, as for inbound hooks.

use axum::Json;
use axum::extract::{Request, State};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::cache;
use crate::plumbing::error::{ApiError, ApiResult, write_error};
use crate::plumbing::json::{parse, read_body_any_type};
use crate::plumbing::path::Path;
use crate::state::ApiState;
use flowline_core::crd::{CallbackReceived, Run, StepPhase};
use flowline_core::engine::callback;

/// Largest callback body: the body becomes the step's output, which is kept up to this.
pub const MAX_CALLBACK_BODY: usize = flowline_core::engine::output::MAX_STEP_OUTPUT;

/// Writes tried before giving up when the run keeps changing under the call.
const WRITE_TRIES: usize = 5;

pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(receive))
}

/// The answer to a call that completed its step.
#[derive(Serialize, ToSchema)]
pub struct CallbackAccepted {
    pub run_id: String,
    pub step_id: String,
}

#[utoipa::path(post, path = "/v1/callbacks/{token}", operation_id = "callbacks.receive", summary = "Complete a callback step", tag = "callbacks",
    description = "No API key: the token is the credential. Completes the `callback` step the \
        URL belongs to with the body (any JSON value, at most 64 KiB) as its output. A URL \
        accepts one call. Counts against the per-address budget of unauthenticated requests.",
    security(()),
    params(("token" = String, Path, description = "The token of the step's URL (`{{ callbacks.<id>.url }}`)")),
    request_body(content = Value, content_type = "application/json", description = "Any JSON value, at most 64 KiB, nested at most 32 deep"),
    responses((status = 200, description = "The step received the body", body = CallbackAccepted),
              (status = 400, description = "The body is not JSON, nested too deep, or over 64 KiB"),
              (status = 404, description = "`callback_not_found`: unknown token, or its step no longer waits"),
              (status = 409, description = "`callback_used`: the URL was already called"),
              (status = 413, description = "The body is larger than 1 MiB"),
              (status = 429, description = "The address's budget of unauthenticated requests is spent")))]
async fn receive(
    State(state): State<ApiState>,
    Path(token): Path<String>,
    req: Request,
) -> ApiResult<Json<CallbackAccepted>> {
    let (namespace, run_id) = callback::parse(&token).ok_or(ApiError::CallbackNotFound)?;
    let cached =
        cache::get(&state.caches.runs, namespace, run_id).ok_or(ApiError::CallbackNotFound)?;
    let step_id = cached
        .status
        .as_ref()
        .and_then(|s| {
            s.callback_tokens
                .iter()
                .find(|t| callback::matches(&token, &t.token))
        })
        .map(|t| t.step_id.clone())
        .ok_or(ApiError::CallbackNotFound)?;
    let bytes = read_body_any_type(req).await?;
    if bytes.len() > MAX_CALLBACK_BODY {
        return Err(ApiError::field(
            "body",
            format!(
                "a callback body may be at most {MAX_CALLBACK_BODY} bytes (it becomes the step's \
                 output); this one is {}",
                bytes.len()
            ),
        ));
    }
    let body: Value = parse(&bytes)?;
    let api: Api<Run> = Api::namespaced(state.client.clone(), namespace);
    for _ in 0..WRITE_TRIES {
        let run = api
            .get_opt(run_id)
            .await?
            .ok_or(ApiError::CallbackNotFound)?;
        let mut received = run.spec.callbacks.clone();
        if received.iter().any(|c| c.step_id == step_id) {
            return Err(ApiError::CallbackUsed);
        }
        if !still_expected(&run, &step_id) {
            return Err(ApiError::CallbackNotFound);
        }
        received.push(CallbackReceived {
            step_id: step_id.clone(),
            body: body.clone(),
            at: Some(flowline_core::clock::now_ms()),
        });
        // Conditional on the run as read: two calls racing write once.
        let patch = json!({
            "metadata": {"resourceVersion": run.resource_version()},
            "spec": {"callbacks": received},
        });
        match api
            .patch(run_id, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                return Ok(Json(CallbackAccepted {
                    run_id: run_id.to_string(),
                    step_id,
                }));
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(write_error(e)),
        }
    }
    Err(ApiError::Unavailable)
}

/// Whether `run`'s callback step `step_id` may still receive its body: the run is
/// unfinished and the step has not ended (it waits, or has not started: a body that
/// comes early is kept for it).
fn still_expected(run: &Run, step_id: &str) -> bool {
    if run.phase().is_finished() {
        return false;
    }
    let record = run
        .status
        .as_ref()
        .and_then(|s| s.steps.iter().find(|r| r.step_id == step_id));
    record.is_none_or(|r| matches!(r.status, StepPhase::Pending | StepPhase::Waiting))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(phase: &str, step: Option<&str>) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n"},
            "spec": {"workflowRef": "wf"},
            "status": {"phase": phase, "steps": step.map_or(json!([]), |s| json!([
                {"stepId": "cb", "name": "cb", "status": s}]))}
        }))
        .unwrap()
    }

    #[test]
    fn a_body_is_expected_until_the_step_or_the_run_ends() {
        let rows = [
            ("running", Some("waiting"), true),
            ("running", Some("pending"), true),
            ("running", None, true),
            ("queued", None, true),
            ("running", Some("failed"), false),
            ("running", Some("succeeded"), false),
            ("running", Some("cancelled"), false),
            ("failed", Some("waiting"), false),
            ("succeeded", None, false),
        ];
        for (phase, step, want) in rows {
            assert_eq!(
                still_expected(&run(phase, step), "cb"),
                want,
                "{phase} {step:?}"
            );
        }
    }
}
