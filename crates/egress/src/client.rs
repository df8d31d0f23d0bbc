//! The one HTTP client for user-chosen URLs. Built only here, so every request to such a
//! URL passes the guard: the URL is checked before any connection (scheme, IP literal,
//! loopback names), names are checked when resolved ([`GuardedResolver`]), proxies from
//! the environment are ignored (a proxy would connect to the destination itself, past
//! the guard) and redirects are never followed automatically (each hop must be checked
//! again; see [`super::exchange`]).

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, RequestBuilder, Url};

use super::policy::{DestinationPolicy, Refusal};
use super::resolver::{GuardedResolver, ResolveError};

/// How the client is built.
#[derive(Debug, Clone, Default)]
pub struct ClientSettings {
    pub policy: DestinationPolicy,
    /// A deadline for each request, body included; none when the caller bounds the
    /// whole exchange itself.
    pub timeout: Option<Duration>,
    /// Trusted roots besides the system's (`--ca-bundle` of deliveries).
    pub extra_roots: Vec<reqwest::Certificate>,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct BuildError(String);

/// Why a request got no HTTP status. Messages never contain a resolved address.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("destination refused: {0}")]
    Refused(#[from] Refusal),
    #[error("invalid url: {0}")]
    InvalidUrl(String),
    #[error("cannot resolve {host}: {reason}")]
    Resolve { host: String, reason: String },
    #[error("no response in time")]
    Timeout,
    #[error("connection failed: {0}")]
    Connect(String),
    #[error("request failed: {0}")]
    Request(String),
}

#[derive(Clone)]
pub struct GuardedClient {
    http: reqwest::Client,
    policy: Arc<DestinationPolicy>,
}

impl GuardedClient {
    pub fn new(settings: ClientSettings) -> Result<Self, BuildError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let policy = Arc::new(settings.policy);
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("flowline/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver(policy.clone())));
        if let Some(timeout) = settings.timeout {
            builder = builder.timeout(timeout);
        }
        if !settings.extra_roots.is_empty() {
            builder = builder.tls_certs_merge(settings.extra_roots);
        }
        let http = builder.build().map_err(|e| BuildError(e.to_string()))?;
        Ok(Self { http, policy })
    }

    /// A request to `url`, or its refusal before any connection: only `http` and
    /// `https`, and a host that is not a refused IP literal or loopback name. Other
    /// names are checked when the connection resolves them.
    pub fn request(&self, method: Method, url: Url) -> Result<RequestBuilder, RequestError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(RequestError::InvalidUrl(format!(
                "scheme {} is not http or https",
                url.scheme()
            )));
        }
        let host = url
            .host()
            .ok_or_else(|| RequestError::InvalidUrl("no host".into()))?;
        self.policy.check_host(&host)?;
        Ok(self.http.request(method, url))
    }
}

impl From<reqwest::Error> for RequestError {
    fn from(err: reqwest::Error) -> Self {
        if err.is_timeout() {
            return Self::Timeout;
        }
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
        while let Some(e) = source {
            if let Some(refusal) = e.downcast_ref::<Refusal>() {
                return Self::Refused(refusal.clone());
            }
            if let Some(ResolveError { host, reason }) = e.downcast_ref::<ResolveError>() {
                return Self::Resolve {
                    host: host.clone(),
                    reason: reason.clone(),
                };
            }
            source = e.source();
        }
        let detail = innermost(&err);
        if err.is_connect() {
            Self::Connect(detail)
        } else {
            Self::Request(detail)
        }
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
