//! `flowline step` as a real process, with exactly the environment a step Job's pod
//! gives it: FLOWLINE_STEP with the rendered inputs, FLOWLINE_SECRET_<n> for the secret
//! values they use, FLOWLINE_ALLOW_CIDRS with the operator's allow-list, and a
//! termination log to write.

#[path = "support/step_process.rs"]
mod step_process;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

fn run_step(step: &str) -> (i32, String) {
    run_step_with(step, &[])
}

/// Runs `flowline step` with only FLOWLINE_STEP, the termination log and `env` set.
fn run_step_with(step: &str, env: &[(&str, &str)]) -> (i32, String) {
    let mut vars = vec![("FLOWLINE_STEP", step)];
    vars.extend_from_slice(env);
    step_process::run_step(&vars)
}

/// The same, off the async runtime that serves the test's HTTP endpoints.
async fn run_step_async(step: Value, env: &[(&str, &str)]) -> (i32, String) {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        run_step_with(&step.to_string(), &env)
    })
    .await
    .unwrap()
}

/// A local endpoint answering `answer` to every request, and how many it got.
async fn endpoint(answer: &'static str) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let app = axum::Router::new().fallback(move || {
        seen.fetch_add(1, Ordering::SeqCst);
        async move { answer }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, hits)
}

fn http_step(url: &str) -> Value {
    json!({"action": "http.request", "with": {"url": url}})
}

#[test]
fn a_successful_step_writes_its_output_as_json() {
    let (code, message) =
        run_step(r#"{"action": "transform", "with": {"value": {"order": 7, "ok": true}}}"#);
    assert_eq!(code, 0);
    let output: serde_json::Value = serde_json::from_str(&message).unwrap();
    assert_eq!(output, serde_json::json!({"order": 7, "ok": true}));
}

#[test]
fn a_failing_step_exits_non_zero_with_its_message() {
    let (code, message) = run_step(r#"{"action": "fail", "with": {"message": "card declined"}}"#);
    assert_eq!((code, message.as_str()), (1, "card declined"));
}

#[test]
fn a_huge_failure_message_is_capped_to_what_kubernetes_keeps() {
    // 4096 characters of "é" are 8 KiB: the cap counts bytes.
    let step = serde_json::json!({"action": "fail", "with": {"message": "é".repeat(10_000)}});
    let (code, message) = run_step(&step.to_string());
    assert_eq!(code, 1);
    assert!(
        message.len() <= flowline_core::limits::MAX_ERROR_BYTES,
        "{}",
        message.len()
    );
    assert!(message.starts_with("éé"));
    assert!(message.ends_with(flowline_core::limits::TRUNCATED_MARKER));
}

#[test]
fn a_bad_environment_is_reported_not_panicked_on() {
    let (code, message) = run_step("not json");
    assert_eq!(code, 2);
    assert!(
        message.contains("FLOWLINE_STEP is not a valid step"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn http_steps_refuse_loopback_unless_the_operator_allows_it() {
    let (base, hits) = endpoint("the-internal-answer").await;
    let port = base.rsplit(':').next().unwrap().to_string();
    for url in [
        format!("{base}/version"),
        format!("http://localhost:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
    ] {
        let (code, message) = run_step_async(http_step(&url), &[]).await;
        assert_eq!(code, 1, "{url}: {message}");
        assert!(
            message.starts_with("destination refused: "),
            "{url}: {message}"
        );
        assert!(message.contains("--allow-cidr"), "{message}");
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "nothing reached the endpoint"
    );
    // The allow-list the operator hands to step Jobs.
    let allowed = [("FLOWLINE_ALLOW_CIDRS", "127.0.0.1/32")];
    let (code, message) = run_step_async(http_step(&base), &allowed).await;
    assert_eq!(code, 0, "{message}");
    let output: Value = serde_json::from_str(&message).unwrap();
    assert_eq!(output["body"], "the-internal-answer");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_variables_are_ignored() {
    let (target, target_hits) = endpoint("from-the-target").await;
    let (proxy, proxy_hits) = endpoint("from-the-proxy").await;
    // The stand-in proxy does intercept what a proxy-honouring client sends.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let proxied = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(&proxy).unwrap())
        .build()
        .unwrap();
    let via_proxy = proxied
        .get(&target)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(via_proxy, "from-the-proxy");
    let before = proxy_hits.load(Ordering::SeqCst);
    let env = [
        ("FLOWLINE_ALLOW_CIDRS", "127.0.0.1/32"),
        ("HTTP_PROXY", proxy.as_str()),
        ("http_proxy", proxy.as_str()),
        ("HTTPS_PROXY", proxy.as_str()),
        ("ALL_PROXY", proxy.as_str()),
    ];
    let (code, message) = run_step_async(http_step(&target), &env).await;
    assert_eq!(code, 0, "{message}");
    let output: Value = serde_json::from_str(&message).unwrap();
    assert_eq!(output["body"], "from-the-target");
    assert_eq!(target_hits.load(Ordering::SeqCst), 1);
    assert_eq!(
        proxy_hits.load(Ordering::SeqCst),
        before,
        "the proxy saw nothing"
    );
}

#[test]
fn a_bad_allow_list_is_reported() {
    let (code, message) = run_step_with(
        r#"{"action": "transform", "with": {"value": 1}}"#,
        &[("FLOWLINE_ALLOW_CIDRS", "10.0.0.0/8,not-a-network")],
    );
    assert_eq!(code, 2);
    assert!(
        message.starts_with("FLOWLINE_ALLOW_CIDRS: \"not-a-network\" is neither a network"),
        "{message}"
    );
}

const PLACEHOLDER: &str = "flowline-secret-0123456789abcdef0123456789abcdef";

fn step_with_secret(action: &str, with: serde_json::Value) -> String {
    json!({"action": action, "with": with, "secrets": {PLACEHOLDER: "FLOWLINE_SECRET_0"}})
        .to_string()
}

#[test]
fn secret_placeholders_are_filled_from_the_environment_and_redacted_in_the_log() {
    // The value was used (a transform can only show it if it was substituted), and what
    // reaches the termination log is redacted.
    let step = step_with_secret(
        "transform",
        json!({"value": {"auth": format!("Bearer {PLACEHOLDER}"), "n": 1}}),
    );
    let (code, message) = step_process::run_step(&[
        ("FLOWLINE_STEP", step.as_str()),
        ("FLOWLINE_SECRET_0", "s3cr3t-value"),
    ]);
    assert_eq!(code, 0, "{message}");
    let output: serde_json::Value = serde_json::from_str(&message).unwrap();
    assert_eq!(output, json!({"auth": "Bearer [redacted]", "n": 1}));

    let step = step_with_secret("fail", json!({"message": format!("bad key {PLACEHOLDER}")}));
    let (code, message) = step_process::run_step(&[
        ("FLOWLINE_STEP", step.as_str()),
        ("FLOWLINE_SECRET_0", "s3cr3t-value"),
    ]);
    assert_eq!((code, message.as_str()), (1, "bad key [redacted]"));
}

#[test]
fn a_missing_secret_variable_fails_before_running() {
    let step = step_with_secret("transform", json!({"value": PLACEHOLDER}));
    let (code, message) = run_step(&step);
    assert_eq!(
        (code, message.as_str()),
        (2, "FLOWLINE_SECRET_0 is not set")
    );
}
