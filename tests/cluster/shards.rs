//! Sharded execution (`--shards`) with real operator processes: the replicas share
//! the shards, every run executes once, and a killed replica's runs move on to the
//! others and finish, never executing in two replicas at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowline_controller::shard;
use flowline_core::crd::Run;

use crate::builders::{RunBuilder, WorkflowBuilder, step};
use crate::support::{Process, TestNamespace, eventually, gauge, metrics_text, ready};

/// The calls a step endpoint received, by run: when each began.
#[derive(Default)]
struct Calls(Mutex<HashMap<String, Vec<Instant>>>);

impl Calls {
    fn of(&self, run: &str) -> Vec<Instant> {
        self.0.lock().unwrap().get(run).cloned().unwrap_or_default()
    }

    fn runs_called(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A local step endpoint, `POST {url}/<run>`, that records each call and answers
/// after `delay`.
async fn endpoint(delay: Duration) -> (String, Arc<Calls>) {
    let calls = Arc::new(Calls::default());
    let seen = calls.clone();
    let app = axum::Router::new().route(
        "/hit/{run}",
        axum::routing::post(
            move |axum::extract::Path(run): axum::extract::Path<String>| {
                seen.0
                    .lock()
                    .unwrap()
                    .entry(run)
                    .or_default()
                    .push(Instant::now());
                async move {
                    // Pacing: a slow endpoint keeps steps under way when a replica goes.
                    tokio::time::sleep(delay).await;
                    "ok"
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hit", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, calls)
}

fn replica(ns: &TestNamespace, shards: u32) -> (Process, u16) {
    Process::operator(
        ns,
        &[
            "--allow-cidr",
            "127.0.0.1/32",
            "--shards",
            &shards.to_string(),
            "--no-api",
        ],
    )
}

/// Runs that reached a final status in the process serving `port` (all phases).
async fn runs_finished(port: u16) -> u64 {
    let text = metrics_text(port).await.unwrap_or_default();
    text.lines()
        .filter(|line| line.starts_with("flowline_runs_finished_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Waits until the shards held by the processes on `ports` are `expected` (in order).
async fn await_shares(ports: &[u16], expected: &[u64]) {
    eventually(
        &format!("the replicas to hold {expected:?} shards"),
        Duration::from_secs(40),
        || async {
            let mut held = Vec::new();
            for &port in ports {
                held.push(gauge(port, "flowline_shards_held").await?);
            }
            (held == expected).then_some(())
        },
    )
    .await;
}

/// A workflow whose one step posts to `url/<run id>`.
fn workflow(url: &str, name: &str) -> WorkflowBuilder {
    WorkflowBuilder::new(name).step(step::http(
        "hit",
        "POST",
        &format!("{url}/{{{{ run.id }}}}"),
    ))
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn three_replicas_share_three_shards_and_execute_each_run_once() {
    let ns = TestNamespace::new("shard-three").await;
    let (url, calls) = endpoint(Duration::ZERO).await;
    let replicas: Vec<_> = (0..3).map(|_| replica(&ns, 3)).collect();
    let ports: Vec<u16> = replicas.iter().map(|(_, port)| *port).collect();
    for &port in &ports {
        ready(port).await;
    }
    // Started together, each takes its fair share: one shard each.
    await_shares(&ports, &[1, 1, 1]).await;
    let mut leaders = 0;
    for &port in &ports {
        leaders += gauge(port, "flowline_leader").await.unwrap();
    }
    assert_eq!(
        leaders, 1,
        "exactly one replica holds shard 0 (schedules, deliveries)"
    );

    let names = crate::replicas::create(&ns, &workflow(&url, "spread"), 30).await;
    crate::support::all_succeeded(&ns, &names, Duration::from_secs(90)).await;
    for name in &names {
        assert_eq!(calls.of(name).len(), 1, "run {name} executed exactly once");
    }
    assert_eq!(calls.runs_called(), names.len());
    // The work was shared: every replica finished some of the runs, and together
    // they finished each once.
    let mut finished = Vec::new();
    for &port in &ports {
        finished.push(runs_finished(port).await);
    }
    assert!(
        finished.iter().all(|&n| n > 0),
        "every replica executed runs: {finished:?}"
    );
    assert_eq!(
        finished.iter().sum::<u64>(),
        names.len() as u64,
        "{finished:?}"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_killed_replicas_runs_move_on_within_the_lease_and_never_run_twice_at_once() {
    let ns = TestNamespace::new("shard-kill").await;
    // Each call takes 2 s, so runs are mid-step when a replica is killed.
    let (url, calls) = endpoint(Duration::from_secs(2)).await;
    let mut replicas: Vec<_> = (0..2).map(|_| replica(&ns, 2)).collect();
    let ports: Vec<u16> = replicas.iter().map(|(_, port)| *port).collect();
    for &port in &ports {
        ready(port).await;
    }
    await_shares(&ports, &[1, 1]).await;
    // The victim holds shard 0: its runs, schedules and deliveries all move.
    let mut victim = None;
    for (i, &port) in ports.iter().enumerate() {
        if gauge(port, "flowline_leader").await == Some(1) {
            victim = Some(i);
        }
    }
    let victim = victim.expect("one replica holds shard 0");
    let survivor = ports[1 - victim];

    let names = crate::replicas::create(&ns, &workflow(&url, "moving"), 12).await;
    let runs = ns.api::<Run>();
    let mut moving = Vec::new();
    for name in &names {
        let run = runs.get(name).await.unwrap();
        if shard::of_run(&run, 2) == 0 {
            moving.push(name.clone());
        }
    }
    // 12 random uids all miss shard 0 with probability 2^-12.
    assert!(!moving.is_empty(), "some runs fall in shard 0");
    // Kill while shard 0's runs are mid-call.
    eventually(
        "a run of shard 0 mid-step",
        Duration::from_secs(30),
        || async {
            moving
                .iter()
                .any(|name| !calls.of(name).is_empty())
                .then_some(())
        },
    )
    .await;
    let killed = Instant::now();
    replicas[victim].0.kill(); // SIGKILL: its leases stay until they expire

    eventually(
        "the survivor to hold both shards and lead",
        Duration::from_secs(30),
        || async {
            (gauge(survivor, "flowline_shards_held").await == Some(2)
                && gauge(survivor, "flowline_leader").await == Some(1))
            .then_some(())
        },
    )
    .await;
    let moved_after = killed.elapsed();
    // The test operators' lease is 8 s: a lease duration and a retry period.
    assert!(
        moved_after <= Duration::from_secs(15),
        "shard 0 moved on after {moved_after:?}"
    );
    crate::support::all_succeeded(&ns, &names, Duration::from_secs(90)).await;
    for name in &names {
        let starts = calls.of(name);
        assert!(!starts.is_empty(), "run {name} called its step");
        // A run executes in one replica at a time: a second call of its step comes
        // only from the new holder, after the old one died, and at most once.
        assert!(
            starts.len() <= 2,
            "run {name} called its step {} times",
            starts.len()
        );
        if starts.len() == 2 {
            assert!(
                moving.contains(name),
                "run {name} of the survivor's shard ran twice"
            );
            assert!(
                starts[1] > killed,
                "run {name} was called again before the kill"
            );
        }
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_replica_stopped_with_sigterm_hands_its_shards_over_at_once() {
    let ns = TestNamespace::new("shard-term").await;
    let replicas: Vec<_> = (0..2).map(|_| replica(&ns, 3)).collect();
    let ports: Vec<u16> = replicas.iter().map(|(_, port)| *port).collect();
    for &port in &ports {
        ready(port).await;
    }
    // Three shards over two replicas: two and one, whichever way round.
    eventually(
        "the shards to be shared",
        Duration::from_secs(40),
        || async {
            let a = gauge(ports[0], "flowline_shards_held").await?;
            let b = gauge(ports[1], "flowline_shards_held").await?;
            (a + b == 3 && a.min(b) == 1).then_some(())
        },
    )
    .await;
    let stopped = Instant::now();
    replicas[0].0.terminate();
    // Released, and the member Lease removed: the survivor's share becomes all
    // three and it takes them well before a lease (8 s) could have expired.
    await_shares(&ports[1..], &[3]).await;
    let moved_after = stopped.elapsed();
    assert!(
        moved_after < Duration::from_secs(8),
        "the shards moved after {moved_after:?}: they expired instead of being released"
    );
}

/// Creates `count` more Runs of `workflow`, named `<prefix>-<i>`.
async fn more_runs(ns: &TestNamespace, workflow: &str, prefix: &str, count: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..count {
        let run = RunBuilder::of(workflow).name(format!("{prefix}-{i}"));
        names.push(ns.create_run(&run).await);
    }
    names
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_replica_with_another_shard_count_waits_until_the_old_ones_are_gone() {
    let ns = TestNamespace::new("shard-count").await;
    let (url, calls) = endpoint(Duration::ZERO).await;
    let (old, old_port) = replica(&ns, 2);
    ready(old_port).await;
    await_shares(&[old_port], &[2]).await;
    // A rolling update to --shards 3: the new replica splits runs differently, so it
    // must take nothing while the old one holds its shards.
    let log = std::env::temp_dir().join(format!("{}-new-replica.log", ns.name));
    let (_new, new_port) = Process::operator_logging_to(
        &ns,
        &["--allow-cidr", "127.0.0.1/32", "--shards", "3", "--no-api"],
        &log,
    );
    ready(new_port).await;
    eventually(
        "the new replica to refuse the shards",
        Duration::from_secs(30),
        || async {
            std::fs::read_to_string(&log)
                .ok()?
                .contains("another --shards holds shards")
                .then_some(())
        },
    )
    .await;
    assert_eq!(gauge(new_port, "flowline_shards_held").await, Some(0));
    let before = crate::replicas::create(&ns, &workflow(&url, "counted"), 8).await;
    crate::support::all_succeeded(&ns, &before, Duration::from_secs(60)).await;
    assert_eq!(gauge(new_port, "flowline_shards_held").await, Some(0));

    // The old replica stops: the new one takes all three shards and executes.
    old.terminate();
    await_shares(&[new_port], &[3]).await;
    let after = more_runs(&ns, "counted", "after", 8).await;
    crate::support::all_succeeded(&ns, &after, Duration::from_secs(60)).await;
    for name in before.iter().chain(&after) {
        assert_eq!(calls.of(name).len(), 1, "run {name} executed exactly once");
    }
}
