//! Custom resource types: the whole state of Flowline lives in these objects.
//!
//! One kind per file. Doc comments become the schema descriptions that
//! `kubectl explain` prints, and CEL rules reject bad manifests at admission,
//! before any controller sees them.

mod api_key;
mod common;
mod event;
mod flow_control;
mod run;
pub mod tags;
pub mod timestamps;
mod webhook;
mod workflow;

pub use api_key::{ApiKey, ApiKeySpec, Scope};
pub use common::{
    Condition, ConditionStatus, EventKind, PendingEvent, schemaless_object, set_condition,
};
pub use event::{
    CancelOn, EVENT_NAME_RULE, EventPhase, EventRef, FlowlineEvent, FlowlineEventSpec,
    FlowlineEventStatus, MAX_CANCEL_ON, event_id, object_name as event_object_name,
    valid_event_name,
};
pub use flow_control::{
    Debounce, MAX_DEBOUNCE_MS, MAX_RATE_LIMIT, MAX_RATE_PERIOD_MS, MIN_DEBOUNCE_MS,
    MIN_RATE_PERIOD_MS, RateLimit,
};
pub use run::{
    ApprovalDecision, CallbackReceived, CallbackToken, DEFAULT_PRIORITY, EventDetail,
    IterationRecord, MatchedEvent, ParentRef, QueuedFor, ReusedStep, Run, RunPhase, RunSpec,
    RunStatus, RunTrigger, StepPhase, StepRecord, Verdict, WorkflowSnapshot, scheduled_run_name,
};
pub use webhook::{
    DeliveryAttempt, RetryingEvent, SecretReference, Webhook, WebhookSpec, WebhookStatus,
};
pub use workflow::{
    Action, Concurrency, ConcurrencyPolicy, DEFAULT_FOR_EACH_CONCURRENCY, DEFAULT_PARALLELISM,
    Executor, History, MAX_CONCURRENCY_KEY, MAX_CONCURRENCY_LIMIT, MAX_FOR_EACH,
    MAX_FOR_EACH_CONCURRENCY, MAX_FOR_EACH_ITEMS, MAX_ITERATION_RECORDS, MAX_PARALLELISM,
    MAX_RUN_TIMEOUT_MS, MAX_STEPS, Overlap, RetryPolicy, RunCounts, SealedHookSecret, Step,
    Trigger, TriggerType, Workflow, WorkflowSpec, WorkflowState, WorkflowStatus,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// API group of every Flowline kind.
pub const GROUP: &str = "flowline.io";

/// Label keys Flowline sets and reads.
pub mod labels {
    pub const WORKFLOW: &str = "flowline.io/workflow";
    pub const RUN: &str = "flowline.io/run";
    pub const STEP: &str = "flowline.io/step";
    /// On a child Run: the name of the run whose `workflow` step started it.
    pub const PARENT_RUN: &str = "flowline.io/parent-run";
    /// On a Run whose pinned workflow has `wait_for_event` steps: `"true"`. An event's
    /// fan-out lists only such runs (unfinished ones) to find the steps it completes.
    pub const WAITS_FOR_EVENTS: &str = "flowline.io/waits-for-events";
}

/// Every CRD Flowline owns, in the order they are installed.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        Workflow::crd(),
        Run::crd(),
        Webhook::crd(),
        FlowlineEvent::crd(),
        ApiKey::crd(),
    ]
    .into_iter()
    .map(with_kubernetes_formats)
    .collect()
}

/// schemars writes Rust's unsigned formats (`uint32`, …), which the API server does
/// not know and warns about on every apply; Kubernetes knows `int32` and `int64`.
/// The `minimum: 0` that schemars also writes keeps the values unsigned.
fn with_kubernetes_formats(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(format)) = map.get_mut("format") {
                    match format.as_str() {
                        "uint8" | "uint16" => *format = "int32".into(),
                        "uint32" | "uint64" | "uint" => *format = "int64".into(),
                        _ => {}
                    }
                }
                map.values_mut().for_each(walk);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(&crd).expect("a CRD always serialises");
    walk(&mut value);
    serde_json::from_value(value).expect("renaming formats keeps a valid CRD")
}

/// The CRDs as one multi-document YAML stream, exactly what `flowline crdgen` prints
/// and what `crds/` must hold.
pub fn render_yaml() -> String {
    let mut out = String::new();
    for crd in all() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd).expect("a CRD always serialises to YAML"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `crds/` must be exactly what the types generate; run `make crds` after changing them.
    #[test]
    fn crds_folder_is_up_to_date() {
        let committed = include_str!("../../../../crds/flowline.yaml");
        assert!(
            committed == render_yaml(),
            "crds/flowline.yaml is stale: run `make crds` and commit the result"
        );
    }

    #[test]
    fn only_formats_kubernetes_knows() {
        let yaml = render_yaml();
        assert!(
            !yaml.contains("format: uint"),
            "unsigned formats left in the CRDs"
        );
        assert!(yaml.contains("format: int64"));
    }

    /// Paths of schema nodes without a description, under `path`.
    fn undescribed(node: &serde_json::Value, path: &str, out: &mut Vec<String>) {
        if node
            .get("description")
            .is_none_or(|d| d.as_str().is_none_or(str::is_empty))
        {
            out.push(path.to_string());
        }
        if let Some(properties) = node.get("properties").and_then(|p| p.as_object()) {
            for (name, child) in properties {
                // apiVersion, kind and metadata are described by the API server.
                if path.is_empty() && matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                undescribed(child, &format!("{path}.{name}"), out);
            }
        }
        // A list's own description explains its items; their fields need theirs.
        if let Some(fields) = node
            .pointer("/items/properties")
            .and_then(|p| p.as_object())
        {
            for (name, child) in fields {
                undescribed(child, &format!("{path}[].{name}"), out);
            }
        }
    }

    #[test]
    fn kubectl_explain_describes_every_kind_and_field() {
        for crd in all() {
            let schema = serde_json::to_value(
                crd.spec.versions[0]
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .unwrap(),
            )
            .unwrap();
            let mut missing = Vec::new();
            undescribed(&schema, "", &mut missing);
            assert!(
                missing.is_empty(),
                "{}: no description at {missing:?}",
                crd.spec.names.kind
            );
            let top = schema["description"].as_str().unwrap();
            assert!(
                !top.contains("Auto-generated"),
                "{}: {top}",
                crd.spec.names.kind
            );
        }
    }

    #[test]
    fn event_kinds_round_trip_through_their_wire_names() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.as_str()), Some(kind));
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json, serde_json::Value::String(kind.as_str().to_string()));
        }
        assert_eq!(EventKind::parse("run.exploded"), None);
    }

    #[test]
    fn every_kind_has_short_name_category_and_status_subresource() {
        for crd in all() {
            let names = &crd.spec.names;
            assert_eq!(
                names.categories.as_deref(),
                Some(&["flowline".to_string()][..])
            );
            assert_eq!(
                names.short_names.as_ref().map(Vec::len),
                Some(1),
                "{}",
                names.kind
            );
            let version = &crd.spec.versions[0];
            // An ApiKey is written once and never acted on: nothing to report.
            assert_eq!(
                version
                    .subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                names.kind != "ApiKey",
                "{}",
                names.kind
            );
            assert!(
                !version
                    .additional_printer_columns
                    .as_ref()
                    .unwrap()
                    .is_empty()
            );
        }
    }
}
