//! Crash-proof acceptance: runs created through a separate `flowline api` process
//! while the controller process (`flowline operator --no-api`) is disturbed, with a
//! webhook receiver that fails some attempts. A killed or cut-off controller must stay
//! invisible to users: no failed, lost or stuck run, every event delivered, few
//! duplicates. Sized by environment variables (chaos/settings.rs); `make chaos` runs
//! the big one. docs/benchmarks.md describes the method.

mod events;
mod inbound;
mod kills;
mod observer;
mod operators;
mod report;
mod settings;
mod stage;
mod stall;
mod timeline;
mod verdict;
mod workload;

use std::sync::Mutex;
use std::time::Instant;

use operators::Operators;
use stage::Stage;

/// The operator is SIGKILLed at chosen moments and restarted.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_killed_operator_is_invisible_to_users() {
    let mut stage = Stage::new("chaos").await;
    let client = stage.client();
    let lease = stage.settings.lease_seconds;
    let flags = stage.operator_flags();
    let mut operators = Operators::start(&stage.api.ns, "operator", lease, flags, vec![]).await;
    let leading = operators.await_leader(&client, None).await;
    let plan = kills::plan(stage.settings.kills, &mut stage.rng);
    let created = Mutex::new(Vec::new());
    let scene = kills::Scene {
        operators: &mut operators,
        observer: &stage.observer,
        receiver: &stage.receiver,
        client: &client,
        created: &created,
        runs: stage.settings.runs,
    };
    let ((), restarts) = tokio::join!(
        stage.start_runs(&created),
        kills::carry_out(&plan, scene, leading),
    );
    let names = created.into_inner().unwrap();
    // The load and the kills are over: from here every run must settle in time.
    let quiet = Instant::now();
    verdict::conclude(&stage, &mut [&mut operators], &names, &restarts, quiet)
        .await
        .assert_invisible();
}

/// The leader's connection to the API server stalls in the middle of the load and a
/// second operator takes over: the cut-off leader exits before the other leads (and
/// comes back as a follower once its connection works again), no step attempt runs
/// under both, and users see a pause, nothing else.
#[tokio::test]
#[ignore = "needs cluster"]
async fn a_stalled_leader_is_replaced_without_doing_work_twice() {
    let stage = Stage::new("chaos-stall").await;
    let client = stage.client();
    let lease = stage.settings.lease_seconds;
    let (proxy, kubeconfig) = crate::leader::kubeconfig_through_proxy().await;
    let through_proxy = vec![("KUBECONFIG".to_string(), kubeconfig.clone().into())];
    let flags = stage.operator_flags();
    let mut a = Operators::start(&stage.api.ns, "cut-off", lease, flags, through_proxy).await;
    a.await_leader(&client, None).await;
    let flags = stage.operator_flags();
    let mut b = Operators::start(&stage.api.ns, "follower", lease, flags, vec![]).await;

    let created = Mutex::new(Vec::new());
    let ((), takeover) = tokio::join!(
        stage.start_runs(&created),
        stall::cut_off(&stage, &proxy, &mut a, &created),
    );
    proxy.resume();
    let names = created.into_inner().unwrap();
    let quiet = Instant::now();
    let verdict = verdict::conclude(&stage, &mut [&mut a, &mut b], &names, &[], quiet).await;
    println!("{}", takeover.describe());
    let _ = std::fs::remove_file(kubeconfig);

    assert_eq!(
        takeover.exit_code,
        Some(flowline::operator::EXIT_LOST_LEADERSHIP),
        "the cut-off leader exits because it stopped leading\n{}",
        verdict.text
    );
    assert!(
        takeover.a_gone < takeover.b_not_yet,
        "the cut-off leader must be seen gone before the other is last seen not leading"
    );
    let hits: Vec<_> = stage
        .sink
        .hits()
        .into_iter()
        .map(|h| (h.at, h.idempotency_key))
        .collect();
    let hand_over = crate::leader::judge_hand_over(&hits, takeover.a_gone, takeover.b_not_yet);
    println!("{hand_over}");
    verdict.assert_invisible();
}
