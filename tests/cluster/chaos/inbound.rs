//! Events during the scenario. `chaos.order` events, posted with the runs, fan out to
//! two subscribed workflows ("On order" takes every one, "On big order" only those
//! whose filter holds): each must start exactly one run of each matching workflow,
//! whatever the kills. The "Waits" workflow's runs wait for a `chaos.packed` event
//! naming them, which a third party (`nudge`) posts every second until the run has
//! finished, as a sender retrying until it sees the effect would.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use flowline_core::crd::{EventPhase, FlowlineEvent, Run};
use serde_json::json;

use crate::builders::WorkflowBuilder;
use crate::support::TestApi;

pub const ORDER: &str = "chaos.order";
const PACKED: &str = "chaos.packed";
/// How often a third party posts the event a waiting run expects.
const NUDGE_EVERY: Duration = Duration::from_secs(1);

/// An accepted `chaos.order` event.
#[derive(Debug, Clone)]
pub struct Posted {
    pub id: String,
    /// Whether "On big order"'s filter holds for it.
    pub big: bool,
}

/// The two workflows subscribed to `chaos.order`.
pub struct Subscribers {
    pub every: String,
    pub big: String,
}

/// Creates the subscribers.
pub async fn subscribers(api: &TestApi) -> Subscribers {
    let steps = json!([{"id": "take", "action": "transform",
        "with": {"value": {"n": "{{ trigger.payload.n }}", "event": "{{ trigger.event.id }}"}}}]);
    let subscriber = |name: &str, filter: Option<&str>| {
        let mut trigger = json!({"type": "event", "event": ORDER});
        if let Some(filter) = filter {
            trigger["filter"] = json!(filter);
        }
        WorkflowBuilder::new(name)
            .trigger(trigger)
            .state("active")
            .steps(steps.clone())
    };
    let every = api.workflow(&subscriber("On order", None)).await;
    let big = api
        .workflow(&subscriber(
            "On big order",
            Some("event.payload.big == true"),
        ))
        .await;
    Subscribers { every, big }
}

/// The workflow whose runs wait for their `chaos.packed` event.
pub fn waits() -> WorkflowBuilder {
    WorkflowBuilder::new("Waits").steps(json!([
        {"id": "packed", "action": "wait_for_event", "with": {"event": PACKED,
            "match": "event.payload.n == trigger.payload.n", "timeout_ms": 600_000}},
        {"id": "after", "action": "transform", "with": {"value": "{{ steps.packed.output.event_id }}"}}]))
}

/// Posts the order event of the `n`th run (one posted in two is big).
pub async fn post_order(api: &TestApi, n: usize) -> Posted {
    let big = n.is_multiple_of(4);
    let body = json!({"name": ORDER, "payload": {"n": n, "big": big}});
    let res = api
        .send("POST", &api.admin_key, "/v1/events", Some(body))
        .await;
    assert_eq!(res.status(), 202, "posting an event");
    let answer: serde_json::Value = res.json().await.unwrap();
    Posted {
        id: answer["id"].as_str().unwrap().to_string(),
        big,
    }
}

/// Posts `chaos.packed` for the run `run` (payload `n`) every [`NUDGE_EVERY`] until
/// the run has finished (at most ten minutes).
pub fn nudge(api: &TestApi, run: String, n: usize) {
    let (http, key) = (reqwest::Client::new(), api.admin_key.clone());
    let (events, view) = (api.url("/v1/events"), api.url(&format!("/v1/runs/{run}")));
    tokio::spawn(async move {
        let until = Instant::now() + Duration::from_secs(600);
        while Instant::now() < until {
            let body = json!({"name": PACKED, "payload": {"n": n}});
            let _ = http
                .post(&events)
                .bearer_auth(&key)
                .json(&body)
                .send()
                .await;
            tokio::time::sleep(NUDGE_EVERY).await;
            let Ok(res) = http.get(&view).bearer_auth(&key).send().await else {
                continue;
            };
            let status = res.json::<serde_json::Value>().await.unwrap_or_default();
            if ["succeeded", "failed", "cancelled"]
                .contains(&status["status"].as_str().unwrap_or(""))
            {
                return;
            }
        }
    });
}

/// Waits (until `deadline`) for every posted order event to be fanned out; returns
/// the runs they started.
pub async fn fanned_out(api: &TestApi, posted: &[Posted], deadline: Instant) -> Vec<String> {
    let events = api.ns.api::<FlowlineEvent>();
    loop {
        let listed = events.list(&Default::default()).await.unwrap().items;
        let done: HashMap<String, &FlowlineEvent> = listed
            .iter()
            .filter(|e| e.phase() == EventPhase::Done)
            .map(|e| (e.id(), e))
            .collect();
        if posted.iter().all(|p| done.contains_key(&p.id)) || Instant::now() > deadline {
            return posted
                .iter()
                .filter_map(|p| done.get(&p.id))
                .flat_map(|e| e.status.iter().flat_map(|s| s.runs.clone()))
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What the order events started, against what their subscribers' filters call for.
#[derive(Debug, Default)]
pub struct Tally {
    pub posted: usize,
    pub runs: usize,
    /// (event, workflow) pairs without a run.
    pub missing: Vec<String>,
    /// (event, workflow) pairs with more than one run, or a run of a workflow that
    /// should have none.
    pub extra: Vec<String>,
}

pub fn tally(posted: &[Posted], subscribers: &Subscribers, runs: &[Run]) -> Tally {
    let mut started: BTreeMap<(String, String), usize> = BTreeMap::new();
    for run in runs {
        if let Some(event) = &run.spec.event {
            *started
                .entry((event.id.clone(), run.spec.workflow_ref.clone()))
                .or_default() += 1;
        }
    }
    let mut tally = Tally {
        posted: posted.len(),
        runs: started.values().sum(),
        ..Default::default()
    };
    for p in posted {
        for (workflow, due) in [(&subscribers.every, true), (&subscribers.big, p.big)] {
            let key = (p.id.clone(), workflow.clone());
            match (started.remove(&key).unwrap_or(0), due) {
                (0, true) => tally.missing.push(format!("{} → {workflow}", p.id)),
                (1, true) | (0, false) => {}
                (n, _) => tally.extra.push(format!("{} → {workflow}: {n} runs", p.id)),
            }
        }
    }
    tally.extra.extend(
        started.into_iter().map(|((event, wf), n)| {
            format!("{event} → {wf}: {n} runs of an event not posted here")
        }),
    );
    tally
}
