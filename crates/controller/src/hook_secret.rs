//! Inbound hook secrets brought by a Secret (`<workflow>-hook`, type
//! `flowline.io/hook-secret`: applied with kubectl or GitOps, or made by an earlier
//! version of the API), sealed into the Workflow's status so that the API verifies hooks
//! without reading Secrets. The controller reads such a Secret by name, as it reads the
//! Secrets step templates name.
//!
//! A workflow whose annotation `flowline.io/hook-secret` holds a secret the API made is
//! left alone: that one wins. Otherwise the Secret is looked at when the workflow has no
//! sealed secret yet, and again at most every [`LOOK_AGAIN`], so a replaced Secret is
//! picked up without a read per reconcile.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};

use flowline_core::crd::{SealedHookSecret, TriggerType, Workflow};
use flowline_core::sealed::{
    ANNOTATION, HOOK_SECRET_KEY, HOOK_SECRET_TYPE, SealKey, hook_secret_name,
};

/// How often a workflow's hook Secret is read again.
pub const LOOK_AGAIN: Duration = Duration::from_secs(300);
/// Workflows whose last read is remembered before old ones are dropped.
const MAX_REMEMBERED: usize = 10_000;

/// What the status should hold after a look at the Secret.
#[derive(Debug, PartialEq)]
pub enum Sealing {
    /// Nothing to change.
    Keep,
    /// Seal this secret, read from the Secret at this resourceVersion.
    Seal { secret: String, version: String },
    /// No Secret brings one (any more): the status holds none.
    Clear,
}

/// Whether the controller reads `wf`'s hook Secret now, given when it last did. Pure.
pub fn looks(wf: &Workflow, last_look: Option<Instant>, now: Instant) -> bool {
    let sealed = wf.status.as_ref().and_then(|s| s.hook_secret.as_ref());
    wf.spec.trigger.type_ == TriggerType::Webhook
        && !wf.annotations().contains_key(ANNOTATION)
        && (sealed.is_none() || last_look.is_none_or(|t| now.duration_since(t) >= LOOK_AGAIN))
}

/// What `found` (the Secret as read; `None`: there is none) means for `wf`'s status.
/// Pure.
pub fn decide(wf: &Workflow, found: Option<&Secret>) -> Sealing {
    let sealed = wf.status.as_ref().and_then(|s| s.hook_secret.as_ref());
    let brought = found
        .filter(|s| s.type_.as_deref() == Some(HOOK_SECRET_TYPE))
        .and_then(|s| Some((text(s, HOOK_SECRET_KEY)?, s.resource_version()?)));
    match (brought, sealed) {
        (Some((_, version)), Some(sealed)) if sealed.source_version == version => Sealing::Keep,
        (Some((secret, version)), _) => Sealing::Seal { secret, version },
        (None, Some(_)) => Sealing::Clear,
        (None, None) => Sealing::Keep,
    }
}

/// A Secret's value under `key`, as text.
fn text(secret: &Secret, key: &str) -> Option<String> {
    if let Some(v) = secret.string_data.as_ref().and_then(|d| d.get(key)) {
        return Some(v.clone());
    }
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone())
        .ok()
        .filter(|s| !s.is_empty())
}

/// Reads and seals hook Secrets for the workflow controller.
pub struct HookSecrets {
    seal: std::sync::Arc<SealKey>,
    /// When each workflow's Secret was last read (`namespace/name`).
    looked: Mutex<HashMap<String, Instant>>,
}

impl HookSecrets {
    pub fn new(seal: std::sync::Arc<SealKey>) -> Self {
        HookSecrets {
            seal,
            looked: Mutex::default(),
        }
    }

    /// What `wf`'s status should hold: `None` to leave it as it is. A failed read
    /// changes nothing (logged; looked at again later).
    pub async fn sealed(&self, client: &Client, wf: &Workflow) -> Option<Option<SealedHookSecret>> {
        let (namespace, name) = (wf.namespace().unwrap_or_default(), wf.name_any());
        let id = format!("{namespace}/{name}");
        let now = Instant::now();
        {
            let mut looked = self.looked.lock().unwrap_or_else(|e| e.into_inner());
            if !looks(wf, looked.get(&id).copied(), now) {
                return None;
            }
            // Bounded: entries past LOOK_AGAIN would be read again anyway.
            if looked.len() >= MAX_REMEMBERED {
                looked.retain(|_, at| now.duration_since(*at) < LOOK_AGAIN);
            }
            looked.insert(id, now);
        }
        let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
        let found = match api.get_opt(&hook_secret_name(&name)).await {
            Ok(found) => found,
            Err(err) => {
                tracing::warn!(%namespace, workflow = %name, error = %err, "cannot read the workflow's hook Secret");
                return None;
            }
        };
        match decide(wf, found.as_ref()) {
            Sealing::Keep => None,
            Sealing::Clear => Some(None),
            Sealing::Seal { secret, version } => Some(Some(SealedHookSecret {
                sealed: self.seal.seal(ANNOTATION, &namespace, &name, &secret),
                source_version: version,
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wf(trigger: &str, annotated: bool, sealed_from: Option<&str>) -> Workflow {
        let mut wf: Workflow = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "orders", "namespace": "team"},
            "spec": {"name": "W", "trigger": {"type": trigger}},
        }))
        .unwrap();
        if annotated {
            wf.annotations_mut()
                .insert(ANNOTATION.into(), "v1.x".into());
        }
        if let Some(version) = sealed_from {
            wf.status = Some(flowline_core::crd::WorkflowStatus {
                hook_secret: Some(SealedHookSecret {
                    sealed: "v1.y".into(),
                    source_version: version.into(),
                }),
                ..Default::default()
            });
        }
        wf
    }

    fn secret(type_: &str, value: Option<&str>, version: &str) -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": "orders-hook", "namespace": "team", "resourceVersion": version},
            "type": type_,
            "stringData": value.map(|v| json!({"secret": v})).unwrap_or(json!({})),
        }))
        .unwrap()
    }

    #[test]
    fn the_secret_is_read_for_a_webhook_workflow_without_the_apis_secret() {
        let now = Instant::now();
        let long_ago = now.checked_sub(LOOK_AGAIN).unwrap();
        let a_moment_ago = now.checked_sub(Duration::from_secs(1)).unwrap();
        type Row<'a> = (&'a str, Workflow, Option<Instant>, bool);
        let table: Vec<Row> = vec![
            (
                "none sealed yet",
                wf("webhook", false, None),
                Some(a_moment_ago),
                true,
            ),
            (
                "sealed, never looked here",
                wf("webhook", false, Some("1")),
                None,
                true,
            ),
            (
                "sealed, looked a moment ago",
                wf("webhook", false, Some("1")),
                Some(a_moment_ago),
                false,
            ),
            (
                "sealed, looked long ago",
                wf("webhook", false, Some("1")),
                Some(long_ago),
                true,
            ),
            (
                "the API's secret wins",
                wf("webhook", true, None),
                None,
                false,
            ),
            (
                "not a webhook trigger",
                wf("manual", false, None),
                None,
                false,
            ),
        ];
        for (case, wf, last, want) in table {
            assert_eq!(looks(&wf, last, now), want, "{case}");
        }
    }

    #[test]
    fn a_new_or_changed_secret_is_sealed_and_a_removed_one_cleared() {
        let brought = secret(HOOK_SECRET_TYPE, Some("whsec_a"), "5");
        type Row<'a> = (&'a str, Workflow, Option<Secret>, Sealing);
        let table: Vec<Row> = vec![
            (
                "new",
                wf("webhook", false, None),
                Some(brought.clone()),
                Sealing::Seal {
                    secret: "whsec_a".into(),
                    version: "5".into(),
                },
            ),
            (
                "unchanged",
                wf("webhook", false, Some("5")),
                Some(brought.clone()),
                Sealing::Keep,
            ),
            (
                "replaced",
                wf("webhook", false, Some("4")),
                Some(brought.clone()),
                Sealing::Seal {
                    secret: "whsec_a".into(),
                    version: "5".into(),
                },
            ),
            (
                "removed",
                wf("webhook", false, Some("4")),
                None,
                Sealing::Clear,
            ),
            (
                "another type is not a hook secret",
                wf("webhook", false, Some("4")),
                Some(secret("Opaque", Some("whsec_a"), "5")),
                Sealing::Clear,
            ),
            (
                "no value",
                wf("webhook", false, None),
                Some(secret(HOOK_SECRET_TYPE, None, "5")),
                Sealing::Keep,
            ),
        ];
        for (case, wf, found, want) in table {
            assert_eq!(decide(&wf, found.as_ref()), want, "{case}");
        }
    }
}
