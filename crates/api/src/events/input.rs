//! Body of `POST /v1/events`.

use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::plumbing::validation::{Problems, Validate, present};
use crate::state::ApiConfig;
use flowline_core::crd::{EVENT_NAME_RULE, valid_event_name};

/// Most characters of a client's event `id`.
pub const MAX_CLIENT_ID: usize = 255;

/// Body of `POST /v1/events`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = EventCreate, examples(json!({"name": "order.created", "payload": {"order_id": 42}, "id": "order-42-created"})))]
pub struct EventCreate {
    /// The event's name: workflows with an `event` trigger of this name start runs.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[a-z0-9][a-z0-9._-]{0,127}$"
    )]
    pub name: String,
    /// The event's data, `trigger.payload` of the runs it starts; default `{}`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<HashMap<String, Value>>, nullable = false)]
    pub payload: Option<Map<String, Value>>,
    /// Your id for the event: a second post with the same id within 24 h answers the
    /// first event (200) and starts nothing.
    #[serde(default, deserialize_with = "present")]
    #[schema(min_length = 1, max_length = 255, nullable = false)]
    pub id: Option<String>,
}

impl Validate for EventCreate {
    fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
        let mut p = Problems::default();
        if !valid_event_name(&self.name) {
            p.add("name", EVENT_NAME_RULE);
        }
        if let Some(id) = &self.id {
            let len = id.chars().count();
            if len == 0 || len > MAX_CLIENT_ID {
                p.add("id", format!("must be 1 to {MAX_CLIENT_ID} characters"));
            }
        }
        p.finish()
    }
}
