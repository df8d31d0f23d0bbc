//! Every refusal of `/v1/webhooks` (deliveries, redeliveries and secret rotation
//! included) that needs no write to the cluster, in process (`crate::testing`). None of
//! them reaches the API server.

use serde_json::{Value, json};

use crate::testing::*;

fn world() -> World {
    World::default()
        .workflow(workflow("wf-a", json!({})))
        .workflow(workflow_in(OTHER_NS, "wf-theirs", json!({})))
        .webhook(webhook(
            "wh-a",
            json!({"recentAttempts": [{"id": "dlv-1", "eventId": "evt-gone", "event": "run.failed",
                   "attempt": 1, "statusCode": 500, "durationMs": 12, "at": "2026-01-01T00:00:00Z"}]}),
        ))
}

fn routes() -> Vec<(&'static str, &'static str, &'static str, Option<Value>)> {
    vec![
        ("GET", "/v1/webhooks", "read", None),
        (
            "POST",
            "/v1/webhooks",
            "write",
            Some(json!({"url": "https://h.test/", "events": ["run.failed"]})),
        ),
        ("GET", "/v1/webhooks/wh-a", "read", None),
        ("DELETE", "/v1/webhooks/wh-a", "write", None),
        ("GET", "/v1/webhooks/wh-a/deliveries", "read", None),
        (
            "POST",
            "/v1/webhooks/wh-a/deliveries/dlv-1/retry",
            "write",
            None,
        ),
        ("POST", "/v1/webhooks/wh-a/rotate-secret", "write", None),
    ]
}

#[tokio::test]
async fn every_route_needs_a_key_with_its_scope() {
    let api = world().start();
    for (method, path, scope, body) in routes() {
        let c = || match &body {
            Some(b) => call(method, path).value(b.clone()),
            None => call(method, path),
        };
        api.send(c().build()).await.error(401, "unauthenticated");
        api.send(c().key("flk_revoked").build())
            .await
            .error(401, "unauthenticated");
        let refused: &[&str] = if scope == "read" {
            &[NO_SCOPE]
        } else {
            &[READ, EXECUTE, NO_SCOPE]
        };
        for key in refused {
            let answer = api.send(c().key(key).build()).await;
            answer.error(403, "insufficient_scope");
            assert!(answer.message().contains(&format!("`{scope}`")));
        }
    }
    // The scope before the body.
    for c in [
        call("POST", "/v1/webhooks").json("{"),
        call("POST", "/v1/webhooks").body("{}"),
        call("POST", "/v1/webhooks").value(json!([])),
    ] {
        api.send(c.key(READ).build())
            .await
            .error(403, "insufficient_scope");
    }
    api.assert_untouched();
}

#[tokio::test]
async fn a_webhook_is_refused_on_each_field_it_gets_wrong() {
    let api = world().start();
    let send = |c: Call| api.send(c.key(WRITE).build());
    send(call("POST", "/v1/webhooks").body("{}"))
        .await
        .error(415, "unsupported_media_type");
    send(call("POST", "/v1/webhooks").json(vec![b' '; (1 << 20) + 1]))
        .await
        .error(413, "payload_too_large");
    send(call("POST", "/v1/webhooks").json("{\"url\":"))
        .await
        .error(400, "invalid_json");
    let long = format!("https://h.test/{}", "x".repeat(2048));
    for (body, fields) in [
        (json!(["https://h.test/", ["run.failed"]]), vec!["body"]),
        (json!(null), vec!["body"]),
        (json!({"events": ["run.failed"]}), vec!["url"]),
        (json!({"url": "https://h.test/"}), vec!["events"]),
        (
            json!({"url": "https://h.test/", "events": ["run.failed"], "secret": "mine"}),
            vec!["secret"],
        ),
        (
            json!({"url": "https://h.test/", "events": "run.failed"}),
            vec!["events"],
        ),
        (
            json!({"url": "https://h.test/", "events": ["run.boom"]}),
            vec!["events[0]"],
        ),
        (json!({"url": 7, "events": ["run.failed"]}), vec!["url"]),
        (
            json!({"url": "http://h.test/", "events": ["run.failed"]}),
            vec!["url"],
        ),
        (
            json!({"url": "ftp://h.test/", "events": ["run.failed"]}),
            vec!["url"],
        ),
        (
            json!({"url": "h.test", "events": ["run.failed"]}),
            vec!["url"],
        ),
        (
            json!({"url": "https://", "events": ["run.failed"]}),
            vec!["url"],
        ),
        (json!({"url": long, "events": ["run.failed"]}), vec!["url"]),
        (
            json!({"url": "https://h.test/", "events": []}),
            vec!["events"],
        ),
        (
            json!({"url": "https://h.test/", "events": ["run.failed", "run.failed"]}),
            vec!["events[1]"],
        ),
        (
            json!({"url": "https://h.test/", "events": ["run.failed"], "workflow_id": ""}),
            vec!["workflow_id"],
        ),
        (
            json!({"url": "http://h.test/", "events": [], "workflow_id": ""}),
            vec!["url", "events", "workflow_id"],
        ),
    ] {
        let answer = send(call("POST", "/v1/webhooks").value(body.clone())).await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), fields, "{body}");
    }
    // A subscription to a workflow of no account's, or of another account's.
    for wf in ["wf-nope", "wf-theirs"] {
        send(
            call("POST", "/v1/webhooks").value(
                json!({"url": "https://h.test/", "events": ["run.failed"], "workflow_id": wf}),
            ),
        )
        .await
        .error(404, "workflow_not_found");
    }
    api.assert_untouched();
}

#[tokio::test]
async fn unknown_webhooks_and_deliveries_are_not_found() {
    let api = world().start();
    for id in ["wh-nope", "WH-A"] {
        for c in [
            call("GET", &format!("/v1/webhooks/{id}")).key(READ),
            call("DELETE", &format!("/v1/webhooks/{id}")).key(WRITE),
            call("GET", &format!("/v1/webhooks/{id}/deliveries")).key(READ),
            call("POST", &format!("/v1/webhooks/{id}/deliveries/dlv-1/retry")).key(WRITE),
            call("POST", &format!("/v1/webhooks/{id}/rotate-secret")).key(WRITE),
        ] {
            api.send(c.build()).await.error(404, "webhook_not_found");
        }
    }
    // Another account's webhook is not found.
    api.send(call("GET", "/v1/webhooks/wh-a").key(OTHER_ADMIN).build())
        .await
        .error(404, "webhook_not_found");
    api.send(
        call("POST", "/v1/webhooks/wh-a/deliveries/dlv-nope/retry")
            .key(WRITE)
            .build(),
    )
    .await
    .error(404, "delivery_not_found");
    api.send(call("GET", "/v1/webhooks/%FF").key(READ).build())
        .await
        .error(400, "validation_error");
    api.assert_untouched();
}

#[tokio::test]
async fn a_delivery_whose_event_is_gone_is_not_sent_again() {
    let api = world().start();
    api.send(
        call("POST", "/v1/webhooks/wh-a/deliveries/dlv-1/retry")
            .key(WRITE)
            .build(),
    )
    .await
    .error(409, "event_expired");
    api.assert_untouched();
}

#[tokio::test]
async fn list_parameters_are_checked() {
    let api = world().start();
    for path in ["/v1/webhooks", "/v1/webhooks/wh-a/deliveries"] {
        for (query, code) in [
            ("limit=0", "validation_error"),
            ("limit=1000", "validation_error"),
            ("cursor=abc", "invalid_cursor"),
        ] {
            api.send(call("GET", &format!("{path}?{query}")).key(READ).build())
                .await
                .error(400, code);
        }
    }
    api.assert_untouched();
}
