use jiff::Timestamp;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// Schema of a free-form JSON object (action inputs, payloads, outputs). The API
/// server keeps unknown fields only where the schema says so.
pub fn schemaless_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema of any JSON value (a step output may be an object, a string, a number...).
pub fn any_value(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Status of a condition, as in `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// A standard Kubernetes condition (`metav1.Condition` shape), so tools such as
/// `kubectl wait --for=condition=Ready` understand it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type in CamelCase, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Whether the condition holds.
    pub status: ConditionStatus,
    /// Machine-readable reason in CamelCase.
    pub reason: String,
    /// Human-readable explanation.
    #[serde(default)]
    pub message: String,
    /// When the status last changed.
    pub last_transition_time: Timestamp,
    /// The `metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Kinds of event a webhook can subscribe to.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, utoipa::ToSchema,
)]
pub enum EventKind {
    #[serde(rename = "run.started")]
    RunStarted,
    #[serde(rename = "run.succeeded")]
    RunSucceeded,
    #[serde(rename = "run.failed")]
    RunFailed,
    #[serde(rename = "run.cancelled")]
    RunCancelled,
    #[serde(rename = "workflow.activated")]
    WorkflowActivated,
    #[serde(rename = "workflow.paused")]
    WorkflowPaused,
}

impl EventKind {
    pub const ALL: [EventKind; 6] = [
        EventKind::RunStarted,
        EventKind::RunSucceeded,
        EventKind::RunFailed,
        EventKind::RunCancelled,
        EventKind::WorkflowActivated,
        EventKind::WorkflowPaused,
    ];

    /// The wire name, e.g. `run.started`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::RunStarted => "run.started",
            EventKind::RunSucceeded => "run.succeeded",
            EventKind::RunFailed => "run.failed",
            EventKind::RunCancelled => "run.cancelled",
            EventKind::WorkflowActivated => "workflow.activated",
            EventKind::WorkflowPaused => "workflow.paused",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event that is due for delivery and not yet handed to every matching webhook.
/// Recorded in the status of the object it is about, in the same write that records
/// the transition, so it survives an operator crash (the outbox; see docs/delivery.md).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingEvent {
    /// Unique event id (`evt_…`); every delivery attempt of the event carries it.
    pub id: String,
    /// Event kind.
    pub kind: EventKind,
    /// When the event happened.
    pub timestamp: Timestamp,
    /// The event's `data` object.
    #[schemars(schema_with = "schemaless_object")]
    pub data: serde_json::Value,
}
