//! One access-log line and one metrics sample per HTTP request, under a request id:
//! the client's `X-Request-Id` when it is sane (1 to 128 of `A-Z a-z 0-9 - _ . :`),
//! else a fresh `req_…`. The id is returned as `X-Request-Id` and carried by every log
//! line Flowline writes while the request is served (in a `request` span), so a
//! client's report leads to the server's lines. The line names the account (namespace)
//! when the request carried a valid key. Probes and scrapes (`/healthz`, `/readyz`,
//! `/metrics`) log at debug level only. With traces on, the `request` span is the
//! request's server span, open for the whole request, and the line names its
//! `trace_id`. Without traces the span is opened only around a line written while
//! serving ([`in_request`]): the id is kept in a task-local meanwhile, which costs a
//! request far less than a span does (a span cost about 6 % of a single GET). The
//! access line itself is formatted by `access_line`, straight into the log writer's
//! buffer, when the process logs through Flowline's own subscriber without traces
//! (see [`log`]).

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::access_line::{AccessLine, Level, TARGET};
use super::http_metrics::HttpMetrics;
use super::log_writer;
use super::logging;
use super::traces;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The account (namespace) a request was authenticated as: the authenticating layer
/// puts it in the response's extensions, and the access-log line names it. Shared,
/// not copied: the authenticating layer hands over what it already holds.
#[derive(Clone)]
pub struct Account(pub Arc<dyn AccountName>);

/// Whatever names the account of a request (the API's principal).
pub trait AccountName: Send + Sync + 'static {
    fn account_name(&self) -> &str;
}

impl AccountName for String {
    fn account_name(&self) -> &str {
        self
    }
}

/// Longest client-chosen request id kept.
const MAX_REQUEST_ID: usize = 128;

tokio::task_local! {
    /// The id of the request the task serves, when no `request` span is open for it
    /// (traces off): [`in_request`] opens one around a line.
    static SERVING: HeaderValue;
}

/// Runs `log` (a line written while serving a request) inside the request's
/// `request` span, so the line carries the request id: the span already open when
/// traces are on, or one opened for the line alone. Outside a request, `log` runs as
/// it is.
pub fn in_request<R>(log: impl FnOnce() -> R) -> R {
    match SERVING.try_with(|id| plain_request_span(id.to_str().unwrap_or_default())) {
        Ok(span) => span.in_scope(log),
        Err(_) => log(),
    }
}

/// The `request` span without traces: the request id alone.
fn plain_request_span(id: &str) -> tracing::Span {
    tracing::info_span!("request", request_id = %id)
}

/// The middleware (`axum::middleware::from_fn_with_state`); applied to the whole
/// router, after routing, so the matched route is known.
pub async fn record(State(metrics): State<HttpMetrics>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let id_header = request_id_header(req.headers().get(&REQUEST_ID));
    // Clones of shared buffers (an `Arc`, a `Bytes`), not copies: this runs for every
    // request.
    let route = req.extensions().get::<MatchedPath>().cloned();
    let route = route.as_ref().map(MatchedPath::as_str);
    let peer = req
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    let method = req.method().clone();
    let uri = req.uri().clone();
    let path = uri.path();
    let id = id_header.to_str().expect("a request id is visible ASCII");
    let (mut response, trace_id) = if traces::enabled() {
        let span = traced_request_span(id, &method, route, path, req.headers());
        let trace_id = traces::trace_id(&span);
        let response = next.run(req).instrument(span.clone()).await;
        let status = response.status().as_u16();
        span.record("http.response.status_code", status);
        if status >= 500 {
            span.record("otel.status_code", "error");
        }
        (response, trace_id)
    } else {
        let response = SERVING.scope(id_header.clone(), next.run(req)).await;
        (response, None)
    };
    let took = start.elapsed();
    let status = response.status().as_u16();
    metrics.record(route, method.as_str(), status, took);
    let route = route.unwrap_or(super::http_metrics::UNMATCHED_ROUTE);
    let account = response.extensions().get::<Account>().cloned();
    log(&AccessLine {
        level: if is_probe(route) {
            Level::Debug
        } else {
            Level::Info
        },
        request_id: id,
        method: method.as_str(),
        route,
        path,
        status,
        took,
        peer,
        account: account.as_ref().map(|a| a.0.account_name()),
        trace_id: trace_id.as_deref(),
    });
    response.headers_mut().insert(REQUEST_ID, id_header);
    response
}

/// Writes the line where `RUST_LOG` lets it through: formatted straight into the log
/// writer's buffer when the process logs through Flowline's own subscriber without
/// traces (`logging::direct_style`), else as the event it always was (tests with a
/// subscriber of their own, traces on).
fn log(line: &AccessLine<'_>) {
    let enabled = match line.level {
        Level::Info => tracing::enabled!(target: TARGET, tracing::Level::INFO),
        Level::Debug => tracing::enabled!(target: TARGET, tracing::Level::DEBUG),
    };
    if !enabled {
        return;
    }
    if let Some(style) = logging::direct_style() {
        let at = SystemTime::now();
        log_writer::process_ref().append_with(|buf| line.write(buf, style, at));
        return;
    }
    let AccessLine {
        request_id,
        method,
        route,
        path,
        status,
        peer,
        account,
        trace_id,
        ..
    } = *line;
    let duration_ms = super::access_line::millis_f64(line.took);
    let peer = Peer(peer);
    match line.level {
        Level::Info => {
            tracing::info!(target: TARGET, request_id = %request_id, %method, route, path, status, duration_ms, %peer, account, trace_id, "request")
        }
        Level::Debug => {
            tracing::debug!(target: TARGET, request_id = %request_id, %method, route, path, status, duration_ms, %peer, account, trace_id, "request")
        }
    }
}

/// The connection's address as the line shows it: the IP, or `-` without one
/// (in-process callers). Written when the line is formatted, never kept as a string.
struct Peer(Option<std::net::IpAddr>);

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(ip) => ip.fmt(f),
            None => f.write_str("-"),
        }
    }
}

/// The span of a request while traces are on (`super::traces`): the request's server
/// span, continuing a client's valid `traceparent`, open for the whole request.
fn traced_request_span(
    id: &str,
    method: &axum::http::Method,
    route: Option<&str>,
    path: &str,
    headers: &axum::http::HeaderMap,
) -> tracing::Span {
    let route = route.unwrap_or(super::http_metrics::UNMATCHED_ROUTE);
    if is_probe(route) {
        // Below the exported level: probes and scrapes would flood the traces.
        return tracing::debug_span!("request", request_id = %id);
    }
    let span = tracing::info_span!(
        "request",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        request_id = %id,
        http.request.method = %method,
        http.route = route,
        url.path = path,
        http.response.status_code = tracing::field::Empty,
    );
    traces::continue_from(&span, headers);
    span
}

/// Probes and scrapes: logged at debug level, never traced.
fn is_probe(route: &str) -> bool {
    matches!(route, "/healthz" | "/readyz" | "/metrics")
}

/// The client's request id if it is sane, else a new one.
pub fn request_id(given: Option<&HeaderValue>) -> String {
    let header = request_id_header(given);
    header.to_str().expect("visible ASCII").to_owned()
}

/// [`request_id`] as the header it is echoed in: the client's own value (shared,
/// not copied) when it is sane, else a fresh `req_` and 10 random characters made
/// without a string of its own (this runs for every request).
fn request_id_header(given: Option<&HeaderValue>) -> HeaderValue {
    if let Some(given) = given.filter(|v| v.to_str().is_ok_and(is_sane)) {
        return given.clone();
    }
    let mut tail = [0; flowline_core::ids::TAIL_LEN];
    flowline_core::ids::fill_tail(&mut tail);
    let mut id = [0; 4 + flowline_core::ids::TAIL_LEN];
    id[..4].copy_from_slice(b"req_");
    id[4..].copy_from_slice(&tail);
    HeaderValue::from_bytes(&id).expect("visible ASCII")
}

/// Short and plain enough to log and echo as is: no spaces, quotes or control
/// characters that could forge log fields or headers.
fn is_sane(id: &str) -> bool {
    (1..=MAX_REQUEST_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    #[test]
    fn a_sane_client_id_is_kept_anything_else_is_replaced() {
        for kept in ["abc-123", "4bf92f3577b34da6a3ce929d0e0e4736", "a.b_c:d"] {
            assert_eq!(request_id(Some(&HeaderValue::from_static(kept))), kept);
        }
        let long = "x".repeat(MAX_REQUEST_ID + 1);
        for replaced in ["", "with space", "quote\"", "a=b", long.as_str()] {
            let id = request_id(Some(&HeaderValue::from_str(replaced).unwrap()));
            assert!(
                id.starts_with("req_") && id != replaced,
                "{replaced:?} → {id}"
            );
        }
        let invalid_utf8 = HeaderValue::from_bytes(b"\xffid").unwrap();
        assert!(request_id(Some(&invalid_utf8)).starts_with("req_"));
        assert_ne!(request_id(None), request_id(None), "fresh ids differ");
    }

    async fn call(app: Router, path: &str, id: Option<&str>) -> Response {
        let mut req = Request::get(path).body(Body::empty()).unwrap();
        if let Some(id) = id {
            req.headers_mut()
                .insert(REQUEST_ID, HeaderValue::from_str(id).unwrap());
        }
        app.oneshot(req).await.unwrap()
    }

    #[tokio::test]
    async fn every_response_carries_the_id_and_is_counted_by_its_route_pattern() {
        let metrics = super::super::metrics::Metrics::default();
        let http = HttpMetrics::new(&metrics);
        let app = Router::new()
            .route("/items/{id}", get(|| async { "item" }))
            .layer(axum::middleware::from_fn_with_state(http, record));
        let res = call(app.clone(), "/items/42", Some("client-7")).await;
        assert_eq!(res.headers()[REQUEST_ID], "client-7");
        let res = call(app.clone(), "/items/43", Some("bad id")).await;
        assert!(
            res.headers()[REQUEST_ID]
                .to_str()
                .unwrap()
                .starts_with("req_")
        );
        let res = call(app, "/nothing/here", None).await;
        assert_eq!(res.status(), 404);
        assert!(res.headers().contains_key(REQUEST_ID));
        let text = metrics.render();
        for line in [
            "flowline_http_requests_total{route=\"/items/{id}\",method=\"GET\",status=\"200\"} 2",
            "flowline_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("/items/42"), "raw paths never become labels");
    }

    /// Without traces no span is open while a request is served, yet a line written
    /// through `in_request` while serving it carries the request id in its `request`
    /// span, as every such line did when the span was open for the whole request; a
    /// line outside any request is left as it is.
    #[tokio::test]
    async fn lines_written_while_serving_carry_the_request_id() {
        let captured = crate::captured::Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(captured.clone())
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let metrics = super::super::metrics::Metrics::default();
        let app = Router::new()
            .route(
                "/fails",
                get(|| async {
                    in_request(|| tracing::warn!("inside the request"));
                    tracing::warn!("not through in_request");
                    "done"
                }),
            )
            .layer(axum::middleware::from_fn_with_state(
                HttpMetrics::new(&metrics),
                record,
            ));
        let res = call(app, "/fails", Some("client-9")).await;
        assert_eq!(res.status(), 200);
        in_request(|| tracing::warn!("outside any request"));
        let lines: Vec<serde_json::Value> = captured
            .text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let find = |message: &str| {
            lines
                .iter()
                .find(|l| l["fields"]["message"] == message)
                .unwrap_or_else(|| panic!("{message:?} not logged: {lines:?}"))
                .clone()
        };
        let inside = find("inside the request");
        assert_eq!(inside["span"]["name"], "request");
        assert_eq!(inside["span"]["request_id"], "client-9");
        assert!(find("not through in_request").get("span").is_none());
        assert!(find("outside any request").get("span").is_none());
    }
}
