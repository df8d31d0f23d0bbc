//! How a scenario ends: every run settles (or is reported stuck), the deliveries are
//! awaited and counted, the figures are printed, and what users must never see is
//! asserted.

use std::time::{Duration, Instant};

use flowline_core::crd::{Run, RunPhase};

use super::events::{self, Events};
use super::inbound;
use super::kills::Restart;
use super::observer::Observer;
use super::operators::Operators;
use super::report;
use super::stage::Stage;
use crate::delivery::receiver::Receiver;

/// After every due event has arrived, deliveries still arriving within this long are
/// counted too (late duplicates of a restart).
const QUIET: Duration = Duration::from_secs(2);
/// How long after the runs settled every due event must have been delivered.
const DELIVERY_BOUND: Duration = Duration::from_secs(60);

pub struct Verdict {
    /// The printed figures.
    pub text: String,
    stuck: Vec<String>,
    failed: Vec<String>,
    events: Events,
    /// The runs the order events started, against the subscribers' filters.
    inbound: inbound::Tally,
    max_dup: f64,
    /// The most runs of the rate-limited workflow that started within one second.
    paced_most: usize,
}

/// Settles the runs `names` (each must finish within the settle bound after `quiet`,
/// when the load and the disturbances were over) with `operators` kept running, then
/// counts.
pub async fn conclude(
    stage: &Stage,
    operators: &mut [&mut Operators],
    names: &[String],
    restarts: &[Restart],
    last: Instant,
) -> Verdict {
    let deadline = last + stage.settings.settle;
    let posted = stage.posted.lock().unwrap().clone();
    // The runs the events started settle like those created through `/v1`.
    let started = inbound::fanned_out(&stage.api, &posted, deadline).await;
    let names = &[names, &started[..]].concat();
    let stuck = settle(operators, &stage.observer, names, deadline).await;
    let settled = last.elapsed();
    let runs = stage
        .api
        .ns
        .api::<Run>()
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    await_deliveries(&stage.receiver, &runs).await;
    let received = stage.receiver.received();
    let events = events::tally(&received, &runs);
    let logs = &operators[0].log_dir;
    super::timeline::write(logs, stage.began, restarts, &received);
    let failed = failures(&runs);
    let inbound = inbound::tally(&posted, &stage.subscribers, &runs);
    let paced = &stage.workflows[super::workload::PACED];
    let paced_starts: Vec<i64> = runs
        .iter()
        .filter(|r| &r.spec.workflow_ref == paced)
        .filter_map(|r| r.status.as_ref()?.started_at)
        .map(|t| t.as_millisecond())
        .collect();
    let paced_most = crate::support::most_within(paced_starts, 1000);
    let recoveries = report::recoveries(restarts, &stage.observer);
    let kills: Vec<Instant> = restarts.iter().map(|r| r.killed_at).collect();
    let resent = events::resent_per_kill(&received, &kills);
    let text = report::render(&report::Figures {
        settings: &stage.settings,
        restarts,
        recoveries: &recoveries,
        resent: &resent,
        finished: names.len() - stuck.len(),
        failed: &failed,
        stuck: &stuck,
        events: &events,
        calls: report::calls(&stage.sink.hits()),
        self_exits: operators.iter().map(|o| o.self_exits).sum(),
        settled,
        wall: stage.began.elapsed(),
        logs,
    });
    let text = format!(
        "{text}\nevents in: {} posted, {} runs started, missing {:?}, extra {:?}\n\
         rate limit: at most {paced_most} runs of the paced workflow started in one second \
         (limit {})",
        inbound.posted,
        inbound.runs,
        inbound.missing,
        inbound.extra,
        super::workload::PACED_PER_SECOND
    );
    println!("{text}");
    Verdict {
        text,
        stuck,
        failed,
        events,
        inbound,
        max_dup: stage.settings.max_dup,
        paced_most,
    }
}

impl Verdict {
    /// No stuck, failed or lost run or event, and few duplicates.
    pub fn assert_invisible(&self) {
        let text = &self.text;
        assert!(self.stuck.is_empty(), "runs stuck:\n{text}");
        assert!(self.failed.is_empty(), "runs failed:\n{text}");
        assert!(
            self.inbound.missing.is_empty(),
            "accepted events did not start a run of every matching workflow:\n{text}"
        );
        assert!(
            self.inbound.extra.is_empty(),
            "an event started more than one run of a workflow:\n{text}"
        );
        assert!(self.events.lost.is_empty(), "events lost:\n{text}");
        assert!(
            self.paced_most <= super::workload::PACED_PER_SECOND,
            "a rate limit was exceeded:\n{text}"
        );
        assert!(
            self.events.unexpected.is_empty(),
            "unexpected events:\n{text}"
        );
        assert!(
            self.events.reminted.is_empty(),
            "events delivered under two ids (receivers deduplicating on webhook-id handle \
             them twice):\n{text}"
        );
        assert!(
            self.events.duplicate_ratio() <= self.max_dup,
            "too many duplicate deliveries (FLOWLINE_CHAOS_MAX_DUP):\n{text}"
        );
    }
}

/// Runs that finished other than succeeded, with their errors.
fn failures(runs: &[Run]) -> Vec<String> {
    runs.iter()
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
        .collect()
}

/// Waits until every run has finished or `deadline` passed, restarting an operator
/// that exits meanwhile; returns the runs still unfinished.
async fn settle(
    operators: &mut [&mut Operators],
    observer: &Observer,
    names: &[String],
    deadline: Instant,
) -> Vec<String> {
    loop {
        for operators in operators.iter_mut() {
            operators.supervise();
        }
        let unfinished = observer.unfinished(names);
        if unfinished.is_empty() || Instant::now() > deadline {
            return unfinished;
        }
        observer.next_change(Duration::from_millis(200)).await;
    }
}

/// Waits until every due event was delivered (bounded), then until deliveries stop
/// arriving for a moment.
///
/// The quiet moment is kept, and it is strong but not strict: it only widens the count
/// of duplicates, whose bound is then checked, so waiting longer can only make that
/// check stricter, never pass a run it should fail. No later marker event could
/// replace it: the late duplicates come from retry series on timers (the receiver fails
/// some attempts on purpose), which no event delivered afterwards is ordered after.
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
