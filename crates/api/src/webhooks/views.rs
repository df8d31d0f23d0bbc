//! What `/v1/webhooks` answers.

use kube::ResourceExt;
use serde::Serialize;
use utoipa::ToSchema;

use crate::plumbing::time::ApiTime;
use flowline_core::crd::timestamps::created_at;
use flowline_core::crd::{DeliveryAttempt, EventKind, Webhook};

/// A webhook.
#[derive(Serialize, ToSchema)]
pub struct WebhookView {
    pub id: String,
    pub url: String,
    pub events: Vec<EventKind>,
    /// `null`: events of every workflow of the account.
    pub workflow_id: Option<String>,
    pub enabled: bool,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: ApiTime,
}

impl From<&Webhook> for WebhookView {
    fn from(hook: &Webhook) -> Self {
        WebhookView {
            id: hook.name_any(),
            url: hook.spec.url.clone(),
            events: hook.spec.events.clone(),
            workflow_id: hook.spec.workflow_ref.clone(),
            enabled: hook.status.as_ref().map(|s| s.enabled).unwrap_or(true),
            created_at: ApiTime(created_at(&hook.metadata)),
        }
    }
}

/// A webhook just created, with its signing secret (shown only here).
#[derive(Serialize, ToSchema)]
pub struct WebhookCreated {
    #[serde(flatten)]
    pub webhook: WebhookView,
    pub secret: String,
}

/// A webhook whose secret was just rotated, with the new secret (shown only here).
#[derive(Serialize, ToSchema)]
pub struct SecretRotated {
    #[serde(flatten)]
    pub webhook: WebhookView,
    pub secret: String,
    /// Until then deliveries are signed with both the new and the previous secret.
    #[schema(value_type = String, format = DateTime)]
    pub previous_secret_expires_at: ApiTime,
}

/// One delivery attempt of a webhook.
#[derive(Serialize, ToSchema)]
pub struct DeliveryView {
    pub id: String,
    pub event_id: String,
    pub event: EventKind,
    /// Attempt number for this event, from 1.
    pub attempt: u32,
    /// HTTP status received; `null` when the attempt got no response.
    pub status_code: Option<u16>,
    /// Why the attempt got no response (refused destination, timeout, …).
    pub error: Option<String>,
    pub duration_ms: u64,
    #[schema(value_type = String, format = DateTime)]
    pub attempted_at: ApiTime,
}

impl From<&DeliveryAttempt> for DeliveryView {
    fn from(a: &DeliveryAttempt) -> Self {
        DeliveryView {
            id: a.id.clone(),
            event_id: a.event_id.clone(),
            event: a.event,
            attempt: a.attempt,
            status_code: a.status_code,
            error: a.error.clone(),
            duration_ms: a.duration_ms,
            attempted_at: ApiTime(a.at),
        }
    }
}

/// A redelivery request accepted; the worker sends the event once more.
#[derive(Serialize, ToSchema)]
pub struct RedeliveryAccepted {
    /// Id of the request.
    pub id: String,
    pub delivery_id: String,
    pub event_id: String,
    pub event: EventKind,
    /// Always `queued`: the attempt shows in the deliveries list once made.
    pub status: &'static str,
}
