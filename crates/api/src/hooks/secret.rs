//! The inbound secret of a webhook-triggered workflow: the Secret `<workflow>-hook` of
//! type `flowline.io/hook-secret`, owned by the Workflow, made when the trigger becomes
//! `webhook` and replaced by `POST /v1/workflows/{id}/hook-secret/rotate`.
//!
//! The value is shown once, in the response that made it. A rotation replaces it at
//! once, without an overlap: the secret is shared with one sender that the user
//! controls and reconfigures in the same step, unlike outbound secrets, which
//! receivers we do not control must pick up.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::{Extension, Json};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Patch;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{Principal, Scope};
use super::cache;
use super::error::{ApiError, ApiResult, write_error};
use super::state::ApiState;
use super::views::WorkflowView;
use super::workflows::find as find_workflow;
use flowline_core::crd::{TriggerType, Workflow};
use flowline_core::delivery::signing::generate_secret;
use flowline_delivery::secrets::{SECRET_KEY, text};

/// `type` of inbound hook Secrets: a type of its own, so the API never mistakes another
/// Secret for one (or overwrites it), and workflow templates cannot read it (every
/// `flowline.io/…` type is refused to them).
pub const SECRET_TYPE: &str = "flowline.io/hook-secret";
/// Label naming the workflow a hook Secret belongs to.
pub const LABEL: &str = "flowline.io/hook";

/// The routes, as the handlers' `#[utoipa::path]` declare them (one declaration
/// serves the router and the OpenAPI document).
pub fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(rotate))
}

/// Name of the Secret holding a workflow's inbound secret.
pub fn secret_name(workflow: &str) -> String {
    format!("{workflow}-hook")
}

/// The secret to verify a workflow's hooks with, from the watch cache. `None` when the
/// Secret is missing or has no `secret` key.
pub fn current(state: &ApiState, namespace: &str, workflow: &str) -> Option<String> {
    let secret = cache::get(
        &state.caches.hook_secrets,
        namespace,
        &secret_name(workflow),
    )?;
    (secret.type_.as_deref() == Some(SECRET_TYPE))
        .then(|| text(&secret, SECRET_KEY))
        .flatten()
}

/// A workflow as `POST`/`PATCH /v1/workflows` return it, with the inbound secret when
/// that request made one.
#[derive(Serialize, ToSchema)]
pub struct WorkflowWithSecret {
    #[serde(flatten)]
    pub workflow: WorkflowView,
    /// The new inbound secret (`whsec_…`), present only in the response that made it:
    /// when the trigger became `webhook`. Store it now; it is not shown again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook_secret: Option<String>,
}

/// Body of a rotation.
#[derive(Serialize, ToSchema)]
pub struct HookSecret {
    /// The new inbound secret (`whsec_…`); the previous one no longer verifies.
    pub hook_secret: String,
}

/// Whether a write that leaves `wf` in place needs a fresh secret: its trigger became
/// `webhook` (from `before`), or it is `webhook` and has no usable secret yet.
pub fn needs_secret(before: Option<TriggerType>, wf: &Workflow, has_secret: bool) -> bool {
    wf.spec.trigger.type_ == TriggerType::Webhook
        && (before != Some(TriggerType::Webhook) || !has_secret)
}

/// Makes a new inbound secret for `wf` and stores it (creating the Secret, or
/// replacing the value of an existing hook Secret), then waits until the API's cache
/// holds it, so the next hook request is verified with it.
pub async fn install(state: &ApiState, wf: &Workflow) -> ApiResult<String> {
    let namespace = wf.namespace().unwrap_or_default();
    let name = secret_name(&wf.name_any());
    let value = generate_secret();
    let api: Api<Secret> = Api::namespaced(state.client.clone(), &namespace);
    let written = match api
        .create(&ApiState::post_params(), &owned_secret(wf, &value))
        .await
    {
        Ok(created) => created,
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // Never overwrite a Secret that is not a hook secret (its type is
            // immutable, so the check cannot go stale).
            let existing = api.get(&name).await.map_err(write_error)?;
            if existing.type_.as_deref() != Some(SECRET_TYPE) {
                return Err(ApiError::field(
                    "trigger.type",
                    format!(
                        "the Secret {name} exists and is not of type {SECRET_TYPE}; \
                         delete or rename it to use a webhook trigger"
                    ),
                ));
            }
            api.patch(
                &name,
                &ApiState::patch_params(),
                &Patch::Merge(json!({"stringData": {SECRET_KEY: value}})),
            )
            .await
            .map_err(write_error)?
        }
        Err(e) => return Err(write_error(e)),
    };
    cache::await_write(&state.caches.hook_secrets, &written).await;
    Ok(value)
}

/// A new hook Secret for `wf`, owned by it (deleting the workflow deletes it).
fn owned_secret(wf: &Workflow, value: &str) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(secret_name(&wf.name_any())),
            namespace: wf.namespace(),
            owner_references: wf.controller_owner_ref(&()).map(|o| vec![o]),
            labels: Some(BTreeMap::from([(LABEL.to_string(), wf.name_any())])),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.into()),
        string_data: Some(BTreeMap::from([(SECRET_KEY.to_string(), value.into())])),
        ..Default::default()
    }
}

#[utoipa::path(post, path = "/v1/workflows/{id}/hook-secret/rotate", operation_id = "workflows.rotateHookSecret", tag = "workflows",
    description = "Scope: `write`. Replaces the inbound secret of a webhook-triggered workflow; the previous one stops verifying at once.",
    params(("id" = String, Path, description = "Workflow id")),
    responses((status = 200, description = "The new secret, shown only here", body = HookSecret),
              (status = 404, description = "No such workflow"),
              (status = 409, description = "The workflow's trigger is not `webhook`")))]
async fn rotate(
    State(state): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<HookSecret>> {
    who.require(Scope::Write)?;
    let wf = find_workflow(&state, &who.namespace, &id)?;
    if wf.spec.trigger.type_ != TriggerType::Webhook {
        return Err(ApiError::NotWebhookTriggered);
    }
    let hook_secret = install(&state, &wf).await?;
    Ok(Json(HookSecret { hook_secret }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wf(trigger: &str) -> Workflow {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "wf-1", "namespace": "team", "uid": "u-1"},
            "spec": {"name": "W", "trigger": {"type": trigger}},
        }))
        .unwrap()
    }

    #[test]
    fn a_secret_is_made_when_the_trigger_becomes_webhook_or_has_none() {
        use TriggerType::*;
        let hook = wf("webhook");
        assert!(needs_secret(None, &hook, false), "created as webhook");
        assert!(
            needs_secret(Some(Manual), &hook, true),
            "switched to webhook"
        );
        assert!(!needs_secret(Some(Webhook), &hook, true), "unchanged: kept");
        assert!(needs_secret(Some(Webhook), &hook, false), "lost: remade");
        assert!(!needs_secret(Some(Webhook), &wf("manual"), false));
    }

    #[test]
    fn the_secret_is_owned_typed_and_labelled() {
        let secret = owned_secret(&wf("webhook"), "whsec_x");
        assert_eq!(secret.metadata.name.as_deref(), Some("wf-1-hook"));
        assert_eq!(secret.type_.as_deref(), Some(SECRET_TYPE));
        let owner = &secret.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Workflow", "u-1")
        );
        assert_eq!(secret.metadata.labels.as_ref().unwrap()[LABEL], "wf-1");
        assert_eq!(text(&secret, SECRET_KEY).as_deref(), Some("whsec_x"));
    }
}
