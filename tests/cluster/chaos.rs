//! Crash-proof acceptance: runs created through a separate `flowline api` process
//! while the controller process (`flowline operator --no-api`) is SIGKILLed at chosen
//! moments and restarted, with a webhook receiver that fails some attempts. A killed
//! controller must stay invisible to users: no failed, lost or stuck run, every event
//! delivered, few duplicates. Sized by environment variables (chaos/settings.rs);
//! `make chaos` runs the big one. docs/benchmarks.md describes the method.

mod events;
mod kills;
mod observer;
mod operators;
mod report;
mod settings;
mod timeline;
mod workload;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use flowline::crd::{Run, RunPhase};
use rand::{Rng, SeedableRng};

use crate::delivery::receiver::Receiver;
use crate::support::TestApi;
use observer::Observer;
use operators::Operators;
use settings::Settings;

/// The run events the webhook subscribes to (every `run.*` kind).
const RUN_EVENTS: [&str; 4] = [
    "run.started",
    "run.succeeded",
    "run.failed",
    "run.cancelled",
];
/// After every due event has arrived, deliveries still arriving within this long are
/// counted too (late duplicates of a restart).
const QUIET: Duration = Duration::from_secs(2);
/// How long after the runs settled every due event must have been delivered.
const DELIVERY_BOUND: Duration = Duration::from_secs(60);

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_killed_operator_is_invisible_to_users() {
    let settings = Settings::from_env();
    let began = Instant::now();
    let mut rng = rand::rngs::StdRng::seed_from_u64(settings.seed);
    let (api, _api_process) = TestApi::start_process("chaos").await;
    let client = api.ns.client.clone();
    let receiver = Receiver::start().await;
    receiver.fail_randomly(settings.fail_rate, rng.random());
    let sink = workload::StepSink::start().await;
    let flags = [crate::delivery::flags(&receiver.pki), workload::job_flags()].concat();
    let mut operators = Operators::start(&api.ns, settings.lease_seconds, flags).await;
    let leading = operators.await_leader(&client, None).await;
    let observer = Observer::start(&api.ns).await;
    crate::delivery::webhook(&api, &receiver.url("/chaos"), &RUN_EVENTS, None).await;
    let workflows = workload::workflows(&api, &sink).await;

    let plan = kills::plan(settings.kills, &mut rng);
    let created = Mutex::new(Vec::new());
    let load_rng = rand::rngs::StdRng::seed_from_u64(rng.random());
    let scene = kills::Scene {
        operators: &mut operators,
        observer: &observer,
        receiver: &receiver,
        client: &client,
        created: &created,
        runs: settings.runs,
    };
    let ((), restarts) = tokio::join!(
        workload::start_runs(&api, &workflows, &settings, load_rng, &created),
        kills::carry_out(&plan, scene, leading),
    );
    let names = created.into_inner().unwrap();
    let last_restart = restarts.last().map_or(began, |r| r.restarted_at);

    let stuck = settle(
        &mut operators,
        &observer,
        &names,
        last_restart + settings.settle,
    )
    .await;
    let settled = last_restart.elapsed();
    let runs = api
        .ns
        .api::<Run>()
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    await_deliveries(&receiver, &runs).await;
    let received = receiver.received();
    let events = events::tally(&received, &runs);
    timeline::write(&operators.log_dir, began, &restarts, &received);
    let failed: Vec<String> = runs
        .iter()
        .filter_map(|run| {
            let status = run.status.as_ref()?;
            (status.phase.is_finished() && status.phase != RunPhase::Succeeded).then(|| {
                format!(
                    "{} {}: {}",
                    run.metadata.name.as_deref().unwrap_or_default(),
                    status.phase.as_str(),
                    status.error.as_deref().unwrap_or("no error recorded")
                )
            })
        })
        .collect();
    let recoveries = report::recoveries(&restarts, &observer);
    let figures = report::Figures {
        settings: &settings,
        restarts: &restarts,
        recoveries: &recoveries,
        finished: names.len() - stuck.len(),
        failed: &failed,
        stuck: &stuck,
        events: &events,
        calls: report::calls(&sink.hits()),
        self_exits: operators.self_exits,
        settled,
        wall: began.elapsed(),
        logs: &operators.log_dir,
    };
    let text = report::render(&figures);
    println!("{text}");

    assert!(stuck.is_empty(), "runs stuck:\n{text}");
    assert!(failed.is_empty(), "runs failed:\n{text}");
    assert!(events.lost.is_empty(), "events lost:\n{text}");
    assert!(events.unexpected.is_empty(), "unexpected events:\n{text}");
    assert!(
        events.duplicate_ratio() <= settings.max_dup,
        "too many duplicate deliveries (FLOWLINE_CHAOS_MAX_DUP):\n{text}"
    );
}

/// Waits until every run has finished or `deadline` passed, restarting an operator
/// that exits meanwhile; returns the runs still unfinished.
async fn settle(
    operators: &mut Operators,
    observer: &Observer,
    names: &[String],
    deadline: Instant,
) -> Vec<String> {
    loop {
        operators.supervise();
        let unfinished = observer.unfinished(names);
        if unfinished.is_empty() || Instant::now() > deadline {
            return unfinished;
        }
        observer.next_change(Duration::from_millis(200)).await;
    }
}

/// Waits until every due event was delivered (bounded), then until deliveries stop
/// arriving for a moment.
async fn await_deliveries(receiver: &Receiver, runs: &[Run]) {
    let deadline = Instant::now() + DELIVERY_BOUND;
    let mut arrivals = receiver.arrivals();
    while !events::tally(&receiver.received(), runs).lost.is_empty() && Instant::now() < deadline {
        let _ = tokio::time::timeout(Duration::from_millis(200), arrivals.changed()).await;
    }
    while tokio::time::timeout(QUIET, arrivals.changed())
        .await
        .is_ok()
        && Instant::now() < deadline + DELIVERY_BOUND
    {}
}
