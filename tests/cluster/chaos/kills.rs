//! When the operator is killed. Each kill waits until its share of the runs has been
//! created (kills spread over the load), a seeded lead-in, then its moment; it is
//! SIGKILLed, restarted after a seeded pause, and the next kill waits until a new
//! generation leads.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;
use rand::seq::SliceRandom;

use super::observer::Observer;
use super::operators::Operators;
use super::workload::LONG_STEPS;
use crate::delivery::receiver::Receiver;
use crate::support::eventually;

/// The instant a kill lands at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// Anywhere: after the lead-in alone.
    Random,
    /// Within a few milliseconds of a Run status write landing (the engine is likely
    /// writing the next one).
    StatusWrite,
    /// Right after the receiver got a delivery and before it answers (answers are held
    /// back a little meanwhile): the attempt reached the user, its outcome is lost.
    Delivery,
    /// While a delay step or a step Job is running.
    StepRunning,
}

const MOMENTS: [Moment; 4] = [
    Moment::Random,
    Moment::StatusWrite,
    Moment::Delivery,
    Moment::StepRunning,
];

/// How long a kill waits for its moment before it lands anyway.
const MOMENT_WAIT: Duration = Duration::from_secs(15);
/// How long a new leader may take to move every run the kill left in flight before the
/// next kill is armed anyway.
const RECOVERY_WAIT: Duration = Duration::from_secs(60);
/// The shortest life of a generation before it is killed: a crash loop faster than
/// the delivery worker's acknowledgement writes (once a second) re-sends its whole
/// catch-up burst at every restart, which measures the loop, not the kills.
const MIN_UPTIME: Duration = Duration::from_secs(2);
/// How long answers are held back while a kill waits for a delivery.
const HOLD_ANSWERS: Duration = Duration::from_millis(300);

/// One planned kill.
#[derive(Debug, Clone)]
pub struct Kill {
    pub moment: Moment,
    lead_in: Duration,
    /// After a status write (StatusWrite).
    jitter: Duration,
    /// Between the kill and the restart.
    down: Duration,
}

/// `count` kills; every moment occurs once before any repeats, in seeded order.
pub fn plan(count: usize, rng: &mut rand::rngs::StdRng) -> Vec<Kill> {
    let mut moments = Vec::new();
    while moments.len() < count {
        let mut round = MOMENTS;
        round.shuffle(rng);
        moments.extend(round);
    }
    moments.truncate(count);
    moments
        .into_iter()
        .map(|moment| Kill {
            moment,
            lead_in: Duration::from_millis(rng.random_range(0..1500)),
            jitter: Duration::from_millis(rng.random_range(0..15)),
            down: Duration::from_millis(rng.random_range(0..500)),
        })
        .collect()
}

/// What one kill did.
#[derive(Debug, Clone)]
pub struct Restart {
    pub moment: Moment,
    /// Whether the moment came (else the kill landed when the wait ran out).
    pub on_moment: bool,
    pub killed_at: Instant,
    pub restarted_at: Instant,
    /// When a new generation held the lease.
    pub leading_at: Instant,
    /// Runs created and not finished when the kill landed.
    pub in_flight: Vec<String>,
}

/// Where the kills look.
pub struct Scene<'a> {
    pub operators: &'a mut Operators,
    pub observer: &'a Observer,
    pub receiver: &'a Receiver,
    pub client: &'a kube::Client,
    pub created: &'a Mutex<Vec<String>>,
    pub runs: usize,
}

/// Carries out the plan. `leading_since`: when the first generation took the lease.
pub async fn carry_out(plan: &[Kill], scene: Scene<'_>, leading_since: Instant) -> Vec<Restart> {
    let mut restarts = Vec::new();
    let mut leading_since = leading_since;
    for (i, kill) in plan.iter().enumerate() {
        let share = scene.runs * (i + 1) / (plan.len() + 1);
        eventually(
            &format!("{share} runs created before kill {}", i + 1),
            Duration::from_secs(600),
            || async { (scene.created.lock().unwrap().len() >= share).then_some(()) },
        )
        .await;
        // Pacing of the disturbance (the kill plan's schedule), not a check.
        tokio::time::sleep_until((leading_since + MIN_UPTIME).into()).await;
        tokio::time::sleep(kill.lead_in).await;
        // Read before the moment: nothing may come between the moment and the kill.
        let leader = scene.operators.leader(scene.client).await;
        let on_moment = tokio::time::timeout(MOMENT_WAIT, moment(kill, &scene, leading_since))
            .await
            .is_ok();
        let killed_at = scene.operators.kill();
        scene.receiver.set_delay(Duration::ZERO);
        let in_flight = scene
            .observer
            .unfinished(&scene.created.lock().unwrap().clone());
        // Pacing: how long the operator stays down is part of the plan.
        tokio::time::sleep(kill.down).await;
        let restarted_at = scene.operators.restart();
        let leading_at = scene
            .operators
            .await_leader(scene.client, leader.as_deref())
            .await;
        // Kill a generation that has taken over, not one still catching up: otherwise
        // consecutive kills pile up on the same steps, and the figures of this restart
        // would be cut short.
        let recovered = Instant::now() + RECOVERY_WAIT;
        while scene.observer.moved(&in_flight, leading_at).is_none() && Instant::now() < recovered {
            scene.operators.supervise();
            scene.observer.next_change(Duration::from_secs(1)).await;
        }
        leading_since = leading_at;
        restarts.push(Restart {
            moment: kill.moment,
            on_moment,
            killed_at,
            restarted_at,
            leading_at,
            in_flight,
        });
    }
    restarts
}

/// Returns at the kill's moment.
async fn moment(kill: &Kill, scene: &Scene<'_>, leading_since: Instant) {
    match kill.moment {
        Moment::Random => {}
        Moment::StatusWrite => {
            while !scene.observer.next_change(MOMENT_WAIT).await {}
            // Pacing: a planned offset after the status write.
            tokio::time::sleep(kill.jitter).await;
        }
        Moment::Delivery => {
            let mut arrivals = scene.receiver.arrivals();
            arrivals.borrow_and_update();
            scene.receiver.set_delay(HOLD_ANSWERS);
            let _ = arrivals.changed().await;
        }
        Moment::StepRunning => {
            while !scene.observer.running(&LONG_STEPS, leading_since) {
                scene.observer.next_change(MOMENT_WAIT).await;
            }
        }
    }
}
