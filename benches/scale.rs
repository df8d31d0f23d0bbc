//! `make bench-scale`: Flowline with many workflows and finished runs of realistic size,
//! loaded straight through the API server, each figure a ratio against a reference
//! measured in the same run:
//!
//! - API memory: RSS of a release `flowline api` serving the loaded namespace, less
//!   its RSS serving an empty one, against the JSON bytes of the objects (goal ≤ 1.5×);
//! - API cold start (until `/readyz`) against a raw paginated LIST of the same objects
//!   (goal ≤ 1.5×);
//! - `/v1` list and get latency (p50, p99) against the API server's for the same reads;
//! - controller start-up (until `/readyz` and until its writes settle) and memory;
//! - etcd bytes per run (database growth / runs), for sizing.
//!
//! Sizes: FLOWLINE_SCALE_WORKFLOWS (default 10,000) and FLOWLINE_SCALE_RUNS (default
//! 100,000); one run in FLOWLINE_SCALE_BIG_EVERY (default 100) has a step output near
//! the 64 KiB cap. Needs a release build of the binary (`make bench-scale` builds it).

use std::time::{Duration, Instant};

use flowline_core::crd::{Run, Workflow};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

#[path = "support/apiserver.rs"]
mod apiserver;
#[path = "support/process.rs"]
mod process;

use process::Server;

const CONCURRENCY: usize = 48;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn workflow_spec(i: usize) -> Value {
    json!({
        "name": format!("Order sync {i}"),
        "state": "active",
        "steps": [
            {"id": "fetch", "action": "http.request", "with": {
                "method": "GET", "url": format!("https://shop.example.com/orders/{{{{ trigger.payload.order }}}}?w={i}"),
                "headers": {"Accept": "application/json"}}, "retry": {"maxAttempts": 3, "backoffMs": 500}},
            {"id": "shape", "action": "transform", "with": {"value": {
                "order": "{{ steps.fetch.output.body.id }}", "total": "{{ steps.fetch.output.body.total }}"}}},
            {"id": "pause", "action": "delay", "with": {"ms": 100}}
        ]
    })
}

/// A finished run's status: three steps with small outputs (one near the cap when
/// `big`), and its two events.
fn finished_status(run: &str, i: usize, big: bool) -> Value {
    let at = |s: u32| {
        format!(
            "2026-11-23T08:{:02}:{:02}.{:03}Z",
            (i / 60) % 60,
            s,
            i % 1000
        )
    };
    let body = if big {
        json!({"id": i, "total": 42.5, "notes": "x".repeat(60 * 1024)})
    } else {
        json!({"id": i, "total": 42.5, "currency": "EUR", "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}]})
    };
    let step = |id: &str, name: &str, action: &str, output: Value, s: u32| {
        json!({"stepId": id, "name": name, "action": action, "status": "succeeded", "attempts": 1,
               "startedAt": at(s), "finishedAt": at(s + 1), "durationMs": 180, "output": output})
    };
    let event = |kind: &str, n: u32| {
        json!({"id": format!("evt_{run}_{n}"), "kind": kind, "timestamp": at(n),
               "data": {"run_id": run, "workflow_id": "wf", "workflow_name": "Order sync", "status": kind.trim_start_matches("run.")}})
    };
    json!({
        "phase": "succeeded", "startedAt": at(1), "finishedAt": at(9), "durationMs": 8000,
        "workflowGeneration": 1, "executionId": format!("exec_{i:024}"),
        "steps": [
            step("fetch", "fetch", "http.request", json!({"status": 200, "headers": {"content-type": "application/json"}, "body": body}), 1),
            step("shape", "shape", "transform", json!({"order": i, "total": 42.5}), 3),
            step("pause", "pause", "delay", json!({"waited_ms": 100}), 5),
        ],
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": at(9)}],
        "pendingEvents": [event("run.started", 1), event("run.succeeded", 9)],
    })
}

/// Resident memory of a process, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// etcd's database size, from its metrics (the local control plane's etcd).
async fn etcd_db_bytes() -> Option<f64> {
    let port = std::env::var("FLOWLINE_ETCD_PORT").unwrap_or_else(|_| "12379".into());
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with("etcd_mvcc_db_total_size_in_bytes "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The longest bench-scale waits for the operator's start-up.
const OPERATOR_START_BOUND: Duration = Duration::from_secs(600);

fn spawn(role: &[&str], ns: &str) -> Server {
    let mut args = role.to_vec();
    args.extend(["--watch-namespace", ns]);
    // Only the operator elects a leader: `flowline api` refuses controller flags.
    if role.first() == Some(&"operator") {
        args.extend(["--leader-election-namespace", ns]);
    }
    process::spawn(&args)
}

/// Reconciles `controller` has finished in `server`.
async fn reconciles(server: &Server, controller: &str) -> u64 {
    let series =
        format!("flowline_reconcile_duration_seconds_count{{controller=\"{controller}\"}}");
    process::metric(server, &series).await.unwrap_or(0.0) as u64
}

async fn until_ready(server: &Server) -> Duration {
    let started = Instant::now();
    let url = format!("http://127.0.0.1:{}/readyz", server.port);
    loop {
        if reqwest::get(&url).await.is_ok_and(|r| r.status() == 200) {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// RSS once it stops growing (two readings 2 s apart within 1 %).
async fn settled_rss(pid: u32) -> u64 {
    let mut last = rss(pid);
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = rss(pid);
        if now.abs_diff(last) * 100 <= last {
            return now;
        }
        last = now;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// p50 and p99 in ms of `n` sequential calls of `call`.
async fn latencies<F, Fut>(n: usize, mut call: F) -> (f64, f64)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        call(i).await;
        times.push(t.elapsed());
    }
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = Client::try_default().await.expect("KUBECONFIG");
    let workflows_n = setting("FLOWLINE_SCALE_WORKFLOWS", 10_000);
    let runs_n = setting("FLOWLINE_SCALE_RUNS", 100_000);
    let big_every = setting("FLOWLINE_SCALE_BIG_EVERY", 100).max(1);
    let ns = format!("bench-scale-{}", std::process::id());
    let empty_ns = format!("{ns}-empty");
    for name in [&ns, &empty_ns] {
        let object: Namespace = serde_json::from_value(json!({"metadata": {"name": name,
            "annotations": {"flowline.io/plan": "enterprise", "flowline.io/requests-per-minute": "1000000000"}}}))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }
    let etcd_before = etcd_db_bytes().await;

    // Load.
    let load = Instant::now();
    let wf_api: Api<Workflow> = Api::namespaced(client.clone(), &ns);
    let run_api: Api<Run> = Api::namespaced(client.clone(), &ns);
    let workflows: Vec<Workflow> = futures::stream::iter(0..workflows_n)
        .map(|i| {
            let wf_api = wf_api.clone();
            async move {
                let wf: Workflow = serde_json::from_value(json!({
                    "metadata": {"name": format!("wf-{i:05}")}, "spec": workflow_spec(i)}))
                .unwrap();
                wf_api.create(&PostParams::default(), &wf).await.unwrap()
            }
        })
        .buffered(CONCURRENCY)
        .collect()
        .await;
    let params = PatchParams {
        field_manager: Some("flowline-controller".into()),
        ..Default::default()
    };
    futures::stream::iter(0..runs_n)
        .for_each_concurrent(CONCURRENCY, |i| {
            let (run_api, params) = (run_api.clone(), params.clone());
            let wf = &workflows[i % workflows.len()];
            async move {
                let name = format!("run-{i:06}");
                let run = Run::of_workflow(
                    wf,
                    &name,
                    Default::default(),
                    Some(json!({"order": i, "customer": format!("c-{}", i % 977), "items": [1, 2, 3]})),
                    jiff::Timestamp::now(),
                );
                run_api.create(&PostParams::default(), &run).await.unwrap();
                let status = finished_status(&name, i, i % big_every == 0);
                run_api
                    .patch_status(&name, &params, &Patch::Merge(json!({"status": status})))
                    .await
                    .unwrap();
            }
        })
        .await;
    let load_time = load.elapsed();
    let etcd_after = etcd_db_bytes().await;

    // Reference: a raw paginated LIST of everything the API caches here.
    let list_started = Instant::now();
    let mut json_bytes = 0usize;
    let mut listed = 0usize;
    for plural in ["workflows", "runs"] {
        let mut next: Option<String> = None;
        loop {
            let mut url = format!("/apis/flowline.io/v1/namespaces/{ns}/{plural}?limit=500");
            if let Some(token) = &next {
                url.push_str(&format!("&continue={token}"));
            }
            let text = client
                .request_text(http::Request::get(url).body(vec![]).unwrap())
                .await
                .unwrap();
            let page: Value = serde_json::from_str(&text).unwrap();
            for item in page["items"].as_array().unwrap() {
                json_bytes += serde_json::to_vec(item).unwrap().len();
                listed += 1;
            }
            next = page["metadata"]["continue"]
                .as_str()
                .filter(|t| !t.is_empty())
                .map(String::from);
            if next.is_none() {
                break;
            }
        }
    }
    let list_time = list_started.elapsed();

    // The API: empty namespace, then the loaded one.
    let empty = spawn(&["api"], &empty_ns);
    until_ready(&empty).await;
    let empty_rss = settled_rss(empty.child.id()).await;
    drop(empty);
    let api = spawn(&["api"], &ns);
    let api_ready = until_ready(&api).await;
    let api_rss = settled_rss(api.child.id()).await;
    let cached = api_rss.saturating_sub(empty_rss);

    // Reads: /v1 against the API server.
    let key = flowline_api::keys::create_key(
        client.clone(),
        &ns,
        "bench",
        &[flowline_api::plumbing::auth::Scope::Read],
    )
    .await
    .unwrap()
    .value;
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{}", api.port);
    // The key is read from the cache: wait until it is there.
    while http
        .get(format!("{base}/v1/workflows?limit=1"))
        .bearer_auth(&key)
        .send()
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let samples = 300;
    let wf_name = |i: usize| workflows[(i * 7919) % workflows.len()].name_any();
    let run_name = |i: usize| format!("run-{:06}", (i * 104_729) % runs_n);
    // One /v1 read of `path`, answered 200 and read to the end.
    let v1_read = |path: String| {
        let req = http.get(format!("{base}{path}")).bearer_auth(&key);
        async move {
            let res = req.send().await.unwrap();
            assert_eq!(res.status(), 200);
            res.bytes().await.unwrap();
        }
    };
    let v1_list = latencies(samples, |i| {
        v1_read(format!("/v1/workflows/{}/runs?limit=20", wf_name(i)))
    })
    .await;
    let v1_get = latencies(samples, |i| v1_read(format!("/v1/runs/{}", run_name(i)))).await;
    let k8s_list = latencies(samples, |i| {
        let (run_api, wf) = (run_api.clone(), wf_name(i));
        async move {
            let lp = ListParams::default()
                .labels(&format!("{}={wf}", flowline_core::crd::labels::WORKFLOW))
                .limit(20);
            run_api.list(&lp).await.unwrap();
        }
    })
    .await;
    let k8s_get = latencies(samples, |i| {
        let (run_api, name) = (run_api.clone(), run_name(i));
        async move {
            run_api.get(&name).await.unwrap();
        }
    })
    .await;
    drop(api);

    // The controllers.
    let writes_before = apiserver::writes(&client, &["runs", "workflows", "webhooks"]).await;
    let mut operator = spawn(&["operator", "--no-api"], &ns);
    let operator_ready = until_ready(&operator).await;
    let operator_started = Instant::now();
    // Start-up is over once each controller has reconciled every object of its kind
    // (its caches are full: a positive signal, where a pause in the writes can be the
    // caches still filling), and then the writes (workflow statuses, labels) stop. An
    // operator that exits, or takes more than the bound, ends the wait: the table
    // then says so instead of the bench waiting forever.
    let mut last = writes_before;
    let mut operator_failure = None;
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        if let Some(status) = operator.exited() {
            operator_failure = Some(format!(
                "exited ({status}); log: {}",
                operator.log.display()
            ));
            break;
        }
        if operator_started.elapsed() > OPERATOR_START_BOUND {
            operator_failure = Some(format!(
                "not settled within {OPERATOR_START_BOUND:?}; log: {}",
                operator.log.display()
            ));
            break;
        }
        let now = apiserver::writes(&client, &["runs", "workflows", "webhooks"]).await;
        let reconciled = reconciles(&operator, "workflow").await >= workflows_n as u64
            && reconciles(&operator, "run").await >= runs_n as u64;
        if now == last && reconciled {
            break;
        }
        last = now;
    }
    let settle = operator_ready + operator_started.elapsed();
    let operator_rss = if operator_failure.is_none() {
        settled_rss(operator.child.id()).await
    } else {
        0
    };
    let startup_writes = last - writes_before;
    drop(operator);

    let mb = |b: f64| b / 1_048_576.0;
    println!(
        "bench-scale: {workflows_n} workflows, {runs_n} finished runs (1 in {big_every} with a ~60 KiB output)"
    );
    println!(
        "loaded in {:.1} s; {listed} objects, {:.1} MB of JSON ({:.2} KB per object)",
        load_time.as_secs_f64(),
        mb(json_bytes as f64),
        json_bytes as f64 / listed as f64 / 1024.0
    );
    println!();
    println!("| measure | Flowline | reference | ratio | goal |");
    println!("|---|---|---|---|---|");
    println!(
        "| API memory for the cache (RSS less an empty API's {:.0} MB) vs JSON bytes | {:.1} MB | {:.1} MB | {:.2}x | ≤ 1.5x |",
        mb(empty_rss as f64),
        mb(cached as f64),
        mb(json_bytes as f64),
        cached as f64 / json_bytes as f64
    );
    println!(
        "| API cold start to /readyz vs raw paginated LIST | {:.2} s | {:.2} s | {:.2}x | ≤ 1.5x |",
        api_ready.as_secs_f64(),
        list_time.as_secs_f64(),
        api_ready.as_secs_f64() / list_time.as_secs_f64()
    );
    println!(
        "| list 20 runs of a workflow, p50 / p99 ms | {:.2} / {:.2} | {:.2} / {:.2} | {:.2}x / {:.2}x | |",
        v1_list.0,
        v1_list.1,
        k8s_list.0,
        k8s_list.1,
        v1_list.0 / k8s_list.0,
        v1_list.1 / k8s_list.1
    );
    println!(
        "| get one run, p50 / p99 ms | {:.2} / {:.2} | {:.2} / {:.2} | {:.2}x / {:.2}x | |",
        v1_get.0,
        v1_get.1,
        k8s_get.0,
        k8s_get.1,
        v1_get.0 / k8s_get.0,
        v1_get.1 / k8s_get.1
    );
    println!(
        "| operator ready / writes settled | {:.2} s / {:.1} s ({startup_writes} writes) | | | |",
        operator_ready.as_secs_f64(),
        settle.as_secs_f64()
    );
    match &operator_failure {
        None => println!(
            "| operator RSS vs JSON bytes | {:.1} MB | {:.1} MB | {:.2}x | |",
            mb(operator_rss as f64),
            mb(json_bytes as f64),
            operator_rss as f64 / json_bytes as f64
        ),
        Some(failure) => {
            println!("| operator RSS vs JSON bytes | not measured: the operator {failure} | | | |")
        }
    }
    match (etcd_before, etcd_after) {
        (Some(before), Some(after)) => println!(
            "| etcd growth per run (incl. its workflow's share) | {:.1} KB | | | |",
            (after - before) / runs_n as f64 / 1024.0
        ),
        _ => println!(
            "| etcd growth per run | not measured (no etcd metrics at 127.0.0.1:$FLOWLINE_ETCD_PORT) | | | |"
        ),
    }

    // FLOWLINE_SCALE_KEEP=1 leaves the objects in place, to profile a process against
    // them afterwards (docs/benchmarks.md, "Profiling the operator's memory").
    if std::env::var_os("FLOWLINE_SCALE_KEEP").is_some() {
        println!("kept namespace {ns} (FLOWLINE_SCALE_KEEP)");
        return;
    }
    for name in [&ns, &empty_ns] {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(name, &Default::default())
            .await;
    }
}
