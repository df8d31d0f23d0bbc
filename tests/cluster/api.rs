//! The /v1 API through HTTP, as a client uses it, against the real control plane.

use std::collections::HashSet;
use std::time::Duration;

use flowline_api::plumbing::auth::Scope;
use flowline_core::crd::{Run, RunPhase, RunStatus};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::{ApiOptions, TestApi, assert_error, eventually, http_client, new_key, text};

#[tokio::test]
#[ignore = "needs cluster"]
async fn workflow_lifecycle_follows_the_seed_and_the_contract() {
    let api = TestApi::start("api-wf").await;
    let key = &api.admin_key;

    let res = api
        .send(
            "POST",
            key,
            "/v1/workflows",
            Some(json!({"name": "Order sync", "description": "d"})),
        )
        .await;
    assert_eq!(res.status(), 201);
    let location = res.headers()["location"].to_str().unwrap().to_string();
    let wf: Value = res.json().await.unwrap();
    let id = wf["id"].as_str().unwrap();
    assert!(id.starts_with("wf-"), "{wf}");
    assert_eq!(location, format!("/v1/workflows/{id}"));
    assert_eq!(
        (wf["state"].as_str(), wf["steps"].as_array().map(Vec::len)),
        (Some("draft"), Some(0))
    );
    assert_eq!(wf["trigger"], json!({"type": "manual"}));
    assert_eq!(
        wf["executor"],
        Value::Null,
        "absent values are null, not missing"
    );
    let created_at = wf["created_at"].as_str().unwrap();
    assert!(
        created_at.ends_with('Z') && created_at.len() == 24,
        "ms precision: {created_at}"
    );

    let got: Value = api.get(key, &location).await.json().await.unwrap();
    assert_eq!(got["name"], "Order sync");

    let res = api
        .send("PATCH", key, &location, Some(json!({
            "name": "Order sync v2",
            "state": "active",
            "executor": "job",
            "trigger": {"type": "schedule", "cron": "*/5 * * * *", "timezone": "Europe/Paris"},
            "steps": [{"id": "fetch", "name": "Fetch", "action": "http.request",
                       "with": {"url": "https://example.com/{{ trigger.payload.x }}"},
                       "retry": {"max_attempts": 3, "backoff_ms": 10, "backoff_factor": 2.0}, "timeout_ms": 500}]
        })))
        .await;
    assert_eq!(res.status(), 200);
    let patched: Value = res.json().await.unwrap();
    assert_eq!(patched["state"], "active");
    assert_eq!(patched["steps"][0]["retry"]["max_attempts"], 3);
    assert_eq!(patched["trigger"]["timezone"], "Europe/Paris");
    assert!(patched["updated_at"].as_str().unwrap() >= created_at);

    // Back to a manual trigger: the stale cron must go with it.
    let res = api
        .send(
            "PATCH",
            key,
            &location,
            Some(json!({"trigger": {"type": "manual"}})),
        )
        .await;
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());

    let list: Value = api
        .get(key, "/v1/workflows?state=active")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["data"][0]["id"], id);
    assert_eq!(list["next_cursor"], Value::Null);
    let item = list["data"][0].as_object().unwrap();
    let keys: HashSet<&str> = item.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        HashSet::from(["id", "name", "state", "created_at", "updated_at"])
    );
    let drafts: Value = api
        .get(key, "/v1/workflows?state=draft")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(drafts["data"], json!([]));

    // Seed rule 1: an active workflow cannot be deleted until paused.
    assert_error(
        api.send("DELETE", key, &location, None).await,
        409,
        "workflow_active",
    )
    .await;
    let res = api
        .send("PATCH", key, &location, Some(json!({"state": "paused"})))
        .await;
    assert_eq!(res.status(), 200);
    let res = api.send("DELETE", key, &location, None).await;
    assert_eq!(res.status(), 204);
    assert!(res.bytes().await.unwrap().is_empty());
    assert_error(api.get(key, &location).await, 404, "workflow_not_found").await;
    assert_error(
        api.send("PATCH", key, &location, Some(json!({"name": "x"})))
            .await,
        404,
        "workflow_not_found",
    )
    .await;
    assert_error(
        api.send("DELETE", key, &location, None).await,
        404,
        "workflow_not_found",
    )
    .await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn invalid_input_gets_field_level_details_and_changes_nothing() {
    let api = TestApi::start("api-val").await;
    let key = &api.admin_key;
    let id = api.create_workflow("Valid").await;
    let path = format!("/v1/workflows/{id}");

    // A shape problem (unknown enum value, unknown field) names its field's path.
    for (patch, field, says) in [
        (
            json!({"state": "archived"}),
            "state",
            "unknown variant `archived`",
        ),
        (
            json!({"steps": [{"id": "a", "action": "fail", "retries": 3}]}),
            "steps[0].retries",
            "unknown field `retries`, expected one of",
        ),
    ] {
        let body = assert_error(
            api.send("PATCH", key, &path, Some(patch)).await,
            400,
            "validation_error",
        )
        .await;
        assert_eq!(body["error"]["details"][0]["field"], field, "{body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(says),
            "{body}"
        );
    }
    // Every broken rule is reported, each with its path.
    let body = assert_error(
        api.send(
            "PATCH",
            key,
            &path,
            Some(json!({"name": " ", "steps": [
                {"id": "A B", "action": "fail"},
                {"id": "t", "action": "transform"}
            ]})),
        )
        .await,
        400,
        "validation_error",
    )
    .await;
    let fields: Vec<&str> = body["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["name", "steps[0].id", "steps[1].with.value"],
        "{body}"
    );
    let unchanged: Value = api.get(key, &path).await.json().await.unwrap();
    assert_eq!(
        (
            unchanged["state"].as_str(),
            unchanged["steps"].as_array().unwrap().len()
        ),
        (Some("draft"), 0)
    );

    assert_error(
        api.send("POST", key, "/v1/workflows", Some(json!({})))
            .await,
        400,
        "validation_error",
    )
    .await;
    assert_error(
        api.send("POST", key, "/v1/workflows", Some(json!({"name": 5})))
            .await,
        400,
        "validation_error",
    )
    .await;

    let malformed = api
        .http
        .post(api.url("/v1/workflows"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body("{\"name\":")
        .send()
        .await
        .unwrap();
    assert_error(malformed, 400, "invalid_json").await;
    let wrong_type = api
        .http
        .post(api.url("/v1/workflows"))
        .bearer_auth(key)
        .header("content-type", "text/plain")
        .body("{\"name\":\"x\"}")
        .send()
        .await
        .unwrap();
    assert_error(wrong_type, 415, "unsupported_media_type").await;
    let huge = format!("{{\"name\":\"{}\"}}", "x".repeat(1 << 20));
    let too_large = api
        .http
        .post(api.url("/v1/workflows"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_error(too_large, 413, "payload_too_large").await;

    for bad in ["limit=0", "limit=101", "limit=x", "state=archived"] {
        assert_error(
            api.get(key, &format!("/v1/workflows?{bad}")).await,
            400,
            "validation_error",
        )
        .await;
    }
    assert_error(
        api.get(key, "/v1/workflows?cursor=garbage").await,
        400,
        "invalid_cursor",
    )
    .await;
    assert_error(api.get(key, "/v1/nothing-here").await, 404, "not_found").await;
    assert_error(
        api.send("PUT", key, "/v1/workflows", None).await,
        405,
        "method_not_allowed",
    )
    .await;

    let all: Value = api.get(key, "/v1/workflows").await.json().await.unwrap();
    assert_eq!(
        all["data"].as_array().unwrap().len(),
        1,
        "no failed request created anything"
    );
}

/// A list page is kept while the workflow cache does not change: every write the API
/// answered is in the next list, through a kept page or not.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_kept_list_page_shows_every_write_answered_before_it() {
    let api = TestApi::start("api-pages").await;
    let key = &api.admin_key;
    let ids = |list: &Value| -> Vec<String> {
        (list["data"].as_array().unwrap().iter())
            .map(|w| w["id"].as_str().unwrap().to_string())
            .collect()
    };
    let api = &api;
    let list = |path: &'static str| async move {
        let res = api.get(key, path).await;
        assert_eq!(res.status(), 200);
        res.json::<Value>().await.unwrap()
    };
    let first = api.create_workflow("Kept one").await;
    for _ in 0..3 {
        assert_eq!(
            ids(&list("/v1/workflows").await),
            std::slice::from_ref(&first)
        );
    }
    let second = api.create_workflow("Kept two").await;
    assert_eq!(
        ids(&list("/v1/workflows").await),
        [second.clone(), first.clone()],
        "a create is in the next page"
    );
    let renamed = api
        .send(
            "PATCH",
            key,
            &format!("/v1/workflows/{first}"),
            Some(json!({"name": "Renamed"})),
        )
        .await;
    assert_eq!(renamed.status(), 200);
    let page = list("/v1/workflows").await;
    assert_eq!(
        page["data"][1]["name"], "Renamed",
        "an update is in the next page"
    );
    let deleted = (api.send("DELETE", key, &format!("/v1/workflows/{second}"), None)).await;
    assert_eq!(deleted.status(), 204);
    assert_eq!(
        ids(&list("/v1/workflows").await),
        [first],
        "a delete is in the next page"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn runs_are_started_listed_read_and_cancelled() {
    let api = TestApi::start("api-run").await;
    let key = &api.admin_key;
    let id = api.create_workflow("Runs").await;
    let wf_path = format!("/v1/workflows/{id}");
    api.send(
        "PATCH",
        key,
        &wf_path,
        Some(json!({"steps": [{"id": "wait", "action": "delay", "with": {"ms": 1}}]})),
    )
    .await;

    // Seed rule: draft and active workflows can be run.
    let res = api
        .send(
            "POST",
            key,
            &format!("{wf_path}/runs"),
            Some(json!({"payload": {"order": 42}})),
        )
        .await;
    assert_eq!(res.status(), 201);
    let location = res.headers()["location"].to_str().unwrap().to_string();
    let run: Value = res.json().await.unwrap();
    assert_eq!(
        (run["status"].as_str(), run["workflow_id"].as_str()),
        (Some("running"), Some(id.as_str()))
    );
    assert_eq!(run["payload"], json!({"order": 42}));
    assert_eq!(run["finished_at"], Value::Null);
    assert_eq!(
        run["steps"][0]["status"], "pending",
        "nothing ran yet, and the API does not pretend"
    );
    assert_eq!(
        location,
        format!("/v1/runs/{}", run["id"].as_str().unwrap())
    );

    // Owned by the workflow, labelled with it.
    let stored: Run = api
        .ns
        .api::<Run>()
        .get(run["id"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(stored.metadata.owner_references.unwrap()[0].name, id);

    // A body-less trigger works too.
    let res = api
        .http
        .post(api.url(&format!("{wf_path}/runs")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let second: Value = res.json().await.unwrap();

    let list: Value = api
        .get(key, &format!("{wf_path}/runs"))
        .await
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [second["id"].as_str().unwrap(), run["id"].as_str().unwrap()],
        "newest first"
    );

    // Finish the first run as the controller would, then filter and cancel.
    let status = RunStatus {
        phase: RunPhase::Succeeded,
        ..Default::default()
    };
    api.ns
        .api::<Run>()
        .patch_status(
            run["id"].as_str().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap();
    eventually(
        "the finished run to show",
        // A watch event on a loaded machine; returns as soon as it shows.
        Duration::from_secs(30),
        || async {
            let list: Value = api
                .get(key, &format!("{wf_path}/runs?status=succeeded"))
                .await
                .json()
                .await
                .unwrap();
            (list["data"].as_array().unwrap().len() == 1).then_some(())
        },
    )
    .await;
    assert_error(
        api.send("POST", key, &format!("{location}/cancel"), None)
            .await,
        409,
        "run_not_running",
    )
    .await;
    let res = api
        .send(
            "POST",
            key,
            &format!("/v1/runs/{}/cancel", second["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(res.status(), 202);
    let cancelled: Value = res.json().await.unwrap();
    assert_eq!(cancelled["cancel_requested"], true);
    let stored: Run = api
        .ns
        .api::<Run>()
        .get(second["id"].as_str().unwrap())
        .await
        .unwrap();
    assert!(
        stored.spec.cancel,
        "cancel sets spec.cancel, as kubectl patch would"
    );

    assert_error(
        api.get(key, &format!("{wf_path}/runs?status=exploded"))
            .await,
        400,
        "validation_error",
    )
    .await;
    assert_error(
        api.get(key, "/v1/runs/run-missing").await,
        404,
        "run_not_found",
    )
    .await;
    assert_error(
        api.send("POST", key, "/v1/workflows/wf-missing/runs", None)
            .await,
        404,
        "workflow_not_found",
    )
    .await;

    // Seed rule 2: a paused workflow cannot be run.
    api.send("PATCH", key, &wf_path, Some(json!({"state": "paused"})))
        .await;
    assert_error(
        api.send("POST", key, &format!("{wf_path}/runs"), None)
            .await,
        409,
        "workflow_paused",
    )
    .await;

    // Deleting the workflow removes its run history.
    assert_eq!(api.send("DELETE", key, &wf_path, None).await.status(), 204);
    eventually(
        "runs deleted with their workflow",
        // Kubernetes' garbage collector does it; with a backlog (thousands of Runs of
        // a namespace deleted just before) it was seen to take over a minute.
        Duration::from_secs(180),
        || async {
            let res = api.get(key, &location).await;
            (res.status() == 404).then_some(())
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn keys_and_scopes_guard_every_endpoint() {
    let api = TestApi::start("api-auth").await;
    let id = api.create_workflow("Guarded").await;
    let wf = format!("/v1/workflows/{id}");

    let res = api.http.get(api.url("/v1/workflows")).send().await.unwrap();
    assert_eq!(res.headers()["www-authenticate"], "Bearer");
    assert_error(res, 401, "unauthenticated").await;
    assert_error(
        api.get("flk_notakey", "/v1/workflows").await,
        401,
        "unauthenticated",
    )
    .await;

    let read = new_key(&api.ns, &[Scope::Read]).await;
    let execute = new_key(&api.ns, &[Scope::Execute]).await;
    let write = new_key(&api.ns, &[Scope::Write]).await;
    for k in [&read, &execute, &write] {
        api.await_key(k).await;
    }
    assert_eq!(api.get(&read, &wf).await.status(), 200);
    assert_eq!(
        api.get(&execute, &wf).await.status(),
        200,
        "execute includes read"
    );
    assert_eq!(
        api.get(&write, &wf).await.status(),
        200,
        "write includes read"
    );
    assert_error(
        api.send("POST", &read, "/v1/workflows", Some(json!({"name": "x"})))
            .await,
        403,
        "insufficient_scope",
    )
    .await;
    assert_error(
        api.send("POST", &read, &format!("{wf}/runs"), None).await,
        403,
        "insufficient_scope",
    )
    .await;
    assert_error(
        api.send("POST", &write, &format!("{wf}/runs"), None).await,
        403,
        "insufficient_scope",
    )
    .await;
    assert_error(
        api.send("PATCH", &execute, &wf, Some(json!({"name": "x"})))
            .await,
        403,
        "insufficient_scope",
    )
    .await;
    assert_eq!(
        api.send("POST", &execute, &format!("{wf}/runs"), None)
            .await
            .status(),
        201
    );
    assert_error(
        api.get(&write, "/v1/api-keys").await,
        403,
        "insufficient_scope",
    )
    .await;

    // Admins manage keys; values are shown once and never listed.
    let res = api
        .send(
            "POST",
            &api.admin_key,
            "/v1/api-keys",
            Some(json!({"name": "ci", "scopes": ["read"]})),
        )
        .await;
    assert_eq!(res.status(), 201);
    let created: Value = res.json().await.unwrap();
    let value = created["key"].as_str().unwrap().to_string();
    assert!(value.starts_with("flk_") && value.len() >= 36);
    assert_eq!(
        api.get(&value, &wf).await.status(),
        200,
        "a key works as soon as it is returned"
    );
    let listed = api
        .get(&api.admin_key, "/v1/api-keys")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        listed.contains("\"ci\"") && !listed.contains(&value),
        "{listed}"
    );
    let key_id = created["id"].as_str().unwrap();
    assert_eq!(
        api.send(
            "DELETE",
            &api.admin_key,
            &format!("/v1/api-keys/{key_id}"),
            None
        )
        .await
        .status(),
        204
    );
    assert_error(api.get(&value, &wf).await, 401, "unauthenticated").await;
    assert_error(
        api.send(
            "DELETE",
            &api.admin_key,
            &format!("/v1/api-keys/{key_id}"),
            None,
        )
        .await,
        404,
        "api_key_not_found",
    )
    .await;

    // Revocation by deleting the ApiKey with kubectl takes effect within 2 s.
    let key_name = api
        .ns
        .api::<flowline_core::crd::ApiKey>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|k| k.spec.sha256 == flowline_api::plumbing::auth::hash_key(&read))
        .unwrap()
        .metadata
        .name
        .unwrap();
    let out = api
        .ns
        .kubectl(&["delete", "apikeys.flowline.io", &key_name]);
    assert!(
        out.status.success(),
        "{}",
        crate::support::text(&out.stderr)
    );
    let started = std::time::Instant::now();
    eventually(
        "the revoked key to be refused",
        Duration::from_secs(2),
        || async { (api.get(&read, &wf).await.status() == 401).then_some(()) },
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn another_accounts_objects_answer_exactly_like_missing_ones() {
    let a = TestApi::start("api-ns-a").await;
    let b = TestApi::start("api-ns-b").await;
    let id = a.create_workflow("Mine").await;
    let foreign = b.get(&b.admin_key, &format!("/v1/workflows/{id}")).await;
    let missing = b.get(&b.admin_key, "/v1/workflows/wf-doesnotexist").await;
    let foreign = assert_error(foreign, 404, "workflow_not_found").await;
    let missing = assert_error(missing, 404, "workflow_not_found").await;
    assert_eq!(foreign, missing);
    assert_error(
        b.send("DELETE", &b.admin_key, &format!("/v1/workflows/{id}"), None)
            .await,
        404,
        "workflow_not_found",
    )
    .await;
    assert_error(
        b.send(
            "POST",
            &b.admin_key,
            &format!("/v1/workflows/{id}/runs"),
            None,
        )
        .await,
        404,
        "workflow_not_found",
    )
    .await;
    let listed: Value = b
        .get(&b.admin_key, "/v1/workflows")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["data"], json!([]));
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn rate_limits_exhaust_then_reset_with_headers_everywhere() {
    let api = TestApi::start_with(
        "api-rate",
        ApiOptions {
            plan_annotations: vec![("flowline.io/plan", "free")],
            window_secs: 3,
            allow_http: false,
        },
    )
    .await;
    // Start at the beginning of a fresh window so 60 requests fit in it.
    let reset = api.get(&api.admin_key, "/v1/workflows").await.headers()["x-ratelimit-reset"]
        .to_str()
        .unwrap()
        .parse::<i64>()
        .unwrap();
    let wait = reset - jiff::Timestamp::now().as_second();
    // Pacing, not a check: windows follow the wall clock, so the only event to wait
    // for is the clock reaching `reset`. Polling for the new window instead would spend
    // requests of the budget under test.
    tokio::time::sleep(Duration::from_millis((wait.max(0) as u64) * 1000 + 50)).await;

    let mut last_remaining = u32::MAX;
    for _ in 0..60 {
        let res = api.get(&api.admin_key, "/v1/nope").await; // 404s count too
        assert_eq!(res.headers()["x-ratelimit-limit"], "60");
        let remaining: u32 = res.headers()["x-ratelimit-remaining"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(remaining < last_remaining);
        last_remaining = remaining;
        assert_error(res, 404, "not_found").await;
    }
    let res = api.get(&api.admin_key, "/v1/workflows").await;
    assert!(res.headers().contains_key("retry-after"));
    assert_eq!(res.headers()["x-ratelimit-remaining"], "0");
    assert_error(res, 429, "rate_limited").await;

    eventually("the window to reset", Duration::from_secs(5), || async {
        (api.get(&api.admin_key, "/v1/workflows").await.status() == 200).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn paging_under_concurrent_inserts_has_no_gaps_or_duplicates() {
    let api = TestApi::start("api-page").await;
    let mut existing = HashSet::new();
    for i in 0..25 {
        existing.insert(api.create_workflow(&format!("wf {i}")).await);
    }
    let inserter = {
        let (base, key) = (api.base.clone(), api.admin_key.clone());
        tokio::spawn(async move {
            let http = http_client();
            for i in 0..15 {
                http.post(format!("{base}/v1/workflows"))
                    .bearer_auth(&key)
                    .json(&json!({"name": format!("late {i}")}))
                    .send()
                    .await
                    .unwrap();
            }
        })
    };
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/workflows?limit=4&cursor={c}"),
            None => "/v1/workflows?limit=4".to_string(),
        };
        let page: Value = api.get(&api.admin_key, &path).await.json().await.unwrap();
        seen.extend(
            page["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w["id"].as_str().unwrap().to_string()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    inserter.await.unwrap();
    let unique: HashSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "duplicates in {seen:?}");
    assert!(
        existing.is_subset(&unique),
        "gaps: {:?}",
        existing.difference(&unique).collect::<Vec<_>>()
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn kubectl_applied_workflows_show_up_in_the_api() {
    let api = TestApi::start("api-kubectl").await;
    let from_git = crate::builders::WorkflowBuilder::new("from-git")
        .display_name("From Git")
        .active()
        .step(
            json!({"id": "a", "action": "delay", "with": {"ms": 1}, "retry": {"maxAttempts": 2}}),
        );
    let out = api.ns.kubectl_apply(&from_git.manifest());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let wf: Value = eventually(
        "the applied workflow in the API",
        Duration::from_secs(5),
        || async {
            let res = api.get(&api.admin_key, "/v1/workflows/from-git").await;
            if res.status() == 200 {
                res.json().await.ok()
            } else {
                None
            }
        },
    )
    .await;
    assert_eq!(
        (wf["name"].as_str(), wf["state"].as_str()),
        (Some("From Git"), Some("active"))
    );
    assert_eq!(wf["steps"][0]["retry"]["max_attempts"], 2);
    let list: Value = api
        .get(&api.admin_key, "/v1/workflows")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["data"][0]["id"], "from-git");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_write_is_visible_to_a_read_on_another_connection() {
    let api = TestApi::start("api-raw").await;
    let other = http_client();
    for i in 0..10 {
        let id = api.create_workflow(&format!("raw {i}")).await;
        let res = other
            .get(api.url(&format!("/v1/workflows/{id}")))
            .bearer_auth(&api.admin_key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "read after write #{i}");
        let path = format!("/v1/workflows/{id}");
        api.send(
            "PATCH",
            &api.admin_key,
            &path,
            Some(json!({"name": format!("renamed {i}")})),
        )
        .await;
        let got: Value = other
            .get(api.url(&path))
            .bearer_auth(&api.admin_key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(got["name"], format!("renamed {i}"));
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn webhooks_are_created_with_a_secret_listed_and_deleted() {
    let api = TestApi::start("api-hook").await;
    let key = &api.admin_key;
    let wf = api.create_workflow("Hooked").await;
    let res = api
        .send("POST", key, "/v1/webhooks", Some(json!({"url": "https://hooks.example.com/in", "events": ["run.failed", "workflow.paused"], "workflow_id": wf})))
        .await;
    assert_eq!(res.status(), 201);
    let hook: Value = res.json().await.unwrap();
    let id = hook["id"].as_str().unwrap();
    assert!(hook["secret"].as_str().unwrap().starts_with("whsec_"));
    assert_eq!(
        (hook["enabled"].as_bool(), hook["workflow_id"].as_str()),
        (Some(true), Some(wf.as_str()))
    );

    // The secret is sealed into the Webhook: no Secret is made, and the object shows
    // only ciphertext.
    let stored = api
        .ns
        .api::<flowline_core::crd::Webhook>()
        .get(id)
        .await
        .unwrap();
    let sealed =
        &stored.metadata.annotations.unwrap()[flowline_core::delivery::signing_secrets::ANNOTATION];
    assert!(sealed.starts_with("v1."), "{sealed}");
    assert!(!sealed.contains(hook["secret"].as_str().unwrap()));
    assert!(
        api.ns
            .api::<k8s_openapi::api::core::v1::Secret>()
            .get_opt(&format!("{id}-signing"))
            .await
            .unwrap()
            .is_none(),
        "no signing Secret"
    );

    let list: Value = api.get(key, "/v1/webhooks").await.json().await.unwrap();
    assert_eq!(list["data"][0]["id"], id);
    assert!(
        list["data"][0].get("secret").is_none(),
        "the secret is shown only once"
    );
    assert_eq!(
        api.get(key, &format!("/v1/webhooks/{id}")).await.status(),
        200
    );

    assert_error(
        api.send(
            "POST",
            key,
            "/v1/webhooks",
            Some(json!({"url": "http://hooks.example.com", "events": ["run.failed"]})),
        )
        .await,
        400,
        "validation_error",
    )
    .await;
    assert_error(
        api.send(
            "POST",
            key,
            "/v1/webhooks",
            Some(json!({"url": "https://hooks.example.com", "events": ["run.boom"]})),
        )
        .await,
        400,
        "validation_error",
    )
    .await;
    assert_error(api.send("POST", key, "/v1/webhooks", Some(json!({"url": "https://hooks.example.com", "events": ["run.failed"], "workflow_id": "wf-nope"}))).await, 404, "workflow_not_found").await;

    assert_eq!(
        api.send("DELETE", key, &format!("/v1/webhooks/{id}"), None)
            .await
            .status(),
        204
    );
    assert_error(
        api.get(key, &format!("/v1/webhooks/{id}")).await,
        404,
        "webhook_not_found",
    )
    .await;
    assert_error(
        api.send("DELETE", key, &format!("/v1/webhooks/{id}"), None)
            .await,
        404,
        "webhook_not_found",
    )
    .await;
}
