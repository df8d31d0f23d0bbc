//! What `/v1/events` answers.

use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::plumbing::time::ApiTime;
use flowline_core::crd::FlowlineEvent;

/// An event, with what it did.
#[derive(Serialize, ToSchema)]
pub struct EventView {
    pub id: String,
    pub name: String,
    #[schema(value_type = HashMap<String, Value>)]
    pub payload: Value,
    #[schema(value_type = String, format = DateTime)]
    pub received_at: ApiTime,
    /// Ids of the runs it started (empty until the operator has fanned it out).
    pub runs: Vec<String>,
    /// Ids of the runs whose waiting step it completed.
    pub resumed: Vec<String>,
    /// Ids of the runs it cancelled.
    pub cancelled: Vec<String>,
}

/// An event as lists show it: without its payload (read one event for it).
#[derive(Serialize, ToSchema)]
pub struct EventListItem {
    pub id: String,
    pub name: String,
    #[schema(value_type = String, format = DateTime)]
    pub received_at: ApiTime,
    pub runs: Vec<String>,
    pub resumed: Vec<String>,
    pub cancelled: Vec<String>,
}

/// The id of a new event, as `202` answers it.
#[derive(Serialize, ToSchema)]
pub struct EventAccepted {
    pub id: String,
}

impl From<&FlowlineEvent> for EventListItem {
    fn from(event: &FlowlineEvent) -> Self {
        let status = event.status.clone().unwrap_or_default();
        EventListItem {
            id: event.id(),
            name: event.spec.name.clone(),
            received_at: ApiTime(event.spec.received_at),
            runs: status.runs,
            resumed: status.resumed,
            cancelled: status.cancelled,
        }
    }
}

impl From<&FlowlineEvent> for EventView {
    fn from(event: &FlowlineEvent) -> Self {
        let item = EventListItem::from(event);
        EventView {
            id: item.id,
            name: item.name,
            payload: event.spec.payload.clone().unwrap_or_else(|| json!({})),
            received_at: item.received_at,
            runs: item.runs,
            resumed: item.resumed,
            cancelled: item.cancelled,
        }
    }
}
