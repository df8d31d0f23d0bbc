//! The inbound secret of a webhook-triggered workflow, sealed into the Workflow itself
//! ([`flowline_core::sealed`]): made when the trigger becomes `webhook` and replaced by
//! `POST /v1/workflows/{id}/hook-secret/rotate` (a handler of [`crate::workflows`]),
//! it is the annotation `flowline.io/hook-secret`. A workflow applied with kubectl can
//! bring its own in a Secret `<workflow>-hook` of type `flowline.io/hook-secret`, which
//! the workflow controller seals into the Workflow's status; the annotation, when set,
//! wins. Either way the API reads secrets from its cache of Workflows, never from
//! Secrets.
//!
//! The value is shown once, in the response that made it. A rotation replaces it at
//! once, without an overlap: the secret is shared with one sender that the user
//! controls and reconfigures in the same step, unlike outbound secrets, which
//! receivers we do not control must pick up.

use kube::api::Patch;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::cache;
use crate::plumbing::error::{ApiResult, write_error};
use crate::state::ApiState;
use flowline_core::crd::{TriggerType, Workflow};
use flowline_core::delivery::signing::generate_secret;
use flowline_core::sealed::{ANNOTATION, SealKey};

/// The secret to verify `wf`'s hooks with: the one the API sealed into its annotation,
/// else the one the controller sealed into its status from the workflow's Secret.
/// `None` when it has neither, or neither opens with this installation's key.
pub fn current(seal: &SealKey, wf: &Workflow) -> Option<String> {
    let (namespace, name) = (wf.namespace().unwrap_or_default(), wf.name_any());
    let sealed = match wf.annotations().get(ANNOTATION) {
        Some(sealed) => sealed.as_str(),
        None => wf.status.as_ref()?.hook_secret.as_ref()?.sealed.as_str(),
    };
    seal.open(ANNOTATION, &namespace, &name, sealed)
}

/// Whether a write that leaves `wf` in place needs a fresh secret: its trigger became
/// `webhook` (from `before`), or it is `webhook` and has no usable secret yet.
pub fn needs_secret(before: Option<TriggerType>, wf: &Workflow, has_secret: bool) -> bool {
    wf.spec.trigger.type_ == TriggerType::Webhook
        && (before != Some(TriggerType::Webhook) || !has_secret)
}

/// Makes a new inbound secret for `wf` and seals it into its annotation, then waits
/// until the API's cache holds it, so the next hook request is verified with it.
pub async fn install(state: &ApiState, wf: &Workflow) -> ApiResult<String> {
    let namespace = wf.namespace().unwrap_or_default();
    let name = wf.name_any();
    let value = generate_secret();
    let sealed = state.seal.seal(ANNOTATION, &namespace, &name, &value);
    let api: Api<Workflow> = Api::namespaced(state.client.clone(), &namespace);
    let written = api
        .patch(
            &name,
            &ApiState::patch_params(),
            &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION: sealed}}})),
        )
        .await
        .map_err(write_error)?;
    cache::await_write(&state.caches.workflows, &written).await;
    Ok(value)
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
    fn the_annotation_wins_over_the_status_and_opens_only_for_its_workflow() {
        let key = SealKey::new(&[3; 32]).unwrap();
        let mut hook = wf("webhook");
        assert_eq!(current(&key, &hook), None, "none yet");
        hook.status = Some(flowline_core::crd::WorkflowStatus {
            hook_secret: Some(flowline_core::crd::SealedHookSecret {
                sealed: key.seal(ANNOTATION, "team", "wf-1", "whsec_from_secret"),
                source_version: "7".into(),
            }),
            ..Default::default()
        });
        assert_eq!(current(&key, &hook).as_deref(), Some("whsec_from_secret"));
        hook.annotations_mut().insert(
            ANNOTATION.into(),
            key.seal(ANNOTATION, "team", "wf-1", "whsec_made"),
        );
        assert_eq!(current(&key, &hook).as_deref(), Some("whsec_made"));
        // Sealed for another workflow, or by another installation: no secret.
        hook.annotations_mut().insert(
            ANNOTATION.into(),
            key.seal(ANNOTATION, "team", "wf-2", "whsec_made"),
        );
        assert_eq!(current(&key, &hook), None);
        let other = SealKey::new(&[4; 32]).unwrap();
        hook.annotations_mut().insert(
            ANNOTATION.into(),
            other.seal(ANNOTATION, "team", "wf-1", "whsec_made"),
        );
        assert_eq!(current(&key, &hook), None);
    }
}
