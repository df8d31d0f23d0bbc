//! Every refusal of `/v1/workflows` that needs no write to the cluster, in process
//! (`crate::testing`): authentication, scopes, bodies, lookups, state, routing and
//! rate limits. None of them reaches the API server.

use serde_json::{Value, json};

use crate::testing::*;

fn world() -> World {
    World::default()
        .workflow(workflow("wf-draft", json!({})))
        .workflow(workflow("wf-active", json!({"state": "active"})))
        .workflow(workflow(
            "wf-hook",
            json!({"state": "active", "trigger": {"type": "webhook"}}),
        ))
        .workflow(workflow_in(OTHER_NS, "wf-theirs", json!({})))
}

/// Every route of the resource, with a body it would accept.
fn routes() -> Vec<(&'static str, &'static str, Option<Value>)> {
    vec![
        ("GET", "/v1/workflows", None),
        ("POST", "/v1/workflows", Some(json!({"name": "x"}))),
        ("GET", "/v1/workflows/wf-draft", None),
        (
            "PATCH",
            "/v1/workflows/wf-draft",
            Some(json!({"name": "x"})),
        ),
        ("DELETE", "/v1/workflows/wf-draft", None),
        ("POST", "/v1/workflows/wf-hook/hook-secret/rotate", None),
    ]
}

fn with_body(c: Call, body: Option<Value>) -> Call {
    match body {
        Some(body) => c.value(body),
        None => c,
    }
}

#[tokio::test]
async fn without_a_known_key_every_route_is_unauthenticated() {
    let api = world().start();
    for (method, path, body) in routes() {
        for authorization in [
            None,
            Some("Bearer flk_unknown"),
            Some("Bearer "),
            Some("Basic Zm9vOmJhcg=="),
            Some(ADMIN),
        ] {
            let mut c = with_body(call(method, path), body.clone());
            if let Some(a) = authorization {
                c = c.header("authorization", a);
            }
            api.send(c.build()).await.error(401, "unauthenticated");
        }
        // Before the body is read.
        let c = call(method, path).json("{");
        api.send(c.build()).await.error(401, "unauthenticated");
    }
    api.assert_untouched();
}

#[tokio::test]
async fn a_key_without_the_scope_is_refused_before_the_body_is_read() {
    let api = world().start();
    for (method, path, body) in routes() {
        let refused: &[&str] = if method == "GET" {
            &[NO_SCOPE]
        } else {
            &[READ, EXECUTE, NO_SCOPE]
        };
        for key in refused {
            let answer = api
                .send(with_body(call(method, path), body.clone()).key(key).build())
                .await;
            let needed = if method == "GET" { "read" } else { "write" };
            answer.error(403, "insufficient_scope");
            assert!(answer.message().contains(&format!("`{needed}`")));
            if body.is_some() {
                // Malformed, not JSON, too large: still the scope first.
                for c in [
                    call(method, path).json("{"),
                    call(method, path)
                        .header("content-type", "text/plain")
                        .body("x"),
                    call(method, path).json(vec![b' '; (1 << 20) + 1]),
                ] {
                    api.send(c.key(key).build())
                        .await
                        .error(403, "insufficient_scope");
                }
            }
        }
    }
    api.assert_untouched();
}

/// Media type, size, depth and JSON syntax, on both bodies.
#[tokio::test]
async fn bodies_must_be_json_objects_within_the_limits() {
    let api = world().start();
    let deep = format!(r#"{{"name":{}"x"{}}}"#, "[".repeat(40), "]".repeat(40));
    for (method, path) in [
        ("POST", "/v1/workflows"),
        ("PATCH", "/v1/workflows/wf-draft"),
    ] {
        let send = |c: Call| api.send(c.key(WRITE).build());
        send(call(method, path).body(r#"{"name":"x"}"#))
            .await
            .error(415, "unsupported_media_type");
        send(
            call(method, path)
                .header("content-type", "text/plain")
                .body(r#"{"name":"x"}"#),
        )
        .await
        .error(415, "unsupported_media_type");
        send(call(method, path).json(vec![b' '; (1 << 20) + 1]))
            .await
            .error(413, "payload_too_large");
        send(
            call(method, path)
                .header("content-length", "2000000")
                .json(r#"{"name":"x"}"#),
        )
        .await
        .error(413, "payload_too_large");
        for malformed in ["{", "", "{\"name\": \"x\",}", "nul", "{\"name\": \"x\"} 1"] {
            send(call(method, path).json(malformed))
                .await
                .error(400, "invalid_json");
        }
        let answer = send(call(method, path).json(deep.clone())).await;
        answer.error(400, "validation_error");
        assert_eq!(answer.message(), "body: nesting deeper than 32");
        // Well-formed JSON that is not an object, or an object's fields as an array
        // (serde's derive would read those as the struct).
        for not_an_object in [
            json!([]),
            json!(["Sync", null, null]),
            json!(["Sync", null, null, null, null, null, null, null, null]),
            json!("Sync"),
            json!(3),
            json!(true),
            json!(null),
        ] {
            let answer = send(call(method, path).value(not_an_object.clone())).await;
            answer.error(400, "validation_error");
            assert_eq!(answer.fields(), ["body"], "{not_an_object}");
            assert!(
                answer.message().contains("expected struct"),
                "{}",
                answer.message()
            );
        }
    }
    api.assert_untouched();
}

#[tokio::test]
async fn a_create_is_refused_on_each_field_it_gets_wrong() {
    let api = world().start();
    for (body, fields) in [
        (json!({}), vec!["name"]),
        (json!({"name": 3}), vec!["name"]),
        (json!({"name": "x", "steps": []}), vec!["steps"]),
        (json!({"name": "x", "state": "active"}), vec!["state"]),
        (json!({"name": " "}), vec!["name"]),
        (json!({"name": "x".repeat(201)}), vec!["name"]),
        (
            json!({"name": "x", "description": "d".repeat(2001)}),
            vec!["description"],
        ),
        (
            json!({"name": "x", "trigger": {"type": "schedule"}}),
            vec!["trigger.cron"],
        ),
        (
            json!({"name": "x", "trigger": {"type": "schedule", "cron": "61 * * * *"}}),
            vec!["trigger.cron"],
        ),
        (
            json!({"name": "x", "trigger": {"type": "schedule", "cron": "* * * * *", "timezone": "Mars/Olympus"}}),
            vec!["trigger.timezone"],
        ),
        (
            json!({"name": "x", "trigger": {"type": "manual", "cron": "* * * * *", "timezone": "UTC"}}),
            vec!["trigger.cron", "trigger.timezone"],
        ),
        (
            json!({"name": "x", "trigger": {"type": "push"}}),
            vec!["trigger.type"],
        ),
        (json!({"name": "x", "trigger": ["manual"]}), vec!["trigger"]),
        (json!({"name": "x", "trigger": "manual"}), vec!["trigger"]),
        (
            json!({"name": " ", "description": "d".repeat(2001), "trigger": {"type": "schedule"}}),
            vec!["name", "description", "trigger.cron"],
        ),
    ] {
        let answer = api
            .send(
                call("POST", "/v1/workflows")
                    .key(WRITE)
                    .value(body.clone())
                    .build(),
            )
            .await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), fields, "{body}");
    }
    api.assert_untouched();
}

#[tokio::test]
async fn a_patch_is_refused_on_each_field_it_gets_wrong() {
    let api = world().start();
    let step = |extra: Value| {
        let mut s = json!({"id": "a", "action": "fail"});
        s.as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap());
        s
    };
    let many: Vec<Value> = (0..101)
        .map(|i| json!({"id": format!("s{i}"), "action": "fail"}))
        .collect();
    for (body, fields) in [
        (json!({}), vec!["body"]),
        (json!({"nmae": "x"}), vec!["nmae"]),
        (json!({"name": null}), vec!["name"]),
        (json!({"state": null}), vec!["state"]),
        (json!({"state": "archived"}), vec!["state"]),
        (json!({"executor": "lambda"}), vec!["executor"]),
        (json!({"name": ""}), vec!["name"]),
        (json!({"timeout_ms": 0}), vec!["timeout_ms"]),
        (json!({"timeout_ms": 604_800_001u64}), vec!["timeout_ms"]),
        (json!({"parallelism": 0}), vec!["parallelism"]),
        (json!({"parallelism": 101}), vec!["parallelism"]),
        (
            json!({"concurrency": {"limit": 0}}),
            vec!["concurrency.limit"],
        ),
        (
            json!({"concurrency": {"limit": 1, "key": " "}}),
            vec!["concurrency.key"],
        ),
        (
            json!({"concurrency": {"limit": 1, "key": "{{ steps.a.output }}"}}),
            vec!["concurrency.key"],
        ),
        (json!({"concurrency": [1]}), vec!["concurrency"]),
        (json!({"steps": many}), vec!["steps"]),
        (json!({"steps": {"id": "a"}}), vec!["steps"]),
        (json!({"steps": [["a", "fail"]]}), vec!["steps[0]"]),
        (json!({"steps": [{"action": "fail"}]}), vec!["steps[0].id"]),
        (
            json!({"steps": [step(json!({"retries": 3}))]}),
            vec!["steps[0].retries"],
        ),
        (
            json!({"steps": [step(json!({"action": "launch"}))]}),
            vec!["steps[0].action"],
        ),
        (
            json!({"steps": [step(json!({"id": "Bad Id"}))]}),
            vec!["steps[0].id"],
        ),
        (
            json!({"steps": [step(json!({})), step(json!({}))]}),
            vec!["steps[1].id"],
        ),
        (
            json!({"steps": [step(json!({"name": "n".repeat(201)}))]}),
            vec!["steps[0].name"],
        ),
        (
            json!({"steps": [step(json!({"timeout_ms": 0}))]}),
            vec!["steps[0].timeout_ms"],
        ),
        (
            json!({"steps": [step(json!({"when": " "}))]}),
            vec!["steps[0].when"],
        ),
        (
            json!({"steps": [step(json!({"when": "trigger.payload.n = 1"}))]}),
            vec!["steps[0].when"],
        ),
        (
            json!({"steps": [step(json!({"retry": {"max_attempts": 0, "backoff_ms": 3_600_001u64, "backoff_factor": 11}}))]}),
            vec![
                "steps[0].retry.max_attempts",
                "steps[0].retry.backoff_ms",
                "steps[0].retry.backoff_factor",
            ],
        ),
        (
            json!({"steps": [step(json!({"retry": [3]}))]}),
            vec!["steps[0].retry"],
        ),
        (
            json!({"steps": [step(json!({"needs": ["A!"]}))]}),
            vec!["steps[0].needs[0]"],
        ),
        (
            json!({"steps": [step(json!({"needs": ["b"]})), {"id": "b", "action": "fail", "needs": ["a"]}]}),
            vec!["steps[1].needs[0]"],
        ),
        (
            json!({"steps": [step(json!({"for_each_concurrency": 2}))]}),
            vec!["steps[0].for_each_concurrency"],
        ),
        (
            json!({"steps": [step(json!({"for_each": "{{ trigger.payload.xs }}", "for_each_concurrency": 51}))]}),
            vec!["steps[0].for_each_concurrency"],
        ),
        (
            json!({"steps": [{"id": "a", "action": "transform", "with": {"value": "{{ steps.b.output }}"}},
                             {"id": "b", "action": "fail"}]}),
            vec!["steps[0].with.value"],
        ),
        (
            json!({"steps": [step(json!({"with": {"message": "{{ trigger.payload"}}))]}),
            vec!["steps[0].with.message"],
        ),
        (
            json!({"steps": [step(json!({"with": [1]}))]}),
            vec!["steps[0].with"],
        ),
        // An action's inputs: the engine's own check (spec_check), as kubectl gets it.
        (
            json!({"steps": [{"id": "a", "action": "http.request"}]}),
            vec!["steps[0].with.url"],
        ),
        (
            json!({"steps": [{"id": "a", "action": "http.request", "with": {"url": "ftp://x.test"}}]}),
            vec!["steps[0].with.url"],
        ),
        (
            json!({"steps": [{"id": "a", "action": "http.request", "with": {"url": "https://x.test", "method": "FETCH"}}]}),
            vec!["steps[0].with.method"],
        ),
        (
            json!({"steps": [{"id": "a", "action": "transform"}]}),
            vec!["steps[0].with.value"],
        ),
        (
            json!({"steps": [{"id": "a", "action": "delay", "with": {"ms": -1}}]}),
            vec!["steps[0].with.ms"],
        ),
        (
            json!({"steps": [{"id": "a", "action": "container", "with": {"image": ""}}]}),
            vec!["steps[0].with.image"],
        ),
        (
            json!({"steps": [{"id": "a", "action": "wait"}]}),
            vec!["steps[0].with"],
        ),
        (
            json!({"steps": [{"id": "a", "action": "wait", "with": {"until": "tomorrow"}}]}),
            vec!["steps[0].with.until"],
        ),
        (
            json!({"steps": [{"id": "a", "action": "approval", "with": {"timeout_ms": 0}}]}),
            vec!["steps[0].with.timeout_ms"],
        ),
        (
            json!({"steps": [{"id": "a", "action": "approval", "for_each": "{{ trigger.payload.xs }}"}]}),
            vec!["steps[0].for_each"],
        ),
    ] {
        let answer = api
            .send(
                call("PATCH", "/v1/workflows/wf-draft")
                    .key(WRITE)
                    .value(body.clone())
                    .build(),
            )
            .await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), fields, "{body}");
    }
    api.assert_untouched();
}

/// What the API refuses of an action's inputs is what the workflow controller reports
/// (`Ready=False`, `InvalidSpec`) for the same steps applied with kubectl.
#[tokio::test]
async fn the_api_and_the_controller_refuse_the_same_steps() {
    let api = world().start();
    for steps in [
        json!([{"id": "a", "action": "http.request", "with": {"url": "not a url"}}]),
        json!([{"id": "a", "action": "delay"}]),
        json!([{"id": "a", "action": "wait", "with": {"ms": 1, "until": "2026-12-01T09:00:00Z"}}]),
        json!([{"id": "a", "action": "approval", "with": {"timeout_ms": "soon"}}]),
        json!([{"id": "a", "action": "transform", "with": {"value": "{{ steps.z.output }}"}}]),
    ] {
        let answer = api
            .send(
                call("PATCH", "/v1/workflows/wf-draft")
                    .key(WRITE)
                    .value(json!({ "steps": steps }))
                    .build(),
            )
            .await;
        answer.error(400, "validation_error");
        let spec: flowline_core::crd::WorkflowSpec =
            serde_json::from_value(json!({"name": "W", "steps": steps})).unwrap();
        let controller = flowline_core::engine::spec_check::workflow(&spec);
        let api_said: Vec<(String, String)> = answer.body["error"]["details"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["field"].as_str().unwrap().into(),
                    d["message"].as_str().unwrap().into(),
                )
            })
            .collect();
        let controller_said: Vec<(String, String)> = controller
            .into_iter()
            .map(|p| (p.path, p.message))
            .collect();
        assert_eq!(api_said, controller_said, "{steps}");
    }
    api.assert_untouched();
}

#[tokio::test]
async fn unknown_workflows_are_not_found_as_other_accounts_workflows_are() {
    let api = world().start();
    for id in ["wf-nope", "wf-theirs", "WF-DRAFT", "wf-draft%20", "a%2Fb"] {
        let path = format!("/v1/workflows/{id}");
        for c in [
            call("GET", &path).key(READ),
            call("PATCH", &path).key(WRITE).value(json!({"name": "x"})),
            call("DELETE", &path).key(WRITE),
            call("POST", &format!("{path}/hook-secret/rotate")).key(WRITE),
        ] {
            api.send(c.build()).await.error(404, "workflow_not_found");
        }
    }
    // An id that is not UTF-8 names nothing: refused in the contract's shape (axum's
    // own answer was a plain-text 400).
    for id in ["%FF", "%C3%28", "wf%80x"] {
        let path = format!("/v1/workflows/{id}");
        for c in [
            call("GET", &path).key(READ),
            call("PATCH", &path).key(WRITE).value(json!({"name": "x"})),
            call("DELETE", &path).key(WRITE),
            call("POST", &format!("{path}/hook-secret/rotate")).key(WRITE),
            call("GET", &format!("{path}/runs")).key(READ),
        ] {
            let answer = api.send(c.build()).await;
            answer.error(400, "validation_error");
            assert_eq!(answer.fields(), ["id"]);
        }
    }
    // The other account sees its own, and not ours.
    api.send(
        call("GET", "/v1/workflows/wf-draft")
            .key(OTHER_ADMIN)
            .build(),
    )
    .await
    .error(404, "workflow_not_found");
    // The body is checked before the workflow is looked up.
    api.send(
        call("PATCH", "/v1/workflows/wf-nope")
            .key(WRITE)
            .value(json!({}))
            .build(),
    )
    .await
    .error(400, "validation_error");
    api.assert_untouched();
}

#[tokio::test]
async fn an_active_workflow_is_not_deleted_and_only_a_webhook_trigger_has_a_hook_secret() {
    let api = world().start();
    api.send(call("DELETE", "/v1/workflows/wf-active").key(WRITE).build())
        .await
        .error(409, "workflow_active");
    api.send(
        call("POST", "/v1/workflows/wf-draft/hook-secret/rotate")
            .key(WRITE)
            .build(),
    )
    .await
    .error(409, "not_webhook_triggered");
    api.assert_untouched();
}

#[tokio::test]
async fn list_parameters_are_checked() {
    let api = world().start();
    for (query, code, fields) in [
        ("limit=0", "validation_error", vec!["limit"]),
        ("limit=101", "validation_error", vec!["limit"]),
        ("limit=ten", "validation_error", vec!["limit"]),
        ("state=archived", "validation_error", vec!["state"]),
        (
            "limit=0&state=archived",
            "validation_error",
            vec!["limit", "state"],
        ),
        ("cursor=nope", "invalid_cursor", vec![]),
        ("cursor=%ZZ", "invalid_cursor", vec![]),
    ] {
        let answer = api
            .send(
                call("GET", &format!("/v1/workflows?{query}"))
                    .key(READ)
                    .build(),
            )
            .await;
        answer.error(400, code);
        assert_eq!(answer.fields(), fields, "{query}");
    }
    api.assert_untouched();
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_the_contract_shape() {
    let api = world().start();
    for (method, path, status, code) in [
        ("GET", "/v1/nope", 404, "not_found"),
        ("GET", "/v1/workflows/wf-draft/nope", 404, "not_found"),
        ("GET", "/v1/", 404, "not_found"),
        ("PUT", "/v1/workflows", 405, "method_not_allowed"),
        ("DELETE", "/v1/workflows", 405, "method_not_allowed"),
        ("POST", "/v1/workflows/wf-draft", 405, "method_not_allowed"),
        (
            "GET",
            "/v1/workflows/wf-hook/hook-secret/rotate",
            405,
            "method_not_allowed",
        ),
    ] {
        api.send(call(method, path).key(READ).build())
            .await
            .error(status, code);
        // Without a key, no route is told apart from another.
        api.send(call(method, path).build())
            .await
            .error(401, "unauthenticated");
    }
    api.assert_untouched();
}

#[tokio::test]
async fn an_account_over_its_budget_is_rate_limited() {
    let api = world().account_budget(2).start();
    for _ in 0..2 {
        assert_eq!(
            api.send(call("GET", "/v1/workflows").key(READ).build())
                .await
                .status,
            200
        );
    }
    let answer = api
        .send(call("GET", "/v1/workflows").key(WRITE).build())
        .await;
    answer.error(429, "rate_limited");
    assert_eq!(answer.headers["x-ratelimit-remaining"], "0");
    // Another account's budget is its own.
    assert_eq!(
        api.send(call("GET", "/v1/workflows").key(OTHER_ADMIN).build())
            .await
            .status,
        200
    );
    api.assert_untouched();
}

#[tokio::test]
async fn an_address_over_its_unauthenticated_budget_is_rate_limited() {
    let api = world().config(|c| c.unauthenticated_requests = 1).start();
    api.send(call("GET", "/v1/workflows").build())
        .await
        .error(401, "unauthenticated");
    api.send(
        call("GET", "/v1/workflows")
            .header("authorization", "Bearer flk_guess")
            .build(),
    )
    .await
    .error(429, "rate_limited");
    // A valid key spends its account's budget, not the address's.
    assert_eq!(
        api.send(call("GET", "/v1/workflows").key(READ).build())
            .await
            .status,
        200
    );
    api.assert_untouched();
}

/// A backfill is refused on its key, its body, its workflow and its span before any
/// run is created.
#[tokio::test]
async fn a_backfill_is_refused_on_its_key_body_workflow_and_span() {
    let api = World::default()
        .workflow(workflow(
            "wf-nightly",
            json!({"state": "active", "trigger": {"type": "schedule", "cron": "0 2 * * *"}}),
        ))
        .workflow(workflow(
            "wf-paused",
            json!({"state": "paused", "trigger": {"type": "schedule", "cron": "0 2 * * *"}}),
        ))
        .workflow(workflow("wf-draft", json!({})))
        .workflow(workflow_in(
            OTHER_NS,
            "wf-theirs",
            json!({"trigger": {"type": "schedule", "cron": "0 2 * * *"}}),
        ))
        .start();
    let span = json!({"from": "2026-01-01T00:00:00Z", "to": "2026-01-03T00:00:00Z"});
    let path = "/v1/workflows/wf-nightly/backfill";
    api.send(call("POST", path).value(span.clone()).build())
        .await
        .error(401, "unauthenticated");
    for key in [READ, WRITE, NO_SCOPE] {
        api.send(call("POST", path).key(key).value(span.clone()).build())
            .await
            .error(403, "insufficient_scope");
    }
    let send = |path: &'static str, body: Value| {
        api.send(call("POST", path).key(EXECUTE).value(body).build())
    };
    for (body, field) in [
        (json!({}), "from"),
        (json!({"from": "2026-01-01T00:00:00Z"}), "to"),
        (
            json!({"from": "soon", "to": "2026-01-03T00:00:00Z"}),
            "from",
        ),
        (
            json!({"from": "2026-01-03T00:00:00Z", "to": "2026-01-01T00:00:00Z"}),
            "to",
        ),
        (
            json!({"from": "2026-01-01T00:00:00Z", "to": "2999-01-01T00:00:00Z"}),
            "to",
        ),
        (
            json!({"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", "x": 1}),
            "x",
        ),
        // Daily at 02:00: 1,001 days hold more than 1,000 ticks.
        (
            json!({"from": "2021-01-01T00:00:00Z", "to": "2023-12-31T00:00:00Z"}),
            "to",
        ),
    ] {
        let answer = send(path, body.clone()).await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), [field], "{body}");
    }
    send("/v1/workflows/wf-draft/backfill", span.clone())
        .await
        .error(400, "validation_error");
    send("/v1/workflows/wf-paused/backfill", span.clone())
        .await
        .error(409, "workflow_paused");
    for path in [
        "/v1/workflows/wf-nope/backfill",
        "/v1/workflows/wf-theirs/backfill",
    ] {
        send(path, span.clone())
            .await
            .error(404, "workflow_not_found");
    }
    api.assert_untouched();
}
