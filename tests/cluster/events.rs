//! Inbound events (`POST /v1/events`): the operator's fan-out starts one run of every
//! active workflow subscribed to the event's name whose filter holds (and none of paused,
//! draft, filtered-out or other accounts' workflows); a repeated client id answers the
//! first event; reads and lists are the account's own.

use std::time::Duration;

use kube::api::PostParams;
use serde_json::{Value, json};

use crate::builders::WorkflowBuilder;
use crate::support::{Process, TestApi, assert_error, eventually, ready};
use flowline_core::crd::FlowlineEvent;

const FINISH: Duration = Duration::from_secs(60);

/// A workflow subscribed to `event` (with `filter`), in `state`, whose one step echoes
/// the payload's `n` and the event's id.
pub fn subscriber(id: &str, event: &str, filter: Option<&str>, state: &str) -> WorkflowBuilder {
    let mut trigger = json!({"type": "event", "event": event});
    if let Some(filter) = filter {
        trigger["filter"] = json!(filter);
    }
    WorkflowBuilder::new(id)
        .trigger(trigger)
        .state(state)
        .steps(
            json!([{"id": "echo", "action": "transform", "with": {"value": {
            "n": "{{ trigger.payload.n }}", "event": "{{ trigger.event.id }}",
            "name": "{{ trigger.event.name }}"}}}]),
        )
}

/// Posts an event as `key`; returns the answer's status and body.
pub async fn post_event(api: &TestApi, key: &str, body: Value) -> (u16, Value) {
    let res = api.send("POST", key, "/v1/events", Some(body)).await;
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// The event `id` once the operator has fanned it out (its object's phase is `done`).
pub async fn fanned_out(api: &TestApi, id: &str, within: Duration) -> Value {
    let name = id.replacen("evt_", "evt-", 1);
    let events = api.ns.api::<FlowlineEvent>();
    eventually(&format!("event {id} to be fanned out"), within, || async {
        let event = events.get(&name).await.ok()?;
        (event.phase() == flowline_core::crd::EventPhase::Done).then_some(())
    })
    .await;
    let res = api.get(&api.admin_key, &format!("/v1/events/{id}")).await;
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

/// The Kubernetes object of the event `id` (`evt_…` is object `evt-…`).
pub async fn event_object(api: &TestApi, id: &str) -> FlowlineEvent {
    api.ns
        .api::<FlowlineEvent>()
        .get(&id.replacen("evt_", "evt-", 1))
        .await
        .unwrap()
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn events_fan_out_to_matching_active_workflows_only() {
    let api = TestApi::start("events-fan").await;
    let other = TestApi::start("events-other").await;
    let key = api.admin_key.clone();
    let (_operator, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;

    let plain = api
        .workflow(&subscriber("plain", "order.created", None, "active"))
        .await;
    let big = api
        .workflow(&subscriber(
            "big",
            "order.created",
            Some("event.payload.n > 5 && event.name == 'order.created'"),
            "active",
        ))
        .await;
    let small = api
        .workflow(&subscriber(
            "small",
            "order.created",
            Some("event.payload.n < 5"),
            "active",
        ))
        .await;
    let paused = api
        .workflow(&subscriber("paused", "order.created", None, "paused"))
        .await;
    let draft = api
        .workflow(&subscriber("draft", "order.created", None, "draft"))
        .await;
    let elsewhere = api
        .workflow(&subscriber("elsewhere", "order.paid", None, "active"))
        .await;
    let theirs = other
        .workflow(&subscriber("theirs", "order.created", None, "active"))
        .await;

    let (status, body) = post_event(
        &api,
        &key,
        json!({"name": "order.created", "payload": {"n": 7}}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("evt_"), "{id}");
    let event = fanned_out(&api, &id, FINISH).await;
    assert_eq!(event["name"], "order.created");
    assert_eq!(event["payload"], json!({"n": 7}));
    let runs: Vec<String> = serde_json::from_value(event["runs"].clone()).unwrap();
    assert_eq!(runs.len(), 2, "{event}");
    for run in &runs {
        crate::support::assert_owned_by_its_workflow(&api.ns, run).await;
    }
    let metrics = crate::support::metrics_text(port).await.unwrap_or_default();
    assert!(
        metrics.contains("flowline_events_fanned_out_total 1")
            && metrics.contains("flowline_event_runs_total{action=\"started\"} 2"),
        "{metrics}"
    );

    for (workflow, expected) in [
        (&plain, 1),
        (&big, 1),
        (&small, 0),
        (&paused, 0),
        (&draft, 0),
        (&elsewhere, 0),
    ] {
        let ids = api.run_ids(workflow, "").await;
        assert_eq!(ids.len(), expected, "{workflow}: {ids:?}");
        for run in ids {
            assert!(runs.contains(&run), "{run} not in {runs:?}");
            let view = api.finished_view(&key, &run, FINISH).await;
            assert_eq!(view["status"], "succeeded", "{view}");
            assert_eq!(view["trigger"], "event");
            assert_eq!(view["event_id"], id.as_str());
            assert_eq!(
                view["steps"][0]["output"],
                json!({"n": 7, "event": id, "name": "order.created"})
            );
        }
    }
    assert!(other.run_ids(&theirs, "").await.is_empty());

    // Another account cannot read it.
    let res = other
        .get(&other.admin_key, &format!("/v1/events/{id}"))
        .await;
    assert_error(res, 404, "event_not_found").await;
    let res = api.get(&key, "/v1/events/evt_nosuchevent").await;
    assert_error(res, 404, "event_not_found").await;
    let res = other.get(&other.admin_key, "/v1/events").await;
    let page: Value = res.json().await.unwrap();
    assert_eq!(page["data"], json!([]), "{page}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_repeated_event_id_answers_the_first_event_and_starts_nothing_more() {
    let api = TestApi::start("events-dup").await;
    let key = api.admin_key.clone();
    let (_operator, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let a = api.workflow(&subscriber("a", "tick", None, "active")).await;
    let b = api.workflow(&subscriber("b", "tick", None, "active")).await;

    let body = json!({"name": "tick", "payload": {"n": 1}, "id": "tick-2026-11-27"});
    let (status, first) = post_event(&api, &key, body.clone()).await;
    assert_eq!(status, 202, "{first}");
    let id = first["id"].as_str().unwrap().to_string();
    // Again, at once (before or while the fan-out runs), and with another payload.
    let (status, again) = post_event(&api, &key, body).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["id"], id.as_str());
    assert_eq!(again["payload"], json!({"n": 1}));
    let (status, third) = post_event(
        &api,
        &key,
        json!({"name": "tick", "payload": {"n": 2}, "id": "tick-2026-11-27"}),
    )
    .await;
    assert_eq!(status, 200, "{third}");
    assert_eq!(third["payload"], json!({"n": 1}), "the first event's");

    let event = fanned_out(&api, &id, FINISH).await;
    assert_eq!(event["runs"].as_array().unwrap().len(), 2, "{event}");
    // A later event proves no second fan-out of the first is on its way: the operator
    // handles events in turn, and this one is done.
    let (status, later) = post_event(&api, &key, json!({"name": "tick"})).await;
    assert_eq!(status, 202);
    fanned_out(&api, later["id"].as_str().unwrap(), FINISH).await;
    for wf in [&a, &b] {
        let ids = api.run_ids(wf, "").await;
        assert_eq!(ids.len(), 2, "{wf}: one run per event: {ids:?}");
    }
    let res = api.get(&key, "/v1/events?limit=100").await;
    let page: Value = res.json().await.unwrap();
    assert_eq!(page["data"].as_array().unwrap().len(), 2, "{page}");

    // Eight concurrent posts of a new id: one is accepted, the others answer it.
    let body = json!({"name": "tick", "id": "burst"});
    let answers =
        futures::future::join_all((0..8).map(|_| post_event(&api, &key, body.clone()))).await;
    let accepted: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 202)
        .map(|(_, b)| b)
        .collect();
    assert_eq!(accepted.len(), 1, "{answers:?}");
    let id = accepted[0]["id"].as_str().unwrap();
    for (status, body) in &answers {
        assert!(*status == 202 || *status == 200, "{status} {body}");
        assert_eq!(body["id"], id);
    }
    fanned_out(&api, id, FINISH).await;
    for wf in [&a, &b] {
        assert_eq!(api.run_ids(wf, "").await.len(), 3, "{wf}");
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn events_are_listed_newest_first_in_pages() {
    let api = TestApi::start("events-list").await;
    let key = api.admin_key.clone();
    let mut posted = Vec::new();
    for (name, n) in [("a.one", 1), ("b.two", 2), ("a.one", 3), ("a.one", 4)] {
        let (status, body) =
            post_event(&api, &key, json!({"name": name, "payload": {"n": n}})).await;
        assert_eq!(status, 202, "{body}");
        posted.push(body["id"].as_str().unwrap().to_string());
        // Distinct receive times, so the order is the posting order.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ids = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect()
    };
    let page: Value = api
        .get(&key, "/v1/events?limit=2")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ids(&page), [posted[3].clone(), posted[2].clone()]);
    assert!(page["data"][0].get("payload").is_none());
    let cursor = page["next_cursor"].as_str().unwrap();
    let next: Value = api
        .get(&key, &format!("/v1/events?limit=2&cursor={cursor}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ids(&next), [posted[1].clone(), posted[0].clone()]);
    assert_eq!(next["next_cursor"], Value::Null);
    let named: Value = api
        .get(&key, "/v1/events?name=a.one&limit=100")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        ids(&named),
        [posted[3].clone(), posted[2].clone(), posted[0].clone()]
    );
    // A read right after the write sees it, payload included.
    let one: Value = api
        .get(&key, &format!("/v1/events/{}", posted[1]))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(one["payload"], json!({"n": 2}));
    assert_eq!(one["runs"], json!([]));
    let res = api.get(&key, "/v1/events?name=Not%20A%20Name").await;
    assert_error(res, 400, "validation_error").await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn an_event_trigger_with_a_bad_filter_is_refused_by_the_api_and_kubernetes() {
    let api = TestApi::start("events-spec").await;
    let key = api.admin_key.clone();
    for (trigger, field) in [
        (json!({"type": "event"}), "trigger.event"),
        (
            json!({"type": "event", "event": "Bad Name"}),
            "trigger.event",
        ),
        (
            json!({"type": "event", "event": "x", "filter": "trigger.payload.a == 1"}),
            "trigger.filter",
        ),
        (
            json!({"type": "event", "event": "x", "filter": "event.payload.a =="}),
            "trigger.filter",
        ),
        (json!({"type": "manual", "event": "x"}), "trigger.event"),
        (
            json!({"type": "manual", "filter": "true"}),
            "trigger.filter",
        ),
    ] {
        let res = api
            .send(
                "POST",
                &key,
                "/v1/workflows",
                Some(json!({"name": "w", "trigger": trigger})),
            )
            .await;
        let body = assert_error(res, 400, "validation_error").await;
        let fields: Vec<&str> = body["error"]["details"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["field"].as_str())
            .collect();
        assert!(fields.contains(&field), "{trigger}: {body}");
    }
    // PATCH sets and clears the event trigger whole.
    let wf = api.create_workflow("patched").await;
    let path = format!("/v1/workflows/{wf}");
    let trigger = json!({"type": "event", "event": "x.y", "filter": "event.payload.a == 1"});
    api.patch_workflow(&key, &wf, json!({"trigger": trigger}))
        .await;
    let view: Value = api.get(&key, &path).await.json().await.unwrap();
    assert_eq!(view["trigger"], trigger);
    api.patch_workflow(&key, &wf, json!({"trigger": {"type": "manual"}}))
        .await;
    let view: Value = api.get(&key, &path).await.json().await.unwrap();
    assert_eq!(view["trigger"], json!({"type": "manual"}));
    // The CRD's rules refuse what kubectl would apply without `event`.
    let out = api.ns.kubectl_apply(
        &WorkflowBuilder::new("no-event")
            .trigger(json!({"type": "event"}))
            .manifest(),
    );
    assert!(!out.status.success());
    assert!(
        crate::support::text(&out.stderr).contains("trigger.event is required"),
        "{}",
        crate::support::text(&out.stderr)
    );
}

/// The run `run` once its first step has `status` (as `key` sees it).
async fn first_step_is(api: &TestApi, run: &str, status: &str) {
    eventually(
        &format!("run {run}'s first step to be {status}"),
        FINISH,
        || async {
            let view: Value = api
                .get(&api.admin_key, &format!("/v1/runs/{run}"))
                .await
                .json()
                .await
                .ok()?;
            (view["steps"][0]["status"] == status).then_some(())
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn an_event_cancels_the_unfinished_runs_its_cancel_on_matches() {
    let api = TestApi::start("events-cancel").await;
    let key = api.admin_key.clone();
    let (_operator, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let cancel_on = json!({"cancel_on": [
        {"event": "order.cancelled", "match": "trigger.payload.order == event.payload.order"}
    ]});
    // One whose run executes (a delay in a task), one whose run parks (a wait).
    let busy = api
        .workflow(
            &WorkflowBuilder::new("busy")
                .active()
                .steps(json!([{"id": "slow", "action": "delay", "with": {"ms": 300000}}])),
        )
        .await;
    api.patch_workflow(&key, &busy, cancel_on.clone()).await;
    let parked = api
        .workflow(
            &WorkflowBuilder::new("parked")
                .active()
                .steps(json!([{"id": "later", "action": "wait", "with": {"ms": 300000}}])),
        )
        .await;
    api.patch_workflow(&key, &parked, cancel_on).await;
    let view: Value = api
        .get(&key, &format!("/v1/workflows/{busy}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["cancel_on"][0]["event"], "order.cancelled", "{view}");

    let order = |o: &str| Some(json!({"payload": {"order": o}}));
    let busy_a = api.start_run(&key, &busy, order("A-1")).await;
    let busy_b = api.start_run(&key, &busy, order("B-2")).await;
    let parked_a = api.start_run(&key, &parked, order("A-1")).await;
    first_step_is(&api, &busy_a, "running").await;
    first_step_is(&api, &busy_b, "running").await;
    first_step_is(&api, &parked_a, "waiting").await;

    let (status, body) = post_event(
        &api,
        &key,
        json!({"name": "order.cancelled", "payload": {"order": "A-1"}}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let event = fanned_out(&api, &id, FINISH).await;
    let mut expected = vec![busy_a.clone(), parked_a.clone()];
    expected.sort();
    assert_eq!(event["cancelled"], json!(expected), "{event}");
    assert_eq!(event["runs"], json!([]));
    for run in [&busy_a, &parked_a] {
        let view = api.finished_view(&key, run, FINISH).await;
        assert_eq!(view["status"], "cancelled", "{view}");
        assert_eq!(view["error"], format!("cancelled by event {id}"), "{view}");
    }
    // The other order's run goes on; a user's cancel has no reason.
    let view: Value = api
        .get(&key, &format!("/v1/runs/{busy_b}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["status"], "running", "{view}");
    let res = api
        .send("POST", &key, &format!("/v1/runs/{busy_b}/cancel"), None)
        .await;
    assert_eq!(res.status(), 202);
    let view = api.finished_view(&key, &busy_b, FINISH).await;
    assert_eq!(view["status"], "cancelled");
    assert_eq!(view["error"], Value::Null);

    // A bad entry is refused on its field.
    let res = api
        .send(
            "PATCH",
            &key,
            &format!("/v1/workflows/{busy}"),
            Some(json!({"cancel_on": [{"event": "x", "match": "steps.a.output == 1"}]})),
        )
        .await;
    let body = assert_error(res, 400, "validation_error").await;
    assert_eq!(body["error"]["details"][0]["field"], "cancel_on[0].match");
}

/// A FlowlineEvent object as the API would have stored it, received at `received`.
fn stored_event(name: &str, event: &str, client_id: Option<&str>, received: &str) -> FlowlineEvent {
    let mut object = json!({
        "apiVersion": "flowline.io/v1", "kind": "FlowlineEvent",
        "metadata": {"name": name},
        "spec": {"name": event, "payload": {"n": 0}, "receivedAt": received},
    });
    if let Some(id) = client_id {
        object["spec"]["clientId"] = json!(id);
    }
    serde_json::from_value(object).unwrap()
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn old_events_are_fanned_out_then_deleted_and_an_old_client_id_names_a_new_event() {
    let api = TestApi::start("events-old").await;
    let key = api.admin_key.clone();
    let (_operator, port) = Process::operator(&api.ns, &["--no-api", "--event-retention", "7d"]);
    ready(port).await;
    let wf = api
        .workflow(&subscriber("sub", "tick", None, "active"))
        .await;
    let events = api.ns.api::<FlowlineEvent>();

    // Received 8 days ago: past the retention. It is fanned out all the same (an
    // accepted event is never lost), then deleted.
    let stale = stored_event("evt-stale", "tick", None, "2020-01-01T00:00:00Z");
    events.create(&PostParams::default(), &stale).await.unwrap();
    eventually("the stale event to be deleted", FINISH, || async {
        events
            .get_opt("evt-stale")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let ids = api.run_ids(&wf, "").await;
    assert_eq!(ids.len(), 1, "{ids:?}");

    // A client id last used two days ago names a new event: 202, a fresh fan-out.
    let name = flowline_core::fanout::object_name_for(Some("nightly"));
    let two_days_ago = flowline_core::clock::format_ts(
        flowline_core::clock::now_ms() - jiff::SignedDuration::from_hours(48),
    );
    let old = stored_event(&name, "tick", Some("nightly"), &two_days_ago);
    let old = events.create(&PostParams::default(), &old).await.unwrap();
    let id = name.replacen("evt-", "evt_", 1);
    fanned_out(&api, &id, FINISH).await;
    assert_eq!(api.run_ids(&wf, "").await.len(), 2);
    let (status, body) = post_event(
        &api,
        &key,
        json!({"name": "tick", "payload": {"n": 5}, "id": "nightly"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["id"], id.as_str());
    let event = fanned_out(&api, &id, FINISH).await;
    assert_eq!(event["payload"], json!({"n": 5}));
    let replaced = events.get(&name).await.unwrap();
    assert_ne!(replaced.metadata.uid, old.metadata.uid);
    assert_eq!(api.run_ids(&wf, "").await.len(), 3, "its own run");
    // Within the day, the same id is that event.
    let (status, again) = post_event(&api, &key, json!({"name": "tick", "id": "nightly"})).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["payload"], json!({"n": 5}));
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_fan_out_interrupted_after_its_first_run_completes_without_a_second() {
    let api = TestApi::start("events-crash").await;
    let key = api.admin_key.clone();
    let first = api
        .workflow(&subscriber("first", "tick", None, "active"))
        .await;
    let second = api
        .workflow(&subscriber("second", "tick", None, "active"))
        .await;
    // Posted while no operator runs: accepted and kept pending.
    let (status, body) = post_event(&api, &key, json!({"name": "tick", "payload": {"n": 3}})).await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let events = api.ns.api::<FlowlineEvent>();
    let event = events.get(&id.replacen("evt_", "evt-", 1)).await.unwrap();
    assert_eq!(event.phase(), flowline_core::crd::EventPhase::Pending);
    // What an operator killed right after creating the first workflow's run left.
    let wf = api
        .ns
        .api::<flowline_core::crd::Workflow>()
        .get(&first)
        .await
        .unwrap();
    let run = flowline_controller::event::run_of(&event, &wf, flowline_core::clock::now_ms());
    let made = api
        .ns
        .api::<flowline_core::crd::Run>()
        .create(&PostParams::default(), &run)
        .await
        .unwrap();

    let (_operator, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let event = fanned_out(&api, &id, FINISH).await;
    assert_eq!(event["runs"].as_array().unwrap().len(), 2, "{event}");
    assert_eq!(api.run_ids(&first, "").await, [made.metadata.name.unwrap()]);
    assert_eq!(api.run_ids(&second, "").await.len(), 1);
}

/// A `wait_for_event` step is completed by the first event of its name posted after it
/// started whose `match` holds: not by one posted before, nor by one that does not
/// match; the event lists the run as resumed. Without a match in time it fails.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_wait_for_event_is_completed_by_the_second_event_only() {
    let api = TestApi::start("events-wait").await;
    let key = api.admin_key.clone();
    let steps = |timeout_ms: u64| {
        json!([
            {"id": "w", "action": "wait_for_event", "with": {"event": "order.shipped",
                "match": "event.payload.order == trigger.payload.order", "timeout_ms": timeout_ms}},
            {"id": "after", "action": "transform", "with": {"value": "{{ steps.w.output.payload.carrier }}"}}
        ])
    };
    let wf = api
        .workflow(&WorkflowBuilder::new("ship").steps(steps(600_000)))
        .await;
    let (_op, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let (status, early) = post_event(
        &api,
        &key,
        json!({"name": "order.shipped", "payload": {"order": 5, "carrier": "early"}}),
    )
    .await;
    assert_eq!(status, 202, "{early}");
    fanned_out(&api, early["id"].as_str().unwrap(), FINISH).await;
    let run = api
        .start_run(&key, &wf, Some(json!({"payload": {"order": 5}})))
        .await;
    crate::support::parked_on(&api.ns, &run, "w").await;

    let (_, other) = post_event(
        &api,
        &key,
        json!({"name": "order.shipped", "payload": {"order": 6, "carrier": "ups"}}),
    )
    .await;
    let seen = fanned_out(&api, other["id"].as_str().unwrap(), FINISH).await;
    assert_eq!(seen["resumed"], json!([]), "{seen}");
    let (_, mine) = post_event(
        &api,
        &key,
        json!({"name": "order.shipped", "payload": {"order": 5, "carrier": "dhl"}}),
    )
    .await;
    let id = mine["id"].as_str().unwrap();
    let seen = fanned_out(&api, id, FINISH).await;
    assert_eq!(seen["resumed"], json!([run]), "{seen}");

    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(
        view["steps"][0]["output"],
        json!({"event_id": id, "payload": {"order": 5, "carrier": "dhl"}}),
        "{view}"
    );
    assert_eq!(view["steps"][1]["output"], "dhl", "{view}");

    let short = api
        .workflow(&WorkflowBuilder::new("late").steps(steps(1_000)))
        .await;
    let run = api
        .start_run(&key, &short, Some(json!({"payload": {"order": 9}})))
        .await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(
        view["error"], "step w (wait_for_event) failed: timed out waiting for event order.shipped",
        "{view}"
    );
}

/// A step that started waiting before an event was received, but whose "waiting"
/// status landed after that event's fan-out listed the runs, is caught up: the run
/// controller lists the events of the name received since the step started and
/// completes it with the first that matches, also after a restart (the fan-out is
/// simulated here by writing the event done while no operator runs).
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_wait_the_fan_out_missed_is_caught_up_by_the_run_controller() {
    let api = TestApi::start("events-catch-up").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("ship").steps(json!([
            {"id": "w", "action": "wait_for_event", "with": {"event": "order.packed",
                "match": "event.payload.order == trigger.payload.order", "timeout_ms": 600_000}}
        ])))
        .await;
    let operator = Process::operator(&api.ns, &["--no-api"]);
    ready(operator.1).await;
    let run = api
        .start_run(&key, &wf, Some(json!({"payload": {"order": 5}})))
        .await;
    crate::support::parked_on(&api.ns, &run, "w").await;
    drop(operator);

    let mut ids = Vec::new();
    for order in [6, 5] {
        let body = json!({"name": "order.packed", "payload": {"order": order}});
        let (status, posted) = post_event(&api, &key, body).await;
        assert_eq!(status, 202, "{posted}");
        let id = posted["id"].as_str().unwrap().to_string();
        // A fan-out that listed the runs before the step's status said "waiting".
        let done = json!({"status": {"phase": "done", "observedWorkflows": 0}});
        api.ns
            .api::<FlowlineEvent>()
            .patch_status(
                &id.replacen("evt_", "evt-", 1),
                &Default::default(),
                &kube::api::Patch::Merge(&done),
            )
            .await
            .unwrap();
        ids.push(id);
    }

    let (_operator, port) = Process::operator(&api.ns, &["--no-api"]);
    ready(port).await;
    let view = api.finished_view(&key, &run, FINISH).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(
        view["steps"][0]["output"],
        json!({"event_id": ids[1], "payload": {"order": 5}}),
        "the matching event, not the first of the name: {view}"
    );
    eventually("the event to list the run it resumed", FINISH, || async {
        let seen = fanned_out(&api, &ids[1], FINISH).await;
        (seen["resumed"] == json!([run])).then_some(())
    })
    .await;
    assert_eq!(
        fanned_out(&api, &ids[0], FINISH).await["resumed"],
        json!([])
    );
}
