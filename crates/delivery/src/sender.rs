//! One delivery attempt over HTTPS: the signed request through the guarded client
//! (`flowline_egress`), and the outcome as the worker records it.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use jiff::Timestamp;

use flowline_core::crd::EventKind;
use flowline_core::delivery::schedule::{ATTEMPT_TIMEOUT, parse_retry_after};
use flowline_core::delivery::signing::{self, SigningError};
use flowline_egress::exchange::drain_capped;
use flowline_egress::{ClientSettings, DestinationPolicy, GuardedClient, Refusal, RequestError};
use flowline_telemetry::traces;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The response body is read (so the connection can be reused) up to this size.
const MAX_RESPONSE_BODY: usize = 64 * 1024;

/// Why an attempt got no HTTP status. The message is what users see in the
/// deliveries list, so it names the cause and, where there is one, the remedy.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("destination refused: {0}")]
    Refused(Refusal),
    #[error("http:// destinations need the operator's --allow-http flag")]
    InsecureScheme,
    #[error("no response within {}s", ATTEMPT_TIMEOUT.as_secs())]
    Timeout,
    #[error(transparent)]
    Transport(RequestError),
    #[error("request failed: {0}")]
    Request(String),
    #[error("signing failed: {0}")]
    Signing(#[from] SigningError),
}

impl From<RequestError> for SendError {
    fn from(err: RequestError) -> Self {
        match err {
            RequestError::Refused(refusal) => Self::Refused(refusal),
            RequestError::Timeout => Self::Timeout,
            other => Self::Transport(other),
        }
    }
}

/// Operator settings for outbound deliveries.
#[derive(Debug, Clone, Default)]
pub struct SenderConfig {
    /// PEM file with extra trusted roots (besides the system's).
    pub ca_bundle: Option<std::path::PathBuf>,
    pub policy: DestinationPolicy,
    /// Development only: allow `http://` urls (for webhooks that also opt in).
    pub allow_http: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SenderConfigError {
    #[error("cannot read the CA bundle {path}: {source}")]
    ReadBundle {
        path: String,
        source: std::io::Error,
    },
    #[error("the CA bundle {path} holds no usable certificate: {reason}")]
    BadBundle { path: String, reason: String },
    #[error(transparent)]
    Client(#[from] flowline_egress::client::BuildError),
}

/// What one request carries.
pub struct Outgoing<'a> {
    pub url: &'a str,
    /// The webhook opted in to `http://` (spec.allowInsecureHttp).
    pub webhook_allows_http: bool,
    pub event_id: &'a str,
    pub kind: EventKind,
    pub attempt: u32,
    pub body: Bytes,
    /// Signing secrets, newest first (two during a rotation).
    pub secrets: &'a [String],
    /// The Run the event is about, whose trace the attempt joins (traces on).
    pub run_uid: Option<&'a str>,
}

/// The outcome of one attempt.
#[derive(Debug)]
pub struct Attempted {
    pub result: Result<Response, SendError>,
    pub duration: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub retry_after: Option<Duration>,
}

#[derive(Clone)]
pub struct Sender {
    client: GuardedClient,
    allow_http: bool,
}

impl Sender {
    pub fn new(config: &SenderConfig) -> Result<Self, SenderConfigError> {
        let extra_roots = match &config.ca_bundle {
            Some(path) => read_bundle(path)?,
            None => Vec::new(),
        };
        let client = GuardedClient::new(ClientSettings {
            policy: config.policy.clone(),
            timeout: Some(ATTEMPT_TIMEOUT),
            extra_roots,
        })?;
        Ok(Sender {
            client,
            allow_http: config.allow_http,
        })
    }

    pub async fn send(&self, out: Outgoing<'_>) -> Attempted {
        let started = Instant::now();
        let span = delivery_span(&out);
        let result = self.try_send(out).instrument(span.clone()).await;
        match &result {
            Ok(response) => {
                span.record("http.response.status_code", response.status);
                if !(200..300).contains(&response.status) {
                    span.record("otel.status_code", "error");
                }
            }
            Err(err) => {
                span.record("otel.status_code", "error");
                span.record("error.message", err.to_string());
            }
        }
        Attempted {
            result,
            duration: started.elapsed(),
        }
    }

    async fn try_send(&self, out: Outgoing<'_>) -> Result<Response, SendError> {
        let url =
            reqwest::Url::parse(out.url).map_err(|e| RequestError::InvalidUrl(e.to_string()))?;
        if url.scheme() == "http" && !(self.allow_http && out.webhook_allows_http) {
            return Err(SendError::InsecureScheme);
        }
        // Refused destinations fail here, before anything is signed or sent.
        let request = self.client.request(reqwest::Method::POST, url)?;
        let timestamp = Timestamp::now().as_second();
        let secrets: Vec<&str> = out.secrets.iter().map(String::as_str).collect();
        let standard = signing::standard_signature(&secrets, out.event_id, timestamp, &out.body)?;
        let seed = signing::seed_signature(secrets[0], &out.body);
        let mut trace = reqwest::header::HeaderMap::new();
        traces::inject_current(&mut trace);
        let response = request
            .headers(trace)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(signing::SEED_SIGNATURE_HEADER, seed)
            .header("x-service-event", out.kind.as_str())
            .header("x-service-event-id", out.event_id)
            .header("x-service-delivery-attempt", out.attempt.to_string())
            .header(signing::WEBHOOK_ID_HEADER, out.event_id)
            .header(signing::WEBHOOK_TIMESTAMP_HEADER, timestamp.to_string())
            .header(signing::WEBHOOK_SIGNATURE_HEADER, standard)
            .body(out.body)
            .send()
            .await
            .map_err(RequestError::from)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, Timestamp::now()));
        // Read (a bounded amount) so the connection returns to the pool; unused.
        drain_capped(response, MAX_RESPONSE_BODY).await;
        Ok(Response {
            status,
            retry_after,
        })
    }
}

/// With traces on, the span of one attempt: in the trace of the run the event is
/// about (a workflow's event starts a trace of its own); off, none.
fn delivery_span(out: &Outgoing<'_>) -> tracing::Span {
    if !traces::enabled() {
        return tracing::Span::none();
    }
    let host = reqwest::Url::parse(out.url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    let span = tracing::info_span!(
        "webhook.delivery",
        otel.name = %format_args!("deliver {}", out.kind.as_str()),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        server.address = host,
        flowline.event = out.kind.as_str(),
        flowline.event_id = out.event_id,
        flowline.delivery.attempt = out.attempt,
        http.response.status_code = tracing::field::Empty,
        error.message = tracing::field::Empty,
    );
    match out.run_uid {
        Some(uid) => traces::join_run(&span, uid),
        // Not a child of whatever span the worker is in.
        None => {
            let _ = span.set_parent(opentelemetry::Context::new());
        }
    }
    span
}

fn read_bundle(path: &Path) -> Result<Vec<reqwest::Certificate>, SenderConfigError> {
    let display = path.display().to_string();
    let pem = std::fs::read(path).map_err(|source| SenderConfigError::ReadBundle {
        path: display.clone(),
        source,
    })?;
    let certs =
        reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| SenderConfigError::BadBundle {
            path: display.clone(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(SenderConfigError::BadBundle {
            path: display,
            reason: "no PEM certificates".into(),
        });
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(config: SenderConfig) -> Sender {
        Sender::new(&config).unwrap()
    }

    fn outgoing<'a>(url: &'a str, secrets: &'a [String]) -> Outgoing<'a> {
        Outgoing {
            url,
            webhook_allows_http: true,
            event_id: "evt_1",
            kind: EventKind::RunStarted,
            attempt: 1,
            body: Bytes::from_static(b"{}"),
            secrets,
            run_uid: Some("3f2a9c4e-1b7d-4e8a-9c0f-5d6e7f8a9b0c"),
        }
    }

    #[tokio::test]
    async fn loopback_and_metadata_addresses_are_refused_before_connecting() {
        let s = sender(SenderConfig::default());
        let keys = [flowline_core::delivery::signing::generate_secret()];
        for url in [
            "https://127.0.0.1:9/x",
            "https://169.254.169.254/latest/meta-data",
            "https://[::1]/",
            "https://localhost:9/",
        ] {
            let err = s.send(outgoing(url, &keys)).await.result.unwrap_err();
            assert!(
                matches!(err, SendError::Refused(_)),
                "{url}: {err} should be a refusal"
            );
            let message = err.to_string();
            assert!(message.starts_with("destination refused: "), "{message}");
            assert!(message.contains("--allow-cidr"), "{message}");
        }
    }

    #[tokio::test]
    async fn http_needs_both_the_operator_flag_and_the_webhook_opt_in() {
        let s = sender(SenderConfig::default());
        let err = s.send(outgoing("http://example.com/", &[])).await.result;
        assert!(matches!(err, Err(SendError::InsecureScheme)), "{err:?}");
        let s = sender(SenderConfig {
            allow_http: true,
            ..Default::default()
        });
        let mut out = outgoing("http://example.com/", &[]);
        out.webhook_allows_http = false;
        assert!(matches!(
            s.send(out).await.result,
            Err(SendError::InsecureScheme)
        ));
    }

    #[test]
    fn a_bundle_without_certificates_is_a_startup_error() {
        let dir = std::env::temp_dir().join(format!("flowline-ca-{}", std::process::id()));
        std::fs::write(&dir, "not a certificate").unwrap();
        let err = Sender::new(&SenderConfig {
            ca_bundle: Some(dir.clone()),
            ..Default::default()
        })
        .err()
        .expect("an empty bundle is refused");
        assert!(err.to_string().contains("no PEM certificates"), "{err}");
        let missing = Sender::new(&SenderConfig {
            ca_bundle: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        })
        .err()
        .unwrap();
        assert!(missing.to_string().contains("/nonexistent/ca.pem"));
        let _ = std::fs::remove_file(dir);
    }
}
