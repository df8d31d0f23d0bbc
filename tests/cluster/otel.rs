//! OpenTelemetry traces (`--otlp-endpoint`): an operator process exports to a local
//! OTLP/HTTP JSON receiver; the test checks the request span, the run span with its
//! step-attempt children in the run's trace, the delivery span, and the `traceparent`
//! an `http.request` step's target and a webhook receiver get.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::builders::WorkflowBuilder;
use crate::delivery::receiver::Receiver;
use crate::support::{Process, TestApi, TestNamespace, eventually};

/// What a plain-HTTP recorder got: path, headers, body.
type Recorded = Arc<Mutex<Vec<(String, http::HeaderMap, Bytes)>>>;

/// A plain HTTP/1.1 server on loopback that records every request and answers 200
/// with `{}`: the OTLP receiver (`POST /v1/traces`) and the step's target.
async fn recorder() -> (SocketAddr, Recorded, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Recorded = Arc::default();
    let state = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let state = state.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await?.to_bytes();
                        state.lock().unwrap().push((
                            parts.uri.path().to_string(),
                            parts.headers,
                            body,
                        ));
                        let mut answer = Response::new(Full::new(Bytes::from_static(b"{}")));
                        answer.headers_mut().insert(
                            http::header::CONTENT_TYPE,
                            http::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, hyper::Error>(answer)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    (addr, seen, task)
}

/// A span as OTLP/JSON carries it.
#[derive(Debug, Clone)]
struct Span {
    trace: String,
    id: String,
    parent: String,
    name: String,
    attributes: Value,
}

impl Span {
    fn attr(&self, key: &str) -> Option<String> {
        let value = self
            .attributes
            .as_array()?
            .iter()
            .find(|kv| kv["key"] == key)?
            .get("value")?;
        value
            .as_object()?
            .values()
            .next()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
    }
}

/// Every span in the OTLP/JSON export requests received so far.
fn spans(seen: &Recorded) -> Vec<Span> {
    let hex = |v: &Value| v.as_str().unwrap_or_default().to_ascii_lowercase();
    let mut out = Vec::new();
    for (path, headers, body) in seen.lock().unwrap().iter() {
        assert_eq!(path, "/v1/traces", "the OTLP/HTTP traces path");
        assert_eq!(headers[http::header::CONTENT_TYPE], "application/json");
        let doc: Value = serde_json::from_slice(body).expect("OTLP/HTTP JSON");
        for rs in doc["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for s in ss["spans"].as_array().into_iter().flatten() {
                    out.push(Span {
                        trace: hex(&s["traceId"]),
                        id: hex(&s["spanId"]),
                        parent: hex(&s["parentSpanId"]),
                        name: s["name"].as_str().unwrap_or_default().to_string(),
                        attributes: s["attributes"].clone(),
                    });
                }
            }
        }
    }
    out
}

/// `00-<trace>-<span>-<flags>` split.
fn traceparent(value: &str) -> (String, String) {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "{value}");
    assert_eq!(parts[0], "00", "{value}");
    (parts[1].to_string(), parts[2].to_string())
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn requests_runs_steps_and_deliveries_are_traced_and_propagated() {
    let (collector, exported, _collector_task) = recorder().await;
    let (target, called, _target_task) = recorder().await;
    let hooks = Receiver::start().await;
    let ns = TestNamespace::new("otel").await;
    let log = std::env::temp_dir().join(format!("{}.log", ns.name));
    let mut flags = crate::delivery::flags(&hooks.pki);
    flags.extend([
        "--log-format".into(),
        "json".into(),
        "--otlp-endpoint".into(),
        format!("http://{collector}"),
    ]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (_operator, port) = Process::operator_logging_to(&ns, &flags, &log);
    let api = TestApi::attach(ns, port).await;
    let key = api.admin_key.clone();

    // A client's traceparent is continued by the request's server span.
    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let res = api
        .http
        .get(api.url("/v1/workflows"))
        .bearer_auth(&key)
        .header("x-request-id", "otel-req-1")
        .header(
            "traceparent",
            format!("00-{client_trace}-00f067aa0ba902b7-01"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    crate::delivery::webhook(&api, &hooks.url("/hook"), &["run.succeeded"], None).await;
    let wf = api.workflow(&WorkflowBuilder::new("Traced").active().steps(json!([
            {"id": "call", "action": "http.request", "with": {"url": format!("http://{target}/step")}},
            {"id": "after", "action": "transform", "with": {"value": 1}},
        ]))).await;
    let run = api.start_run(&key, &wf, None).await;
    let view = api.finished_view(&key, &run, Duration::from_secs(60)).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    let uid = api
        .ns
        .api::<flowline_core::crd::Run>()
        .get(&run)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let run_trace = uid.replace('-', "");

    let (run_span, attempts, delivery) = eventually(
        "the run, its step attempts and the delivery exported",
        Duration::from_secs(60),
        || async {
            let all = spans(&exported);
            let run_span = all
                .iter()
                .find(|s| s.name == "run" && s.attr("flowline.run").as_deref() == Some(&run))?
                .clone();
            let attempts: Vec<Span> = all
                .iter()
                .filter(|s| s.name.starts_with("step ") && s.parent == run_span.id)
                .cloned()
                .collect();
            let delivery = all
                .iter()
                .find(|s| s.name == "deliver run.succeeded" && s.trace == run_trace)?
                .clone();
            (attempts.len() == 2).then_some((run_span, attempts, delivery))
        },
    )
    .await;
    assert_eq!(run_span.trace, run_trace, "a run's trace id is its uid");
    assert_eq!(
        run_span.attr("flowline.run.phase").as_deref(),
        Some("succeeded")
    );
    assert_eq!(
        run_span.attr("flowline.workflow").as_deref(),
        Some(wf.as_str())
    );
    for attempt in &attempts {
        assert_eq!(attempt.trace, run_trace, "{attempt:?}");
        assert_eq!(attempt.attr("flowline.attempt").as_deref(), Some("1"));
        assert_eq!(
            attempt.attr("flowline.step.outcome").as_deref(),
            Some("succeeded")
        );
    }
    let call = attempts
        .iter()
        .find(|s| s.attr("flowline.step").as_deref() == Some("call"))
        .expect("the http.request attempt");
    assert_eq!(
        call.attr("flowline.action").as_deref(),
        Some("http.request")
    );
    assert_eq!(
        delivery.attr("http.response.status_code").as_deref(),
        Some("200")
    );

    // The step's target got the attempt's context.
    let to_target = called.lock().unwrap().clone();
    assert_eq!(to_target.len(), 1, "{to_target:?}");
    let sent = to_target[0].1["traceparent"].to_str().unwrap().to_string();
    assert_eq!(traceparent(&sent), (run_trace.clone(), call.id.clone()));

    // The webhook receiver got the delivery attempt's context, in the run's trace.
    let delivered = hooks
        .received()
        .into_iter()
        .find(|r| r.header("x-service-event") == "run.succeeded")
        .expect("run.succeeded delivered");
    assert_eq!(
        traceparent(delivered.header("traceparent")),
        (run_trace.clone(), delivery.id.clone())
    );

    // Request spans: the client's trace continued; the route as the span's name.
    let all = spans(&exported);
    let listed = all
        .iter()
        .find(|s| s.attr("request_id").as_deref() == Some("otel-req-1"))
        .expect("the request span of otel-req-1");
    assert_eq!(listed.name, "GET /v1/workflows");
    assert_eq!(listed.trace, client_trace);
    assert_eq!(listed.parent, "00f067aa0ba902b7");
    assert_eq!(listed.attr("http.route").as_deref(), Some("/v1/workflows"));
    assert_eq!(
        listed.attr("http.response.status_code").as_deref(),
        Some("200")
    );
    assert!(
        all.iter().any(|s| s.name == "POST /v1/workflows/{id}/runs"),
        "the request that started the run"
    );
    // Probes (`ready` polled /readyz) are not traced.
    assert!(
        all.iter()
            .all(|s| s.name != "request" && !s.name.ends_with("/readyz")),
        "{:?}",
        all.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    // And the access log names the trace.
    let lines = std::fs::read_to_string(&log).unwrap();
    let line = lines
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["target"] == "flowline::access" && l["fields"]["request_id"] == "otel-req-1")
        .expect("the access line of otel-req-1");
    assert_eq!(line["fields"]["trace_id"], client_trace);
    let _ = std::fs::remove_file(&log);
}
