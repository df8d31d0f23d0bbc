//! `make bench-engine`: the run engine against references measured in the same run.
//! (a) 40 sequential inline steps of 10 ms vs the same sleeps in a bare loop;
//! (b) 1,000 runs of 3 no-op inline steps: runs/s and API-server writes per run, vs
//!     creating the same Run objects and patching a small status directly, and vs
//!     creating them and patching the engine's own final status (the contract's floor);
//! (c) the job executor's per-step overhead vs a bare Job going create → Complete;
//! (d) 1,000 runs of a workflow with `concurrency: {limit: 4}`, all created at once and
//!     drained by the queue, vs the same 1,000 runs created at once without a limit
//!     (goal: at least 0.9x), and vs 4 clients that each wait for their run to finish
//!     before starting the next;
//! (e) a graph of 100 parallel 10 ms delay steps (`parallelism: 100`) vs a workflow of
//!     one such step: the ratio of their create → finished times (goal: within 3x);
//! (f) 50 runs parked on an `approval` step: API-server writes to Runs over 10 s while
//!     they wait (goal: 0), then the time from approving all 50 to all finished;
//! (g) 3,000 runs queued behind one parked run of a `limit: 1` workflow: the
//!     controller's CPU over 20 s while nothing moves, vs the same with 1,000 queued
//!     (goal: at most 5x, nearer a cost that grows with the queue, 3x, than one that
//!     grows with its square, 9x).
//! (h) a parent run calling 10 child runs in sequence (`workflow` steps, each child one
//!     10 ms delay step) vs one run of the same 10 steps: the ratio of their create →
//!     finished times (goal: at most 1.5x), and the API-server writes each child adds.
//! (i) event fan-out: one event to 100 subscribed workflows (the median of 5 rounds),
//!     and 1,000 events to 10 workflows, from the event's create to every run finished,
//!     vs creating the same runs directly (goal: at least 0.9x).
//! (l) start latency: `POST /v1/workflows/{id}/runs` to the step started and to the run
//!     seen finished, 1,000 one-step runs in sequence, p50 and p99, vs creating a Run
//!     and seeing it through a watch (goal: p50 at most 1.5x, p99 at most 3x).
//! Not a test: it prints figures; docs/benchmarks.md records them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowline_core::crd::{Run, Workflow};
use flowline_telemetry::engine_metrics::EngineTelemetry;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[path = "support/apiserver.rs"]
mod apiserver;
#[path = "engine_parts/latency.rs"]
mod latency;

const CONCURRENCY: usize = 32;

/// Deletes a namespace and waits until it is gone: the garbage collection of its
/// thousands of Runs would otherwise share the machine with a run started next.
async fn delete_namespace(client: &Client, name: &str) {
    let namespaces = Api::<Namespace>::all(client.clone());
    let deleting = namespaces
        .delete(name, &DeleteParams::background())
        .await
        .unwrap();
    // The namespace as it is now, terminating (absent if it was already gone).
    if let Some(namespace) = deleting.left() {
        let uid = namespace.metadata.uid.unwrap_or_default();
        await_condition(namespaces, name, conditions::is_deleted(&uid))
            .await
            .unwrap();
    }
}

async fn namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

fn controller(
    client: &Client,
    ns: &str,
    jobs: flowline_engine::job::JobSettings,
) -> CancellationToken {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ctx = flowline_controller::run::Context::new(
        client.clone(),
        flowline_egress::GuardedClient::new(Default::default()).unwrap(),
        flowline_core::crd::Executor::Inline,
        Some(ns.to_string()),
        EngineTelemetry::new(
            &flowline_telemetry::metrics::Metrics::default(),
            Some(client.clone()),
        ),
        "http://127.0.0.1:8080".into(),
        jobs,
    );
    let stop = CancellationToken::new();
    let runs = flowline_controller::run_cache::RunCache::start(client, Some(ns), stop.clone());
    tokio::spawn(flowline_controller::run::run(
        ctx,
        runs.clone(),
        stop.clone(),
    ));
    runs.watch.begin();
    stop
}

async fn workflow(client: &Client, ns: &str, name: &str, spec: Value) -> Workflow {
    let wf: Workflow =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    Api::<Workflow>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &wf)
        .await
        .unwrap()
}

/// A run as the API creates it: pinned to the workflow's version.
fn run_object(name: &str, workflow: &Workflow) -> Run {
    Run::of_workflow(
        workflow,
        name,
        Default::default(),
        None,
        jiff::Timestamp::now(),
    )
}

async fn until_finished(runs: &Api<Run>, name: &str) {
    await_condition(runs.clone(), name, |r: Option<&Run>| {
        r.and_then(|r| r.status.as_ref())
            .is_some_and(|s| s.phase.is_finished())
    })
    .await
    .unwrap();
}

/// Until `n` runs of workflow `workflow` have finished, seen through one watch of their
/// label (its first list shows those already finished): the wait costs the API server
/// one watch, not one per run, which would be charged to the engine's side alone.
async fn until_all_finished(runs: &Api<Run>, workflow: &str, n: usize) {
    until_all(runs, workflow, n, |phase| phase.is_finished()).await;
}

/// Until `n` runs of workflow `workflow` are in a phase `reached` accepts, through one
/// watch (see [`until_all_finished`]).
async fn until_all(
    runs: &Api<Run>,
    workflow: &str,
    n: usize,
    reached: impl Fn(flowline_core::crd::RunPhase) -> bool,
) {
    let config = kube::runtime::watcher::Config::default().labels(&format!(
        "{}={workflow}",
        flowline_core::crd::labels::WORKFLOW
    ));
    let mut there = std::collections::HashSet::new();
    let mut objects = std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(
        kube::runtime::watcher(runs.clone(), config)
    ));
    while there.len() < n {
        let run = objects
            .next()
            .await
            .expect("the watch ended")
            .expect("watch");
        let name = kube::ResourceExt::name_any(&run);
        if run.status.as_ref().is_some_and(|s| reached(s.phase)) {
            there.insert(name);
        } else {
            there.remove(&name);
        }
    }
}

/// Writes the API server has served so far to Runs and Events.
async fn writes(client: &Client) -> f64 {
    apiserver::writes(client, &["runs", "events"]).await
}

async fn in_parallel<F, Fut>(count: usize, f: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    futures::stream::iter(0..count)
        .for_each_concurrent(CONCURRENCY, f)
        .await;
}

#[tokio::main]
async fn main() {
    let client = Client::try_default().await.expect("KUBECONFIG");
    let ns = format!("bench-engine-{}", std::process::id());
    namespace(&client, &ns).await;
    let runs: Api<Run> = Api::namespaced(client.clone(), &ns);
    let kwok = flowline_engine::job::JobSettings {
        step_image: "flowline:bench".into(),
        pod_annotations: [(
            "flowline.io/fake-termination-message".to_string(),
            "{}".to_string(),
        )]
        .into(),
        ..Default::default()
    };
    // FLOWLINE_BENCH_PARTS picks parts, e.g. "d" (default: all of abcdefghijkl).
    let parts = std::env::var("FLOWLINE_BENCH_PARTS").unwrap_or_else(|_| "abcdefghijkl".into());
    if parts.contains(['a', 'b', 'c']) {
        abc(&client, &ns, &runs, kwok, &parts).await;
    }
    if parts.contains('d') {
        // A namespace of its own: (b)'s reference runs carry their creator's label, and a
        // controller started in their namespace would relabel them during (d)'s first
        // phase, charging its reference 1,000 writes that are not its own.
        let queue_ns = format!("{ns}-queue");
        namespace(&client, &queue_ns).await;
        let queue_runs: Api<Run> = Api::namespaced(client.clone(), &queue_ns);
        concurrency_drain(&client, &queue_ns, &queue_runs).await;
        delete_namespace(&client, &queue_ns).await;
    }
    if parts.contains('e') {
        let stop = controller(&client, &ns, Default::default());
        part_e(&client, &ns, &runs).await;
        stop.cancel();
    }
    if parts.contains('f') {
        let stop = controller(&client, &ns, Default::default());
        part_f(&client, &ns, &runs).await;
        stop.cancel();
    }
    if parts.contains('g') {
        part_g(&client, &ns).await;
    }
    if parts.contains('h') {
        let stop = controller(&client, &ns, Default::default());
        part_h(&client, &ns, &runs).await;
        stop.cancel();
    }
    if parts.contains('i') {
        // A namespace of its own: its runs are counted by one watch of the namespace.
        let events_ns = format!("{ns}-events");
        namespace(&client, &events_ns).await;
        part_i(&client, &events_ns).await;
        delete_namespace(&client, &events_ns).await;
    }
    if parts.contains('j') {
        part_j(&client, &ns).await;
    }
    if parts.contains('k') {
        part_k(&client, &ns).await;
    }
    if parts.contains('l') {
        latency::part_l(&client, &ns).await;
    }

    delete_namespace(&client, &ns).await;
}

/// (j) a rate-limited drain: 1,000 runs of 3 no-op steps created at once into a
/// workflow with `rate_limit: 100 per second`, against the limit itself (the start
/// rate from the first window's starts to the last start). The same 1,000 runs without
/// a limit show what the engine sustains here, and the writes per run what each costs.
async fn part_j(client: &Client, ns: &str) {
    // FLOWLINE_BENCH_RATE_LIMIT tries another limit (per second; default 100).
    let limit: usize = std::env::var("FLOWLINE_BENCH_RATE_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let limited = drain(client, ns, "limited", Some(limit as u32)).await;
    let free = drain(client, ns, "free", None).await;
    let n = limited.starts.len();
    let starts = &limited.starts;
    let most = (0..n)
        .map(|i| {
            starts[i..]
                .iter()
                .take_while(|t| **t - starts[i] < 1000)
                .count()
        })
        .max()
        .unwrap_or(0);
    // The first window's runs start as fast as they arrive (the creates take seconds,
    // so they spread over part of a second), and a sliding window repeats that spread
    // every period: the limiter's rate is counted from the first window's last start,
    // over the runs after it. From the very first start it is shown too.
    let rate = (n - limit) as f64 * 1000.0 / (starts[n - 1] - starts[limit - 1]).max(1) as f64;
    let from_first = (n - limit) as f64 * 1000.0 / (starts[n - 1] - starts[0]).max(1) as f64;
    let per_second: Vec<usize> = (0..=((starts[n - 1] - starts[0]) / 1000))
        .map(|s| {
            let from = starts[0] + s * 1000;
            starts
                .iter()
                .filter(|t| (from..from + 1000).contains(*t))
                .count()
        })
        .collect();
    // How long after its place opened each run started: the start `limit` places
    // before it left the window one period after it began.
    let mut late: Vec<i64> = (limit..n)
        .map(|i| starts[i] - (starts[i - limit] + 1000))
        .collect();
    late.sort();
    let late_at =
        |q: f64| late.get(((late.len() as f64 * q) as usize).min(late.len().saturating_sub(1)));
    let free_rate = n as f64 * 1000.0 / (free.starts[n - 1] - free.starts[0]).max(1) as f64;
    println!("(j) a rate-limited drain");
    println!(
        "    {n} runs at limit {limit} per second: {rate:.1} starts/s after the first window, \
         {:.2}x of the limit (goal: at least 0.95x); most starts in one second: {most} \
         (must be at most {limit}); starts in each second from the first: {per_second:?}",
        rate / limit as f64
    );
    println!(
        "    a run's start after its place opened, ms: p10 {:?}, p50 {:?}, p90 {:?}; the \
         1,000 creates took {:.1} s, the first window's starts {} ms; from the very first \
         start: {from_first:.1} starts/s",
        late_at(0.1),
        late_at(0.5),
        late_at(0.9),
        limited.created_in.as_secs_f64(),
        starts[limit - 1] - starts[0]
    );
    println!(
        "    API-server writes per run: {:.2} limited, {:.2} without a limit; the same runs \
         without a limit start at {free_rate:.1}/s",
        limited.writes_per_run, free.writes_per_run
    );
}

/// What [`drain`] measured.
struct Drain {
    /// The runs' recorded starts, in milliseconds, in order.
    starts: Vec<i64>,
    writes_per_run: f64,
    /// How long the 1,000 creates took: no run starts before it exists.
    created_in: Duration,
}

/// 1,000 runs of 3 no-op steps created at once into a workflow `name` (with
/// `rate_limit: {limit, period_ms: 1000}` when `limit`), under a controller of a
/// namespace of their own, until all finished.
async fn drain(client: &Client, ns: &str, name: &str, limit: Option<u32>) -> Drain {
    let steps = json!([
        {"id": "a", "action": "transform", "with": {"value": 1}},
        {"id": "b", "action": "transform", "with": {"value": 2}},
        {"id": "c", "action": "transform", "with": {"value": 3}}]);
    let drain_ns = format!("{ns}-j-{name}");
    namespace(client, &drain_ns).await;
    let runs: Api<Run> = Api::namespaced(client.clone(), &drain_ns);
    let stop = controller(client, &drain_ns, Default::default());
    let mut spec = json!({"name": name, "steps": steps});
    if let Some(limit) = limit {
        spec["rateLimit"] = json!({"limit": limit, "periodMs": 1000});
    }
    let wf = workflow(client, &drain_ns, name, spec).await;
    let n = 1000;
    let before = writes(client).await;
    let creating = Instant::now();
    in_parallel(n, |i| {
        let (runs, run) = (runs.clone(), run_object(&format!("{name}-{i}"), &wf));
        async move {
            runs.create(&PostParams::default(), &run).await.unwrap();
        }
    })
    .await;
    let created_in = creating.elapsed();
    until_all_finished(&runs, name, n).await;
    let writes_per_run = (writes(client).await - before) / n as f64;
    let mut starts: Vec<i64> = runs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|r| r.status.as_ref()?.started_at)
        .map(|t| t.as_millisecond())
        .collect();
    starts.sort();
    stop.cancel();
    delete_namespace(client, &drain_ns).await;
    Drain {
        starts,
        writes_per_run,
        created_in,
    }
}

/// (k) the controller's CPU while 10,000 runs wait for a rate limit's window (one start
/// a day) and nothing moves, against the same controller holding the same 10,000 runs
/// finished (cancelled before they started). Each has a namespace and a controller of
/// its own.
async fn part_k(client: &Client, ns: &str) {
    let mut cpu = Vec::new();
    for waiting in [false, true] {
        let ns = format!("{ns}-k-{}", if waiting { "waiting" } else { "idle" });
        namespace(client, &ns).await;
        let runs: Api<Run> = Api::namespaced(client.clone(), &ns);
        let stop = controller(client, &ns, Default::default());
        let wf = workflow(
            client,
            &ns,
            "daily",
            json!({"name": "Daily", "rateLimit": {"limit": 1, "periodMs": 86_400_000},
                   "steps": [{"id": "a", "action": "transform", "with": {"value": 1}}]}),
        )
        .await;
        // The day's one start goes first; the 10,000 then wait (or are cancelled).
        runs.create(&PostParams::default(), &run_object("daily-first", &wf))
            .await
            .unwrap();
        until_finished(&runs, "daily-first").await;
        in_parallel(10_000, |i| {
            let mut run = run_object(&format!("daily-{i}"), &wf);
            run.spec.cancel = !waiting;
            let runs = runs.clone();
            async move {
                runs.create(&PostParams::default(), &run).await.unwrap();
            }
        })
        .await;
        until_all(&runs, "daily", 10_001, |phase| {
            phase.is_finished() || (waiting && phase == flowline_core::crd::RunPhase::Queued)
        })
        .await;
        cpu.push(cpu_while_idle().await);
        stop.cancel();
        delete_namespace(client, &ns).await;
    }
    println!("(k) runs waiting for a rate limit's window");
    println!(
        "    10,000 runs waiting for a rate limit's window, the controller's CPU while nothing \
         moves: {:.1} % of a core, against {:.1} % holding the same runs finished: {:.2}x \
         (goal: at most 5x)",
        cpu[1] * 100.0,
        cpu[0] * 100.0,
        cpu[1] / cpu[0].max(0.001)
    );
}

/// (a) to (c), those of them `parts` names.
async fn abc(
    client: &Client,
    ns: &str,
    runs: &Api<Run>,
    kwok: flowline_engine::job::JobSettings,
    parts: &str,
) {
    let (client, ns) = (client.clone(), ns.to_string());
    let stop = controller(&client, &ns, kwok);
    if parts.contains('a') {
        part_a(&client, &ns, runs).await;
    }
    if parts.contains('b') {
        part_b(&client, &ns, runs, &stop).await;
    }
    stop.cancel();
    if parts.contains('c') {
        part_c(&client, &ns, runs).await;
    }
}

/// (a) 40 sequential 10 ms steps.
async fn part_a(client: &Client, ns: &str, runs: &Api<Run>) {
    let (client, ns) = (client.clone(), ns.to_string());
    let steps: Vec<Value> = (0..40)
        .map(|i| json!({"id": format!("s{i}"), "action": "delay", "with": {"ms": 10}}))
        .collect();
    let forty = workflow(
        &client,
        &ns,
        "forty",
        json!({"name": "Forty", "steps": steps}),
    )
    .await;
    let t = Instant::now();
    runs.create(&PostParams::default(), &run_object("forty-1", &forty))
        .await
        .unwrap();
    until_finished(runs, "forty-1").await;
    let engine_40 = t.elapsed();
    let t = Instant::now();
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let bare_40 = t.elapsed();
    println!("(a) 40 sequential inline steps of 10 ms");
    println!(
        "    engine, create → finished: {:.3} s; bare loop: {:.3} s; ratio {:.2}x",
        engine_40.as_secs_f64(),
        bare_40.as_secs_f64(),
        engine_40.as_secs_f64() / bare_40.as_secs_f64()
    );
}

/// (h) sub-workflow overhead: 10 sequential `workflow` steps, each waiting for a child
/// of one 10 ms delay step, vs 10 sequential 10 ms delay steps in one run. Rounds
/// alternate the two; the median of each is compared. Writes: to Runs and Events, the
/// parent's run minus the reference's, per child.
async fn part_h(client: &Client, ns: &str, runs: &Api<Run>) {
    const CALLS: usize = 10;
    const ROUNDS: usize = 7;
    let delay = |id: String| json!({"id": id, "action": "delay", "with": {"ms": 10}});
    let child = workflow(
        client,
        ns,
        "leaf",
        json!({"name": "Leaf", "steps": [delay("d".into())]}),
    )
    .await;
    let calls: Vec<Value> = (0..CALLS)
        .map(|i| {
            json!({"id": format!("c{i}"), "action": "workflow",
                        "with": {"workflow": kube::ResourceExt::name_any(&child)}})
        })
        .collect();
    let parent = workflow(
        client,
        ns,
        "caller",
        json!({"name": "Caller", "steps": calls}),
    )
    .await;
    let steps: Vec<Value> = (0..CALLS).map(|i| delay(format!("s{i}"))).collect();
    let flat = workflow(client, ns, "flat", json!({"name": "Flat", "steps": steps})).await;
    let timed = |wf: Workflow, name: String| async move {
        let before = writes(client).await;
        let t = Instant::now();
        runs.create(&PostParams::default(), &run_object(&name, &wf))
            .await
            .unwrap();
        until_finished(runs, &name).await;
        let took = t.elapsed();
        // Children end before their parent: every write of the call is in.
        (took, writes(client).await - before)
    };
    let (mut nested, mut plain) = (Vec::new(), Vec::new());
    let (mut nested_writes, mut plain_writes) = (0.0, 0.0);
    for round in 0..ROUNDS {
        let (took, w) = timed(parent.clone(), format!("caller-{round}")).await;
        nested.push(took);
        nested_writes += w;
        let (took, w) = timed(flat.clone(), format!("flat-{round}")).await;
        plain.push(took);
        plain_writes += w;
    }
    nested.sort();
    plain.sort();
    let (n, p) = (nested[ROUNDS / 2], plain[ROUNDS / 2]);
    let rounds = ROUNDS as f64;
    println!(
        "(h) a parent calling {CALLS} children in sequence vs one run of the same {CALLS} steps"
    );
    println!(
        "    median create → finished: nested {:.3} s, flat {:.3} s; ratio {:.2}x (goal ≤ 1.5x)",
        n.as_secs_f64(),
        p.as_secs_f64(),
        n.as_secs_f64() / p.as_secs_f64()
    );
    println!(
        "    writes per run: nested {:.1}, flat {:.1}; each child adds {:.2} (goal: its own create \
         and final status)",
        nested_writes / rounds,
        plain_writes / rounds,
        (nested_writes - plain_writes) / rounds / CALLS as f64
    );
}

/// (i) event fan-out vs the same runs created directly, in two shapes: one event to 100
/// workflows, and 1,000 events to 10 workflows. Each side is timed from its first
/// create to its last run finished, counted by one watch of the namespace.
async fn part_i(client: &Client, ns: &str) {
    use flowline_core::crd::{FlowlineEvent, FlowlineEventSpec};
    let stop = controller(client, ns, Default::default());
    let telemetry = EngineTelemetry::new(&flowline_telemetry::metrics::Metrics::default(), None);
    tokio::spawn(flowline_controller::event::run(
        client.clone(),
        Some(ns.to_string()),
        jiff::SignedDuration::from_hours(1),
        telemetry,
        stop.clone(),
    ));
    let runs: Api<Run> = Api::namespaced(client.clone(), ns);
    let events: Api<FlowlineEvent> = Api::namespaced(client.clone(), ns);
    println!("(i) event fan-out vs the same runs created directly");
    // The one-event shape takes half a second: its median of 5 rounds, each a fresh
    // event and 100 fresh direct runs, is what one figure of it says.
    for (shape, workflows, posts, rounds) in [
        ("one event, 100 workflows", 100, 1, 5),
        ("1,000 events, 10 workflows", 10, 1000, 1),
    ] {
        let name = format!("bench.{workflows}");
        let mut subscribed = Vec::new();
        for w in 0..workflows {
            let spec = json!({"name": format!("W{w}"), "state": "active",
                "history": {"succeeded": 10000, "failed": 10000},
                "trigger": {"type": "event", "event": name},
                "steps": [{"id": "s", "action": "transform", "with": {"value": 1}}]});
            subscribed.push(workflow(client, ns, &format!("sub-{workflows}-{w}"), spec).await);
        }
        let total = workflows * posts;
        let mut measured = Vec::new();
        for round in 0..rounds {
            let already = runs.list(&Default::default()).await.unwrap().items.len();
            let t = Instant::now();
            let waiting = until_count_finished(&runs, already + total);
            let posting = in_parallel(posts, |i| {
                let events = events.clone();
                let name = name.clone();
                async move {
                    let event = FlowlineEvent::new(
                        &format!("evt-b{workflows}x{round}x{i}"),
                        FlowlineEventSpec {
                            name,
                            payload: Some(json!({"i": i})),
                            client_id: None,
                            received_at: jiff::Timestamp::now(),
                        },
                    );
                    events.create(&PostParams::default(), &event).await.unwrap();
                }
            });
            tokio::join!(waiting, posting);
            let fanned = t.elapsed();
            let t = Instant::now();
            let waiting = until_count_finished(&runs, already + 2 * total);
            let creating = in_parallel(total, |i| {
                let runs = runs.clone();
                let wf = subscribed[i % workflows].clone();
                async move {
                    runs.create(
                        &PostParams::default(),
                        &run_object(&format!("direct-{workflows}-{round}-{i}"), &wf),
                    )
                    .await
                    .unwrap();
                }
            });
            tokio::join!(waiting, creating);
            measured.push((fanned, t.elapsed()));
        }
        // The round with the median ratio.
        measured.sort_by(|a, b| {
            (a.1.as_secs_f64() / a.0.as_secs_f64())
                .total_cmp(&(b.1.as_secs_f64() / b.0.as_secs_f64()))
        });
        let (fanned, direct) = measured[measured.len() / 2];
        println!(
            "    {shape}: {total} runs; fan-out {:.2} s ({:.0} runs/s), direct {:.2} s ({:.0} runs/s); ratio {:.2}x (goal ≥ 0.9x){}",
            fanned.as_secs_f64(),
            total as f64 / fanned.as_secs_f64(),
            direct.as_secs_f64(),
            total as f64 / direct.as_secs_f64(),
            direct.as_secs_f64() / fanned.as_secs_f64(),
            if rounds > 1 {
                format!(", the median of {rounds} rounds")
            } else {
                String::new()
            }
        );
    }
    stop.cancel();
}

/// Until `n` runs of the namespace have finished, through one watch of it.
async fn until_count_finished(runs: &Api<Run>, n: usize) {
    let mut finished = std::collections::HashSet::new();
    let mut objects = std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(
        kube::runtime::watcher(runs.clone(), Default::default())
    ));
    while finished.len() < n {
        let run = objects
            .next()
            .await
            .expect("the watch ended")
            .expect("watch");
        if run.status.as_ref().is_some_and(|s| s.phase.is_finished()) {
            finished.insert(kube::ResourceExt::name_any(&run));
        }
    }
}

/// (e) 99 parallel 10 ms steps after a no-op root (100 steps, the most a workflow
/// holds) vs one such step after the same root: what a wide graph costs over its
/// longest branch.
async fn part_e(client: &Client, ns: &str, runs: &Api<Run>) {
    let root = json!({"id": "go", "action": "transform", "with": {"value": 1}});
    let branches: Vec<Value> = (0..99)
        .map(|i| json!({"id": format!("p{i}"), "action": "delay", "needs": ["go"], "with": {"ms": 10}}))
        .collect();
    let wide = workflow(
        client,
        ns,
        "wide",
        json!({"name": "Wide", "parallelism": 100,
               "steps": std::iter::once(root.clone()).chain(branches).collect::<Vec<_>>()}),
    )
    .await;
    let narrow = workflow(
        client,
        ns,
        "narrow",
        json!({"name": "Narrow", "steps": [root,
            {"id": "p0", "action": "delay", "needs": ["go"], "with": {"ms": 10}}]}),
    )
    .await;
    // Median of 5 runs each, alternating.
    let (mut wide_s, mut narrow_s) = (Vec::new(), Vec::new());
    for i in 0..5 {
        for (wf, times) in [(&wide, &mut wide_s), (&narrow, &mut narrow_s)] {
            let name = format!("{}-{i}", wf.metadata.name.as_deref().unwrap_or("wf"));
            let t = Instant::now();
            runs.create(&PostParams::default(), &run_object(&name, wf))
                .await
                .unwrap();
            until_finished(runs, &name).await;
            times.push(t.elapsed().as_secs_f64());
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (w, n) = (median(&mut wide_s), median(&mut narrow_s));
    println!(
        "(e) 99 parallel 10 ms steps (parallelism 100) vs one, after a no-op root, median of 5"
    );
    println!(
        "    wide: {w:.3} s; one step: {n:.3} s; ratio {:.2}x (goal: within 3x)",
        w / n
    );
}

/// (f) 50 runs waiting on approvals: what parking costs while they wait (writes to Runs
/// over 10 s, goal 0), and how fast a decision resumes them.
async fn part_f(client: &Client, ns: &str, runs: &Api<Run>) {
    const RUNS: usize = 50;
    let wf = workflow(
        client,
        ns,
        "gate",
        json!({"name": "Gate", "steps": [
            {"id": "ok", "action": "approval"},
            {"id": "after", "action": "transform", "with": {"value": 1}}]}),
    )
    .await;
    let names: Vec<String> = (0..RUNS).map(|i| format!("gate-{i}")).collect();
    in_parallel(RUNS, |i| {
        let (runs, run) = (runs.clone(), run_object(&names[i], &wf));
        async move {
            runs.create(&PostParams::default(), &run).await.unwrap();
        }
    })
    .await;
    for name in &names {
        await_condition(runs.clone(), name, |r: Option<&Run>| {
            r.and_then(|r| r.status.as_ref()).is_some_and(|s| s.parked)
        })
        .await
        .unwrap();
    }
    let before = apiserver::writes(client, &["runs"]).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let during = apiserver::writes(client, &["runs"]).await - before;
    let t = Instant::now();
    in_parallel(RUNS, |i| {
        let (runs, name) = (runs.clone(), names[i].clone());
        async move {
            let patch = json!({"spec": {"approvals": [{"stepId": "ok", "decision": "approve", "by": "bench"}]}});
            runs.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap();
        }
    })
    .await;
    for name in &names {
        until_finished(runs, name).await;
    }
    println!("(f) {RUNS} runs parked on an approval for 10 s");
    println!(
        "    writes to Runs while they waited: {during:.0} (goal 0); approve all → all finished: {:.3} s",
        t.elapsed().as_secs_f64()
    );
}

/// (g) the controller's CPU while runs wait behind a parked run and nothing moves: every
/// queued run is looked at again every 10 s, so the cost should grow with the queue,
/// not with its square. 1,000 queued runs are the reference for 3,000, each in a
/// namespace and under a controller of its own.
async fn part_g(client: &Client, ns: &str) {
    let (mut used, mut arriving) = (Vec::new(), Vec::new());
    for queued in [1000, 3000] {
        let ns = format!("{ns}-g{queued}");
        namespace(client, &ns).await;
        let runs: Api<Run> = Api::namespaced(client.clone(), &ns);
        let stop = controller(client, &ns, Default::default());
        let wf = workflow(
            client,
            &ns,
            "gate",
            json!({"name": "Gate", "concurrency": {"limit": 1},
                   "steps": [{"id": "ok", "action": "approval"}]}),
        )
        .await;
        // The first run takes the slot and parks on its approval; the rest queue.
        runs.create(&PostParams::default(), &run_object("gate-first", &wf))
            .await
            .unwrap();
        await_condition(runs.clone(), "gate-first", |r: Option<&Run>| {
            r.and_then(|r| r.status.as_ref()).is_some_and(|s| s.parked)
        })
        .await
        .unwrap();
        let arrival = process_cpu_seconds();
        in_parallel(queued, |i| {
            let (runs, run) = (runs.clone(), run_object(&format!("gate-{i}"), &wf));
            async move {
                runs.create(&PostParams::default(), &run).await.unwrap();
            }
        })
        .await;
        until_all(&runs, "gate", queued, |phase| {
            phase == flowline_core::crd::RunPhase::Queued
        })
        .await;
        arriving.push(process_cpu_seconds() - arrival);
        used.push(cpu_while_idle().await);
        stop.cancel();
        delete_namespace(client, &ns).await;
    }
    println!("(g) runs queued behind a parked run, the controller's CPU while nothing moves");
    println!(
        "    1,000 queued: {:.1} % of a core; 3,000 queued: {:.1} %; ratio {:.2}x (goal: at most 5x; \
         linear growth is 3x, the square 9x)",
        used[0] * 100.0,
        used[1] * 100.0,
        used[1] / used[0]
    );
    println!(
        "    CPU of the bench process while they were created and recorded queued (creates \
         included): {:.2} s for 1,000, {:.2} s for 3,000 ({:.2}x)",
        arriving[0],
        arriving[1],
        arriving[1] / arriving[0]
    );
}

/// The share of a core this process uses over 20 s once 12 s have passed (past the
/// queued label's settle and a whole period of the 10 s looks at queued runs).
async fn cpu_while_idle() -> f64 {
    tokio::time::sleep(Duration::from_secs(12)).await;
    let before = process_cpu_seconds();
    tokio::time::sleep(Duration::from_secs(20)).await;
    (process_cpu_seconds() - before) / 20.0
}

/// CPU time this process has used (user and system, all threads), in seconds.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The fields after the command name, which is in parentheses and may hold spaces:
    // utime and stime are the 14th and 15th fields, in USER_HZ (100 a second on Linux).
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// (b) 1,000 runs of 3 no-op steps against a raw create + status patch; `controller`
/// is stopped before the reference, so that it neither executes nor relabels its runs.
async fn part_b(client: &Client, ns: &str, runs: &Api<Run>, controller: &CancellationToken) {
    let (client, ns) = (client.clone(), ns.to_string());
    let n = 1000;
    let noop = workflow(
        &client,
        &ns,
        "noop",
        json!({"name": "Noop", "steps": [
        {"id": "a", "action": "transform", "with": {"value": 1}},
        {"id": "b", "action": "transform", "with": {"value": 2}},
        {"id": "c", "action": "transform", "with": {"value": 3}}]}),
    )
    .await;
    let before = writes(&client).await;
    let t = Instant::now();
    let runs_ref = Arc::new(runs.clone());
    in_parallel(n, |i| {
        let runs = runs_ref.clone();
        let run = run_object(&format!("noop-{i}"), &noop);
        async move {
            runs.create(&PostParams::default(), &run).await.unwrap();
        }
    })
    .await;
    until_all_finished(runs, "noop", n).await;
    let engine_elapsed = t.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await; // late Event writes land
    let engine_writes = writes(&client).await - before;
    controller.cancel();

    // Reference: the same objects, created and given a final status directly.
    let before = writes(&client).await;
    let t = Instant::now();
    in_parallel(n, |i| {
        let runs = runs_ref.clone();
        let name = format!("raw-{i}");
        let run = run_object(&name, &noop);
        async move {
            runs.create(&PostParams::default(), &run).await.unwrap();
            let status = json!({"status": {"phase": "succeeded", "steps": [
                {"stepId": "a", "name": "a", "status": "succeeded", "attempts": 1, "output": 1},
                {"stepId": "b", "name": "b", "status": "succeeded", "attempts": 1, "output": 2},
                {"stepId": "c", "name": "c", "status": "succeeded", "attempts": 1, "output": 3}]}});
            runs.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                .await
                .unwrap();
        }
    })
    .await;
    let raw_elapsed = t.elapsed();
    let raw_writes = writes(&client).await - before;

    // The contract's floor: the same create, then the very status the engine wrote for
    // one of its runs (steps, conditions, the events it holds for delivery), with no
    // read and no watch.
    let engine_status = runs.get("noop-0").await.unwrap().status;
    let final_status = Arc::new(json!({ "status": engine_status }));
    let before = writes(&client).await;
    let t = Instant::now();
    in_parallel(n, |i| {
        let (runs, status) = (runs_ref.clone(), final_status.clone());
        let name = format!("floor-{i}");
        let run = run_object(&name, &noop);
        async move {
            runs.create(&PostParams::default(), &run).await.unwrap();
            runs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&*status))
                .await
                .unwrap();
        }
    })
    .await;
    let floor_elapsed = t.elapsed();
    let floor_writes = writes(&client).await - before;
    let engine_rate = n as f64 / engine_elapsed.as_secs_f64();
    let raw_rate = n as f64 / raw_elapsed.as_secs_f64();
    let floor_rate = n as f64 / floor_elapsed.as_secs_f64();
    println!("(b) {n} runs of 3 no-op inline steps, {CONCURRENCY} at a time");
    println!(
        "    engine: {engine_rate:.0} runs/s, {:.2} API writes per run (the create included)",
        engine_writes / n as f64
    );
    println!(
        "    raw create + small status patch: {raw_rate:.0} runs/s, {:.2} writes per run; \
         ratio {:.2}x (goal: at least 0.75x)",
        raw_writes / n as f64,
        engine_rate / raw_rate
    );
    println!(
        "    create + the engine's own final status ({} bytes), no read, no watch: \
         {floor_rate:.0} runs/s, {:.2} writes per run; ratio {:.2}x (goal: at least 0.95x)",
        final_status.to_string().len(),
        floor_writes / n as f64,
        engine_rate / floor_rate
    );
}

/// (c) job executor overhead per step, on the local cluster's real node: a one-step run
/// of a container step against a bare Job running the same container, create → done.
async fn part_c(client: &Client, ns: &str, runs: &Api<Run>) {
    let (client, ns) = (client.clone(), ns.to_string());
    let step_image = std::fs::read_to_string(".flowline/cluster/step-image")
        .expect("(c) needs the real node's step image: make cluster images")
        .trim()
        .to_string();
    let stop = controller(
        &client,
        &ns,
        flowline_engine::job::JobSettings {
            step_image,
            ..Default::default()
        },
    );
    const TOOLBOX: &str = "flowline.local/toolbox:1";
    let jobbed = workflow(
        &client,
        &ns,
        "jobbed",
        json!({"name": "Jobbed", "executor": "job", "steps": [
        {"id": "only", "action": "container", "with": {"image": TOOLBOX, "command": ["true"]}}]}),
    )
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut bare_exited = Vec::new();
    let mut bare = Vec::new();
    let mut engine = Vec::new();
    // The first of each warms the node (image layers, the runtime's caches): not counted.
    for i in 0..11 {
        let job: Job = serde_json::from_value(json!({"metadata": {"name": format!("bare-{i}")}, "spec": {"backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": TOOLBOX, "imagePullPolicy": "IfNotPresent", "command": ["true"]}]}}}})).unwrap();
        // Two ends of the bare Job: its pod's status showing the container exited (what
        // the engine watches for), and the Job marked complete.
        let exited = container_exited(pods.clone(), format!("job-name=bare-{i}"));
        let t = Instant::now();
        jobs.create(&PostParams::default(), &job).await.unwrap();
        let exited = tokio::spawn(async move {
            exited.await;
            t.elapsed().as_secs_f64()
        });
        await_condition(
            jobs.clone(),
            &format!("bare-{i}"),
            conditions::is_job_completed(),
        )
        .await
        .unwrap();
        let bare_took = t.elapsed().as_secs_f64();
        let exited_took = exited.await.unwrap();
        let t = Instant::now();
        runs.create(
            &PostParams::default(),
            &run_object(&format!("jobbed-{i}"), &jobbed),
        )
        .await
        .unwrap();
        until_finished(runs, &format!("jobbed-{i}")).await;
        if i > 0 {
            bare.push(bare_took);
            bare_exited.push(exited_took);
            engine.push(t.elapsed().as_secs_f64());
        }
    }
    stop.cancel();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let (b, x, e) = (
        median(&mut bare),
        median(&mut bare_exited),
        median(&mut engine),
    );
    println!(
        "(c) one-step container run vs a bare Job of the same container on the real node, create → done (median of 10)"
    );
    println!(
        "    bare Job complete: {:.0} ms; its pod showing the container exited: {:.0} ms; run: {:.0} ms",
        b * 1e3,
        x * 1e3,
        e * 1e3,
    );
    println!(
        "    overhead per step: {:.0} ms against the Job complete, {:.0} ms against the container exited",
        (e - b) * 1e3,
        (e - x) * 1e3
    );
}

/// Resolves once a pod selected by `labels` shows a terminated container (the watch
/// lists first, so a pod made before it started is seen too).
async fn container_exited(pods: Api<Pod>, labels: String) {
    let config = kube::runtime::watcher::Config::default().labels(&labels);
    let mut seen = std::pin::pin!(
        kube::runtime::watcher(pods, config)
            .default_backoff()
            .applied_objects()
    );
    while let Some(Ok(pod)) = seen.next().await {
        let statuses = pod.status.and_then(|s| s.container_statuses);
        let exited = statuses
            .iter()
            .flatten()
            .any(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()));
        if exited {
            return;
        }
    }
}

/// (d): the queue of a `limit: 4` workflow against the same runs without a limit, and
/// against 4 clients that keep 4 runs of an unlimited workflow in flight; throughput of
/// each, and the most runs of the limited workflow that were running at once (from
/// their recorded start and finish).
async fn concurrency_drain(client: &Client, ns: &str, runs: &Api<Run>) {
    let n = 1000;
    let clients = 4;
    let stop = controller(client, ns, Default::default());
    let steps = json!([
        {"id": "a", "action": "transform", "with": {"value": 1}},
        {"id": "b", "action": "transform", "with": {"value": 2}},
        {"id": "c", "action": "transform", "with": {"value": 3}}]);
    let unlimited = workflow(
        client,
        ns,
        "unlimited",
        json!({"name": "Unlimited", "steps": steps}),
    )
    .await;
    let limited = workflow(
        client,
        ns,
        "limited",
        json!({"name": "Limited", "concurrency": {"limit": 4}, "steps": steps}),
    )
    .await;
    let free = workflow(client, ns, "free", json!({"name": "Free", "steps": steps})).await;

    let before = writes(client).await;
    let t = Instant::now();
    futures::future::join_all((0..clients).map(|c| {
        let (runs, unlimited) = (runs.clone(), unlimited.clone());
        async move {
            for i in (c..n).step_by(clients) {
                let name = format!("unlimited-{i}");
                runs.create(&PostParams::default(), &run_object(&name, &unlimited))
                    .await
                    .unwrap();
                until_finished(&runs, &name).await;
            }
        }
    }))
    .await;
    let clients_elapsed = t.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await; // late Event writes land
    let clients_writes = writes(client).await - before;

    let before = writes(client).await;
    let t = Instant::now();
    in_parallel(n, |i| {
        let run = run_object(&format!("limited-{i}"), &limited);
        async move {
            runs.create(&PostParams::default(), &run).await.unwrap();
        }
    })
    .await;
    until_all_finished(runs, "limited", n).await;
    let queue_elapsed = t.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let queue_writes = writes(client).await - before;

    // The same 1,000 runs created at once without a limit: the reference.
    let before = writes(client).await;
    let t = Instant::now();
    in_parallel(n, |i| {
        let run = run_object(&format!("free-{i}"), &free);
        async move {
            runs.create(&PostParams::default(), &run).await.unwrap();
        }
    })
    .await;
    until_all_finished(runs, "free", n).await;
    let free_elapsed = t.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let free_writes = writes(client).await - before;
    stop.cancel();

    let list = runs
        .list(&kube::api::ListParams::default().labels("flowline.io/workflow=limited"))
        .await
        .unwrap();
    let mut edges: Vec<(i64, i32)> = list
        .items
        .iter()
        .filter_map(|r| r.status.as_ref())
        .flat_map(|s| {
            [
                (s.started_at.map_or(0, |t| t.as_millisecond()), 1),
                (s.finished_at.map_or(0, |t| t.as_millisecond()), -1),
            ]
        })
        .collect();
    edges.sort();
    let most = edges
        .iter()
        .scan(0, |now, (_, d)| {
            *now += d;
            Some(*now)
        })
        .max()
        .unwrap_or(0);
    let clients_rate = n as f64 / clients_elapsed.as_secs_f64();
    let queue_rate = n as f64 / queue_elapsed.as_secs_f64();
    let free_rate = n as f64 / free_elapsed.as_secs_f64();
    println!("(d) {n} runs of 3 no-op inline steps, at most 4 at a time");
    println!(
        "    limit 4, all created at once: {queue_rate:.0} runs/s; the same runs without a \
         limit: {free_rate:.0} runs/s; ratio {:.2}x (goal: at least 0.9x); most running at \
         once under the limit: {most}",
        queue_rate / free_rate
    );
    println!(
        "    4 clients, each waiting for its run, no limit: {clients_rate:.0} runs/s; the \
         queue {:.2}x of them",
        queue_rate / clients_rate
    );
    println!(
        "    API writes per run (the create included): limit 4 {:.2}; without a limit {:.2}; \
         4 clients {:.2}",
        queue_writes / n as f64,
        free_writes / n as f64,
        clients_writes / n as f64
    );
}
