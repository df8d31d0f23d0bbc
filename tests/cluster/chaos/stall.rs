//! The stalled leader: once half the runs are created and a long step is running, the
//! leader's connection to the API server stops answering (the stall proxy holds every
//! byte, closes nothing). It must notice and exit before the follower may take the
//! lease; the follower must then lead.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::operators::Operators;
use super::stage::Stage;
use super::workload::LONG_STEPS;
use crate::stall_proxy::StallProxy;
use crate::support::eventually;

/// How a hand-over went.
pub struct Takeover {
    pub stalled_at: Instant,
    /// When the cut-off leader was seen exited (it exited no later).
    pub a_gone: Instant,
    /// The last time the Lease still named the cut-off leader (the follower led only
    /// after that).
    pub b_not_yet: Instant,
    /// When the Lease was first seen naming the follower.
    pub b_leads: Instant,
    pub exit_code: Option<i32>,
}

/// Cuts the leader `a` (reaching the API server through `proxy`) off and waits for the
/// hand-over to another holder of the lease.
pub async fn cut_off(
    stage: &Stage,
    proxy: &StallProxy,
    a: &mut Operators,
    created: &Mutex<Vec<String>>,
) -> Takeover {
    let client = stage.client();
    let a_identity = a.leader(&client).await.expect("the cut-off operator leads");
    let half = stage.settings.runs / 2;
    eventually(
        "half the runs created",
        Duration::from_secs(600),
        || async { (created.lock().unwrap().len() >= half).then_some(()) },
    )
    .await;
    let wait = Instant::now() + Duration::from_secs(15);
    while !stage.observer.running(&LONG_STEPS, stage.began) && Instant::now() < wait {
        stage.observer.next_change(Duration::from_secs(1)).await;
    }
    proxy.stall();
    let stalled_at = Instant::now();
    let deadline = stalled_at + Duration::from_secs(60);
    let (mut a_gone, mut exit_code, mut b_not_yet) = (None, None, stalled_at);
    loop {
        if a_gone.is_none()
            && let Some(status) = a.exit_status()
        {
            a_gone = Some(Instant::now());
            exit_code = status.code();
        }
        let asked = Instant::now();
        match a.leader(&client).await {
            Some(holder) if holder != a_identity => break,
            _ => b_not_yet = asked,
        }
        assert!(Instant::now() < deadline, "nobody took over within 60 s");
        // The poll interval of a wait for another leader, not a check.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Takeover {
        stalled_at,
        a_gone: a_gone.expect("the cut-off leader must have exited before another leads"),
        b_not_yet,
        b_leads: Instant::now(),
        exit_code,
    }
}

impl Takeover {
    pub fn describe(&self) -> String {
        let secs = |t: Instant| t.duration_since(self.stalled_at).as_secs_f64();
        format!(
            "stalled leader: exited (code {:?}) {:.1} s after the stall, another led {:.1} s \
             after it (seen not yet leading {:.1} s after it)",
            self.exit_code,
            secs(self.a_gone),
            secs(self.b_leads),
            secs(self.b_not_yet)
        )
    }
}
