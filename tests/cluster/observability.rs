//! What an operator process reports about real traffic: the access log with request
//! ids, HTTP metrics by route pattern, build info, leadership, reconcile durations,
//! runs in progress and rate-limit refusals, scraped from its /metrics.

use std::time::Duration;

use serde_json::json;

use crate::builders::WorkflowBuilder;
use crate::support::{Process, TestApi, TestNamespace, eventually, metrics_text};

/// The value of the sample `name{labels}` (the whole line up to the value), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn requests_runs_and_refusals_show_up_in_metrics_and_the_access_log() {
    let ns = TestNamespace::new("obs").await;
    let log = std::env::temp_dir().join(format!("{}.log", ns.name));
    // A small unauthenticated budget, so a refusal is quick to provoke.
    let (_operator, port) = Process::operator_logging_to(
        &ns,
        &[
            "--log-format",
            "json",
            "--unauthenticated-requests-per-minute",
            "20",
        ],
        &log,
    );
    let api = TestApi::attach(ns, port).await;
    let key = api.admin_key.clone();

    let wf = api
        .workflow(
            &WorkflowBuilder::new("Observed")
                .active()
                .steps(json!([{"id": "echo", "action": "transform", "with": {"value": 1}}])),
        )
        .await;
    let run = api.start_run(&key, &wf, None).await;
    let view = api.finished_view(&key, &run, Duration::from_secs(30)).await;
    assert_eq!(view["status"], "succeeded", "{view}");

    // A sane client id comes back as sent; anything else is replaced by a fresh one.
    let with_id = |path: String, id: &'static str| {
        api.http
            .get(api.url(&path))
            .bearer_auth(&key)
            .header("x-request-id", id)
            .send()
    };
    let res = with_id(format!("/v1/workflows/{wf}"), "obs-trace-7")
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-request-id"], "obs-trace-7");
    let res = with_id("/v1/no-such-route".into(), "two words")
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    let generated = res.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(generated.starts_with("req_"), "{generated}");

    // Keyless requests spend the address budget until one is refused.
    let mut refused = false;
    for _ in 0..=20 {
        let res = api.http.get(api.url("/v1/workflows")).send().await.unwrap();
        assert!(res.headers().contains_key("x-request-id"));
        if res.status() == 429 {
            refused = true;
            break;
        }
        assert_eq!(res.status(), 401);
    }
    assert!(refused, "20 keyless requests a minute, then 429");

    // Read once the leader gauge says 1 and both controllers have finished a
    // reconcile (the workflow controller's first one may still be under way when the
    // run has finished).
    let text = eventually(
        "the leader gauge to read 1 and both controllers to have reconciled",
        Duration::from_secs(30),
        || async {
            let text = metrics_text(port).await?;
            let reconciled = |controller: &str| {
                sample(
                    &text,
                    &format!(
                        "flowline_reconcile_duration_seconds_count{{controller=\"{controller}\"}}"
                    ),
                ) >= Some(1.0)
            };
            (sample(&text, "flowline_leader") == Some(1.0)
                && reconciled("run")
                && reconciled("workflow"))
            .then_some(text)
        },
    )
    .await;
    let version = env!("CARGO_PKG_VERSION");
    let counted = |route: &str, method: &str, status: u16| {
        sample(
            &text,
            &format!(
                "flowline_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}}"
            ),
        )
    };
    assert_eq!(counted("/v1/workflows", "POST", 201), Some(1.0), "{text}");
    assert_eq!(counted("/v1/workflows/{id}", "PATCH", 200), Some(1.0));
    assert_eq!(counted("/v1/workflows/{id}/runs", "POST", 201), Some(1.0));
    assert!(counted("/v1/runs/{id}", "GET", 200) >= Some(1.0));
    assert_eq!(counted("unmatched", "GET", 404), Some(1.0));
    assert!(counted("/v1/workflows", "GET", 401) >= Some(1.0));
    assert_eq!(counted("/v1/workflows", "GET", 429), Some(1.0));
    assert!(
        !text.contains(&wf) && !text.contains(&run),
        "object ids never become labels"
    );
    assert_eq!(
        sample(
            &text,
            "flowline_http_request_duration_seconds_count{route=\"/v1/workflows/{id}/runs\",method=\"POST\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "flowline_rate_limited_requests_total{budget=\"address\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("flowline_build_info{{version=\"{version}\",role=\"operator\"}}")
        ),
        Some(1.0)
    );
    assert_eq!(sample(&text, "flowline_runs_in_progress"), Some(0.0));
    for controller in ["run", "workflow"] {
        let reconciles = sample(
            &text,
            &format!("flowline_reconcile_duration_seconds_count{{controller=\"{controller}\"}}"),
        );
        assert!(reconciles >= Some(1.0), "{controller}: {reconciles:?}");
    }

    // The access log: one JSON line per request, with the request id the client saw.
    let lines = std::fs::read_to_string(&log).unwrap();
    let access: Vec<serde_json::Value> = lines
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["target"] == "flowline::access")
        .collect();
    let traced = access
        .iter()
        .find(|l| l["fields"]["request_id"] == "obs-trace-7")
        .unwrap_or_else(|| panic!("no access line for obs-trace-7 in {access:?}"));
    assert_eq!(traced["fields"]["route"], "/v1/workflows/{id}");
    assert_eq!(traced["fields"]["path"], format!("/v1/workflows/{wf}"));
    assert_eq!(traced["fields"]["status"], 200);
    assert_eq!(
        traced["fields"]["account"],
        api.ns.name.as_str(),
        "the key's namespace"
    );
    assert!(
        access
            .iter()
            .any(|l| l["fields"]["request_id"] == generated.as_str())
    );
    let _ = std::fs::remove_file(&log);
}
