//! One delivery attempt over HTTPS: the signed request, the destination guard on
//! every resolved address, and the outcome as the worker records it.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use jiff::Timestamp;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::schedule::{ATTEMPT_TIMEOUT, parse_retry_after};
use super::signing::{self, SigningError};
use super::ssrf::{DestinationPolicy, Refusal};
use crate::crd::EventKind;

/// The response body is read (so the connection can be reused) up to this size.
const MAX_RESPONSE_BODY: usize = 64 * 1024;

/// Why an attempt got no HTTP status. The message is what users see in the
/// deliveries list, so it names the cause and, where there is one, the remedy.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("destination refused: {0}")]
    Refused(#[from] Refusal),
    #[error("http:// destinations need the operator's --allow-http flag")]
    InsecureScheme,
    #[error("invalid url: {0}")]
    InvalidUrl(String),
    #[error("no response within {}s", ATTEMPT_TIMEOUT.as_secs())]
    Timeout,
    #[error("cannot resolve {host}: {reason}")]
    Resolve { host: String, reason: String },
    #[error("connection failed: {0}")]
    Connect(String),
    #[error("request failed: {0}")]
    Request(String),
    #[error("signing failed: {0}")]
    Signing(#[from] SigningError),
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
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
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
    client: reqwest::Client,
    policy: Arc<DestinationPolicy>,
    allow_http: bool,
}

impl Sender {
    pub fn new(config: &SenderConfig) -> Result<Self, SenderConfigError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let policy = Arc::new(config.policy.clone());
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("flowline/", env!("CARGO_PKG_VERSION")))
            .timeout(ATTEMPT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would connect to the destination itself, past the guard.
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver(policy.clone())));
        if let Some(path) = &config.ca_bundle {
            builder = builder.tls_certs_merge(read_bundle(path)?);
        }
        let client = builder
            .build()
            .map_err(|e| SenderConfigError::Client(e.to_string()))?;
        Ok(Sender {
            client,
            policy,
            allow_http: config.allow_http,
        })
    }

    pub async fn send(&self, out: Outgoing<'_>) -> Attempted {
        let started = Instant::now();
        let result = self.try_send(out).await;
        Attempted {
            result,
            duration: started.elapsed(),
        }
    }

    async fn try_send(&self, out: Outgoing<'_>) -> Result<Response, SendError> {
        let url = reqwest::Url::parse(out.url).map_err(|e| SendError::InvalidUrl(e.to_string()))?;
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http && out.webhook_allows_http => {}
            "http" => return Err(SendError::InsecureScheme),
            other => return Err(SendError::InvalidUrl(format!("scheme {other}"))),
        }
        // IP literals never reach the resolver, so they are checked here.
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.policy.check(IpAddr::V4(ip))?,
            Some(url::Host::Ipv6(ip)) => self.policy.check(IpAddr::V6(ip))?,
            Some(url::Host::Domain(_)) => {}
            None => return Err(SendError::InvalidUrl("no host".into())),
        }
        let timestamp = Timestamp::now().as_second();
        let secrets: Vec<&str> = out.secrets.iter().map(String::as_str).collect();
        let standard = signing::standard_signature(&secrets, out.event_id, timestamp, &out.body)?;
        let seed = signing::seed_signature(secrets[0], &out.body);
        let response = self
            .client
            .post(url)
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
            .map_err(classify)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, Timestamp::now()));
        drain(response).await;
        Ok(Response {
            status,
            retry_after,
        })
    }
}

/// Reads a bounded amount of the body so the connection returns to the pool; the
/// content is not used.
async fn drain(mut response: reqwest::Response) {
    let mut read = 0;
    while let Ok(Some(chunk)) = response.chunk().await {
        read += chunk.len();
        if read > MAX_RESPONSE_BODY {
            return;
        }
    }
}

fn classify(err: reqwest::Error) -> SendError {
    if err.is_timeout() {
        return SendError::Timeout;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = source {
        if let Some(refusal) = e.downcast_ref::<Refusal>() {
            return SendError::Refused(refusal.clone());
        }
        if let Some(ResolveError { host, reason }) = e.downcast_ref::<ResolveError>() {
            return SendError::Resolve {
                host: host.clone(),
                reason: reason.clone(),
            };
        }
        source = e.source();
    }
    let detail = innermost(&err);
    if err.is_connect() {
        SendError::Connect(detail)
    } else {
        SendError::Request(detail)
    }
}

/// The most specific message in the chain; reqwest's own top level repeats the url.
fn innermost(err: &(dyn std::error::Error + 'static)) -> String {
    let mut last = err;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

#[derive(Debug, thiserror::Error)]
#[error("cannot resolve {host}: {reason}")]
struct ResolveError {
    host: String,
    reason: String,
}

/// Resolves on every new connection and hands the connector only addresses the
/// policy allows, so the connection goes to the address that was checked (no second
/// lookup a rebinding DNS server could answer differently).
struct GuardedResolver(Arc<DestinationPolicy>);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|e| ResolveError {
                    host: host.clone(),
                    reason: e.to_string(),
                })?
                .collect();
            let mut refusal = None;
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|addr| match policy.check(addr.ip()) {
                    Ok(()) => true,
                    Err(r) => {
                        refusal.get_or_insert(r);
                        false
                    }
                })
                .collect();
            match (allowed.is_empty(), refusal) {
                (false, _) => Ok(Box::new(allowed.into_iter()) as Addrs),
                (true, Some(refusal)) => Err(Box::new(refusal) as _),
                (true, None) => Err(Box::new(ResolveError {
                    host,
                    reason: "no addresses".into(),
                }) as _),
            }
        })
    }
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
        }
    }

    #[tokio::test]
    async fn loopback_and_metadata_addresses_are_refused_before_connecting() {
        let s = sender(SenderConfig::default());
        let keys = [super::super::signing::generate_secret()];
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
            assert!(err.to_string().contains("--allow-cidr"), "{err}");
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
