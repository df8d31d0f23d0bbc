// kube-derive's printcolumn(...) lists repeat `type_ = ...`, which clippy mistakes for
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use jiff::Timestamp;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Condition, EventKind};

/// An outbound notification endpoint. Deliveries are signed with the secret held in
/// the Secret named by `secretRef`, which the Webhook owns.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "flowline.io",
    version = "v1",
    kind = "Webhook",
    plural = "webhooks",
    shortname = "flhook",
    category = "flowline",
    doc = "A receiver of HMAC-signed event notifications (run and workflow events) and the state of its deliveries.",
    namespaced,
    status = "WebhookStatus",
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url"),
    printcolumn(name = "Events", type_ = "string", json_path = ".status.subscribed"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Workflow",
        type_ = "string",
        json_path = ".spec.workflowRef",
        priority = 1
    ),
    printcolumn(
        name = "Enabled",
        type_ = "boolean",
        json_path = ".status.enabled",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.url.startsWith('https://') || (has(self.allowInsecureHttp) && self.allowInsecureHttp && self.url.startsWith('http://'))").message("spec.url must be an https:// URL"))]
pub struct WebhookSpec {
    /// HTTPS address that receives the notifications.
    #[schemars(length(min = 9, max = 2048))]
    pub url: String,
    /// Development only: accept an `http://` url. Deliveries to it are still refused
    /// unless the operator runs with `--allow-http`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_insecure_http: bool,
    /// Event kinds delivered: run.started, run.succeeded, run.failed, run.cancelled,
    /// workflow.activated, workflow.paused.
    #[schemars(length(min = 1, max = 6))]
    #[x_kube(validation = Rule::new("self.size() > 0").message("spec.events must list at least one event kind"))]
    pub events: Vec<EventKind>,
    /// Only events of this workflow (by name) are delivered; unset means all workflows
    /// of the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub workflow_ref: Option<String>,
    /// The Secret (same namespace) holding the signing secret under key `secret`.
    /// Generated when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
}

/// Reference to a Secret in the Webhook's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct SecretReference {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Observed delivery state of a webhook, written by the delivery worker only.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookStatus {
    /// False once deliveries are disabled (410 Gone, or 5 days of failures).
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    /// Why deliveries were disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// Time of the last delivery attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivery_at: Option<Timestamp>,
    /// HTTP status of the last attempt (absent when it got no response).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_status_code: Option<u16>,
    /// Attempts failed in a row.
    #[serde(default)]
    pub consecutive_failures: u32,
    /// When the current run of failures began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<Timestamp>,
    /// The most recent attempts, newest first (bounded).
    #[serde(default)]
    pub recent_attempts: Vec<DeliveryAttempt>,
    /// Acknowledgement watermark: every matching event at or before this time has been
    /// delivered or has exhausted its retries, except those listed in `retrying`.
    /// Absent until the first acknowledgement; the creation time counts until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_through: Option<Timestamp>,
    /// Events at or before `deliveredThrough` still in their retry series (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retrying: Vec<RetryingEvent>,
    /// Ids of events after `deliveredThrough` that are settled too, oldest first
    /// (bounded; an id left out is delivered again after a restart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acknowledged: Vec<String>,
    /// Redelivery requests (annotation `flowline.io/redeliver`) already carried out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handled_redeliveries: Vec<String>,
    /// Standard conditions: `Ready` is `True` (reason `Delivering`) while deliveries
    /// are enabled, `False` (reason `Disabled`, with why) once they are not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The Webhook's `metadata.generation` this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The event kinds of `spec.events`, comma-separated: the Events column of
    /// `kubectl get webhooks`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subscribed: String,
}

/// An event whose retry series continues after a restart.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryingEvent {
    /// Id of the event.
    pub event_id: String,
    /// The event's timestamp.
    pub timestamp: Timestamp,
    /// Attempts made so far.
    pub attempts: u32,
    /// Earliest time of the next attempt.
    pub next_attempt_at: Timestamp,
}

fn enabled_by_default() -> bool {
    true
}

impl Default for WebhookStatus {
    fn default() -> Self {
        WebhookStatus {
            enabled: true,
            disabled_reason: None,
            last_delivery_at: None,
            last_status_code: None,
            consecutive_failures: 0,
            failing_since: None,
            recent_attempts: Vec::new(),
            delivered_through: None,
            retrying: Vec::new(),
            acknowledged: Vec::new(),
            handled_redeliveries: Vec::new(),
            conditions: Vec::new(),
            observed_generation: None,
            subscribed: String::new(),
        }
    }
}

/// One delivery attempt.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryAttempt {
    /// Id of this attempt.
    pub id: String,
    /// Id of the event delivered.
    pub event_id: String,
    /// Kind of the event.
    pub event: EventKind,
    /// Attempt number of this event, from 1.
    pub attempt: u32,
    /// HTTP status received, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// Transport error, if no status was received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long the attempt took.
    pub duration_ms: u64,
    /// When the attempt was made.
    pub at: Timestamp,
}
