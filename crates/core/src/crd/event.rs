// kube-derive's printcolumn(...) lists repeat `type_ = ...`, which clippy mistakes for
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use jiff::Timestamp;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::schemaless_object;

/// An event posted to `POST /v1/events`, kept in the account's namespace until the
/// operator's `--event-retention` has passed. Not `Event`: that kind is Kubernetes'
/// own (`kubectl get events`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "flowline.io",
    version = "v1",
    kind = "FlowlineEvent",
    plural = "flowlineevents",
    shortname = "flev",
    category = "flowline",
    doc = "An event posted to the account (`POST /v1/events`): its name and payload, and in its status the runs it started once the operator has fanned it out to the workflows subscribed to its name.",
    namespaced,
    status = "FlowlineEventStatus",
    selectable = ".spec.name",
    printcolumn(name = "Event", type_ = "string", json_path = ".spec.name"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Received",
        type_ = "date",
        json_path = ".spec.receivedAt",
        priority = 1
    ),
    printcolumn(
        name = "Client-Id",
        type_ = "string",
        json_path = ".spec.clientId",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FlowlineEventSpec {
    /// The event's name; workflows subscribe to it with a trigger of type `event`.
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[a-z0-9][a-z0-9._-]{0,127}$")
    )]
    pub name: String,
    /// The event's data: a JSON object, the `trigger.payload` of the runs it starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schemaless_object")]
    pub payload: Option<serde_json::Value>,
    /// The `id` the caller sent, if any; the object's name is derived from it, so a
    /// second post with the same id within 24 h finds this event instead of fanning
    /// out again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub client_id: Option<String>,
    /// When the API accepted the event.
    pub received_at: Timestamp,
}

/// Whether an event has been fanned out.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum EventPhase {
    /// Accepted; the operator has not recorded its fan-out yet.
    #[default]
    Pending,
    /// Every run it starts exists and is listed in `runs`.
    Done,
}

/// What the fan-out did, written by the operator only (once, when done).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowlineEventStatus {
    /// `pending` until the operator has started every run the event starts, then `done`.
    #[serde(default)]
    pub phase: EventPhase,
    /// The runs it started, one per subscribed workflow whose filter held.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub runs: Vec<String>,
    /// Runs whose waiting step it completed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub resumed: Vec<String>,
    /// Runs it cancelled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub cancelled: Vec<String>,
    /// How many active workflows subscribed to the event's name were looked at.
    #[serde(default)]
    pub observed_workflows: u32,
    /// True when more workflows subscribed than one event may start (1000): the first
    /// 1000 by name got their runs, the others none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Subscribed workflows that got no run although subscribed, and why (a filter
    /// that could not be evaluated, a run that would be too large); at most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub problems: Vec<String>,
    /// When the fan-out was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_at: Option<Timestamp>,
}

/// The event that started a run (`spec.event` of the Run; `trigger.event` in templates).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct EventRef {
    /// The event's id (`evt_…`).
    #[schemars(length(min = 1, max = 253))]
    pub id: String,
    /// The event's name.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
}

/// What an event name must look like, as the API and a trigger's check say it.
pub const EVENT_NAME_RULE: &str = "must match ^[a-z0-9][a-z0-9._-]{0,127}$ (lowercase letters, digits, \
     '.', '_' and '-', starting with a letter or digit, at most 128 characters)";

/// Whether `name` is an event name: `^[a-z0-9][a-z0-9._-]{0,127}$`.
pub fn valid_event_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=128).contains(&bytes.len())
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes.iter().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
}

/// Most `cancelOn` entries of one workflow.
pub const MAX_CANCEL_ON: usize = 10;

/// An entry of a workflow's `cancelOn`: an event that cancels its unfinished runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, utoipa::ToSchema)]
pub struct CancelOn {
    /// The event name.
    #[schemars(length(min = 1, max = 128))]
    pub event: String,
    /// Expression over `event.*` (`id`, `name`, `payload`) and the run's `trigger.*`
    /// (`payload`, `event`, `headers`), in the language of a step's `when`; a run is
    /// cancelled only when it holds. Unset: every unfinished run.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000))]
    pub match_: Option<String>,
}

/// Prefix of an event object's name; the API's ids use `evt_` instead.
pub const OBJECT_PREFIX: &str = "evt-";
/// Prefix of an event id.
pub const ID_PREFIX: &str = "evt_";

/// The API id of the event object named `name`: `evt-<x>` is `evt_<x>`. A name
/// without the prefix (an object created by hand) is its own id.
pub fn event_id(name: &str) -> String {
    match name.strip_prefix(OBJECT_PREFIX) {
        Some(tail) => format!("{ID_PREFIX}{tail}"),
        None => name.to_string(),
    }
}

/// The object name of the event with API id `id`, if `id` can name one: `evt_` and
/// lowercase letters and digits.
pub fn object_name(id: &str) -> Option<String> {
    let tail = id.strip_prefix(ID_PREFIX)?;
    let valid = !tail.is_empty()
        && tail.len() <= 200
        && tail
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    valid.then(|| format!("{OBJECT_PREFIX}{tail}"))
}

impl FlowlineEvent {
    /// The event's API id.
    pub fn id(&self) -> String {
        event_id(self.metadata.name.as_deref().unwrap_or_default())
    }

    /// The fan-out's record, or the empty one of a pending event.
    pub fn phase(&self) -> EventPhase {
        self.status.as_ref().map(|s| s.phase).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_follow_the_contract_pattern() {
        for good in ["a", "order.created", "0_x-y.z", &"a".repeat(128)] {
            assert!(valid_event_name(good), "{good}");
        }
        for bad in [
            "",
            "A",
            ".a",
            "-a",
            "_a",
            "a b",
            "a/b",
            "é",
            &"a".repeat(129),
        ] {
            assert!(!valid_event_name(bad), "{bad}");
        }
    }

    #[test]
    fn ids_and_object_names_map_one_to_one() {
        assert_eq!(event_id("evt-3k9x2m7q1d"), "evt_3k9x2m7q1d");
        assert_eq!(
            object_name("evt_3k9x2m7q1d").as_deref(),
            Some("evt-3k9x2m7q1d")
        );
        assert_eq!(event_id("by-hand"), "by-hand");
        for bad in [
            "evt_",
            "evt-abc",
            "evt_ABC",
            "evt_a/b",
            "evt_a.b",
            "abc",
            "",
            &format!("evt_{}", "a".repeat(201)),
        ] {
            assert_eq!(object_name(bad), None, "{bad}");
        }
        let name = crate::ids::new_id("evt");
        assert_eq!(object_name(&event_id(&name)), Some(name));
    }
}
