//! Every path of `/v1/events`, in process (`crate::testing`): refusals that never reach
//! the API server, and the create, repeat and replace paths against a mocked one.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::testing::*;
use flowline_core::crd::FlowlineEvent;

fn event_in(namespace: &str, name: &str, event: &str, received: &str) -> FlowlineEvent {
    object(
        "flowline.io/v1",
        "FlowlineEvent",
        namespace,
        name,
        json!({"spec": {"name": event, "payload": {"n": 1}, "receivedAt": received},
               "status": {"phase": "done", "runs": ["r-1"]}}),
    )
}

fn world() -> World {
    World::default()
        .event(event_in(
            NS,
            "evt-aaa",
            "order.created",
            "2026-01-01T00:00:01Z",
        ))
        .event(event_in(
            NS,
            "evt-bbb",
            "order.paid",
            "2026-01-01T00:00:02Z",
        ))
        .event(event_in(
            NS,
            "evt-ccc",
            "order.created",
            "2026-01-01T00:00:03Z",
        ))
        .event(event_in(
            OTHER_NS,
            "evt-zzz",
            "order.created",
            "2026-01-01T00:00:04Z",
        ))
}

#[tokio::test]
async fn every_route_needs_a_key_with_its_scope() {
    let api = world().start();
    let body = json!({"name": "order.created"});
    for (method, path, scope) in [
        ("GET", "/v1/events", "read"),
        ("GET", "/v1/events/evt_aaa", "read"),
        ("POST", "/v1/events", "execute"),
    ] {
        let c = || match method {
            "POST" => call(method, path).value(body.clone()),
            _ => call(method, path),
        };
        api.send(c().build()).await.error(401, "unauthenticated");
        let refused: &[&str] = if scope == "read" {
            &[NO_SCOPE]
        } else {
            &[READ, WRITE, NO_SCOPE]
        };
        for key in refused {
            let answer = api.send(c().key(key).build()).await;
            answer.error(403, "insufficient_scope");
            assert!(answer.message().contains(&format!("`{scope}`")));
        }
    }
    api.send(call("POST", "/v1/events").json("{").key(READ).build())
        .await
        .error(403, "insufficient_scope");
    api.assert_untouched();
}

#[tokio::test]
async fn an_event_is_refused_on_each_field_it_gets_wrong() {
    let api = world().start();
    let send = |c: Call| api.send(c.key(EXECUTE).build());
    send(call("POST", "/v1/events").body("{}"))
        .await
        .error(415, "unsupported_media_type");
    send(call("POST", "/v1/events").json(vec![b' '; (1 << 20) + 1]))
        .await
        .error(413, "payload_too_large");
    send(call("POST", "/v1/events").json("{\"name\":"))
        .await
        .error(400, "invalid_json");
    let mut deep = json!(1);
    for _ in 0..40 {
        deep = json!({"d": deep});
    }
    for (body, fields) in [
        (json!(null), vec!["body"]),
        (json!([]), vec!["body"]),
        (json!({}), vec!["name"]),
        (json!({"name": ""}), vec!["name"]),
        (json!({"name": "Order.Created"}), vec!["name"]),
        (json!({"name": ".x"}), vec!["name"]),
        (json!({"name": "a".repeat(129)}), vec!["name"]),
        (json!({"name": 7}), vec!["name"]),
        (json!({"name": "x", "payload": []}), vec!["payload"]),
        (json!({"name": "x", "payload": "s"}), vec!["payload"]),
        (json!({"name": "x", "payload": null}), vec!["payload"]),
        (json!({"name": "x", "id": ""}), vec!["id"]),
        (json!({"name": "x", "id": "i".repeat(256)}), vec!["id"]),
        (json!({"name": "x", "id": 5}), vec!["id"]),
        (json!({"name": "x", "id": null}), vec!["id"]),
        (json!({"name": "x", "extra": 1}), vec!["extra"]),
        (
            json!({"name": "x", "payload": {"deep": deep}}),
            vec!["body"],
        ),
    ] {
        let answer = send(call("POST", "/v1/events").value(body.clone())).await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), fields, "{body}");
    }
    api.assert_untouched();
}

#[tokio::test]
async fn unknown_and_other_accounts_events_are_not_found() {
    let api = world().start();
    for id in [
        "evt_zzz",
        "evt_nope",
        "evt-aaa",
        "aaa",
        "evt_AAA",
        "evt_a%2Fb",
    ] {
        api.send(call("GET", &format!("/v1/events/{id}")).key(READ).build())
            .await
            .error(404, "event_not_found");
    }
    api.assert_untouched();
}

#[tokio::test]
async fn the_list_is_the_accounts_newest_first_without_payloads() {
    let api = world().start();
    let page = |q: &str| {
        let api = &api;
        let q = q.to_string();
        async move {
            let answer = api
                .send(call("GET", &format!("/v1/events{q}")).key(READ).build())
                .await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            answer.body
        }
    };
    let ids = |body: &Value| -> Vec<String> {
        body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect()
    };
    let all = page("").await;
    assert_eq!(ids(&all), ["evt_ccc", "evt_bbb", "evt_aaa"]);
    assert_eq!(all["next_cursor"], Value::Null);
    let first = &all["data"][0];
    assert_eq!(first["name"], "order.created");
    assert_eq!(first["runs"], json!(["r-1"]));
    assert_eq!(first["received_at"], "2026-01-01T00:00:03.000Z");
    assert!(first.get("payload").is_none(), "{first}");
    let named = page("?name=order.created&limit=1").await;
    assert_eq!(ids(&named), ["evt_ccc"]);
    let cursor = named["next_cursor"].as_str().unwrap().to_string();
    let next = page(&format!("?name=order.created&limit=1&cursor={cursor}")).await;
    assert_eq!(ids(&next), ["evt_aaa"]);
    assert_eq!(next["next_cursor"], Value::Null);
    for (q, code, fields) in [
        ("?limit=0", "validation_error", vec!["limit"]),
        ("?limit=101", "validation_error", vec!["limit"]),
        ("?name=Bad%20Name", "validation_error", vec!["name"]),
        ("?cursor=nope", "invalid_cursor", vec![]),
    ] {
        let answer = api
            .send(call("GET", &format!("/v1/events{q}")).key(READ).build())
            .await;
        answer.error(400, code);
        assert_eq!(answer.fields(), fields, "{q}");
    }
    api.assert_untouched();
}

/// The object the mocked server stores: what a create sent, with a uid.
fn stored(body: &Value, uid: &str) -> Value {
    let mut object = body.clone();
    object["metadata"]["uid"] = json!(uid);
    object["metadata"]["resourceVersion"] = json!("1");
    object
}

#[tokio::test]
async fn a_post_creates_the_event_and_answers_its_id() {
    let api = World::default()
        .answer(|seen| (seen.method == "POST").then(|| (201, stored(&seen.body, "u-1"))))
        .start();
    let answer = api
        .send(
            call("POST", "/v1/events")
                .value(json!({"name": "order.created", "payload": {"n": 1}}))
                .key(EXECUTE)
                .build(),
        )
        .await;
    assert_eq!(answer.status, 202, "{}", answer.body);
    let id = answer.body["id"].as_str().unwrap();
    assert!(id.starts_with("evt_") && id.len() == 14, "{id}");
    assert_eq!(answer.body.as_object().unwrap().len(), 1);
    let seen = api.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].path,
        format!("/apis/flowline.io/v1/namespaces/{NS}/flowlineevents")
    );
    let spec = &seen[0].body["spec"];
    assert_eq!(spec["name"], "order.created");
    assert_eq!(spec["payload"], json!({"n": 1}));
    assert!(spec.get("clientId").is_none());
    assert_eq!(seen[0].body["metadata"]["name"], id.replace('_', "-"));
    // No payload: `{}`.
    let api = World::default()
        .answer(|seen| (seen.method == "POST").then(|| (201, stored(&seen.body, "u-1"))))
        .start();
    let answer = api
        .send(
            call("POST", "/v1/events")
                .value(json!({"name": "x"}))
                .key(EXECUTE)
                .build(),
        )
        .await;
    assert_eq!(answer.status, 202);
    assert_eq!(api.seen()[0].body["spec"]["payload"], json!({}));
}

/// A server holding one event for the client id `order-42`, received at `received`:
/// creates conflict while it exists, a delete needs its uid.
fn holding(received: &str) -> World {
    let name = flowline_core::fanout::object_name_for(Some("order-42"));
    let old = json!({"apiVersion": "flowline.io/v1", "kind": "FlowlineEvent",
        "metadata": {"name": name, "namespace": NS, "uid": "u-old", "resourceVersion": "1"},
        "spec": {"name": "order.created", "payload": {"n": 0}, "clientId": "order-42",
                 "receivedAt": received}});
    let held: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(Some(old)));
    World::default().answer(move |seen| {
        let mut held = held.lock().unwrap();
        match seen.method.as_str() {
            "POST" => Some(match &*held {
                Some(_) => (409, mock_api_status(409)),
                None => (201, stored(&seen.body, "u-new")),
            }),
            "GET" => Some(match &*held {
                Some(object) => (200, object.clone()),
                None => (404, mock_api_status(404)),
            }),
            "DELETE" => {
                let uid = &seen.body["preconditions"]["uid"];
                match &*held {
                    Some(object) if object["metadata"]["uid"] == *uid => {
                        *held = None;
                        Some((200, mock_api_status(200)))
                    }
                    _ => Some((409, mock_api_status(409))),
                }
            }
            _ => None,
        }
    })
}

fn mock_api_status(code: u16) -> Value {
    flowline_kube::mock_api::status(code)
}

/// A post of `order-42` to the server of [`holding`].
async fn repeat_after(received: &str) -> (Api, Answer) {
    let api = holding(received).start();
    let answer = api
        .send(
            call("POST", "/v1/events")
                .value(json!({"name": "order.created", "payload": {"n": 1}, "id": "order-42"}))
                .key(EXECUTE)
                .build(),
        )
        .await;
    (api, answer)
}

#[tokio::test]
async fn the_same_id_within_a_day_answers_the_first_event() {
    let now = flowline_core::clock::format_ts(flowline_core::clock::now_ms());
    let (api, answer) = repeat_after(&now).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let name = flowline_core::fanout::object_name_for(Some("order-42"));
    assert_eq!(answer.body["id"], name.replace("evt-", "evt_"));
    assert_eq!(answer.body["payload"], json!({"n": 0}), "the first event's");
    let methods: Vec<String> = api.seen().iter().map(|s| s.method.clone()).collect();
    assert_eq!(methods, ["POST", "GET"], "no delete, no second create");
}

#[tokio::test]
async fn the_same_id_after_a_day_replaces_the_old_event() {
    let (api, answer) = repeat_after("2020-01-01T00:00:00.000Z").await;
    assert_eq!(answer.status, 202, "{}", answer.body);
    let name = flowline_core::fanout::object_name_for(Some("order-42"));
    assert_eq!(answer.body["id"], name.replace("evt-", "evt_"));
    let seen = api.seen();
    let methods: Vec<&str> = seen.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["POST", "GET", "DELETE", "POST"]);
    assert_eq!(seen[2].body["preconditions"]["uid"], "u-old");
    assert_eq!(seen[3].body["spec"]["payload"], json!({"n": 1}));
}

#[tokio::test]
async fn a_failed_write_surfaces() {
    let api = World::default()
        .answer(|seen| (seen.method == "POST").then(|| (503, mock_api_status(503))))
        .start();
    api.send(
        call("POST", "/v1/events")
            .value(json!({"name": "x"}))
            .key(EXECUTE)
            .build(),
    )
    .await
    .error(503, "unavailable");
    let api = World::default()
        .answer(|seen| (seen.method == "POST").then(|| (500, mock_api_status(500))))
        .start();
    api.send(
        call("POST", "/v1/events")
            .value(json!({"name": "x", "id": "a"}))
            .key(EXECUTE)
            .build(),
    )
    .await
    .error(500, "internal_error");
}
