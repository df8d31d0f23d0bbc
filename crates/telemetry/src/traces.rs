//! OpenTelemetry traces, off unless `--otlp-endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`)
//! is given: spans go to an OTLP/HTTP collector as JSON, in batches, from a bounded
//! queue (a full queue drops spans), so an absent or slow collector never blocks or
//! fails the service. A failed export is retried a few times within its deadline (the
//! exporter's OTLP retry policy), then dropped; failures are logged here (a warning,
//! then debug until an export succeeds). Spans dropped from a full queue are not
//! logged.
//!
//! Off (the default) nothing here runs: no exporter, no thread, no span beyond the
//! `request` span the access log always had, and no `traceparent` header on anything
//! Flowline sends. On:
//! - each HTTP request is a server span (`request`), continuing a client's valid
//!   `traceparent`;
//! - each run execution is a `run` span whose trace id is the Run's uid (see
//!   [`run_context`]), so a resumed execution and the deliveries of the run's events
//!   share its trace; each step attempt is a `step.attempt` span under it;
//! - each webhook delivery attempt is a `webhook.delivery` span;
//! - `http.request` steps and webhook deliveries carry a W3C `traceparent` (unless the
//!   workflow author set one).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{
    Bytes, HeaderExtractor, HeaderInjector, HttpClient, HttpError, Request, Response,
};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use reqwest::header::HeaderMap;
use sha2::{Digest, Sha256};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Whether traces are exported (set once, by [`start`]).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Spans waiting for export beyond this are dropped.
const MAX_QUEUE: usize = 2048;
/// One export request's deadline.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the last spans to be exported.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The header W3C Trace Context propagates.
pub const TRACEPARENT: &str = "traceparent";

/// `flowline operator` / `flowline api` flags for traces.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TraceArgs {
    /// Export OpenTelemetry traces over OTLP/HTTP (JSON) to this collector, e.g.
    /// `http://otel-collector:4318` (spans are posted to `<URL>/v1/traces`). Off when
    /// unset: no exporter, and no `traceparent` on requests Flowline sends.
    #[arg(
        long = "otlp-endpoint",
        value_name = "URL",
        env = "OTEL_EXPORTER_OTLP_ENDPOINT"
    )]
    pub otlp_endpoint: Option<url::Url>,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceSetupError {
    #[error("--otlp-endpoint {0} is not an http(s) URL")]
    Scheme(String),
    #[error("cannot start the trace exporter: {0}")]
    Exporter(String),
}

/// The running exporter; [`Traces::shutdown`] flushes what is queued.
pub struct Traces {
    url: String,
    provider: SdkTracerProvider,
    /// Drives the exporter's requests, apart from the service's runtime so that spans
    /// can be flushed after that runtime has stopped.
    runtime: tokio::runtime::Runtime,
}

impl Traces {
    /// Where spans are posted.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Exports what is queued (at most [`FLUSH_TIMEOUT`]) and stops the exporter.
    pub fn shutdown(self) {
        if let Err(err) = self.provider.shutdown_with_timeout(FLUSH_TIMEOUT) {
            tracing::warn!(error = %err, "traces: the last spans may not have been exported");
        }
        self.runtime.shutdown_background();
    }
}

/// `<endpoint>/v1/traces`, as OTLP/HTTP specifies for `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub fn traces_url(endpoint: &url::Url) -> Result<String, TraceSetupError> {
    if !matches!(endpoint.scheme(), "http" | "https") {
        return Err(TraceSetupError::Scheme(endpoint.to_string()));
    }
    let base = endpoint.as_str().trim_end_matches('/');
    Ok(format!("{base}/v1/traces"))
}

/// Starts the exporter and returns the tracer the subscriber's layer uses; None when
/// traces are off.
pub fn start(
    args: &TraceArgs,
    role: &'static str,
) -> Result<Option<(Traces, opentelemetry_sdk::trace::Tracer)>, TraceSetupError> {
    let Some(endpoint) = &args.otlp_endpoint else {
        return Ok(None);
    };
    let url = traces_url(endpoint)?;
    let failed = |e: &dyn std::fmt::Display| TraceSetupError::Exporter(e.to_string());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otlp-export")
        .enable_all()
        .build()
        .map_err(|e| failed(&e))?;
    let http = {
        let _in_runtime = runtime.enter();
        reqwest::Client::builder()
            .user_agent(concat!("flowline/", env!("CARGO_PKG_VERSION")))
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| failed(&e))?
    };
    let client = ExportClient {
        http,
        runtime: runtime.handle().clone(),
        failing: Arc::default(),
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        .with_endpoint(url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(client)
        .build()
        .map_err(|e| failed(&e))?;
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(MAX_QUEUE)
                .build(),
        )
        .build();
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("flowline")
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_attribute(KeyValue::new("flowline.role", role))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("flowline");
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Some((
        Traces {
            url,
            provider,
            runtime,
        },
        tracer,
    )))
}

/// Whether spans are exported: callers create their spans (and send `traceparent`)
/// only then, so that with traces off logs and requests are what they always were.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The exporter's HTTP client: the project's reqwest, its requests run on the
/// exporter's own runtime (the SDK's batch thread awaits them without one).
#[derive(Debug)]
struct ExportClient {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
    /// The last export failed: further failures are logged at debug level only.
    failing: Arc<AtomicBool>,
}

impl ExportClient {
    /// A failed export is a warning the first time, then debug until one succeeds
    /// (a collector that is down does not fill the log).
    fn note(&self, outcome: Result<(), &dyn std::fmt::Display>) {
        match outcome {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("traces: exporting again");
                }
            }
            Err(error) if !self.failing.swap(true, Ordering::Relaxed) => tracing::warn!(
                %error,
                "traces: export request failed (further failures at debug level until one succeeds)"
            ),
            Err(error) => tracing::debug!(%error, "traces: export request failed"),
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for ExportClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let sent = self.runtime.spawn(async move {
            let request = reqwest::Request::try_from(request)?;
            let response = http.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            let mut answer = Response::new(body);
            *answer.status_mut() = status;
            *answer.headers_mut() = headers;
            Ok::<_, reqwest::Error>(answer)
        });
        let answer = sent.await.map_err(HttpError::from).and_then(|r| Ok(r?));
        // The exporter decides from the status whether to retry.
        match &answer {
            Ok(a) if a.status().is_success() => self.note(Ok(())),
            Ok(a) => self.note(Err(&format_args!("the collector answered {}", a.status()))),
            Err(e) => self.note(Err(e)),
        }
        answer
    }
}

/// The W3C propagator (stateless).
fn propagator() -> TraceContextPropagator {
    TraceContextPropagator::new()
}

/// Adds `traceparent` (and `tracestate`) for the current span to `headers`, when
/// traces are on and the headers do not carry a `traceparent` already (a workflow
/// author's own wins).
pub fn inject_current(headers: &mut HeaderMap) {
    if enabled() {
        inject(&tracing::Span::current().context(), headers);
    }
}

/// Adds the trace context of `cx` unless `headers` has a `traceparent`; nothing for a
/// context without a valid span. Pure.
pub fn inject(cx: &Context, headers: &mut HeaderMap) {
    if headers.contains_key(TRACEPARENT) {
        return;
    }
    propagator().inject_context(cx, &mut HeaderInjector(headers));
}

/// Makes a client's valid `traceparent` the parent of `span` (traces on only).
pub fn continue_from(span: &tracing::Span, headers: &HeaderMap) {
    if !enabled() {
        return;
    }
    let cx = propagator().extract(&HeaderExtractor(headers));
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// The trace id of `span`, when it is exported (for the access log).
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

/// The trace of a run: its trace id is the Run's uid (a UUID, without dashes; other
/// strings are hashed), its parent span id derived from the uid. Every execution of
/// the run and every delivery of its events starts from this context, so they share
/// one trace without storing anything on the Run. The parent span itself is never
/// exported: a trace viewer shows each `run` span as a root with a missing parent.
pub fn run_context(run_uid: &str) -> Context {
    let digest = Sha256::digest(format!("flowline-run/{run_uid}").as_bytes());
    let trace_id = TraceId::from_hex(&run_uid.replace('-', ""))
        .ok()
        .filter(|id| *id != TraceId::INVALID && run_uid.len() == 36)
        .unwrap_or_else(|| TraceId::from_bytes(digest[..16].try_into().expect("16 of 32 bytes")));
    let span_id = SpanId::from_bytes(digest[16..24].try_into().expect("8 of 32 bytes"));
    let parent = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Context::new().with_remote_span_context(parent)
}

/// Makes `span` part of the run's trace ([`run_context`]); traces on only.
pub fn join_run(span: &tracing::Span, run_uid: &str) {
    if enabled() {
        let _ = span.set_parent(run_context(run_uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    const UID: &str = "3f2a9c4e-1b7d-4e8a-9c0f-5d6e7f8a9b0c";

    #[test]
    fn off_by_default_nothing_is_injected() {
        // Nothing in the unit tests starts an exporter.
        assert!(!enabled());
        let mut headers = HeaderMap::new();
        let span = tracing::info_span!("any");
        let _entered = span.enter();
        inject_current(&mut headers);
        assert!(headers.is_empty(), "{headers:?}");
        assert_eq!(trace_id(&span), None);
    }

    #[test]
    fn a_run_trace_is_its_uid_and_is_stable() {
        let cx = run_context(UID);
        let sc = cx.span().span_context().clone();
        assert!(sc.is_valid() && sc.is_sampled());
        assert_eq!(sc.trace_id().to_string(), UID.replace('-', ""));
        assert_eq!(
            run_context(UID).span().span_context().span_id(),
            sc.span_id()
        );
        let other = run_context("not-a-uuid");
        assert!(other.span().span_context().is_valid());
    }

    #[test]
    fn injection_writes_traceparent_and_keeps_the_authors() {
        let cx = run_context(UID);
        let mut headers = HeaderMap::new();
        inject(&cx, &mut headers);
        let sent = headers[TRACEPARENT].to_str().unwrap();
        let trace = UID.replace('-', "");
        assert!(
            sent.starts_with(&format!("00-{trace}-")) && sent.ends_with("-01"),
            "{sent}"
        );
        let mut own = HeaderMap::new();
        own.insert("TraceParent", HeaderValue::from_static("mine"));
        inject(&cx, &mut own);
        assert_eq!(own[TRACEPARENT], "mine");
        let mut none = HeaderMap::new();
        inject(&Context::new(), &mut none);
        assert!(none.is_empty(), "no valid span, no header");
    }

    #[test]
    fn the_endpoint_gets_the_traces_path() {
        let url = |s: &str| traces_url(&s.parse().unwrap());
        assert_eq!(
            url("http://collector:4318").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            url("https://c.example/otlp/").unwrap(),
            "https://c.example/otlp/v1/traces"
        );
        assert!(url("grpc://collector:4317").is_err());
    }
}
