//! Inbound hook secrets brought by a Secret (`<workflow>-hook`, type
//! `flowline.io/hook-secret`: applied with kubectl or GitOps, or made by an earlier
//! version of the API), sealed into the Workflow's status so that the API verifies hooks
//! without reading Secrets. The controller reads such a Secret by name, as it reads the
//! Secrets step templates name.
//!
//! A workflow whose annotation `flowline.io/hook-secret` holds a secret the API made is
//! left alone: that one wins. Otherwise the Secret is read when the workflow is first
//! seen and then every [`LOOK_AGAIN`] (a replaced or deleted Secret is picked up), or,
//! while there is none, again after 5 s, 10 s, 20 s … up to [`LOOK_AGAIN`]: a Secret
//! applied a moment after its Workflow is sealed at once, and a workflow that never
//! gets one costs a read every few minutes, never one per reconcile.

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
/// The first wait after a read that found no Secret; it doubles with each such read.
const FIRST_MISS_WAIT: Duration = Duration::from_secs(5);

/// The last read of a workflow's hook Secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Look {
    pub at: Instant,
    /// Reads in a row that found none.
    pub misses: u32,
}

/// How long after `last` the Secret is read again. Pure.
pub fn wait_after(last: &Look) -> Duration {
    if last.misses == 0 {
        return LOOK_AGAIN;
    }
    FIRST_MISS_WAIT
        .saturating_mul(1 << (last.misses - 1).min(16))
        .min(LOOK_AGAIN)
}
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

/// Whether `wf` may hold a secret its Secret brings: a webhook trigger, and no secret
/// the API made. Pure.
pub fn watched(wf: &Workflow) -> bool {
    wf.spec.trigger.type_ == TriggerType::Webhook && !wf.annotations().contains_key(ANNOTATION)
}

/// Whether the controller reads `wf`'s hook Secret now, given its last read. Pure.
pub fn looks(wf: &Workflow, last: Option<&Look>, now: Instant) -> bool {
    watched(wf) && last.is_none_or(|last| now.duration_since(last.at) >= wait_after(last))
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
    /// Each workflow's last read of its Secret (`namespace/name`).
    looked: Mutex<HashMap<String, Look>>,
}

/// What a reconcile takes from [`HookSecrets::sealed`].
#[derive(Debug, Default)]
pub struct Looked {
    /// What the status should hold; `None`: leave it as it is.
    pub status: Option<Option<SealedHookSecret>>,
    /// When to reconcile the workflow again to read its Secret.
    pub again_in: Option<Duration>,
}

impl HookSecrets {
    pub fn new(seal: std::sync::Arc<SealKey>) -> Self {
        HookSecrets {
            seal,
            looked: Mutex::default(),
        }
    }

    /// What `wf`'s status should hold, and when to look again. A failed read changes
    /// nothing (logged; read again like a miss).
    pub async fn sealed(&self, client: &Client, wf: &Workflow) -> Looked {
        let (namespace, name) = (wf.namespace().unwrap_or_default(), wf.name_any());
        let id = format!("{namespace}/{name}");
        let now = Instant::now();
        let last = {
            let looked = self.looked.lock().unwrap_or_else(|e| e.into_inner());
            let last = looked.get(&id).copied();
            if !looks(wf, last.as_ref(), now) {
                return Looked {
                    status: None,
                    again_in: last
                        .filter(|_| watched(wf))
                        .map(|l| wait_after(&l).saturating_sub(now.duration_since(l.at))),
                };
            }
            last
        };
        let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
        let found = api.get_opt(&hook_secret_name(&name)).await;
        if let Err(err) = &found {
            tracing::warn!(%namespace, workflow = %name, error = %err, "cannot read the workflow's hook Secret");
        }
        let found = found.ok().flatten();
        let misses = match &found {
            Some(_) => 0,
            None => last.map_or(0, |l| l.misses).saturating_add(1),
        };
        let look = Look { at: now, misses };
        {
            let mut looked = self.looked.lock().unwrap_or_else(|e| e.into_inner());
            // Bounded: entries past LOOK_AGAIN would be read again anyway.
            if looked.len() >= MAX_REMEMBERED {
                looked.retain(|_, l| now.duration_since(l.at) < LOOK_AGAIN);
            }
            looked.insert(id, look);
        }
        let status = match decide(wf, found.as_ref()) {
            Sealing::Keep => None,
            Sealing::Clear => Some(None),
            Sealing::Seal { secret, version } => Some(Some(SealedHookSecret {
                sealed: self.seal.seal(ANNOTATION, &namespace, &name, &secret),
                source_version: version,
            })),
        };
        Looked {
            status,
            again_in: Some(wait_after(&look)),
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
    fn the_secret_is_read_at_first_then_every_few_minutes_and_sooner_while_missing() {
        let now = Instant::now();
        let ago = |secs: u64| now.checked_sub(Duration::from_secs(secs)).unwrap();
        let found = |secs| {
            Some(Look {
                at: ago(secs),
                misses: 0,
            })
        };
        let missed = |secs, misses| {
            Some(Look {
                at: ago(secs),
                misses,
            })
        };
        type Row<'a> = (&'a str, Workflow, Option<Look>, bool);
        let table: Vec<Row> = vec![
            ("never read", wf("webhook", false, None), None, true),
            (
                "found a moment ago",
                wf("webhook", false, Some("1")),
                found(1),
                false,
            ),
            (
                "found five minutes ago",
                wf("webhook", false, Some("1")),
                found(300),
                true,
            ),
            (
                "missed once, 4 s ago",
                wf("webhook", false, None),
                missed(4, 1),
                false,
            ),
            (
                "missed once, 5 s ago",
                wf("webhook", false, None),
                missed(5, 1),
                true,
            ),
            (
                "missed thrice, 19 s ago",
                wf("webhook", false, None),
                missed(19, 3),
                false,
            ),
            (
                "missed thrice, 20 s ago",
                wf("webhook", false, None),
                missed(20, 3),
                true,
            ),
            (
                "missed often, 4 min ago",
                wf("webhook", false, None),
                missed(240, 30),
                false,
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
            assert_eq!(looks(&wf, last.as_ref(), now), want, "{case}");
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
