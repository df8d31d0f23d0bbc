//! Custom resource types: the whole state of Flowline lives in these objects.
//!
//! One kind per file. Doc comments become the schema descriptions that
//! `kubectl explain` prints, and CEL rules reject bad manifests at admission,
//! before any controller sees them.

mod common;
mod run;
pub mod timestamps;
mod webhook;
mod workflow;

pub use common::{Condition, ConditionStatus, EventKind, PendingEvent, schemaless_object};
pub use run::{
    ReusedStep, Run, RunPhase, RunSpec, RunStatus, RunTrigger, StepPhase, StepRecord,
    WorkflowSnapshot,
};
pub use webhook::{
    DeliveryAttempt, RetryingEvent, SecretReference, Webhook, WebhookSpec, WebhookStatus,
};
pub use workflow::{
    Action, Executor, History, MAX_STEPS, RetryPolicy, RunCounts, Step, Trigger, TriggerType,
    Workflow, WorkflowSpec, WorkflowState, WorkflowStatus,
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
    pub const STATUS: &str = "flowline.io/status";
}

/// Every CRD Flowline owns, in the order they are installed.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![Workflow::crd(), Run::crd(), Webhook::crd()]
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
        let committed = include_str!("../../crds/flowline.yaml");
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
            assert!(
                version
                    .subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some()
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
