//! `make bench-delivery`: 50,000 events of about 1 KiB delivered by the worker to a
//! local HTTPS sink, against a raw hyper client posting the same bodies over TLS to
//! the same sink at the same concurrency, in the same run: once bare (a content type,
//! nothing else) and once signed (the headers and both signatures every delivery
//! carries, computed per request); and against the worker's own sender posting the same
//! events without the worker around it. Reports deliveries/s, p99 attempt latency
//! (histogram buckets, identical for all sides) and API-server writes per 1,000
//! deliveries (counted by the API server itself).
//! Not a test: it prints figures; docs/benchmarks.md records them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flowline_core::crd::{Webhook, Workflow};
use flowline_delivery::sender::{Outgoing, Sender, SenderConfig};
use flowline_delivery::worker::{self, Settings};
use flowline_egress::DestinationPolicy;
use flowline_telemetry::delivery_metrics::DeliveryMetrics;
use flowline_telemetry::metrics::Metrics;
use http_body_util::Full;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[path = "support/apiserver.rs"]
mod apiserver;
#[path = "../tests/support/receiver.rs"]
mod receiver;
use receiver::Receiver;

const EVENTS: usize = 50_000;
const PER_OWNER: usize = 50;
const CONCURRENCY: usize = 16;
/// Histogram bounds (seconds) used for both sides' p99, as the worker's metric has.
const BUCKETS: [f64; 15] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384,
];

fn p99_bucket(latencies: &mut [f64]) -> f64 {
    latencies.sort_by(f64::total_cmp);
    let p99 = latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)];
    BUCKETS
        .into_iter()
        .find(|b| p99 <= *b)
        .unwrap_or(f64::INFINITY)
}

/// p99 upper bound from the worker's exported histogram.
fn p99_from_metrics(text: &str) -> f64 {
    let buckets: Vec<(f64, f64)> = text
        .lines()
        .filter(|l| l.starts_with("flowline_webhook_delivery_duration_seconds_bucket{le=\""))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let count = l.rsplit(' ').next()?.parse().ok()?;
            Some((le.parse().unwrap_or(f64::INFINITY), count))
        })
        .collect();
    let total = buckets.last().map(|b| b.1).unwrap_or(0.0);
    buckets
        .into_iter()
        .find(|(_, count)| *count >= total * 0.99)
        .map(|b| b.0)
        .unwrap_or(f64::INFINITY)
}

/// Writes the API server has served so far to what the worker could write (it writes
/// only Webhook status and signing Secrets); counted cluster-wide, so run it on an
/// otherwise idle cluster.
async fn writes(client: &Client) -> f64 {
    apiserver::writes(client, &["webhooks", "secrets", "workflows", "runs"]).await
}

fn body(i: usize) -> serde_json::Value {
    json!({
        "run_id": format!("run-{i:06}"),
        "workflow_id": format!("wf-{:04}", i / PER_OWNER),
        "workflow_name": "Benchmark",
        "trigger": "manual",
        "started_at": "2026-01-01T00:00:00.000Z",
        // Pads the payload to about 1 KiB.
        "note": "x".repeat(820),
    })
}

/// What the reference sends besides the body.
#[derive(Clone, Copy)]
enum Shape {
    /// A content type only.
    Bare,
    /// What a delivery carries: the event headers and both signatures (seed and
    /// Standard Webhooks) over each body, made per request with this secret.
    Signed(&'static str),
}

/// The request the reference sends for event `i`.
fn reference_request(
    url: &http::Uri,
    i: usize,
    body: &Bytes,
    shape: Shape,
) -> http::Request<Full<Bytes>> {
    use flowline_core::delivery::signing;
    let request = http::Request::post(url.clone()).header("content-type", "application/json");
    let request = match shape {
        Shape::Bare => request,
        Shape::Signed(secret) => {
            let id = format!("evt_{i:010}");
            let timestamp = jiff::Timestamp::now().as_second();
            let standard = signing::standard_signature(&[secret], &id, timestamp, body).unwrap();
            request
                .header(
                    signing::SEED_SIGNATURE_HEADER,
                    signing::seed_signature(secret, body),
                )
                .header("x-service-event", "run.started")
                .header("x-service-event-id", &id)
                .header("x-service-delivery-attempt", "1")
                .header(signing::WEBHOOK_ID_HEADER, &id)
                .header(signing::WEBHOOK_TIMESTAMP_HEADER, timestamp.to_string())
                .header(signing::WEBHOOK_SIGNATURE_HEADER, standard)
        }
    };
    request.body(Full::new(body.clone())).unwrap()
}

/// The reference: hyper's client over rustls, same CA, same bodies, same concurrency.
async fn raw_hyper(receiver: &Receiver, bodies: &[Bytes], shape: Shape) -> (f64, f64) {
    use hyper_util::client::legacy::Client as HyperClient;
    use hyper_util::rt::TokioExecutor;
    let mut roots = rustls::RootCertStore::empty();
    use rustls_pki_types::pem::PemObject;
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(receiver.pki.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    // TCP_NODELAY as reqwest sets it: without it Nagle's algorithm slows small
    // HTTP/2 frames and the reference would be unfairly slow.
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.set_nodelay(true);
    tcp.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_all_versions()
        .wrap_connector(tcp);
    let client: HyperClient<_, Full<Bytes>> =
        HyperClient::builder(TokioExecutor::new()).build(https);
    let url: http::Uri = receiver.url("/raw").parse().unwrap();
    drive(bodies, move |i, body| {
        let req = reference_request(&url, i, &body, shape);
        let request = client.request(req);
        async move {
            let res = request.await.unwrap();
            assert!(res.status().is_success());
            let _ = http_body_util::BodyExt::collect(res.into_body()).await;
        }
    })
    .await
}

/// The third reference: the worker's own sender (`delivery::sender`: URL parse,
/// destination guard, signing, headers, reqwest) posting the same events at the same
/// concurrency, without the worker around it (outbox, lanes, ledger, status writes).
/// Set against the worker it tells what the worker's machinery costs; set against the
/// signed hyper reference, what the sender's HTTP stack costs.
async fn sender_alone(receiver: &Receiver, bodies: &[Bytes], secret: &'static str) -> (f64, f64) {
    let sender = Arc::new(loopback_sender(receiver));
    let url = Arc::new(receiver.url("/sender"));
    let secrets = Arc::new(vec![secret.to_string()]);
    drive(bodies, move |i, body| {
        let (sender, url, secrets) = (sender.clone(), url.clone(), secrets.clone());
        async move {
            let id = format!("evt_{i:010}");
            let attempted = sender
                .send(Outgoing {
                    url: &url,
                    webhook_allows_http: false,
                    event_id: &id,
                    kind: flowline_core::crd::EventKind::RunStarted,
                    attempt: 1,
                    body,
                    secrets: &secrets,
                    run_uid: None,
                })
                .await;
            let status = attempted.result.expect("sent").status;
            assert!((200..300).contains(&status), "status {status}");
        }
    })
    .await
}

/// A delivery sender that trusts the sink's CA and lets the guard pass loopback.
fn loopback_sender(receiver: &Receiver) -> Sender {
    Sender::new(&SenderConfig {
        ca_bundle: Some(receiver.pki.ca_file.clone()),
        policy: DestinationPolicy::from_list("127.0.0.0/8").unwrap(),
        allow_http: false,
    })
    .unwrap()
}

/// Sends every body, [`CONCURRENCY`] at a time, with `send` (the event's index and
/// body): the rate, and the p99 bucket of the sends' latencies.
async fn drive<F, Fut>(bodies: &[Bytes], send: F) -> (f64, f64)
where
    F: Fn(usize, Bytes) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let bodies: Arc<[Bytes]> = bodies.into();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (send, next, bodies) = (send.clone(), next.clone(), bodies.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(body) = bodies.get(i) else {
                        return latencies;
                    };
                    let t = Instant::now();
                    send(i, body.clone()).await;
                    latencies.push(t.elapsed().as_secs_f64());
                }
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    let rate = bodies.len() as f64 / started.elapsed().as_secs_f64();
    (rate, p99_bucket(&mut latencies))
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = Client::try_default()
        .await
        .expect("KUBECONFIG must point at the cluster (make bench-delivery does)");
    let ns = format!("flowline-bench-delivery-{}", std::process::id());
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let receiver = Receiver::start().await;
    receiver.count_only();

    // The same ~1 KiB bodies both sides send.
    let bodies: Vec<Bytes> = (0..EVENTS)
        .map(|i| {
            Bytes::from(
                json!({"id": format!("evt_{i:010}"), "event": "run.started",
                       "timestamp": "2026-01-01T00:00:00.000Z", "data": body(i)})
                .to_string(),
            )
        })
        .collect();
    let mean_size = bodies.iter().map(Bytes::len).sum::<usize>() / EVENTS;

    println!("bench-delivery: {EVENTS} events of {mean_size} bytes, {CONCURRENCY} in flight");
    let (raw_rate, raw_p99) = raw_hyper(&receiver, &bodies, Shape::Bare).await;
    println!(
        "  raw hyper client (before): {raw_rate:.0} req/s, p99 <= {raw_p99} s, {} of {EVENTS} over HTTP/2",
        receiver.http2_count()
    );
    let secret: &'static str = flowline_core::delivery::signing::generate_secret().leak();
    let (signed_rate, signed_p99) = raw_hyper(&receiver, &bodies, Shape::Signed(secret)).await;
    println!("  raw hyper client, signed (before): {signed_rate:.0} req/s, p99 <= {signed_p99} s");
    let (sender_rate, sender_p99) = sender_alone(&receiver, &bodies, secret).await;
    println!("  the worker's sender alone (before): {sender_rate:.0} req/s, p99 <= {sender_p99} s");

    // The outbox: a webhook first (events before it are not owed), then 1,000
    // Workflows holding 50 pending events each, written as status like the
    // controllers would.
    let hook: Webhook = serde_json::from_value(json!({
        "metadata": {"name": "sink"},
        "spec": {"url": receiver.url("/flowline"), "events": ["run.started"]}
    }))
    .unwrap();
    Api::<Webhook>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &hook)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let workflows: Api<Workflow> = Api::namespaced(client.clone(), &ns);
    let owners = EVENTS / PER_OWNER;
    futures::StreamExt::for_each_concurrent(futures::stream::iter(0..owners), 32, |o| {
        let workflows = workflows.clone();
        async move {
            let name = format!("wf-{o:04}");
            let wf: Workflow = serde_json::from_value(json!({
                "metadata": {"name": name}, "spec": {"name": "Benchmark"}
            }))
            .unwrap();
            workflows.create(&PostParams::default(), &wf).await.unwrap();
            let now = jiff::Timestamp::now();
            let events: Vec<_> = (0..PER_OWNER)
                .map(|k| {
                    let i = o * PER_OWNER + k;
                    json!({"id": format!("evt_{i:010}"), "kind": "run.started",
                               "timestamp": now, "data": body(i)})
                })
                .collect();
            workflows
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"pendingEvents": events}})),
                )
                .await
                .unwrap();
        }
    })
    .await;

    let metrics = Metrics::default();
    let delivery_metrics = DeliveryMetrics::new(&metrics);
    let sender = loopback_sender(&receiver);
    let writes_before = writes(&client).await;
    let stop = CancellationToken::new();
    let before = receiver.count();
    let h2_before = receiver.http2_count();
    let started = Instant::now();
    println!("  (the worker starts now)");
    let runs = flowline_controller::run_cache::RunCache::start(&client, Some(&ns), stop.clone());
    tokio::spawn(worker::run(
        client.clone(),
        sender,
        Settings {
            namespace: Some(ns.clone()),
            schedule: Default::default(),
            concurrency: CONCURRENCY,
        },
        delivery_metrics.clone(),
        runs.watch.clone(),
        std::sync::Arc::new(
            flowline_core::sealed::SealKey::new(&flowline_core::sealed::SealKey::generate())
                .unwrap(),
        ),
        stop.clone(),
    ));
    runs.watch.begin();
    let mut first: Option<Instant> = None;
    while receiver.count() - before < EVENTS as u64 {
        if first.is_none() && receiver.count() > before {
            first = Some(Instant::now());
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "only {} of {EVENTS} delivered in 10 min",
            receiver.count() - before
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total_rate = EVENTS as f64 / elapsed;
    // From the first delivery: the initial list of 1,000 objects holding 50 MB of
    // events is start-up cost, not delivery throughput.
    let first = first.unwrap_or(started);
    let rate = EVENTS as f64 / first.elapsed().as_secs_f64();
    println!(
        "  flowline start-up: first delivery {:.2} s after start (lists 1,000 workflows), {total_rate:.0}/s including it",
        first.duration_since(started).as_secs_f64()
    );
    let p99 = p99_from_metrics(&metrics.render());
    // Let the last acknowledgement land.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let written = writes(&client).await - writes_before;
    let status = Api::<Webhook>::namespaced(client.clone(), &ns)
        .get("sink")
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    println!(
        "  flowline worker:  {rate:.0} deliveries/s from the first delivery, p99 <= {p99} s, {} over HTTP/2",
        receiver.http2_count() - h2_before
    );
    // The reference again, so neither side profits from going first or second; the
    // ratios use the better of its two runs.
    let (raw_rate_after, raw_p99_after) = raw_hyper(&receiver, &bodies, Shape::Bare).await;
    println!("  raw hyper client (after): {raw_rate_after:.0} req/s, p99 <= {raw_p99_after} s");
    let (signed_rate_after, signed_p99_after) =
        raw_hyper(&receiver, &bodies, Shape::Signed(secret)).await;
    println!(
        "  raw hyper client, signed (after): {signed_rate_after:.0} req/s, p99 <= {signed_p99_after} s"
    );
    let (sender_rate_after, sender_p99_after) = sender_alone(&receiver, &bodies, secret).await;
    println!(
        "  the worker's sender alone (after): {sender_rate_after:.0} req/s, p99 <= {sender_p99_after} s"
    );
    for (what, rate_before, rate_after, p99_before, p99_after) in [
        ("raw", raw_rate, raw_rate_after, raw_p99, raw_p99_after),
        (
            "signed raw",
            signed_rate,
            signed_rate_after,
            signed_p99,
            signed_p99_after,
        ),
        (
            "sender-alone",
            sender_rate,
            sender_rate_after,
            sender_p99,
            sender_p99_after,
        ),
    ] {
        println!(
            "  ratio: {:.2}x the {what} rate; p99 {:.2}x the {what} p99",
            rate / rate_before.max(rate_after),
            p99 / p99_before.min(p99_after)
        );
    }
    println!(
        "  API writes: {written} during the drain = {:.2} per 1,000 deliveries \
         (worker's own count: {}); watermark now {:?}, consecutive failures {}",
        written * 1000.0 / EVENTS as f64,
        delivery_metrics.status_writes.get(),
        status.delivered_through,
        status.consecutive_failures
    );
    stop.cancel();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &Default::default())
        .await;
}
