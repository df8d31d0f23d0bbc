//! Leader election under a stalled API connection: the leader that cannot renew
//! stops before another replica may take over.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowline_core::crd::RunPhase;
use k8s_openapi::api::coordination::v1::Lease;
use kube::config::Kubeconfig;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::builders::{WorkflowBuilder, step};
use crate::stall_proxy::StallProxy;
use crate::support::{Process, TestNamespace, all_succeeded, eventually, finished_run, ready};

/// The proxy itself (no cluster needed): bytes pass, are held while stalled without
/// the connection closing, and arrive after `resume()`.
#[tokio::test]
async fn the_stall_proxy_holds_bytes_until_resumed() {
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = echo.local_addr().unwrap();
    // When the upstream read each chunk, and how many bytes it was.
    let reads = Arc::new(Mutex::new(Vec::<(Instant, usize)>::new()));
    let log = reads.clone();
    tokio::spawn(async move {
        let (mut conn, _) = echo.accept().await.unwrap();
        let mut buf = [0u8; 64];
        loop {
            let n = conn.read(&mut buf).await.unwrap();
            if n == 0 {
                return;
            }
            log.lock().unwrap().push((Instant::now(), n));
            conn.write_all(&buf[..n]).await.unwrap();
        }
    });
    let proxy = StallProxy::start(upstream).await;
    let mut conn = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let mut buf = [0u8; 5];
    conn.write_all(b"hello").await.unwrap();
    conn.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"hello");

    proxy.stall();
    conn.write_all(b"again").await.unwrap();
    // Pacing, not a check: a stall has to last a while to say anything, and a proxy
    // that forwarded anyway would have delivered within this long.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resumed = Instant::now();
    proxy.resume();
    conn.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"again", "held bytes arrive after resume");
    // Proven by when they arrived, not by a read that timed out: the upstream got the
    // bytes written during the stall only once it was over.
    let reads = reads.lock().unwrap().clone();
    let mut before = 0;
    let (held_arrived, _) = *reads
        .iter()
        .find(|(_, n)| {
            let first = before >= 5;
            before += n;
            first
        })
        .expect("the upstream read the held bytes");
    assert!(
        held_arrived >= resumed,
        "bytes went through while stalled ({:?} before resume)",
        resumed - held_arrived
    );
    assert_eq!(proxy.accepted(), 1);
}

/// Every request of a step, as the receiver saw it arrive.
#[derive(Default)]
struct StepLog(Mutex<Vec<(Instant, String)>>);

impl StepLog {
    fn hits(&self) -> Vec<(Instant, String)> {
        self.0.lock().unwrap().clone()
    }
}

/// A plain-HTTP endpoint for `http.request` steps that logs each request's arrival
/// and `Idempotency-Key` (one per run, step and attempt) and answers after 100 ms, so
/// that steps are under way when the leader is cut off.
async fn step_receiver() -> (String, Arc<StepLog>) {
    let log = Arc::new(StepLog::default());
    let seen = log.clone();
    let app = axum::Router::new().route(
        "/step",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let key = headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            seen.0.lock().unwrap().push((Instant::now(), key));
            async {
                // Pacing: steps are under way when the leader is cut off.
                tokio::time::sleep(Duration::from_millis(100)).await;
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/step", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, log)
}

/// A copy of the test's kubeconfig whose current cluster is reached through a
/// [`StallProxy`]; returns the proxy and the file.
pub(crate) async fn kubeconfig_through_proxy() -> (StallProxy, PathBuf) {
    let path = std::env::var_os("KUBECONFIG").expect("KUBECONFIG");
    let mut config = Kubeconfig::read_from(&path).unwrap();
    let context = config.current_context.clone().unwrap();
    let cluster_name = config
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .unwrap();
    let cluster = config
        .clusters
        .iter_mut()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.cluster.as_mut())
        .unwrap();
    let server = url::Url::parse(cluster.server.as_deref().unwrap()).unwrap();
    // The API server's certificate names the loopback address; only the port changes.
    let upstream = server.socket_addrs(|| None).unwrap()[0];
    assert!(
        upstream.ip().is_loopback(),
        "the test cluster listens on loopback"
    );
    let proxy = StallProxy::start(upstream).await;
    cluster.server = Some(format!("https://{}", proxy.addr));
    let copy = std::env::temp_dir().join(format!(
        "flowline-stalled-kubeconfig-{}-{}",
        std::process::id(),
        proxy.addr.port()
    ));
    // JSON is YAML: kubeconfig readers take it.
    std::fs::write(&copy, serde_json::to_vec(&config).unwrap()).unwrap();
    (proxy, copy)
}

/// `flowline_leader` on the process's /metrics; None when it does not answer.
async fn leader_gauge(port: u16) -> Option<u8> {
    crate::support::gauge(port, "flowline_leader")
        .await
        .and_then(|v| u8::try_from(v).ok())
}

async fn await_gauge(port: u16, value: u8, what: &str) {
    eventually(what, Duration::from_secs(30), || async {
        (leader_gauge(port).await == Some(value)).then_some(())
    })
    .await;
}

/// The scenario of the crash-proof issue: the leader's connection to the API server
/// stalls (no error, no answer). It must notice within its renew deadline and stop —
/// the process exits — strictly before the follower may take the lease; the follower
/// then finishes every run, and no step attempt runs under both at once.
///
/// How "not both at once" is observed: the test polls A's exit and B's
/// `flowline_leader` in one loop. A's exit, seen at `a_gone`, happened no later than
/// that; B's leadership, not yet there at `b_not_yet`, began after it. With
/// `a_gone < b_not_yet`, every step request (logged by the receiver with its
/// Idempotency-Key) arrived either while A led (before `a_gone`) or while B led
/// (after `b_not_yet`): none in between, and an attempt executed twice — A's copy
/// whose result never reached the API server, then B's — has one copy on each side.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_leader_cut_off_from_the_api_server_stops_before_another_takes_over() {
    let ns = TestNamespace::new("lead-stall").await;
    let (url, log) = step_receiver().await;
    let (proxy, kubeconfig) = kubeconfig_through_proxy().await;
    let allow_loopback = ["--allow-cidr", "127.0.0.1/32"];

    let (mut a, port_a) = Process::operator_with_env(
        &ns,
        &allow_loopback,
        &[("KUBECONFIG", kubeconfig.as_os_str())],
    );
    await_gauge(port_a, 1, "A to lead").await;
    let (_b, port_b) = Process::operator(&ns, &allow_loopback);
    ready(port_b).await;
    await_gauge(port_b, 0, "B to follow").await;

    const RUNS: usize = 8;
    const HITS_PER_RUN: usize = 6;
    let steps: Vec<_> = (0..HITS_PER_RUN)
        .flat_map(|i| {
            [
                step::http(&format!("hit{i}"), "POST", &url),
                step::delay(&format!("wait{i}"), 1000),
            ]
        })
        .collect();
    let wf = WorkflowBuilder::new("steps")
        .display_name("Steps")
        .steps(json!(steps));
    let names = crate::replicas::create(&ns, &wf, RUNS).await;
    // Every run under way at A, its first steps done, none finished: A executes more
    // while cut off, and leaves some for B.
    eventually(
        "A to execute every run",
        Duration::from_secs(30),
        || async { (log.hits().len() >= 2 * RUNS).then_some(()) },
    )
    .await;
    proxy.stall();
    assert!(
        log.hits().len() < RUNS * HITS_PER_RUN,
        "runs must still be in progress when A is cut off"
    );
    assert!(a.exit_status().is_none(), "A is alive when cut off");

    let mut a_gone = None;
    let mut b_not_yet = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if a_gone.is_none()
            && let Some(status) = a.exit_status()
        {
            assert_eq!(
                status.code(),
                Some(flowline::operator::EXIT_LOST_LEADERSHIP),
                "A exits because it stopped leading: {status}"
            );
            a_gone = Some(Instant::now());
        }
        let asked = Instant::now();
        match leader_gauge(port_b).await {
            Some(1) => break,
            Some(_) => b_not_yet = asked,
            None => {}
        }
        assert!(Instant::now() < deadline, "B never took over");
        // The poll interval of a wait for B to lead (the order of A's exit and B's
        // lead is read from these samples), not a check.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let a_gone = a_gone.expect("A must have exited before B leads");
    assert!(
        a_gone < b_not_yet,
        "A must be seen gone before B is last seen not leading (B may have led since \
         then, while A was not known to be gone)"
    );
    eprintln!(
        "A gone at least {:?} before B led",
        b_not_yet.duration_since(a_gone)
    );

    all_succeeded(&ns, &names, Duration::from_secs(60)).await;

    let hits = log.hits();
    assert!(
        hits.iter().any(|(at, _)| *at > b_not_yet),
        "B executed the rest of the runs"
    );
    let hand_over = judge_hand_over(&hits, a_gone, b_not_yet);
    assert_eq!(
        hand_over.attempts,
        RUNS * HITS_PER_RUN,
        "each step of each run executed"
    );
    eprintln!("{hand_over}");
    let _ = std::fs::remove_file(kubeconfig);
}

/// Who executed the step attempts around a hand-over.
pub(crate) struct HandOver {
    /// Distinct attempts (Idempotency-Keys).
    pub attempts: usize,
    pub by_a_alone: usize,
    /// Executed by A, whose result never reached the API server, then again by B.
    pub by_both: usize,
    pub by_b_alone: usize,
}

impl std::fmt::Display for HandOver {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "step attempts: {} by A alone, {} by both in turn, {} by B alone",
            self.by_a_alone, self.by_both, self.by_b_alone
        )
    }
}

/// Judges step requests (arrival, Idempotency-Key) against a hand-over from A, seen
/// gone at `a_gone`, to B, seen not yet leading at `b_not_yet`: none arrived in
/// between, and an attempt arrived at most twice, once under each leader in turn.
pub(crate) fn judge_hand_over(
    hits: &[(Instant, String)],
    a_gone: Instant,
    b_not_yet: Instant,
) -> HandOver {
    let in_gap: Vec<_> = hits
        .iter()
        .filter(|(at, _)| *at >= a_gone && *at <= b_not_yet)
        .collect();
    assert!(
        in_gap.is_empty(),
        "steps executed while nobody led: {in_gap:?}"
    );
    let mut by_key: HashMap<&str, Vec<Instant>> = HashMap::new();
    for (at, key) in hits {
        assert!(!key.is_empty(), "every step request has an Idempotency-Key");
        by_key.entry(key).or_default().push(*at);
    }
    for (key, times) in &by_key {
        match times.as_slice() {
            [_] => {}
            [first, second] => assert!(
                *first < a_gone && *second > b_not_yet,
                "attempt {key} executed twice, not once by each leader in turn"
            ),
            more => panic!("attempt {key} executed {} times", more.len()),
        }
    }
    let by_b = |times: &&Vec<Instant>| times.iter().filter(|t| **t > b_not_yet).count();
    HandOver {
        attempts: by_key.len(),
        by_a_alone: by_key.values().filter(|t| by_b(t) == 0).count(),
        by_both: by_key.values().filter(|t| t.len() == 2).count(),
        by_b_alone: by_key
            .values()
            .filter(|t| t.len() == 1 && by_b(t) == 1)
            .count(),
    }
}

/// SIGTERM: the leader winds down, drops all its work, and only then releases the
/// lease (before it exits), so the follower need not wait for the lease to expire;
/// the run the leader was executing finishes under the follower.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_leader_stopped_with_sigterm_releases_the_lease_for_the_follower() {
    let ns = TestNamespace::new("lead-term").await;
    let (mut a, port_a) = Process::operator(&ns, &[]);
    await_gauge(port_a, 1, "A to lead").await;
    let (_b, port_b) = Process::operator(&ns, &[]);
    await_gauge(port_b, 0, "B to follow").await;
    let leases = ns.api::<Lease>();
    let holder = |lease: Lease| lease.spec.and_then(|s| s.holder_identity);
    let a_identity = holder(leases.get("flowline-controller").await.unwrap()).unwrap();

    let wf = WorkflowBuilder::new("slow")
        .display_name("Slow")
        .step(step::delay("wait", 3000));
    let names = crate::replicas::create(&ns, &wf, 1).await;
    crate::support::step_running(&ns, &names[0], "wait").await;
    a.terminate();
    let status = eventually("A to exit", Duration::from_secs(30), || {
        let exited = a.exit_status();
        async move { exited }
    })
    .await;
    assert!(status.success(), "a clean shutdown: {status}");
    let after = holder(leases.get("flowline-controller").await.unwrap());
    assert_ne!(
        after.as_deref(),
        Some(a_identity.as_str()),
        "A released the lease before exiting"
    );

    await_gauge(port_b, 1, "B to lead").await;
    let run = finished_run(&ns, &names[0], Duration::from_secs(60)).await;
    let status = run.status.unwrap();
    assert_eq!(status.phase, RunPhase::Succeeded, "{:?}", status.error);
}
