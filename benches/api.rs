//! `make bench-api`: reads through `/v1` (served from watch caches) against the same
//! reads straight from kube-apiserver, with one HTTP client and one concurrency.
//! Not a test: it prints figures and ratios; docs/benchmarks.md records them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowline::api::auth::Scope;
use flowline::api::ratelimit::{Plan, PlanDefaults};
use flowline::api::state::{ApiConfig, ApiState};
use flowline::crd::{Workflow, WorkflowSpec};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

const CONCURRENCY: usize = 16;
const DURATION: Duration = Duration::from_secs(8);
const WORKFLOWS: usize = 100;

struct Stats {
    rps: f64,
    p50: Duration,
    p99: Duration,
}

async fn hammer(client: reqwest::Client, url: String, auth: Option<String>) -> Stats {
    let latencies = Arc::new(std::sync::Mutex::new(Vec::new()));
    let deadline = Instant::now() + DURATION;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let (client, url, auth, latencies) =
            (client.clone(), url.clone(), auth.clone(), latencies.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                let mut req = client.get(&url);
                if let Some(a) = &auth {
                    req = req.bearer_auth(a);
                }
                let res = req.send().await.expect("request");
                assert!(
                    res.status().is_success(),
                    "{} answered {}",
                    url,
                    res.status()
                );
                res.bytes().await.expect("body");
                mine.push(t.elapsed());
            }
            latencies.lock().unwrap().extend(mine);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let mut all = latencies.lock().unwrap().clone();
    all.sort();
    let pick = |q: f64| all[((all.len() as f64 - 1.0) * q) as usize];
    Stats {
        rps: all.len() as f64 / elapsed.as_secs_f64(),
        p50: pick(0.50),
        p99: pick(0.99),
    }
}

/// A reqwest client that can talk to both: trusts the cluster CA and presents the
/// kubeconfig's client certificate (ignored by the Flowline API).
fn http_client(config: &kube::Config) -> reqwest::Client {
    let mut builder = reqwest::Client::builder().pool_max_idle_per_host(CONCURRENCY);
    if let Some(roots) = &config.root_cert {
        for der in roots {
            builder = builder.add_root_certificate(reqwest::Certificate::from_der(der).unwrap());
        }
    }
    let (cert, key) = client_identity(config);
    builder
        .identity(reqwest::Identity::from_pem(&[cert, key].concat()).unwrap())
        .build()
        .unwrap()
}

fn client_identity(config: &kube::Config) -> (Vec<u8>, Vec<u8>) {
    let auth = &config.auth_info;
    let data = |inline: &Option<String>, file: &Option<String>| -> Vec<u8> {
        use base64::Engine;
        match (inline, file) {
            (Some(b64), _) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap(),
            (None, Some(path)) => std::fs::read(path).unwrap(),
            _ => panic!(
                "bench-api needs a kubeconfig with a client certificate (the local control plane has one)"
            ),
        }
    };
    let key = auth.client_key_data.as_ref().map(|s| {
        use secrecy::ExposeSecret;
        s.expose_secret().to_string()
    });
    (
        data(&auth.client_certificate_data, &auth.client_certificate),
        data(&key, &auth.client_key),
    )
}

fn line(what: &str, api: &Stats, direct: &Stats) {
    println!(
        "| {what} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {:.1}x | {:.1}x |",
        api.rps,
        api.p50.as_secs_f64() * 1e3,
        api.p99.as_secs_f64() * 1e3,
        direct.rps,
        direct.p50.as_secs_f64() * 1e3,
        direct.p99.as_secs_f64() * 1e3,
        api.rps / direct.rps,
        direct.p99.as_secs_f64() / api.p99.as_secs_f64(),
    );
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube::Config::infer().await.expect("KUBECONFIG");
    let cluster = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let http = http_client(&config);
    let client = Client::try_from(config.clone()).unwrap();

    let ns_name = format!("bench-api-{}", std::process::id());
    let ns: Namespace = serde_json::from_value(
        serde_json::json!({"metadata": {"name": ns_name, "annotations": {
        "flowline.io/plan": "enterprise", "flowline.io/requests-per-minute": "1000000000"}}}),
    )
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let workflows: Api<Workflow> = Api::namespaced(client.clone(), &ns_name);
    for i in 0..WORKFLOWS {
        let spec: WorkflowSpec = serde_json::from_value(serde_json::json!({
            "name": format!("Bench {i}"),
            "steps": [{"id": "a", "action": "delay", "with": {"ms": 1}}, {"id": "b", "action": "transform", "with": {"value": "x"}}]
        }))
        .unwrap();
        workflows
            .create(
                &PostParams::default(),
                &Workflow::new(&format!("wf-{i:03}"), spec),
            )
            .await
            .unwrap();
    }
    let key = flowline::api::keys::create_key(client.clone(), &ns_name, "bench", &[Scope::Read])
        .await
        .unwrap()
        .value;

    let shutdown = tokio_util::sync::CancellationToken::new();
    let caches = flowline::api::cache::Caches::start(client.clone(), shutdown.clone());
    while !caches.is_synced() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let api_config = ApiConfig {
        allow_http_webhooks: false,
        plans: PlanDefaults {
            plan: Plan::Free,
            enterprise_requests: 1,
        },
        rate_limit_window_secs: 60,
    };
    let app = flowline::api::router(ApiState::new(client.clone(), caches, api_config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
        .unwrap()
    });
    // Let the key reach the cache.
    while http
        .get(format!("{base}/v1/workflows"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .status()
        == 401
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let direct = format!("{cluster}/apis/flowline.io/v1/namespaces/{ns_name}/workflows");
    println!(
        "concurrency {CONCURRENCY}, {}s per measurement, {WORKFLOWS} workflows\n",
        DURATION.as_secs()
    );
    println!(
        "| read | /v1 req/s | /v1 p50 ms | /v1 p99 ms | apiserver req/s | apiserver p50 ms | apiserver p99 ms | req/s ratio | p99 ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let api_one = hammer(
        http.clone(),
        format!("{base}/v1/workflows/wf-042"),
        Some(key.clone()),
    )
    .await;
    let direct_one = hammer(http.clone(), format!("{direct}/wf-042"), None).await;
    line("one workflow", &api_one, &direct_one);
    let api_list = hammer(
        http.clone(),
        format!("{base}/v1/workflows?limit=100"),
        Some(key.clone()),
    )
    .await;
    let direct_list = hammer(http.clone(), format!("{direct}?limit=100"), None).await;
    line("list of 100", &api_list, &direct_list);

    shutdown.cancel();
    Api::<Namespace>::all(client)
        .delete(&ns_name, &DeleteParams::background())
        .await
        .unwrap();
}
