//! Whether an event is settled for a webhook (delivered, or its retry series ran out)
//! as the webhook's status records it. One reading of the status, shared by the
//! worker (what a restarted worker still owes) and the workflow controller (a run's
//! events must be settled before retention deletes it; a workflow's before its event
//! cap evicts them). Pure.
//!
//! The status records: a watermark `deliveredThrough` (every matching event at or
//! before it is settled, except those in `retrying`) and `acknowledged`, ids of events
//! after it that are settled too.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use jiff::Timestamp;
use kube::Resource;

use super::outbox;
use crate::crd::{PendingEvent, RetryingEvent, Webhook, WebhookStatus};

/// What the status says of one event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Recorded {
    Settled,
    /// At or before the watermark, its retry series still going: failed attempts so
    /// far and the earliest time of the next.
    Retrying {
        attempts: u32,
        next_attempt_at: Timestamp,
    },
    /// Not (yet) settled.
    Owed,
}

/// The acknowledgement part of a webhook's status, indexed.
#[derive(Debug, Clone, Default)]
pub struct Acknowledgements {
    pub through: Timestamp,
    pub retrying: HashMap<String, RetryingEvent>,
    pub acknowledged: HashSet<String>,
}

impl Acknowledgements {
    /// A webhook that never acknowledged anything owes the events after its creation
    /// (`created`), not older ones.
    pub fn from_status(status: Option<&WebhookStatus>, created: Timestamp) -> Self {
        let Some(status) = status else {
            return Acknowledgements {
                through: created,
                ..Default::default()
            };
        };
        Acknowledgements {
            through: status.delivered_through.unwrap_or(created),
            retrying: status
                .retrying
                .iter()
                .map(|r| (r.event_id.clone(), r.clone()))
                .collect(),
            acknowledged: status.acknowledged.iter().cloned().collect(),
        }
    }

    /// What is recorded of event `id`, stamped `timestamp`.
    pub fn recorded(&self, id: &str, timestamp: Timestamp) -> Recorded {
        if let Some(r) = self.retrying.get(id) {
            Recorded::Retrying {
                attempts: r.attempts,
                next_attempt_at: r.next_attempt_at,
            }
        } else if timestamp <= self.through || self.acknowledged.contains(id) {
            Recorded::Settled
        } else {
            Recorded::Owed
        }
    }
}

/// When a webhook was created (its `created` for [`Acknowledgements::from_status`]).
pub fn created(hook: &Webhook) -> Timestamp {
    hook.meta()
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or_else(Timestamp::now)
}

/// The webhooks of one namespace, read once to ask about many events.
pub struct Outstanding {
    /// Enabled webhooks only: a disabled one delivers nothing more, so owes nothing.
    hooks: Vec<(Arc<Webhook>, Acknowledgements)>,
}

impl Outstanding {
    pub fn new(hooks: impl IntoIterator<Item = Arc<Webhook>>) -> Self {
        let hooks = hooks
            .into_iter()
            .filter(|h| h.status.as_ref().is_none_or(|s| s.enabled))
            .map(|h| {
                let acks = Acknowledgements::from_status(h.status.as_ref(), created(&h));
                (h, acks)
            })
            .collect();
        Outstanding { hooks }
    }

    /// Whether every webhook that subscribes to `event` (of `workflow`) has it settled.
    pub fn settled(&self, workflow: &str, event: &PendingEvent) -> bool {
        self.hooks.iter().all(|(hook, acks)| {
            !outbox::subscribes(hook, event.kind, workflow)
                || acks.recorded(&event.id, event.timestamp) == Recorded::Settled
        })
    }

    /// Whether all of `events` are settled.
    pub fn all_settled(&self, workflow: &str, events: &[PendingEvent]) -> bool {
        events.iter().all(|e| self.settled(workflow, e))
    }
}

/// Test fixtures, for this crate's tests and (feature `fixtures`) the crates above.
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures {
    use super::*;
    use serde_json::json;

    /// A webhook of namespace `n` created at 2026-01-01T00:00:00Z.
    pub fn hook(events: &[&str], status: serde_json::Value) -> Arc<Webhook> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "flowline.io/v1", "kind": "Webhook",
                "metadata": {"name": "wh", "namespace": "n",
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"url": "https://example.com", "events": events},
                "status": status,
            }))
            .unwrap(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::hook;
    use super::*;
    use crate::crd::EventKind;
    use serde_json::json;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn event(id: &str, kind: EventKind, at: Timestamp) -> PendingEvent {
        PendingEvent {
            id: id.into(),
            kind,
            timestamp: at,
            data: json!({}),
        }
    }

    #[test]
    fn the_watermark_the_retrying_list_and_the_acknowledged_ids() {
        let status = WebhookStatus {
            delivered_through: Some(t(100)),
            retrying: vec![RetryingEvent {
                event_id: "failing".into(),
                timestamp: t(50),
                attempts: 3,
                next_attempt_at: t(500),
            }],
            acknowledged: vec!["done-late".into()],
            ..Default::default()
        };
        let acks = Acknowledgements::from_status(Some(&status), t(0));
        assert_eq!(acks.recorded("old", t(60)), Recorded::Settled);
        assert_eq!(
            acks.recorded("failing", t(50)),
            Recorded::Retrying {
                attempts: 3,
                next_attempt_at: t(500)
            }
        );
        assert_eq!(acks.recorded("done-late", t(200)), Recorded::Settled);
        assert_eq!(acks.recorded("new", t(200)), Recorded::Owed);
        let fresh = Acknowledgements::from_status(None, t(10));
        assert_eq!(
            fresh.recorded("before-the-webhook", t(5)),
            Recorded::Settled,
            "events before a webhook existed are not owed to it"
        );
        assert_eq!(fresh.recorded("after", t(15)), Recorded::Owed);
    }

    #[test]
    fn an_event_is_settled_when_every_enabled_subscriber_has_it_settled() {
        let created: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let at = |s: i64| created + jiff::SignedDuration::from_secs(s);
        let done = hook(
            &["run.succeeded"],
            json!({"deliveredThrough": "2026-01-01T00:01:00Z"}),
        );
        let behind = hook(&["run.succeeded"], json!({"acknowledged": ["evt_b"]}));
        let disabled = hook(&["run.succeeded"], json!({"enabled": false}));
        let other_kind = hook(&["workflow.paused"], json!(null));

        let a = event("evt_a", EventKind::RunSucceeded, at(30));
        let b = event("evt_b", EventKind::RunSucceeded, at(30));
        let both = Outstanding::new([done.clone(), behind.clone()]);
        assert!(!both.settled("wf", &a), "behind owes evt_a");
        assert!(both.settled("wf", &b), "acknowledged above the watermark");
        assert!(!both.all_settled("wf", &[b.clone(), a.clone()]));
        assert!(Outstanding::new([done, disabled.clone()]).settled("wf", &a));
        assert!(
            Outstanding::new([disabled, other_kind]).settled("wf", &a),
            "nobody enabled subscribes"
        );
        assert!(Outstanding::new([]).settled("wf", &a));
    }
}
