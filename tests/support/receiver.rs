//! A real HTTPS webhook receiver on loopback, with its own certificate authority (the
//! operator trusts it through `--ca-bundle`). It records every request and answers
//! with scripted statuses. Shared by the cluster tests and `benches/delivery.rs`.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, pki_types};

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request's path (a test's webhooks can share one receiver, each on a path).
    pub path: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
    pub status_sent: u16,
    /// When it arrived.
    pub arrived: std::time::Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("deliveries are JSON")
    }
}

#[derive(Default)]
struct Shared {
    received: Mutex<Vec<Received>>,
    script: Mutex<VecDeque<u16>>,
    /// Unscripted requests fail with this probability, drawn from a seeded generator.
    random_failures: Mutex<Option<RandomFailures>>,
    /// Requests that have arrived (counted before any delay or answer).
    arrivals: tokio::sync::watch::Sender<u64>,
    down: AtomicBool,
    count: AtomicU64,
    http2: AtomicU64,
    keep_bodies: AtomicBool,
    delay_ms: AtomicU64,
}

/// A seeded share of failing answers (chaos tests).
struct RandomFailures {
    rate: f64,
    rng: rand::rngs::StdRng,
}

impl RandomFailures {
    fn status(&mut self) -> u16 {
        use rand::Rng;
        if self.rng.random_bool(self.rate) {
            503
        } else {
            200
        }
    }
}

/// A CA and a certificate it issued for `localhost` and `127.0.0.1`.
pub struct TestPki {
    pub ca_pem: String,
    pub ca_file: PathBuf,
    cert_der: pki_types::CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl TestPki {
    pub fn new() -> TestPki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "flowline test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
        let ca_pem = ca_cert.pem();
        let ca_file = std::env::temp_dir().join(format!(
            "flowline-test-ca-{}-{}.pem",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::write(&ca_file, &ca_pem).unwrap();
        TestPki {
            ca_pem,
            ca_file,
            cert_der: leaf.der().clone(),
            key_der: leaf_key.serialize_der(),
        }
    }

    fn acceptor(&self) -> TlsAcceptor {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let key = pki_types::PrivateKeyDer::Pkcs8(self.key_der.clone().into());
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![self.cert_der.clone()], key)
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        TlsAcceptor::from(Arc::new(config))
    }
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// The receiver; it stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    pub pki: Arc<TestPki>,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    pub async fn start() -> Receiver {
        Self::start_with(Arc::new(TestPki::new())).await
    }

    pub async fn start_with(pki: Arc<TestPki>) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        shared.keep_bodies.store(true, Ordering::SeqCst);
        let acceptor = pki.acceptor();
        let state = shared.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                if state.down.load(Ordering::SeqCst) {
                    drop(tcp); // as if nothing listened: the attempt fails to connect
                    continue;
                }
                let (acceptor, state) = (acceptor.clone(), state.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(move |req| handle(state.clone(), req));
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Receiver {
            addr,
            pki,
            shared,
            task,
        }
    }

    /// `https://localhost:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr.port())
    }

    /// The next requests get these statuses, in order; then 200 again.
    pub fn script(&self, statuses: &[u16]) {
        self.shared.script.lock().unwrap().extend(statuses);
    }

    /// While down, connections are closed before TLS (the sender sees a transport error).
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }

    /// Every request is answered only after this long (a slow endpoint).
    pub fn set_delay(&self, delay: std::time::Duration) {
        self.shared
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Unscripted requests are answered 503 with probability `rate`, drawn from a
    /// generator seeded with `seed` (which requests fail depends on arrival order).
    pub fn fail_randomly(&self, rate: f64, seed: u64) {
        use rand::SeedableRng;
        *self.shared.random_failures.lock().unwrap() = Some(RandomFailures {
            rate,
            rng: rand::rngs::StdRng::seed_from_u64(seed),
        });
    }

    /// Changes each time a request arrives, before it is delayed or answered: a test
    /// can act while the sender still waits for the answer.
    pub fn arrivals(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.arrivals.subscribe()
    }

    /// Count only, without keeping requests (benchmarks).
    pub fn count_only(&self) {
        self.shared.keep_bodies.store(false, Ordering::SeqCst);
    }

    pub fn count(&self) -> u64 {
        self.shared.count.load(Ordering::SeqCst)
    }

    /// Requests that came over HTTP/2 (the rest were HTTP/1.1).
    pub fn http2_count(&self) -> u64 {
        self.shared.http2.load(Ordering::SeqCst)
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, BoxError> {
    if shared.down.load(Ordering::SeqCst) {
        // Also on connections opened while up: the connection closes without a response.
        return Err("receiver is down".into());
    }
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let arrived = std::time::Instant::now();
    shared.arrivals.send_modify(|n| *n += 1);
    let delay = shared.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
    }
    let scripted = shared.script.lock().unwrap().pop_front();
    let status = scripted.unwrap_or_else(|| match &mut *shared.random_failures.lock().unwrap() {
        Some(failures) => failures.status(),
        None => 200,
    });
    shared.count.fetch_add(1, Ordering::SeqCst);
    if parts.version == http::Version::HTTP_2 {
        shared.http2.fetch_add(1, Ordering::SeqCst);
    }
    if shared.keep_bodies.load(Ordering::SeqCst) {
        shared.received.lock().unwrap().push(Received {
            path: parts.uri.path().to_string(),
            headers: parts.headers,
            body,
            status_sent: status,
            arrived,
        });
    }
    Ok(Response::builder()
        .status(status)
        .body(Full::new(Bytes::from_static(b"ok")))
        .unwrap())
}
