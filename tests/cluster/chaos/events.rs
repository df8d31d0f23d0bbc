//! What the receiver got, held against what the Runs recorded: lost events, events
//! that should not exist, and duplicates. An event is one (kind, run); a delivery
//! counts once the receiver answered it 2xx, whatever the sender made of the answer.

use std::collections::{BTreeSet, HashSet};

use flowline::crd::Run;

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
    let mut pairs = HashSet::new();
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
        events.delivered += 1;
        ids.insert(body["id"].as_str().unwrap_or_default().to_string());
        if ![STARTED, SUCCEEDED].contains(&kind.as_str()) {
            events.unexpected.push(format!("{kind} of {run}"));
        }
        pairs.insert((kind, run));
    }
    events.unique = pairs.len();
    events.ids = ids.len();
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
            .filter(|kind| !pairs.contains(&(kind.clone(), name.clone())))
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
