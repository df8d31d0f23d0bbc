//! The leader's life in `flowline operator`: wait for the lease, arm the watchdog,
//! start the leader's work (controllers, delivery worker), renew. A leader that
//! loses the lease — taken, or not renewed within the renew deadline — ends the
//! process at once with [`EXIT_LOST_LEADERSHIP`]: cancelling tokens would leave
//! detached tasks (a run executing, a delivery attempt, a queued status write)
//! running for an unknown while, and another replica may take over soon. Kubernetes
//! restarts the container, which comes back as a follower.
//!
//! A clean shutdown (SIGTERM) keeps renewing while the process winds down; the lease
//! is released only after the whole runtime, and so every task of the leader, has
//! been dropped ([`Leadership::hand_over`], called by `main`). The watchdog stays
//! armed until then: if winding down outlasts the renew deadline, the process exits
//! without releasing and the lease simply expires.

use std::sync::{Arc, OnceLock};

use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::controller::leader::{self, LeaseConfig, Lost, Watchdog};
use crate::telemetry::leader_metrics::LeaderGauge;

/// Exit status of a process that stopped leading (not a crash: it is restarted and
/// follows).
pub const EXIT_LOST_LEADERSHIP: i32 = 3;

/// One process's candidacy, shared by the task that leads and the shutdown that
/// hands the lease over.
#[derive(Clone)]
pub struct Leadership {
    cfg: LeaseConfig,
    gauge: LeaderGauge,
    /// For the client that releases the lease after the runtime is gone (shared:
    /// a configuration is large).
    kube_config: Arc<kube::Config>,
    /// Set when this process becomes leader.
    watchdog: Arc<OnceLock<Arc<Watchdog>>>,
}

impl Leadership {
    pub fn new(cfg: LeaseConfig, gauge: LeaderGauge, kube_config: kube::Config) -> Self {
        Leadership {
            cfg,
            gauge,
            kube_config: Arc::new(kube_config),
            watchdog: Arc::default(),
        }
    }

    /// Waits for the lease, then calls `start` with a token cancelled on shutdown and
    /// renews until the process ends. Returns only on a shutdown before leading; a lost
    /// lease ends the process.
    pub async fn lead(
        self,
        client: Client,
        shutdown: CancellationToken,
        start: impl FnOnce(CancellationToken),
    ) {
        let Some(acquired) = leader::acquire(client.clone(), &self.cfg, &shutdown).await else {
            return;
        };
        let timing = self.cfg.timing;
        let gauge = self.gauge.clone();
        // Armed before any leader work starts, from the instant the winning attempt
        // began: the deadline a follower's wait is measured against.
        let watchdog = Arc::new(Watchdog::arm(acquired + timing.renew_deadline, move || {
            abdicate(&gauge, &Lost::Deadline(timing.renew_deadline))
        }));
        let _ = self.watchdog.set(watchdog.clone());
        self.gauge.set(true);
        start(shutdown.child_token());
        let lost = leader::keep(client, &self.cfg, acquired, &watchdog).await;
        abdicate(&self.gauge, &lost);
    }

    /// Releases the lease after a clean shutdown, so a follower takes over at once.
    /// Call only once the runtime that ran [`Leadership::lead`] has been dropped: a
    /// released lease may be taken immediately, so nothing of this leader may still
    /// run. Blocks (its own small runtime and client; the old ones are gone).
    pub fn hand_over(self) {
        let Some(watchdog) = self.watchdog.get() else {
            return; // never led
        };
        watchdog.disarm();
        self.gauge.set(false);
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(err) => {
                tracing::warn!(error = %err, "cannot release the lease; it expires");
                return;
            }
        };
        runtime.block_on(async {
            match Client::try_from((*self.kube_config).clone()) {
                Ok(client) => leader::release(client, &self.cfg).await,
                Err(err) => tracing::warn!(error = %err, "cannot release the lease; it expires"),
            }
        });
    }
}

/// Ends the process: see the module docs.
fn abdicate(gauge: &LeaderGauge, reason: &Lost) -> ! {
    gauge.set(false);
    tracing::error!(
        %reason,
        "stopped leading; exiting at once so that none of this leader's work continues \
         (restarted, the process follows)"
    );
    std::process::exit(EXIT_LOST_LEADERSHIP);
}
