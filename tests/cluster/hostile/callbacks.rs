//! Hostile-tenant tests: callback URLs. Anyone on the network may call one; without
//! the token's secret nothing is found, whatever the caller knows of the run, and each
//! address has a budget of such requests.

use flowline_core::crd::Run;
use serde_json::{Value, json};

use crate::builders::WorkflowBuilder;
use crate::support::{ApiOptions, Process, TestApi, assert_error, ready};

/// Guesses around a real token (its run known, its secret not), made-up shapes, and a
/// token of one account moved to another's namespace: all 404 `callback_not_found`,
/// and the waiting step still waits for the real call.
#[tokio::test]
#[ignore = "needs cluster"]
async fn guessed_or_moved_tokens_find_nothing() {
    let api = TestApi::start("cb-guess").await;
    let key = api.admin_key.clone();
    let wf = api
        .workflow(&WorkflowBuilder::new("victim").steps(json!([
            {"id": "hand", "action": "transform", "with": {"value": "{{ callbacks.cb.url }}"}},
            {"id": "cb", "action": "callback"}])))
        .await;
    let base = api.url("");
    let (_op, port) = Process::operator(&api.ns, &["--no-api", "--public-url", &base]);
    ready(port).await;
    let run = api.start_run(&key, &wf, None).await;
    crate::support::parked_on(&api.ns, &run, "cb").await;
    let runs = api.ns.api::<Run>();
    let view: Value = api
        .get(&key, &format!("/v1/runs/{run}"))
        .await
        .json()
        .await
        .unwrap();
    let url = view["steps"][0]["output"].as_str().unwrap().to_string();
    let token = url.rsplit('/').next().unwrap().to_string();
    let (ns, secret) = (api.ns.name.clone(), &token[token.len() - 26..]);
    let mut flipped = secret.to_string().into_bytes();
    flipped[0] = if flipped[0] == b'a' { b'b' } else { b'a' };
    let flipped = String::from_utf8(flipped).unwrap();
    let other = TestApi::start("cb-other").await;
    let guesses = [
        format!("{ns}~{run}~{flipped}"),
        format!("{ns}~{run}~{}", "a".repeat(26)),
        format!("{ns}~{run}~{}", &secret[..25]),
        format!("{}~{run}~{secret}", other.ns.name),
        format!("{ns}~run-madeup0000~{secret}"),
        format!("{ns}~{run}"),
        "x".repeat(300),
        "%2e%2e~%2f~".to_string(),
    ];
    for guess in &guesses {
        let res = api
            .http
            .post(api.url(&format!("/v1/callbacks/{guess}")))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_error(res, 404, "callback_not_found").await;
    }
    let r = runs.get(&run).await.unwrap();
    assert!(r.spec.callbacks.is_empty(), "no guess reached the run");
    let res = api
        .http
        .post(&url)
        .json(&json!({"ok": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

/// Callback requests spend the per-address budget of unauthenticated requests.
#[tokio::test]
#[ignore = "needs cluster"]
async fn callback_requests_are_limited_per_address() {
    let api = TestApi::start_tuned(
        "cb-limit",
        ApiOptions {
            window_secs: 3_600,
            ..ApiOptions::default()
        },
        |config| config.unauthenticated_requests = 3,
    )
    .await;
    let mut statuses = Vec::new();
    for i in 0..6 {
        let guess = format!("{}~run-x~{:a>26}", api.ns.name, i);
        let res = api
            .http
            .post(api.url(&format!("/v1/callbacks/{guess}")))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        statuses.push(res.status().as_u16());
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 404 || *s == 429),
        "{statuses:?}"
    );
    assert_eq!(*statuses.last().unwrap(), 429, "{statuses:?}");
}
