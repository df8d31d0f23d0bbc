//! (l) start latency: how fast a run reacts, as a user feels it. 1,000 one-step runs
//! started one after another with `POST /v1/workflows/{id}/runs` (an API and a run
//! controller in this process), each measured from the moment the request is sent to
//! its step starting (the step record's `startedAt`) and to the run seen finished
//! through a watch. The reference, in the same run, is the floor of any engine whose
//! state is in custom resources: creating a Run object and seeing it arrive through a
//! watch (a namespace without a controller). Goal: p50 at most 1.5x that round trip,
//! p99 at most 3x.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowline_core::crd::Run;
use futures::StreamExt;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const RUNS: usize = 1000;
const WARM_UP: usize = 20;

/// When each run of a namespace was first seen through one watch: created, and
/// finished (with its first step's recorded start).
#[derive(Default)]
struct Seen {
    added: HashMap<String, Instant>,
    finished: HashMap<String, (Instant, Option<jiff::Timestamp>)>,
}

/// A watch of `runs` filling [`Seen`], and what wakes its waiters.
fn watch_runs(runs: Api<Run>, stop: CancellationToken) -> (Arc<Mutex<Seen>>, Arc<Notify>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let notify = Arc::new(Notify::new());
    let (into, wake) = (seen.clone(), notify.clone());
    tokio::spawn(async move {
        let mut events = std::pin::pin!(
            watcher(runs, watcher::Config::default())
                .default_backoff()
                .applied_objects()
        );
        loop {
            let run = tokio::select! {
                _ = stop.cancelled() => return,
                next = events.next() => match next {
                    Some(Ok(run)) => run,
                    Some(Err(_)) => continue,
                    None => return,
                },
            };
            let at = Instant::now();
            let name = kube::ResourceExt::name_any(&run);
            let mut seen = into.lock().unwrap();
            seen.added.entry(name.clone()).or_insert(at);
            if let Some(status) = run.status.as_ref().filter(|s| s.phase.is_finished()) {
                let step_start = status.steps.first().and_then(|s| s.started_at);
                seen.finished.entry(name).or_insert((at, step_start));
            }
            drop(seen);
            wake.notify_waiters();
        }
    });
    (seen, notify)
}

/// Waits until `found` finds something in `seen`.
async fn until_seen<T>(
    seen: &Mutex<Seen>,
    notify: &Notify,
    found: impl Fn(&Seen) -> Option<T>,
) -> T {
    loop {
        let notified = notify.notified();
        if let Some(value) = found(&seen.lock().unwrap()) {
            return value;
        }
        if tokio::time::timeout(Duration::from_secs(60), notified)
            .await
            .is_err()
        {
            panic!("nothing seen for 60 s");
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// p50 and p99 of `samples` (milliseconds).
fn p50_p99(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    (percentile(&samples, 0.50), percentile(&samples, 0.99))
}

/// The API in this process over namespace `ns`, with an admin key: its base URL and
/// the key.
async fn api(client: &Client, ns: &str, stop: &CancellationToken) -> (String, String) {
    use flowline_api::plumbing::ratelimit::{Plan, PlanDefaults};
    use flowline_api::state::{ApiConfig, ApiState};
    let scope = flowline_kube::WatchScope::from_list(&[ns.to_string()]);
    let caches = flowline_api::cache::Caches::start(client.clone(), &scope, stop.clone());
    let seal = flowline_kube::seal_key::load(client, "default", "flowline-seal-key")
        .await
        .expect("the seal key");
    // A budget no bench reaches: 1,000 runs started in a few seconds would pass the
    // default plan's, and the bench measures latency, not refusals.
    let config = ApiConfig {
        plans: PlanDefaults {
            plan: Plan::Enterprise,
            enterprise_requests: 1_000_000,
        },
        ..ApiConfig::default()
    };
    let app = flowline_api::router(ApiState::new(
        client.clone(),
        caches.clone(),
        config,
        Arc::new(seal),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = stop.clone();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .unwrap();
    });
    let key = flowline_api::keys::create_key(
        client.clone(),
        ns,
        "bench",
        &[flowline_api::plumbing::auth::Scope::Admin],
    )
    .await
    .unwrap();
    let key_id = kube::ResourceExt::name_any(&key.key);
    while !caches.is_synced() || flowline_api::cache::get(&caches.api_keys, ns, &key_id).is_none() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (base, key.value)
}

pub async fn part_l(client: &Client, ns: &str) {
    let stop = CancellationToken::new();
    let latency_ns = format!("{ns}-latency");
    super::namespace(client, &latency_ns).await;
    let runs: Api<Run> = Api::namespaced(client.clone(), &latency_ns);
    let (base, key) = api(client, &latency_ns, &stop).await;
    let controller = super::controller(client, &latency_ns, Default::default());
    let wf = super::workflow(
        client,
        &latency_ns,
        "one-step",
        json!({"name": "One step", "steps": [
            {"id": "a", "action": "transform", "with": {"value": 1}}]}),
    )
    .await;
    let wf_id = kube::ResourceExt::name_any(&wf);
    let (seen, notify) = watch_runs(runs.clone(), stop.clone());
    let http = reqwest::Client::new();
    let url = format!("{base}/v1/workflows/{wf_id}/runs");
    // Until the API's cache holds the workflow.
    let wf_url = format!("{base}/v1/workflows/{wf_id}");
    let wf_known = || async {
        let res = http.get(&wf_url).bearer_auth(&key).send().await;
        res.is_ok_and(|r| r.status() == 200)
    };
    while !wf_known().await {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (mut to_start, mut to_finish) = (Vec::new(), Vec::new());
    for i in 0..WARM_UP + RUNS {
        let (sent, sent_at) = (Instant::now(), jiff::Timestamp::now());
        let res = http
            .post(&url)
            .bearer_auth(&key)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201, "{:?}", res.text().await);
        let body: Value = res.json().await.unwrap();
        let id = body["id"].as_str().unwrap().to_string();
        let (finished, step_start) =
            until_seen(&seen, &notify, |s| s.finished.get(&id).copied()).await;
        if i < WARM_UP {
            continue;
        }
        let step_start = step_start.expect("the step's recorded start");
        to_start.push(step_start.duration_since(sent_at).as_secs_f64() * 1000.0);
        to_finish.push(finished.duration_since(sent).as_secs_f64() * 1000.0);
    }
    controller.cancel();
    stop.cancel();
    super::delete_namespace(client, &latency_ns).await;

    // The reference: a Run object created and seen through a watch, nothing reacting.
    let stop = CancellationToken::new();
    let floor_ns = format!("{ns}-latency-floor");
    super::namespace(client, &floor_ns).await;
    let floor_runs: Api<Run> = Api::namespaced(client.clone(), &floor_ns);
    let floor_wf = super::workflow(
        client,
        &floor_ns,
        "one-step",
        json!({"name": "One step", "steps": [
            {"id": "a", "action": "transform", "with": {"value": 1}}]}),
    )
    .await;
    let (seen, notify) = watch_runs(floor_runs.clone(), stop.clone());
    let mut round_trip = Vec::new();
    for i in 0..WARM_UP + RUNS {
        let name = format!("floor-{i}");
        let sent = Instant::now();
        floor_runs
            .create(&PostParams::default(), &super::run_object(&name, &floor_wf))
            .await
            .unwrap();
        let arrived = until_seen(&seen, &notify, |s| s.added.get(&name).copied()).await;
        if i >= WARM_UP {
            round_trip.push(arrived.duration_since(sent).as_secs_f64() * 1000.0);
        }
    }
    stop.cancel();
    super::delete_namespace(client, &floor_ns).await;

    let (start50, start99) = p50_p99(to_start);
    let (finish50, finish99) = p50_p99(to_finish);
    let (floor50, floor99) = p50_p99(round_trip);
    println!("(l) start latency, {RUNS} one-step runs one after another");
    println!(
        "    POST /v1/workflows/{{id}}/runs -> its step started: p50 {start50:.1} ms, p99 \
         {start99:.1} ms; -> the run seen finished: p50 {finish50:.1} ms, p99 {finish99:.1} ms"
    );
    println!(
        "    a Run created and seen through a watch: p50 {floor50:.1} ms, p99 {floor99:.1} ms"
    );
    println!(
        "    step started {:.2}x p50, {:.2}x p99; finished {:.2}x p50, {:.2}x p99 (goal: p50 \
         at most 1.5x, p99 at most 3x)",
        start50 / floor50,
        start99 / floor99,
        finish50 / floor50,
        finish99 / floor99
    );
}
