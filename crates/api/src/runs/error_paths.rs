//! Every refusal of the run routes that needs no write to the cluster, in process
//! (`crate::testing`): starting (with and without an Idempotency-Key), reading,
//! cancelling, retrying and deciding on approval steps. Where a route reads the whole
//! run from the API server, the mocked server answers the read; nothing is written.

use flowline_core::clock::{format_ts, now_ms};
use flowline_core::crd::Run;
use serde_json::{Value, json};

use crate::plumbing::idempotency::{DIGEST_ANNOTATION, head_name};
use crate::testing::*;

/// Runs as the API server has them (whole, with their steps), answered to its reads.
fn server(runs: Vec<Run>) -> impl Fn(&flowline_kube::mock_api::Seen) -> Option<(u16, Value)> {
    move |seen| {
        if seen.method != "GET" {
            return None;
        }
        let found = runs
            .iter()
            .find(|r| server_path("runs", r.metadata.name.as_deref().unwrap()) == seen.path);
        Some(match found {
            Some(run) => (200, serde_json::to_value(run).unwrap()),
            None => {
                let mut gone = flowline_kube::mock_api::status(404);
                gone["reason"] = json!("NotFound");
                (404, gone)
            }
        })
    }
}

/// A run of `wf-a` whose step `ok` (an approval) is `ok_status`, and `t` (a transform)
/// pending, with these approvals recorded.
fn approval_run(id: &str, phase: &str, ok_status: &str, approvals: Value) -> Run {
    let mut run = run(
        id,
        "wf-a",
        phase,
        json!({"approvals": approvals, "workflow": {"generation": 1, "name": "A", "steps": [
            {"id": "ok", "action": "approval"},
            {"id": "t", "action": "transform", "with": {"value": 1}}]}}),
    );
    run.status = Some(
        serde_json::from_value(json!({"phase": phase, "steps": [
            {"stepId": "ok", "name": "ok", "status": ok_status},
            {"stepId": "t", "name": "t", "status": "pending"}]}))
        .unwrap(),
    );
    run
}

/// The key `k-1`'s run of `wf-a`, started now by a request with another body.
fn key_holder() -> Run {
    let mut holder = run(
        &head_name("wf-a", "k-1"),
        "wf-a",
        "running",
        json!({"idempotencyKey": "k-1"}),
    );
    holder.metadata.creation_timestamp = None;
    holder.metadata.annotations = Some(
        [
            (DIGEST_ANNOTATION.to_string(), "another body".to_string()),
            (
                flowline_core::crd::timestamps::CREATED_AT_ANNOTATION.to_string(),
                format_ts(now_ms()),
            ),
        ]
        .into(),
    );
    holder
}

fn world() -> World {
    let big = "x".repeat(700 << 10);
    let server_runs = vec![
        approval_run("run-waiting", "running", "waiting", json!([])),
        approval_run("run-pending", "running", "pending", json!([])),
        approval_run(
            "run-decided",
            "running",
            "waiting",
            json!([{"stepId": "ok", "decision": "approve"}]),
        ),
        approval_run("run-over", "failed", "cancelled", json!([])),
        run("run-live", "wf-a", "running", json!({})),
        run("run-failed", "wf-a", "failed", json!({})),
        run("run-of-paused", "wf-paused", "failed", json!({})),
        run("run-orphan", "wf-gone", "succeeded", json!({})),
    ];
    let mut world = World::default()
        .workflow(workflow(
            "wf-a",
            json!({"state": "active", "steps": [{"id": "ok", "action": "approval"}]}),
        ))
        .workflow(workflow("wf-paused", json!({"state": "paused"})))
        .workflow(workflow(
            "wf-big",
            json!({"state": "active", "steps": [
                {"id": "t", "action": "transform", "with": {"value": big}}]}),
        ))
        .workflow(workflow_in(
            OTHER_NS,
            "wf-theirs",
            json!({"state": "active"}),
        ))
        .run(key_holder())
        .run(run("run-done", "wf-a", "succeeded", json!({})))
        .run(run("run-cancelled", "wf-a", "cancelled", json!({})))
        .run(run("run-lost", "wf-a", "succeeded", json!({})));
    for r in &server_runs {
        world = world.run(r.clone());
    }
    // run-lost is in the cache, but the API server no longer has it.
    world.answer(server(server_runs))
}

fn with_body(c: Call, body: Option<Value>) -> Call {
    match body {
        Some(body) => c.value(body),
        None => c,
    }
}

/// Every route, the scope it needs, and a body it would accept.
fn routes() -> Vec<(&'static str, &'static str, &'static str, Option<Value>)> {
    vec![
        ("GET", "/v1/workflows/wf-a/runs", "read", None),
        (
            "POST",
            "/v1/workflows/wf-a/runs",
            "execute",
            Some(json!({"payload": {}})),
        ),
        ("GET", "/v1/runs/run-live", "read", None),
        ("GET", "/v1/runs?status=failed", "read", None),
        (
            "POST",
            "/v1/runs/bulk-cancel",
            "execute",
            Some(json!({"ids": ["run-live"]})),
        ),
        (
            "POST",
            "/v1/runs/bulk-retry",
            "execute",
            Some(json!({"filter": {"status": "failed"}})),
        ),
        ("POST", "/v1/runs/run-live/cancel", "execute", None),
        (
            "POST",
            "/v1/runs/run-failed/retry",
            "execute",
            Some(json!({"from": "start"})),
        ),
        (
            "POST",
            "/v1/runs/run-waiting/steps/ok/approve",
            "execute",
            Some(json!({"comment": "ok"})),
        ),
        (
            "POST",
            "/v1/runs/run-waiting/steps/ok/reject",
            "execute",
            Some(json!({})),
        ),
    ]
}

#[tokio::test]
async fn without_a_known_key_every_route_is_unauthenticated() {
    let api = world().start();
    for (method, path, _, body) in routes() {
        for c in [
            with_body(call(method, path), body.clone()),
            with_body(call(method, path), body.clone()).key("flk_revoked"),
            call(method, path).json("{"),
        ] {
            api.send(c.build()).await.error(401, "unauthenticated");
        }
    }
    api.assert_untouched();
}

#[tokio::test]
async fn a_key_without_the_scope_is_refused_before_anything_else() {
    let api = world().start();
    for (method, path, scope, body) in routes() {
        let refused: &[&str] = if scope == "read" {
            &[NO_SCOPE]
        } else {
            &[READ, WRITE, NO_SCOPE]
        };
        for key in refused {
            let answer = api
                .send(with_body(call(method, path), body.clone()).key(key).build())
                .await;
            answer.error(403, "insufficient_scope");
            assert!(answer.message().contains(&format!("`{scope}`")));
            if method == "POST" {
                for c in [
                    call(method, path).json("{"),
                    call(method, path)
                        .header("content-type", "text/plain")
                        .body("x"),
                    call(method, path).header("idempotency-key", ""),
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

/// The optional bodies (start, retry, approve, reject): no body and `null` are fine;
/// anything else is JSON of the right shape.
#[tokio::test]
async fn optional_bodies_are_checked_when_given() {
    let api = world().start();
    for path in [
        "/v1/workflows/wf-paused/runs",
        "/v1/runs/run-nope/retry",
        "/v1/runs/run-nope/steps/ok/approve",
        "/v1/runs/run-nope/steps/ok/reject",
    ] {
        let send = |c: Call| api.send(c.key(EXECUTE).build());
        send(call("POST", path).body("{}"))
            .await
            .error(415, "unsupported_media_type");
        send(
            call("POST", path)
                .header("content-type", "text/plain")
                .body("{}"),
        )
        .await
        .error(415, "unsupported_media_type");
        send(call("POST", path).json(vec![b' '; (1 << 20) + 1]))
            .await
            .error(413, "payload_too_large");
        for malformed in ["{", "{\"payload\": }", "[", "nul"] {
            send(call("POST", path).json(malformed))
                .await
                .error(400, "invalid_json");
        }
        let deep = format!("{}{}", "[".repeat(33), "]".repeat(33));
        send(call("POST", path).json(deep))
            .await
            .error(400, "validation_error");
        for (body, field) in [
            (json!([]), "body"),
            (json!([null]), "body"),
            (json!(["start"]), "body"),
            (json!("start"), "body"),
            (json!(1), "body"),
            (json!({"nope": 1}), "nope"),
        ] {
            let answer = send(call("POST", path).value(body.clone())).await;
            answer.error(400, "validation_error");
            assert_eq!(answer.fields(), [field], "{path} {body}");
        }
    }
    // The body is checked before the workflow or run is looked up: these answer 404
    // or 409 with an acceptable body (none, or null).
    for body in [None, Some(json!(null))] {
        api.send(
            with_body(call("POST", "/v1/workflows/wf-paused/runs"), body.clone())
                .key(EXECUTE)
                .build(),
        )
        .await
        .error(409, "workflow_paused");
        for path in [
            "/v1/runs/run-nope/retry",
            "/v1/runs/run-nope/steps/ok/approve",
            "/v1/runs/run-nope/steps/ok/reject",
        ] {
            api.send(
                with_body(call("POST", path), body.clone())
                    .key(EXECUTE)
                    .build(),
            )
            .await
            .error(404, "run_not_found");
        }
    }
    api.assert_untouched();
}

#[tokio::test]
async fn a_start_is_refused_on_its_body_its_key_and_its_workflow() {
    let api = world().start();
    let start = |path: &str| call("POST", path).key(EXECUTE);
    for (body, field) in [
        (json!({"payload": [1]}), "payload"),
        (json!({"payload": "x"}), "payload"),
        (json!({"payload": {"a": 1}, "extra": 1}), "extra"),
    ] {
        let answer = api
            .send(start("/v1/workflows/wf-a/runs").value(body.clone()).build())
            .await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), [field], "{body}");
    }
    // The Idempotency-Key: 1 to 255 visible ASCII characters, sent once; checked
    // before the body.
    let long = "k".repeat(256);
    for c in [
        start("/v1/workflows/wf-a/runs").header("idempotency-key", ""),
        start("/v1/workflows/wf-a/runs").header("idempotency-key", &long),
        start("/v1/workflows/wf-a/runs")
            .header("idempotency-key", "a")
            .header("idempotency-key", "b"),
        start("/v1/workflows/wf-nope/runs")
            .header("idempotency-key", "")
            .json("{"),
    ] {
        let answer = api.send(c.build()).await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), ["Idempotency-Key"]);
    }
    for path in ["/v1/workflows/wf-nope/runs", "/v1/workflows/wf-theirs/runs"] {
        api.send(start(path).build())
            .await
            .error(404, "workflow_not_found");
        api.send(start(path).header("idempotency-key", "k-1").build())
            .await
            .error(404, "workflow_not_found");
    }
    for c in [
        start("/v1/workflows/wf-paused/runs"),
        start("/v1/workflows/wf-paused/runs").header("idempotency-key", "k-2"),
    ] {
        api.send(c.build()).await.error(409, "workflow_paused");
    }
    // The key started a run of wf-a with another body (24 h ago at most).
    for body in [None, Some(json!({"payload": {"n": 1}}))] {
        api.send(
            with_body(start("/v1/workflows/wf-a/runs"), body)
                .header("idempotency-key", "k-1")
                .build(),
        )
        .await
        .error(409, "idempotency_key_reused");
    }
    // The payload and the workflow's steps would make a run over 1 MiB.
    let payload = json!({"payload": {"p": "y".repeat(400 << 10)}});
    let answer = api
        .send(start("/v1/workflows/wf-big/runs").value(payload).build())
        .await;
    answer.error(400, "validation_error");
    assert_eq!(answer.fields(), ["payload"]);
    api.assert_untouched();
}

#[tokio::test]
async fn unknown_runs_are_not_found_without_asking_the_api_server() {
    let api = world().start();
    for id in ["run-nope", "RUN-LIVE", "%FF"] {
        let code = if id == "%FF" {
            "validation_error"
        } else {
            "run_not_found"
        };
        let status = if id == "%FF" { 400 } else { 404 };
        for c in [
            call("GET", &format!("/v1/runs/{id}")).key(READ),
            call("POST", &format!("/v1/runs/{id}/cancel")).key(EXECUTE),
            call("POST", &format!("/v1/runs/{id}/retry")).key(EXECUTE),
            call("POST", &format!("/v1/runs/{id}/steps/ok/approve")).key(EXECUTE),
            call("POST", &format!("/v1/runs/{id}/steps/ok/reject")).key(EXECUTE),
        ] {
            api.send(c.build()).await.error(status, code);
        }
    }
    // Another account's run is not found either.
    api.send(call("GET", "/v1/runs/run-live").key(OTHER_ADMIN).build())
        .await
        .error(404, "run_not_found");
    api.assert_untouched();
    // In the cache, but deleted meanwhile: the read says so, and so does the answer.
    for c in [
        call("GET", "/v1/runs/run-lost").key(READ),
        call("POST", "/v1/runs/run-lost/retry").key(EXECUTE),
        call("POST", "/v1/runs/run-lost/steps/ok/approve").key(EXECUTE),
    ] {
        api.send(c.build()).await.error(404, "run_not_found");
    }
    api.assert_only_read();
}

#[tokio::test]
async fn run_lists_are_refused_on_their_workflow_and_parameters() {
    let api = world().start();
    for path in ["/v1/workflows/wf-nope/runs", "/v1/workflows/wf-theirs/runs"] {
        api.send(call("GET", path).key(READ).build())
            .await
            .error(404, "workflow_not_found");
    }
    for (query, code, fields) in [
        ("status=done", "validation_error", vec!["status"]),
        (
            "state=active&status=paused",
            "validation_error",
            vec!["status"],
        ),
        ("limit=0", "validation_error", vec!["limit"]),
        ("cursor=x", "invalid_cursor", vec![]),
    ] {
        let answer = api
            .send(
                call("GET", &format!("/v1/workflows/wf-a/runs?{query}"))
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
async fn only_an_unfinished_run_is_cancelled() {
    let api = world().start();
    for id in ["run-done", "run-cancelled"] {
        let answer = api
            .send(
                call("POST", &format!("/v1/runs/{id}/cancel"))
                    .key(EXECUTE)
                    .build(),
            )
            .await;
        answer.error(409, "run_not_running");
    }
    api.assert_untouched();
}

#[tokio::test]
async fn only_a_finished_run_of_an_unpaused_workflow_is_retried() {
    let api = world().start();
    for (body, field) in [
        (json!({"from": "middle"}), "from"),
        (json!({"from": 1}), "from"),
        (json!({"to": "start"}), "to"),
    ] {
        let answer = api
            .send(
                call("POST", "/v1/runs/run-failed/retry")
                    .key(EXECUTE)
                    .value(body.clone())
                    .build(),
            )
            .await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), [field], "{body}");
    }
    api.assert_untouched();
    for (id, status, code) in [
        ("run-live", 409, "run_not_finished"),
        ("run-waiting", 409, "run_not_finished"),
        ("run-of-paused", 409, "workflow_paused"),
        ("run-orphan", 404, "workflow_not_found"),
    ] {
        let answer = api
            .send(
                call("POST", &format!("/v1/runs/{id}/retry"))
                    .key(EXECUTE)
                    .build(),
            )
            .await;
        answer.error(status, code);
    }
    // Judged on the run as the API server has it: read, never written.
    api.assert_only_read();
}

#[tokio::test]
async fn only_a_waiting_undecided_approval_takes_a_decision() {
    let api = world().start();
    for verb in ["approve", "reject"] {
        for (body, field) in [
            (json!({"comment": "x".repeat(1001)}), "comment"),
            (json!({"comment": 3}), "comment"),
            (json!({"reason": "x"}), "reason"),
            (json!(["looks good"]), "body"),
        ] {
            let answer = api
                .send(
                    call("POST", &format!("/v1/runs/run-waiting/steps/ok/{verb}"))
                        .key(EXECUTE)
                        .value(body.clone())
                        .build(),
                )
                .await;
            answer.error(400, "validation_error");
            assert_eq!(answer.fields(), [field], "{body}");
        }
    }
    api.assert_untouched();
    for verb in ["approve", "reject"] {
        for (run, step, status, code) in [
            ("run-waiting", "ghost", 404, "step_not_found"),
            ("run-waiting", "t", 409, "step_not_waiting"),
            ("run-pending", "ok", 409, "step_not_waiting"),
            ("run-decided", "ok", 409, "step_not_waiting"),
            ("run-over", "ok", 409, "step_not_waiting"),
            ("run-live", "ok", 404, "step_not_found"),
        ] {
            let answer = api
                .send(
                    call("POST", &format!("/v1/runs/{run}/steps/{step}/{verb}"))
                        .key(EXECUTE)
                        .build(),
                )
                .await;
            answer.error(status, code);
        }
    }
    api.assert_only_read();
}

#[tokio::test]
async fn a_step_log_is_refused_for_a_bad_query_an_unknown_run_or_step_or_an_attempt_that_never_ran()
{
    let mut theirs = approval_run("run-theirs", "running", "waiting", json!([]));
    theirs.metadata.namespace = Some(OTHER_NS.into());
    let api = world().run(theirs).start();
    let logs = |path: &str| call("GET", path).key(READ).build();
    api.send(call("GET", "/v1/runs/run-waiting/steps/ok/logs").build())
        .await
        .error(401, "unauthenticated");
    api.send(
        call("GET", "/v1/runs/run-waiting/steps/ok/logs")
            .key(NO_SCOPE)
            .build(),
    )
    .await
    .error(403, "insufficient_scope");
    for (query, field) in [
        ("attempt=0", "attempt"),
        ("attempt=x", "query"),
        ("follow=maybe", "query"),
        ("colour=red", "query"),
    ] {
        let answer = api
            .send(logs(&format!("/v1/runs/run-waiting/steps/ok/logs?{query}")))
            .await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), [field], "{query}");
    }
    // None of those reached the API server.
    api.assert_untouched();
    for path in [
        "/v1/runs/no-such-run/steps/ok/logs",
        // Another account's run answers like a missing one.
        "/v1/runs/run-theirs/steps/ok/logs",
    ] {
        api.send(logs(path)).await.error(404, "run_not_found");
    }
    api.send(logs("/v1/runs/run-waiting/steps/zz/logs"))
        .await
        .error(404, "step_not_found");
    // Not a forEach step: no iteration to pick.
    let answer = api
        .send(logs("/v1/runs/run-waiting/steps/ok/logs?iteration=1"))
        .await;
    answer.error(400, "validation_error");
    assert_eq!(answer.fields(), ["iteration"]);
    // The approval step never ran an attempt, so it has no log; nor does attempt 2 of it.
    for query in ["", "?attempt=2"] {
        api.send(logs(&format!("/v1/runs/run-waiting/steps/ok/logs{query}")))
            .await
            .error(404, "logs_not_found");
    }
    api.assert_only_read();
}

/// The run lists' filters and the bulk actions' bodies, and a start's tags: each bad
/// one is named, before anything is read or written.
#[tokio::test]
async fn run_filters_bulk_bodies_and_tags_are_refused_naming_the_field() {
    let api = world().start();
    for (path, field) in [
        ("/v1/runs?status=done", "status"),
        ("/v1/runs?tag=nocolon", "tag"),
        ("/v1/runs?tag=Bad:x", "tag"),
        ("/v1/runs?created_after=yesterday", "created_after"),
        (
            "/v1/workflows/wf-a/runs?created_before=soon",
            "created_before",
        ),
        ("/v1/workflows/wf-a/runs?status=finished", "status"),
    ] {
        let answer = api.send(call("GET", path).key(READ).build()).await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), [field], "{path}");
    }
    let too_many: Vec<String> = (0..1001).map(|i| format!("run-{i}")).collect();
    for path in ["/v1/runs/bulk-cancel", "/v1/runs/bulk-retry"] {
        for (body, field) in [
            (json!({}), "ids"),
            (json!({"ids": ["run-live"], "filter": {}}), "ids"),
            (json!({"ids": too_many}), "ids"),
            (json!({"filter": {"tag": ["oops"]}}), "filter.tag[0]"),
            (
                json!({"filter": {"created_after": "x"}}),
                "filter.created_after",
            ),
            (json!({"filter": {"nope": 1}}), "filter.nope"),
        ] {
            let answer = api
                .send(call("POST", path).key(EXECUTE).value(body.clone()).build())
                .await;
            answer.error(400, "validation_error");
            assert_eq!(answer.fields(), [field], "{path} {body}");
        }
    }
    let eleven: serde_json::Map<String, Value> =
        (0..11).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (tags, field) in [
        (json!({"Bad": "x"}), "tags.Bad"),
        (json!({"k": "-x"}), "tags.k"),
        (json!({"k": "a b"}), "tags.k"),
        (Value::Object(eleven), "tags"),
    ] {
        let answer = api
            .send(
                call("POST", "/v1/workflows/wf-a/runs")
                    .key(EXECUTE)
                    .value(json!({"tags": tags}))
                    .build(),
            )
            .await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), [field], "{tags}");
    }
    api.assert_untouched();
}

/// `GET /v1/runs` lists the account's runs of every workflow, newest first, filtered;
/// another account's runs never show.
#[tokio::test]
async fn the_account_wide_list_filters_by_workflow_status_and_time() {
    let api = world().start();
    let ids = |path: &str| {
        let api = &api;
        let path = path.to_string();
        async move {
            let answer = api.send(call("GET", &path).key(READ).build()).await;
            assert_eq!(answer.status, 200, "{path}: {}", answer.body);
            let mut ids: Vec<String> = answer.body["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].as_str().unwrap().to_string())
                .collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(
        ids("/v1/runs?status=failed&limit=100").await,
        ["run-failed", "run-of-paused", "run-over"]
    );
    assert_eq!(
        ids("/v1/runs?status=failed&workflow_id=wf-paused").await,
        ["run-of-paused"]
    );
    assert_eq!(
        ids("/v1/runs?workflow_id=wf-theirs").await,
        Vec::<String>::new()
    );
    assert!(
        ids("/v1/runs?created_before=2000-01-01T00:00:00Z")
            .await
            .is_empty()
    );
    assert_eq!(ids("/v1/runs?limit=100").await.len(), 12);
    api.assert_untouched();
}
