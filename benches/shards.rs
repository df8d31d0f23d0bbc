//! `make bench-shards`: sharded execution with real `flowline operator` processes
//! (release build). For 1, 2 and 3 replicas sharing as many shards, 1,000 runs of 3
//! no-op inline steps (P5) created 32 at a time: runs/s (against one replica in the
//! same run), API-server writes per run (Runs and Events, the create included) and
//! runs executed more than once (distinct execution ids seen in their status; must
//! be 0). Then 3 replicas again, one killed with SIGKILL once a third of the runs
//! finished: how long until its shard is held again, and how many runs resumed.
//! Not a test: it prints figures; docs/benchmarks.md records them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowline_core::crd::{Run, Workflow};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;

#[path = "support/apiserver.rs"]
mod apiserver;
#[path = "support/process.rs"]
mod process;

use process::Server;

const RUNS: usize = 1000;
const CONCURRENCY: usize = 32;

fn replica(ns: &str, shards: u32) -> Server {
    let shards = shards.to_string();
    process::spawn(&[
        "operator",
        "--no-api",
        "--watch-namespace",
        ns,
        "--leader-election-namespace",
        ns,
        "--shards",
        &shards,
    ])
}

/// Shards held by the replica; None while it does not answer.
async fn shards_held(replica: &Server) -> Option<u32> {
    process::metric(replica, "flowline_shards_held")
        .await
        .map(|v| v as u32)
}

async fn until_all_shards_held(replicas: &[&Server], shards: u32) {
    let started = Instant::now();
    loop {
        // Bounded: replicas that cannot share the shards (one exited, say) fail the
        // bench with their logs named instead of hanging it.
        if started.elapsed() > Duration::from_secs(120) {
            let logs: Vec<_> = replicas
                .iter()
                .map(|r| r.log.display().to_string())
                .collect();
            panic!(
                "the replicas did not hold all {shards} shards within 2 minutes; logs: {logs:?}"
            );
        }
        let mut held = 0;
        for r in replicas {
            held += shards_held(r).await.unwrap_or(0);
        }
        if held == shards {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the watch saw of the runs: execution ids per run, and the finished ones.
#[derive(Default)]
struct Seen {
    executions: HashMap<String, HashSet<String>>,
    finished: HashSet<String>,
}

fn watch_runs(runs: Api<Run>) -> Arc<Mutex<Seen>> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let record = seen.clone();
    tokio::spawn(async move {
        let mut events = watcher(runs, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let Ok(watcher::Event::Apply(run) | watcher::Event::InitApply(run)) = event else {
                continue;
            };
            let name = run.metadata.name.clone().unwrap_or_default();
            let Some(status) = run.status else { continue };
            let mut seen = record.lock().unwrap();
            if let Some(id) = status.execution_id {
                seen.executions.entry(name.clone()).or_default().insert(id);
            }
            if status.phase.is_finished() {
                seen.finished.insert(name);
            }
        }
    });
    seen
}

fn finished(seen: &Mutex<Seen>) -> usize {
    seen.lock().unwrap().finished.len()
}

/// Runs executed by more than one execution.
fn executed_twice(seen: &Mutex<Seen>) -> usize {
    seen.lock()
        .unwrap()
        .executions
        .values()
        .filter(|ids| ids.len() > 1)
        .count()
}

async fn fresh_namespace(client: &Client, name: &str) -> (Api<Run>, Arc<Workflow>) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let wf: Workflow = serde_json::from_value(json!({
        "apiVersion": "flowline.io/v1", "kind": "Workflow", "metadata": {"name": "noop"},
        "spec": {"name": "Noop", "steps": [
            {"id": "a", "action": "transform", "with": {"value": 1}},
            {"id": "b", "action": "transform", "with": {"value": 2}},
            {"id": "c", "action": "transform", "with": {"value": 3}}]}
    }))
    .unwrap();
    let wf = Api::<Workflow>::namespaced(client.clone(), name)
        .create(&PostParams::default(), &wf)
        .await
        .unwrap();
    (Api::namespaced(client.clone(), name), Arc::new(wf))
}

/// Creates the runs as `/v1` does: pinned to the workflow's version.
async fn create_runs(runs: &Api<Run>, wf: &Workflow) {
    futures::stream::iter(0..RUNS)
        .for_each_concurrent(CONCURRENCY, |i| {
            let runs = runs.clone();
            let run = Run::of_workflow(
                wf,
                &format!("p5-{i}"),
                Default::default(),
                None,
                jiff::Timestamp::now(),
            );
            async move {
                runs.create(&PostParams::default(), &run).await.unwrap();
            }
        })
        .await;
}

async fn until_finished(seen: &Mutex<Seen>, count: usize) {
    while finished(seen) < count {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct Figures {
    rate: f64,
    writes_per_run: f64,
    twice: usize,
}

/// P5 with `replicas` replicas sharing as many shards.
async fn p5(client: &Client, replicas: u32) -> Figures {
    let ns = format!("bench-shards-{replicas}-{}", std::process::id());
    let (runs, wf) = fresh_namespace(client, &ns).await;
    let processes: Vec<Server> = (0..replicas).map(|_| replica(&ns, replicas)).collect();
    until_all_shards_held(&processes.iter().collect::<Vec<_>>(), replicas).await;
    let seen = watch_runs(runs.clone());
    let before = apiserver::writes(client, &["runs", "events"]).await;
    let started = Instant::now();
    create_runs(&runs, &wf).await;
    until_finished(&seen, RUNS).await;
    let elapsed = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await; // late Event writes land
    let writes = apiserver::writes(client, &["runs", "events"]).await - before;
    let figures = Figures {
        rate: RUNS as f64 / elapsed.as_secs_f64(),
        writes_per_run: writes / RUNS as f64,
        twice: executed_twice(&seen),
    };
    drop(processes);
    cleanup(client, &ns).await;
    figures
}

/// P5 with 3 replicas, one killed once a third of the runs finished.
async fn p5_with_a_kill(client: &Client) {
    let ns = format!("bench-shards-kill-{}", std::process::id());
    let (runs, wf) = fresh_namespace(client, &ns).await;
    let mut processes: Vec<Server> = (0..3).map(|_| replica(&ns, 3)).collect();
    until_all_shards_held(&processes.iter().collect::<Vec<_>>(), 3).await;
    let seen = watch_runs(runs.clone());
    let started = Instant::now();
    let creating = {
        let runs = runs.clone();
        tokio::spawn(async move { create_runs(&runs, &wf).await })
    };
    until_finished(&seen, RUNS / 3).await;
    let mut victim = processes.remove(0);
    let _ = victim.child.kill();
    let killed = Instant::now();
    until_all_shards_held(&processes.iter().collect::<Vec<_>>(), 3).await;
    let recovered = killed.elapsed();
    creating.await.unwrap();
    until_finished(&seen, RUNS).await;
    let elapsed = started.elapsed();
    println!(
        "  3 replicas, one killed (SIGKILL) after {} runs finished: its shard held again after {:.1} s \
         (goal ≤ 15 s); all {RUNS} finished in {:.1} s; runs resumed by a second execution: {}",
        RUNS / 3,
        recovered.as_secs_f64(),
        elapsed.as_secs_f64(),
        executed_twice(&seen)
    );
    drop(victim);
    drop(processes);
    cleanup(client, &ns).await;
}

async fn cleanup(client: &Client, ns: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::default())
        .await;
}

fn report(replicas: u32, f: &Figures, one: &Figures) {
    println!(
        "  {replicas} replica(s): {:.0} runs/s ({:.2}x one replica), {:.2} API writes per run, \
         runs executed twice: {} (goal 0)",
        f.rate,
        f.rate / one.rate,
        f.writes_per_run,
        f.twice
    );
}

#[tokio::main]
async fn main() {
    let client = Client::try_default().await.expect("KUBECONFIG");
    println!(
        "P5: {RUNS} runs of 3 no-op inline steps, {CONCURRENCY} created at a time, N replicas sharing N shards"
    );
    let one = p5(&client, 1).await;
    report(1, &one, &one);
    for replicas in 2..=3 {
        report(replicas, &p5(&client, replicas).await, &one);
    }
    p5_with_a_kill(&client).await;
}
