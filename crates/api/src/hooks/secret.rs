//! The inbound secret of a webhook-triggered workflow: the Secret `<workflow>-hook` of
//! type `flowline.io/hook-secret`, owned by the Workflow, made when the trigger becomes
//! `webhook` and replaced by `POST /v1/workflows/{id}/hook-secret/rotate` (a handler of
//! [`crate::workflows`]).
//!
//! The value is shown once, in the response that made it. A rotation replaces it at
//! once, without an overlap: the secret is shared with one sender that the user
//! controls and reconfigures in the same step, unlike outbound secrets, which
//! receivers we do not control must pick up.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Patch;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::cache;
use crate::plumbing::error::{ApiError, ApiResult, write_error};
use crate::state::ApiState;
use flowline_core::crd::{TriggerType, Workflow};
use flowline_core::delivery::signing::generate_secret;
use flowline_delivery::secrets::{SECRET_KEY, text};

/// `type` of inbound hook Secrets: a type of its own, so the API never mistakes another
/// Secret for one (or overwrites it), and workflow templates cannot read it (every
/// `flowline.io/…` type is refused to them).
pub const SECRET_TYPE: &str = "flowline.io/hook-secret";
/// Label naming the workflow a hook Secret belongs to.
pub const LABEL: &str = "flowline.io/hook";

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
