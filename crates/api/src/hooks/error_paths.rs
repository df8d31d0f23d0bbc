//! Every refusal of `POST /v1/hooks/{workflow_id}` (no API key: a Standard Webhooks
//! signature), in process (`crate::testing`): which workflows take hooks, the
//! signature, the body, routing and the per-address budget. None of them reaches the
//! API server.

use base64::Engine as _;
use serde_json::json;

use crate::testing::*;
use flowline_core::delivery::signing::standard_tag;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn world() -> World {
    let big = "x".repeat(700 << 10);
    let hook = |state: &str| json!({"state": state, "trigger": {"type": "webhook"}});
    World::default()
        .workflow(workflow("wf-hook", hook("active")))
        .workflow(workflow("wf-paused", hook("paused")))
        .workflow(workflow("wf-draft", hook("draft")))
        .workflow(workflow("wf-manual", json!({"state": "active"})))
        .workflow(workflow("wf-unkeyed", hook("active")))
        .workflow(workflow(
            "wf-big",
            json!({"state": "active", "trigger": {"type": "webhook"},
                   "steps": [{"id": "t", "action": "transform", "with": {"value": big}}]}),
        ))
        // The same name in two accounts: addresses neither.
        .workflow(workflow("wf-twice", hook("active")))
        .workflow(workflow_in(OTHER_NS, "wf-twice", hook("active")))
        .hook_secret("wf-hook", SECRET)
        .hook_secret("wf-big", SECRET)
        .hook_secret("wf-paused", SECRET)
        .hook_secret("wf-twice", SECRET)
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// `webhook-signature` of `body` sent as message `id` at `ts`, under `secret`.
fn signature(secret: &str, id: &str, ts: i64, body: &[u8]) -> String {
    let tag = standard_tag(secret, id, ts, body).unwrap();
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(tag)
    )
}

/// A hook to `workflow` with `body`, signed as a sender holding `secret` signs it.
fn signed(workflow: &str, body: &str, secret: &str, ts: i64) -> Call {
    call("POST", &format!("/v1/hooks/{workflow}"))
        .header("webhook-id", "msg_1")
        .header("webhook-timestamp", &ts.to_string())
        .header(
            "webhook-signature",
            &signature(secret, "msg_1", ts, body.as_bytes()),
        )
        .json(body.to_string())
}

#[tokio::test]
async fn only_an_active_webhook_triggered_workflow_takes_hooks() {
    let api = world().start();
    for wf in [
        "wf-nope",
        "wf-paused",
        "wf-draft",
        "wf-manual",
        "wf-twice",
        "WF-HOOK",
    ] {
        // Signed or not: one answer, from the caches alone.
        for c in [
            signed(wf, "{}", SECRET, now()),
            call("POST", &format!("/v1/hooks/{wf}")).json("{}"),
            call("POST", &format!("/v1/hooks/{wf}")).json("{"),
        ] {
            api.send(c.build()).await.error(404, "hook_not_found");
        }
    }
    api.assert_untouched();
}

#[tokio::test]
async fn a_request_whose_signature_does_not_check_out_is_refused() {
    let api = world().start();
    let ts = now();
    let good = signature(SECRET, "msg_1", ts, b"{}");
    let base = || {
        call("POST", "/v1/hooks/wf-hook")
            .header("webhook-id", "msg_1")
            .json("{}")
    };
    for (c, says) in [
        (
            call("POST", "/v1/hooks/wf-hook").json("{}"),
            "the webhook-id header is missing",
        ),
        (
            base().header("webhook-signature", &good),
            "the webhook-timestamp header is missing",
        ),
        (
            base().header("webhook-timestamp", &ts.to_string()),
            "the webhook-signature header is missing",
        ),
        (
            call("POST", "/v1/hooks/wf-hook")
                .header("webhook-id", "a b")
                .header("webhook-timestamp", &ts.to_string())
                .header("webhook-signature", &good)
                .json("{}"),
            "webhook-id must be",
        ),
        (
            base()
                .header("webhook-timestamp", "soon")
                .header("webhook-signature", &good),
            "integer number of Unix seconds",
        ),
        (
            signed("wf-hook", "{}", SECRET, ts - 301),
            "more than 5 minutes in the past",
        ),
        (
            signed("wf-hook", "{}", SECRET, ts + 301),
            "more than 5 minutes in the future",
        ),
        (
            signed(
                "wf-hook",
                "{}",
                "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                ts,
            ),
            "no v1 signature",
        ),
        (
            base()
                .header("webhook-timestamp", &ts.to_string())
                .header("webhook-signature", "v1,AAAA"),
            "no v1 signature",
        ),
        // Signed over another body.
        (
            call("POST", "/v1/hooks/wf-hook")
                .header("webhook-id", "msg_1")
                .header("webhook-timestamp", &ts.to_string())
                .header("webhook-signature", &good)
                .json(r#"{"a": 1}"#),
            "no v1 signature",
        ),
        // The workflow has no inbound secret yet: answered as a wrong signature.
        (signed("wf-unkeyed", "{}", SECRET, ts), "no v1 signature"),
        // Verified before the body is parsed.
        (signed("wf-unkeyed", "{", SECRET, ts), "no v1 signature"),
    ] {
        let answer = api.send(c.build()).await;
        answer.error(401, "invalid_signature");
        assert!(answer.message().contains(says), "{}", answer.message());
        assert!(!answer.headers.contains_key("www-authenticate"));
    }
    api.assert_untouched();
}

#[tokio::test]
async fn a_verified_body_must_be_a_json_object_within_the_limits() {
    let api = world().start();
    let ts = now();
    for malformed in ["{", "", "{\"a\": 1,}"] {
        api.send(signed("wf-hook", malformed, SECRET, ts).build())
            .await
            .error(400, "invalid_json");
    }
    let deep = format!("{{\"a\":{}1{}}}", "[".repeat(32), "]".repeat(32));
    for body in ["[]", "[{\"a\": 1}]", "\"text\"", "1", "null", deep.as_str()] {
        let answer = api.send(signed("wf-hook", body, SECRET, ts).build()).await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), ["body"], "{body}");
    }
    // Not JSON by its content type; too large (read before the signature is checked).
    api.send(
        call("POST", "/v1/hooks/wf-hook")
            .header("webhook-id", "msg_1")
            .header("webhook-timestamp", &ts.to_string())
            .header("webhook-signature", &signature(SECRET, "msg_1", ts, b"{}"))
            .header("content-type", "text/plain")
            .body("{}")
            .build(),
    )
    .await
    .error(415, "unsupported_media_type");
    let huge = " ".repeat((1 << 20) + 1);
    api.send(signed("wf-hook", &huge, SECRET, ts).build())
        .await
        .error(413, "payload_too_large");
    // The body and the workflow's steps would make a run over 1 MiB.
    let payload = format!("{{\"p\": \"{}\"}}", "y".repeat(400 << 10));
    let answer = api
        .send(signed("wf-big", &payload, SECRET, ts).build())
        .await;
    answer.error(400, "validation_error");
    assert_eq!(answer.fields(), ["body"]);
    api.assert_untouched();
}

#[tokio::test]
async fn hooks_answer_routing_errors_and_spend_the_address_budget() {
    let api = world().config(|c| c.unauthenticated_requests = 2).start();
    api.send(call("GET", "/v1/hooks/wf-hook").build())
        .await
        .error(405, "method_not_allowed");
    api.send(call("POST", "/v1/hooks/%FF").json("{}").build())
        .await
        .error(400, "validation_error");
    // The address's two requests are spent: a third is refused before anything else,
    // whatever key it carries.
    for c in [
        signed("wf-hook", "{}", SECRET, now()),
        signed("wf-hook", "{}", SECRET, now()).key(ADMIN),
    ] {
        api.send(c.build()).await.error(429, "rate_limited");
    }
    api.assert_untouched();
}
