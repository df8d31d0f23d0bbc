//! What the receiver got, held against what the Runs recorded: lost events, events
//! that should not exist, and duplicates. An event is one (kind, run); a delivery
//! counts once the receiver answered it 2xx, whatever the sender made of the answer.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use flowline_core::crd::Run;

use crate::delivery::receiver::Received;

const STARTED: &str = "run.started";
/// The only final event a run of this scenario should announce.
const SUCCEEDED: &str = "run.succeeded";

#[derive(Debug, Default)]
pub struct Events {
    /// Requests the receiver got (failed attempts included).
    pub attempts: usize,
    /// Requests answered 2xx.
    pub delivered: usize,
    /// Distinct (kind, run) delivered.
    pub unique: usize,
    /// Distinct event ids delivered; more than `unique` means an event was sent again
    /// under a new id, which receivers deduping on `webhook-id` cannot catch.
    pub ids: usize,
    /// Events recorded or due and never delivered.
    pub lost: Vec<String>,
    /// Delivered events no run of this scenario should cause (a failure, a cancel).
    pub unexpected: Vec<String>,
    /// Events delivered under more than one id: receivers that deduplicate on
    /// `webhook-id`, as docs/delivery.md tells them to, handle them twice.
    pub reminted: Vec<String>,
}

impl Events {
    pub fn duplicates(&self) -> usize {
        self.delivered - self.unique
    }

    pub fn duplicate_ratio(&self) -> f64 {
        self.duplicates() as f64 / self.unique.max(1) as f64
    }
}

pub fn tally(received: &[Received], runs: &[Run]) -> Events {
    let mut events = Events {
        attempts: received.len(),
        ..Default::default()
    };
    let mut pairs: HashMap<(String, String), BTreeSet<String>> = HashMap::new();
    let mut ids = HashSet::new();
    for r in received
        .iter()
        .filter(|r| (200..300).contains(&r.status_sent))
    {
        let body = r.json();
        let kind = body["event"].as_str().unwrap_or_default().to_string();
        let run = body["data"]["run_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let id = body["id"].as_str().unwrap_or_default().to_string();
        events.delivered += 1;
        ids.insert(id.clone());
        if ![STARTED, SUCCEEDED].contains(&kind.as_str()) {
            events.unexpected.push(format!("{kind} of {run}"));
        }
        pairs.entry((kind, run)).or_default().insert(id);
    }
    events.unique = pairs.len();
    events.ids = ids.len();
    events.reminted = pairs
        .iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|((kind, run), ids)| format!("{kind} of {run}: {ids:?}"))
        .collect();
    for run in runs {
        let name = run.metadata.name.clone().unwrap_or_default();
        let status = run.status.as_ref();
        // run.started, and the final event of a finished run (whichever it is: a failed
        // run is reported as failed, its run.failed is due all the same); recorded ids
        // must arrive too.
        let last = status
            .filter(|s| s.phase.is_finished())
            .map(|s| format!("run.{}", s.phase.as_str()));
        let mut due: BTreeSet<String> = std::iter::once(STARTED.to_string())
            .chain(last)
            .filter(|kind| !pairs.contains_key(&(kind.clone(), name.clone())))
            .map(|kind| format!("{kind} of {name}"))
            .collect();
        let recorded = status.map(|s| &s.pending_events[..]).unwrap_or_default();
        due.extend(
            recorded
                .iter()
                .filter(|e| !ids.contains(&e.id))
                .map(|e| format!("{} of {name} ({})", e.kind.as_str(), e.id)),
        );
        events.lost.extend(due);
    }
    events
}

/// What one kill cost in duplicates: deliveries made before it and made again after it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Resent {
    pub deliveries: usize,
    /// How long before the kill the oldest of them had been delivered: the window whose
    /// acknowledgements the killed process had not yet written.
    pub oldest: Duration,
}

/// Attributes every duplicate delivery to the last kill between its event's first
/// delivery and itself (`kills` in order); duplicates with no kill in between are not
/// counted here.
pub fn resent_per_kill(received: &[Received], kills: &[Instant]) -> Vec<Resent> {
    let mut delivered: Vec<&Received> = received
        .iter()
        .filter(|r| (200..300).contains(&r.status_sent))
        .collect();
    delivered.sort_by_key(|r| r.arrived);
    let mut first = HashMap::new();
    let mut per_kill = vec![Resent::default(); kills.len()];
    for r in delivered {
        let body = r.json();
        let event = (
            body["event"].to_string(),
            body["data"]["run_id"].to_string(),
        );
        let Some(&was) = first.get(&event) else {
            first.insert(event, r.arrived);
            continue;
        };
        let between = kills.iter().rposition(|k| was < *k && *k <= r.arrived);
        if let Some(k) = between {
            per_kill[k].deliveries += 1;
            per_kill[k].oldest = per_kill[k].oldest.max(kills[k].duration_since(was));
        }
    }
    per_kill
}
