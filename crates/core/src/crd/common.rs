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

/// A standard Kubernetes condition (`metav1.Condition` shape and bounds), so tools
/// such as `kubectl wait --for=condition=Ready` understand it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type in CamelCase, e.g. `Ready`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// Whether the condition holds.
    pub status: ConditionStatus,
    /// Machine-readable reason in CamelCase.
    #[schemars(length(min = 1, max = 1024))]
    pub reason: String,
    /// Human-readable explanation.
    #[serde(default)]
    #[schemars(length(max = 32768))]
    pub message: String,
    /// When the status last changed.
    pub last_transition_time: Timestamp,
    /// The `metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// A condition of `type_` computed `now` for the object at `generation` (its
    /// transition time is kept by [`set_condition`] while the status stays).
    pub fn new(
        type_: &str,
        status: ConditionStatus,
        reason: impl Into<String>,
        message: String,
        generation: Option<i64>,
        now: Timestamp,
    ) -> Condition {
        Condition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message,
            last_transition_time: now,
            observed_generation: generation,
        }
    }
}

/// The schema of a `conditions` list: a list-map keyed by `type` (one condition per
/// type, merged by type under server-side apply), bounded like `metav1.Condition`s.
pub fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": generator.subschema_for::<Condition>(),
        "maxItems": 8,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

/// Sets `condition` in `conditions` (replacing the one of its type), keeping the
/// previous transition time while its status stays the same, as
/// `meta.SetStatusCondition` does. Pure.
pub fn set_condition(conditions: &mut Vec<Condition>, mut condition: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(previous) => {
            if previous.status == condition.status {
                condition.last_transition_time = previous.last_transition_time;
            }
            *previous = condition;
        }
        None => conditions.push(condition),
    }
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
/// the transition, so it survives an operator crash.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(type_: &str, status: ConditionStatus, reason: &str, at: i64) -> Condition {
        let at = Timestamp::from_second(at).unwrap();
        Condition::new(type_, status, reason, String::new(), None, at)
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let mut list = vec![condition("Ready", ConditionStatus::True, "A", 1)];
        set_condition(
            &mut list,
            condition("Succeeded", ConditionStatus::Unknown, "Running", 2),
        );
        assert_eq!(list.len(), 2, "another type is added");
        set_condition(
            &mut list,
            condition("Succeeded", ConditionStatus::Unknown, "Queued", 3),
        );
        assert_eq!(list[1].reason, "Queued");
        assert_eq!(list[1].last_transition_time.as_second(), 2, "same status");
        set_condition(
            &mut list,
            condition("Succeeded", ConditionStatus::True, "Succeeded", 4),
        );
        assert_eq!(
            list[1].last_transition_time.as_second(),
            4,
            "status changed"
        );
        assert_eq!(list.len(), 2, "one condition per type");
        assert_eq!(list[0].reason, "A");
    }
}
