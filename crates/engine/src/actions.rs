//! Built-in actions, executed inline or by `flowline step` in a Job's pod. Inputs arrive
//! rendered.

use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use flowline_core::crd::Action;
use flowline_egress::GuardedClient;
use flowline_egress::exchange::{self, BodyError, Request};

/// Largest response body an `http.request` step reads (1 MiB); a larger one fails the
/// attempt. The output kept in the Run is capped further (see `output`).
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// Time an `http.request` exchange (every redirect and the whole body) may take unless
/// `with.timeout_ms` says otherwise; never more than the step's own `timeoutMs`.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// Why one attempt of an action failed; the message ends up in the step's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ActionError(pub String);

fn err(msg: impl Into<String>) -> ActionError {
    ActionError(msg.into())
}

/// Header that lets a server a step calls recognise a repeated request.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// Gives an `http.request` step's inputs an `Idempotency-Key` header unless the workflow
/// sets one (any case). The key is derived from the run, the step and the attempt number,
/// so it is the same when an interrupted attempt runs again (steps are at least once) and
/// differs between retries, which are new attempts. Pure.
pub fn add_idempotency_key(
    action: Action,
    inputs: &mut Value,
    run_uid: &str,
    step: &str,
    attempt: u32,
) {
    if action != Action::HttpRequest {
        return;
    }
    let Some(object) = inputs.as_object_mut() else {
        return;
    };
    let headers = object
        .entry("headers")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(headers) = headers.as_object_mut() else {
        return; // not an object: the request fails on it with its own error
    };
    if headers
        .keys()
        .any(|name| name.eq_ignore_ascii_case(IDEMPOTENCY_KEY))
    {
        return;
    }
    let digest = Sha256::digest(format!("{run_uid}/{step}/{attempt}").as_bytes());
    let key = format!("flowline-{}", hex::encode(&digest[..16]));
    headers.insert(IDEMPOTENCY_KEY.to_owned(), Value::String(key));
}

/// Runs one attempt. `step_timeout` is the step's `timeoutMs` when the caller knows it:
/// an HTTP exchange never gets longer than that.
pub async fn execute(
    action: Action,
    with: &Value,
    http: &GuardedClient,
    step_timeout: Option<Duration>,
) -> Result<Value, ActionError> {
    match action {
        Action::Transform => with
            .get("value")
            .cloned()
            .ok_or_else(|| err("transform needs `value`")),
        Action::Delay => {
            let ms = with
                .get("ms")
                .and_then(Value::as_u64)
                .ok_or_else(|| err("delay needs `ms` (integer)"))?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(json!({"slept_ms": ms}))
        }
        Action::Fail => Err(err(with
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("the step failed on purpose"))),
        Action::HttpRequest => http_request(with, http, step_timeout).await,
        Action::Container => Err(err("container steps run only with the job executor")),
        Action::Wait
        | Action::Approval
        | Action::Workflow
        | Action::Callback
        | Action::WaitForEvent => Err(err(
            "wait, approval, workflow, callback and wait_for_event steps are executed by the \
             engine itself, never as an attempt",
        )),
    }
}

fn expected(with: &Value, status: u16) -> bool {
    match with.get("expect_status") {
        Some(Value::Number(n)) => n.as_u64() == Some(u64::from(status)),
        Some(Value::Array(list)) => list.iter().any(|n| n.as_u64() == Some(u64::from(status))),
        _ => (200..300).contains(&status),
    }
}

/// A string as is, anything else as its JSON text (header and query values).
/// A JSON value as header, query or env text: strings as they are, anything else as JSON.
pub(super) fn text_of(v: &Value) -> String {
    v.as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v.to_string())
}

/// The request `with` describes: `method`, `url` (plus `query`), `headers`, `body`.
fn request_of(with: &Value) -> Result<Request, ActionError> {
    let raw = with
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| err("http.request needs `url`"))?;
    let mut url = reqwest::Url::parse(raw).map_err(|e| err(format!("invalid url {raw}: {e}")))?;
    let method = with
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("GET")
        .to_ascii_uppercase();
    let method = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|_| err(format!("invalid method {method}")))?;
    if let Some(Value::Object(query)) = with.get("query") {
        url.query_pairs_mut()
            .extend_pairs(query.iter().map(|(k, v)| (k, text_of(v))));
    }
    let mut headers = HeaderMap::new();
    if let Some(Value::Object(map)) = with.get("headers") {
        for (k, v) in map {
            let name = HeaderName::try_from(k.as_str())
                .map_err(|_| err(format!("invalid header name {k:?}")))?;
            let value = HeaderValue::try_from(text_of(v))
                .map_err(|_| err(format!("invalid value of header {k:?}")))?;
            headers.append(name, value);
        }
    }
    let body = match with.get("body") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Bytes::from(s.clone())),
        Some(v) => {
            if !headers.contains_key(CONTENT_TYPE) {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
            Some(Bytes::from(v.to_string()))
        }
    };
    Ok(Request {
        method,
        url,
        headers,
        body,
    })
}

/// `with.timeout_ms` (default [`DEFAULT_HTTP_TIMEOUT`]), never beyond the step's timeout.
fn timeout_of(with: &Value, step_timeout: Option<Duration>) -> Result<Duration, ActionError> {
    let asked = match with.get("timeout_ms") {
        None | Some(Value::Null) => DEFAULT_HTTP_TIMEOUT,
        Some(v) => match v.as_u64() {
            Some(ms) if ms > 0 => Duration::from_millis(ms),
            _ => return Err(err("`timeout_ms` must be a positive integer")),
        },
    };
    Ok(step_timeout.map_or(asked, |step| asked.min(step)))
}

fn follows_redirects(with: &Value) -> Result<bool, ActionError> {
    match with.get("follow_redirects") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(follow)) => Ok(*follow),
        Some(_) => Err(err("`follow_redirects` must be true or false")),
    }
}

/// What came back, before the step decides whether it is a success.
struct Answer {
    status: u16,
    headers: Map<String, Value>,
    is_json: bool,
    body: Bytes,
}

async fn http_request(
    with: &Value,
    http: &GuardedClient,
    step_timeout: Option<Duration>,
) -> Result<Value, ActionError> {
    let mut request = request_of(with)?;
    // Traces on: the attempt's context, unless the author set a traceparent.
    flowline_telemetry::traces::inject_current(&mut request.headers);
    let timeout = timeout_of(with, step_timeout)?;
    let follow = follows_redirects(with)?;
    let url = request.url.clone();
    let answer = tokio::time::timeout(timeout, exchange(http, request, follow))
        .await
        .map_err(|_| {
            err(format!(
                "{url} sent no complete answer within {} ms (with.timeout_ms)",
                timeout.as_millis()
            ))
        })??;
    let body = if answer.is_json {
        // Checked before parsing: serde_json would fail (or recurse) on a deep document.
        flowline_core::limits::check_text_depth(&answer.body).map_err(|too_deep| {
            err(format!(
                "{url} answered with a response nested deeper than {}",
                too_deep.limit
            ))
        })?;
        serde_json::from_slice(&answer.body)
            .unwrap_or_else(|_| json!(String::from_utf8_lossy(&answer.body)))
    } else {
        json!(String::from_utf8_lossy(&answer.body))
    };
    if !expected(with, answer.status) {
        return Err(err(format!("{url} answered HTTP {}", answer.status)));
    }
    Ok(json!({"status": answer.status, "headers": answer.headers, "body": body}))
}

/// Sends the request through the guard and reads the answer (body capped).
async fn exchange(
    http: &GuardedClient,
    request: Request,
    follow_redirects: bool,
) -> Result<Answer, ActionError> {
    let url = request.url.clone();
    let failed = |e: &dyn std::fmt::Display| err(format!("request to {url} failed: {e}"));
    let response = exchange::send(http, request, follow_redirects)
        .await
        .map_err(|e| match e.is_refusal() {
            // A refusal is the whole message, so the error starts "destination refused:".
            true => err(e.to_string()),
            false => failed(&e),
        })?;
    let status = response.status().as_u16();
    let mut headers = Map::new();
    for (k, v) in response.headers() {
        headers.insert(
            k.as_str().to_string(),
            json!(v.to_str().unwrap_or_default()),
        );
    }
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.contains("json"));
    let body = exchange::read_capped(response, MAX_RESPONSE_BYTES)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge { limit } => err(format!(
                "{url} answered with a body larger than the {} MiB limit of http.request ({limit} bytes)",
                limit >> 20
            )),
            BodyError::Read(e) => failed(&e),
        })?;
    Ok(Answer {
        status,
        headers,
        is_json,
        body,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::http::{HeaderMap as Headers, Method, StatusCode, header};
    use axum::response::IntoResponse;
    use axum::routing::{any, get};

    use super::*;
    use flowline_egress::{ClientSettings, DestinationPolicy, parse_cidr};
    use tracing::Instrument;

    #[test]
    fn http_steps_get_an_idempotency_key_stable_per_attempt() {
        let key = |attempt, inputs: Value| {
            let mut inputs = inputs;
            add_idempotency_key(Action::HttpRequest, &mut inputs, "uid-1", "call", attempt);
            inputs["headers"][IDEMPOTENCY_KEY].clone()
        };
        let first = key(1, json!({"url": "https://x"}));
        assert!(first.as_str().unwrap().starts_with("flowline-"), "{first}");
        assert_eq!(
            key(1, json!({"url": "https://x", "headers": {"A": "b"}})),
            first
        );
        assert_ne!(
            key(2, json!({"url": "https://x"})),
            first,
            "a retry is a new attempt"
        );
        // The workflow's own key wins, whatever its case.
        let mut own = json!({"url": "https://x", "headers": {"idempotency-key": "mine"}});
        add_idempotency_key(Action::HttpRequest, &mut own, "uid-1", "call", 1);
        assert_eq!(own["headers"], json!({"idempotency-key": "mine"}));
        // Other actions are left alone.
        let mut other = json!({"value": 1});
        add_idempotency_key(Action::Transform, &mut other, "uid-1", "call", 1);
        assert_eq!(other, json!({"value": 1}));
    }

    /// A client that may reach 127.0.0.1 (the test servers) and nothing else private.
    fn client() -> GuardedClient {
        client_allowing(&["127.0.0.1"])
    }

    fn client_allowing(nets: &[&str]) -> GuardedClient {
        let allowed = nets.iter().map(|n| parse_cidr(n).unwrap()).collect();
        GuardedClient::new(ClientSettings {
            policy: DestinationPolicy::allowing(allowed),
            ..Default::default()
        })
        .unwrap()
    }

    async fn serve(addr: &str, app: axum::Router) -> String {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        base
    }

    /// A server that counts every request it gets: what the guard must keep away.
    async fn counted(addr: &str) -> (String, Arc<AtomicUsize>) {
        let hits = Arc::new(AtomicUsize::new(0));
        let seen = hits.clone();
        let app = axum::Router::new().fallback(move || {
            seen.fetch_add(1, Ordering::SeqCst);
            async { "the-internal-answer" }
        });
        (serve(addr, app).await, hits)
    }

    async fn call(http: &GuardedClient, with: Value) -> Result<Value, ActionError> {
        execute(Action::HttpRequest, &with, http, None).await
    }

    #[tokio::test]
    async fn with_traces_off_no_traceparent_is_sent() {
        assert!(!flowline_telemetry::traces::enabled());
        let app = axum::Router::new().fallback(|headers: Headers| async move {
            axum::Json(json!({"names": headers.keys().map(|k| k.as_str()).collect::<Vec<_>>()}))
        });
        let base = serve("127.0.0.1:0", app).await;
        let span = tracing::info_span!("step.attempt");
        let out = call(&client(), json!({"url": base, "headers": {"X-A": "1"}}))
            .instrument(span)
            .await
            .unwrap();
        let names = out["body"]["names"].as_array().unwrap();
        assert!(names.contains(&json!("x-a")), "{names:?}");
        assert!(
            !names
                .iter()
                .any(|n| n == "traceparent" || n == "tracestate"),
            "{names:?}"
        );
    }

    fn redirect(status: StatusCode, to: String) -> impl IntoResponse {
        (status, [(header::LOCATION, to)])
    }

    #[tokio::test]
    async fn transform_delay_and_fail() {
        let http = client();
        let run = |action, with: Value| {
            let http = http.clone();
            async move { execute(action, &with, &http, None).await }
        };
        assert_eq!(
            run(Action::Transform, json!({"value": {"a": [1]}})).await,
            Ok(json!({"a": [1]}))
        );
        assert_eq!(
            run(Action::Delay, json!({"ms": 1})).await,
            Ok(json!({"slept_ms": 1}))
        );
        assert_eq!(
            run(Action::Fail, json!({"message": "nope"})).await,
            Err(err("nope"))
        );
        assert!(run(Action::Delay, json!({"ms": "soon"})).await.is_err());
        assert!(run(Action::Container, json!({"image": "x"})).await.is_err());
    }

    #[tokio::test]
    async fn http_request_parses_json_and_checks_status() {
        let app = axum::Router::new()
            .route(
                "/ok",
                axum::routing::post(|headers: Headers, body: String| async move {
                    let token = headers
                        .get("x-token")
                        .map(|v| v.to_str().unwrap().to_owned());
                    axum::Json(json!({"echo": body, "token": token}))
                }),
            )
            .route(
                "/q",
                get(|uri: axum::http::Uri| async move { uri.query().unwrap_or("").to_owned() }),
            )
            .route(
                "/boom",
                get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
            );
        let base = serve("127.0.0.1:0", app).await;
        let http = client();
        let out = call(
            &http,
            json!({"method": "post", "url": format!("{base}/ok"), "body": "hi", "headers": {"X-Token": "t"}}),
        )
        .await
        .unwrap();
        assert_eq!(
            (out["status"].as_u64(), &out["body"]),
            (Some(200), &json!({"echo": "hi", "token": "t"}))
        );
        let out = call(
            &http,
            json!({"url": format!("{base}/q?a=1"), "query": {"b": "x y", "n": 2}}),
        )
        .await
        .unwrap();
        assert_eq!(out["body"], "a=1&b=x+y&n=2");
        let failed = call(&http, json!({"url": format!("{base}/boom")}))
            .await
            .unwrap_err();
        assert!(failed.0.ends_with("answered HTTP 500"), "{failed}");
        let accepted = call(
            &http,
            json!({"url": format!("{base}/boom"), "expect_status": [500]}),
        )
        .await;
        assert_eq!(accepted.unwrap()["body"], "boom");
        let bad = call(&http, json!({"url": base, "headers": {"bad name": "x"}})).await;
        assert!(bad.unwrap_err().0.contains("invalid header name"));
    }

    #[tokio::test]
    async fn refused_destinations_are_never_contacted() {
        let (base, hits) = counted("127.0.0.1:0").await;
        let port = base.rsplit(':').next().unwrap();
        let guarded = client_allowing(&[]);
        for url in [
            format!("{base}/version"),
            format!("http://localhost:{port}/version"),
            format!("http://LOCALHOST.:{port}/"),
            format!("http://api.localhost:{port}/"),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            format!("http://2130706433:{port}/"),
            format!("http://[::1]:{port}/"),
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "http://[fd00:ec2::254]/latest/meta-data/".to_string(),
            "http://10.0.0.1/".to_string(),
            "http://100.64.0.1/".to_string(),
            "http://0.0.0.0/".to_string(),
        ] {
            let e = call(&guarded, json!({"url": url})).await.unwrap_err().0;
            assert!(e.starts_with("destination refused: "), "{url}: {e}");
            assert!(e.contains("--allow-cidr"), "{url}: {e}");
        }
        let e = call(
            &guarded,
            json!({"url": format!("http://localhost:{port}/")}),
        )
        .await
        .unwrap_err()
        .0;
        assert_eq!(
            e,
            "destination refused: localhost is a loopback name; allow it with --allow-cidr"
        );
        let e = call(&guarded, json!({"url": "ftp://example.com/"}))
            .await
            .unwrap_err()
            .0;
        assert!(e.contains("scheme ftp is not http or https"), "{e}");
        assert_eq!(hits.load(Ordering::SeqCst), 0, "the server saw no request");
        // The same server, allowed by the operator, answers.
        let out = call(&client(), json!({"url": base})).await.unwrap();
        assert_eq!(out["body"], "the-internal-answer");
    }

    /// Servers for the redirect tests: `base` (127.0.0.1, allowed) and a server on
    /// 127.0.0.2, which the test client refuses.
    async fn redirecting() -> (String, String, Arc<AtomicUsize>) {
        let (hidden, hidden_hits) = counted("127.0.0.2:0").await;
        let loops = Arc::new(AtomicUsize::new(0));
        let to_hidden = format!("{hidden}/secret");
        let app = axum::Router::new()
            .route(
                "/to-hidden",
                get(move || async move { redirect(StatusCode::FOUND, to_hidden) }),
            )
            .route(
                "/to-metadata",
                get(|| async {
                    redirect(
                        StatusCode::MOVED_PERMANENTLY,
                        "http://169.254.169.254/latest".into(),
                    )
                }),
            )
            .route(
                "/to-file",
                get(|| async { redirect(StatusCode::FOUND, "file:///etc/passwd".into()) }),
            )
            .route(
                "/loop",
                get(move || {
                    loops.fetch_add(1, Ordering::SeqCst);
                    async { redirect(StatusCode::FOUND, "/loop".into()) }
                }),
            )
            .route(
                "/see-other",
                any(|| async { redirect(StatusCode::SEE_OTHER, "/echo".into()) }),
            )
            .route(
                "/echo",
                any(
                    |method: Method, headers: Headers, body: String| async move {
                        let seen = |h: &str| headers.get(h).map(|v| v.to_str().unwrap().to_owned());
                        axum::Json(json!({
                            "method": method.as_str(), "body": body,
                            "authorization": seen("authorization"), "cookie": seen("cookie"),
                            "trace": seen("x-trace"),
                        }))
                    },
                ),
            );
        let base = serve("127.0.0.1:0", app).await;
        (base, hidden, hidden_hits)
    }

    #[tokio::test]
    async fn without_follow_redirects_the_redirect_is_the_answer() {
        let (base, _, hidden_hits) = redirecting().await;
        let http = client();
        let out = call(
            &http,
            json!({"url": format!("{base}/to-hidden"), "expect_status": [302]}),
        )
        .await
        .unwrap();
        assert_eq!(out["status"], 302);
        assert!(
            out["headers"]["location"]
                .as_str()
                .unwrap()
                .ends_with("/secret")
        );
        let e = call(&http, json!({"url": format!("{base}/to-hidden")}))
            .await
            .unwrap_err();
        assert!(e.0.ends_with("answered HTTP 302"), "{e}");
        assert_eq!(hidden_hits.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn every_redirect_hop_passes_the_guard() {
        let (base, hidden, hidden_hits) = redirecting().await;
        let http = client();
        let follow = |path: &str| json!({"url": format!("{base}{path}"), "follow_redirects": true});
        let e = call(&http, follow("/to-hidden")).await.unwrap_err().0;
        assert_eq!(
            e,
            "destination refused: 127.0.0.2 is loopback; allow it with --allow-cidr \
             (at redirect 1)"
        );
        let e = call(&http, follow("/to-metadata")).await.unwrap_err().0;
        assert!(
            e.starts_with("destination refused: 169.254.169.254 is link-local"),
            "{e}"
        );
        let e = call(&http, follow("/to-file")).await.unwrap_err().0;
        assert!(
            e.ends_with("scheme file is not http or https (at redirect 1)"),
            "{e}"
        );
        let e = call(&http, follow("/loop")).await.unwrap_err().0;
        assert!(e.ends_with("more than 5 redirects"), "{e}");
        assert_eq!(hidden_hits.load(Ordering::SeqCst), 0);
        // Allowed by the operator, the same hop is followed.
        let both = client_allowing(&["127.0.0.1", "127.0.0.2"]);
        let out = call(&both, follow("/to-hidden")).await.unwrap();
        assert_eq!(out["body"], "the-internal-answer");
        assert_eq!(hidden_hits.load(Ordering::SeqCst), 1);
        assert!(hidden.starts_with("http://127.0.0.2:"));
    }

    #[tokio::test]
    async fn followed_redirects_keep_credentials_with_their_origin() {
        let (base, _, _) = redirecting().await;
        let http = client();
        let port = base.rsplit(':').next().unwrap().to_owned();
        let headers = json!({"Authorization": "Bearer t", "Cookie": "s=1", "X-Trace": "7"});
        let same = call(
            &http,
            json!({"method": "POST", "url": format!("{base}/see-other"), "body": {"a": 1},
                   "headers": headers, "follow_redirects": true}),
        )
        .await
        .unwrap();
        assert_eq!(
            same["body"],
            json!({"method": "GET", "body": "", "authorization": "Bearer t", "cookie": "s=1", "trace": "7"})
        );
        // Another origin (localhost is admitted as 127.0.0.1): credentials are dropped.
        let app = axum::Router::new().fallback(move || {
            let to = format!("http://localhost:{port}/echo");
            async move { redirect(StatusCode::TEMPORARY_REDIRECT, to) }
        });
        let elsewhere = serve("127.0.0.1:0", app).await;
        let moved = call(
            &http,
            json!({"method": "POST", "url": elsewhere, "body": "kept",
                   "headers": headers, "follow_redirects": true}),
        )
        .await
        .unwrap();
        assert_eq!(
            moved["body"],
            json!({"method": "POST", "body": "kept", "authorization": null, "cookie": null, "trace": "7"})
        );
    }

    #[tokio::test]
    async fn bodies_above_the_cap_fail_the_attempt() {
        let app = axum::Router::new()
            .route(
                "/at-limit",
                get(|| async { vec![b'a'; MAX_RESPONSE_BYTES] }),
            )
            .route(
                "/sized",
                get(|| async { vec![b'a'; MAX_RESPONSE_BYTES + 1] }),
            )
            .route(
                "/streamed",
                get(|| async {
                    use futures::StreamExt;
                    // No Content-Length: the cap must stop the read itself.
                    let chunks = futures::stream::repeat_with(|| {
                        Ok::<_, std::io::Error>(Bytes::from(vec![b'a'; 64 * 1024]))
                    })
                    .take(64);
                    axum::body::Body::from_stream(chunks)
                }),
            );
        let base = serve("127.0.0.1:0", app).await;
        let http = client();
        let out = call(&http, json!({"url": format!("{base}/at-limit")}))
            .await
            .unwrap();
        assert_eq!(out["body"].as_str().unwrap().len(), MAX_RESPONSE_BYTES);
        for path in ["/sized", "/streamed"] {
            let e = call(&http, json!({"url": format!("{base}{path}")}))
                .await
                .unwrap_err()
                .0;
            assert!(
                e.ends_with("answered with a body larger than the 1 MiB limit of http.request (1048576 bytes)"),
                "{path}: {e}"
            );
        }
    }

    #[tokio::test]
    async fn slow_answers_time_out_within_the_step_timeout() {
        let app = axum::Router::new().fallback(|| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            "late"
        });
        let base = serve("127.0.0.1:0", app).await;
        let http = client();
        let started = std::time::Instant::now();
        let e = call(&http, json!({"url": base, "timeout_ms": 200}))
            .await
            .unwrap_err()
            .0;
        assert!(
            e.ends_with("sent no complete answer within 200 ms (with.timeout_ms)"),
            "{e}"
        );
        // The step's own timeout caps a larger with.timeout_ms.
        let with = json!({"url": base, "timeout_ms": 60000});
        let e = execute(
            Action::HttpRequest,
            &with,
            &http,
            Some(Duration::from_millis(150)),
        )
        .await
        .unwrap_err()
        .0;
        assert!(e.contains("within 150 ms"), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        for bad in [json!(0), json!("soon"), json!(-1)] {
            let e = call(&http, json!({"url": base, "timeout_ms": bad}))
                .await
                .unwrap_err();
            assert!(
                e.0.contains("`timeout_ms` must be a positive integer"),
                "{e}"
            );
        }
        let e = call(&http, json!({"url": base, "follow_redirects": "yes"}))
            .await
            .unwrap_err();
        assert!(
            e.0.contains("`follow_redirects` must be true or false"),
            "{e}"
        );
    }

    #[test]
    fn the_default_timeout_is_thirty_seconds_capped_by_the_step() {
        assert_eq!(timeout_of(&json!({}), None), Ok(Duration::from_secs(30)));
        assert_eq!(
            timeout_of(&json!({}), Some(Duration::from_secs(5))),
            Ok(Duration::from_secs(5))
        );
        assert_eq!(
            timeout_of(&json!({"timeout_ms": 90000}), None),
            Ok(Duration::from_secs(90))
        );
    }

    #[tokio::test]
    async fn deeply_nested_json_answers_fail_before_parsing() {
        let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let (deep, ok) = (nested(200_000), nested(32));
        let app = axum::Router::new()
            .route(
                "/deep",
                get(move || async move { ([(header::CONTENT_TYPE, "application/json")], deep) }),
            )
            .route(
                "/ok",
                get(move || async move { ([(header::CONTENT_TYPE, "application/json")], ok) }),
            );
        let base = serve("127.0.0.1:0", app).await;
        let http = client();
        let e = call(&http, json!({"url": format!("{base}/deep")}))
            .await
            .unwrap_err()
            .0;
        assert!(
            e.ends_with("answered with a response nested deeper than 32"),
            "{e}"
        );
        let out = call(&http, json!({"url": format!("{base}/ok")}))
            .await
            .unwrap();
        assert_eq!(flowline_core::limits::json_depth(&out["body"]), 32);
    }
}
