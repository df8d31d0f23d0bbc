//! The leader's life in `flowline operator`: wait for the lease, arm the watchdog,
//! start the leader's work (controllers, delivery worker), renew. A leader that
//! loses the lease — taken, or not renewed within the renew deadline — ends the
//! process at once with [`EXIT_LOST_LEADERSHIP`]: cancelling tokens would leave
//! detached tasks (a run executing, a delivery attempt, a queued status write)
//! running for an unknown while, and another replica may take over soon. Kubernetes
//! restarts the container, which comes back as a follower.
//!
//! With `--shards N` above 1 the runs are split into N shards (see
//! `controller::shard`), each with a Lease: shard 0's is the leader-election lease
//! (its holder also runs schedules and deliveries), shard i's is
//! `<lease>-shard-<i>`. Every shard's Lease is held exactly like the leader's (its
//! own watchdog; losing any of them ends the process). To spread the shards, each
//! replica keeps a member Lease slot fresh (`controller::leader::members`) and takes free
//! shards only up to its fair share, ceil(N / replicas alive); a shard whose holder
//! stopped renewing is taken over by whoever sees it expire first, share or not, so
//! a killed replica's runs move on within a lease duration and a retry period.
//!
//! A clean shutdown (SIGTERM) keeps renewing while the process winds down; the leases
//! are released only after the whole runtime, and so every task of the leader, has
//! been dropped ([`Leadership::hand_over`], called by `main`). The watchdogs stay
//! armed until then: if winding down outlasts the renew deadline, the process exits
//! without releasing and the leases simply expire.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use flowline_controller::leader::members::{self, Membership};
use flowline_controller::leader::{self, LeaseConfig, Lost, Observation, Watchdog};
use flowline_telemetry::leader_metrics::LeaderGauge;

/// Exit status of a process that stopped leading (not a crash: it is restarted and
/// follows).
pub const EXIT_LOST_LEADERSHIP: i32 = 3;

/// A lease this process holds, with the watchdog that ends the process if it is
/// not renewed in time.
type Held = (LeaseConfig, Arc<Watchdog>);

/// A lease just taken and renewed, its work not started.
struct Taken {
    cfg: LeaseConfig,
    watchdog: Arc<Watchdog>,
    renewing: tokio::task::JoinHandle<()>,
}

/// One process's candidacy, shared by the task that leads and the shutdown that
/// hands the leases over.
#[derive(Clone)]
pub struct Leadership {
    /// Shard 0's lease: the leader-election lease.
    cfg: LeaseConfig,
    shards: u32,
    /// Member Lease slots (`--member-slots`).
    member_slots: u32,
    gauge: LeaderGauge,
    /// For the client that releases the leases after the runtime is gone (shared:
    /// a configuration is large).
    kube_config: Arc<kube::Config>,
    /// The leases this process holds, each with its watchdog.
    held: Arc<Mutex<Vec<Held>>>,
}

impl Leadership {
    pub fn new(
        cfg: LeaseConfig,
        shards: u32,
        member_slots: u32,
        gauge: LeaderGauge,
        kube_config: kube::Config,
    ) -> Self {
        Leadership {
            cfg,
            shards: shards.max(1),
            member_slots,
            gauge,
            kube_config: Arc::new(kube_config),
            held: Arc::default(),
        }
    }

    /// The Lease of `shard`.
    fn lease_of(&self, shard: u32) -> LeaseConfig {
        let mut cfg = self.cfg.clone();
        if shard > 0 {
            cfg.name = format!("{}-shard-{shard}", self.cfg.name);
        }
        cfg
    }

    /// This replica's member Lease in the election (sharded only).
    fn membership(&self, client: Client) -> Membership {
        Membership::new(
            client,
            &self.cfg.namespace,
            &self.cfg.name,
            &self.cfg.identity,
            self.member_slots,
            self.cfg.timing.lease,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for leases and calls `start` for each shard taken (0 is the leader's),
    /// with a token cancelled on shutdown; renews them until the process ends.
    /// Returns only on a shutdown; a lost lease ends the process.
    ///
    /// Every retry period: renew membership (sharded only), check that no replica
    /// running with another shard count holds a shard, then look at each shard not
    /// held and take it if it is free and this replica is below its share, or if its
    /// holder stopped renewing. A shard just taken is checked again before its work
    /// starts (two replicas of different counts that take a shard at the same moment
    /// each see the other's write in the second look, at least one of them, and
    /// that one gives its shard back).
    pub async fn lead(
        self,
        client: Client,
        shutdown: CancellationToken,
        mut start: impl FnMut(u32, CancellationToken) + Send,
    ) {
        let timing = self.cfg.timing;
        // One shard needs no membership: it is all of the share.
        let membership = (self.shards > 1).then(|| self.membership(client.clone()));
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.cfg.namespace);
        let mut seen: Vec<Option<Observation>> = vec![None; self.shards as usize];
        let mut election = HashMap::new();
        let mut mine = vec![false; self.shards as usize];
        let mut rounds = 0u64;
        loop {
            let live = match &membership {
                None => Some(1),
                Some(membership) => match membership.heartbeat().await {
                    Ok(live) => Some(live),
                    Err(err) => {
                        tracing::warn!(error = %err, "membership not renewed; taking no free shard this round");
                        None
                    }
                },
            };
            // A sharded replica's first round only announces it: replicas started
            // together see each other before any takes a free shard.
            // Holding every shard, there is nothing to look at (and no request to make).
            let looking = (rounds > 0 || membership.is_none()) && mine.contains(&false);
            if looking && self.count_agrees(&api, &mut election).await {
                let share = live.map_or(0, |live| members::fair_share(self.shards, live));
                for shard in members::rotation(&self.cfg.identity, self.shards) {
                    let index = shard as usize;
                    if mine[index] {
                        continue;
                    }
                    let held = mine.iter().filter(|&&m| m).count();
                    let take_free = u32::try_from(held).unwrap_or(u32::MAX) < share;
                    let cfg = self.lease_of(shard);
                    let Some(acquired) =
                        leader::attempt(&api, &cfg, &mut seen[index], take_free).await
                    else {
                        continue;
                    };
                    // Renewed from now on, whatever the second look takes: the renew
                    // deadline counts from the attempt.
                    let taken = self.keep(shard, acquired, &client);
                    if !self.count_agrees(&api, &mut election).await {
                        // Nothing of the shard started: it may be handed back at once.
                        self.give_back(taken, &client).await;
                        seen[index] = None;
                        break;
                    }
                    mine[index] = true;
                    self.start(shard, &shutdown, &mut start);
                }
            }
            rounds += 1;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(timing.retry_period) => {}
            }
        }
    }

    /// Reads every shard Lease of the election and tells whether this replica's
    /// shard count agrees with those held (see [`leader::count_agrees`]); `election`
    /// carries what earlier looks observed, so a Lease whose holder died counts once
    /// it has stayed unchanged for a lease duration. False when the read fails.
    async fn count_agrees(
        &self,
        api: &Api<Lease>,
        election: &mut HashMap<String, Observation>,
    ) -> bool {
        let leases = match tokio::time::timeout(
            self.cfg.timing.renew_deadline,
            leader::election_leases(api, &self.cfg),
        )
        .await
        {
            Ok(Ok(leases)) => leases,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "cannot read the shard Leases; taking none this round");
                return false;
            }
            Err(_) => {
                tracing::warn!("reading the shard Leases timed out; taking none this round");
                return false;
            }
        };
        let now = Instant::now();
        let observed: Vec<(Observation, u32)> = leases
            .iter()
            .map(|lease| {
                let name = lease.name_any();
                let seen = leader::observe(election.remove(&name), leader::Record::of(lease), now);
                election.insert(name, seen.clone());
                (seen, leader::stamped_count(lease))
            })
            .collect();
        let agrees = leader::count_agrees(
            &observed,
            self.shards,
            &self.cfg.identity,
            self.cfg.timing.lease,
            now,
        );
        if !agrees {
            tracing::warn!(
                shards = self.shards,
                "a replica running with another --shards holds shards: taking none until it is gone"
            );
        }
        agrees
    }

    /// Arms the watchdog of a lease just taken (from the instant the winning attempt
    /// began: the deadline a follower's wait is measured against) and renews the
    /// lease in a task of its own; the shard's work is not started yet.
    fn keep(&self, shard: u32, acquired: Instant, client: &Client) -> Taken {
        let cfg = self.lease_of(shard);
        let timing = cfg.timing;
        let gauge = self.gauge.clone();
        let watchdog = Arc::new(Watchdog::arm(acquired + timing.renew_deadline, move || {
            abdicate(&gauge, &Lost::Deadline(timing.renew_deadline))
        }));
        // Listed at once, so a shutdown meanwhile disarms and releases it too.
        self.lock().push((cfg.clone(), watchdog.clone()));
        let (client, gauge) = (client.clone(), self.gauge.clone());
        let renewing = {
            let (cfg, watchdog) = (cfg.clone(), watchdog.clone());
            tokio::spawn(async move {
                let lost = leader::keep(client, &cfg, acquired, &watchdog).await;
                abdicate(&gauge, &lost);
            })
        };
        Taken {
            cfg,
            watchdog,
            renewing,
        }
    }

    /// Starts the work of a shard whose lease [`Leadership::keep`] renews.
    fn start(
        &self,
        shard: u32,
        shutdown: &CancellationToken,
        start: &mut impl FnMut(u32, CancellationToken),
    ) {
        tracing::info!(shard, shards = self.shards, "holding the shard");
        start(shard, shutdown.child_token());
        // Counted once its work has started: a reader of the gauge may rely on it.
        if shard == 0 {
            self.gauge.set(true);
        }
        self.gauge.set_shards(self.lock().len());
    }

    /// Stops renewing a lease whose work never started and releases it.
    async fn give_back(&self, taken: Taken, client: &Client) {
        taken.renewing.abort();
        taken.watchdog.disarm();
        self.lock().retain(|(cfg, _)| cfg.name != taken.cfg.name);
        leader::release(client.clone(), &taken.cfg).await;
    }

    /// Releases the leases after a clean shutdown, so others take over at once.
    /// Call only once the runtime that ran [`Leadership::lead`] has been dropped: a
    /// released lease may be taken immediately, so nothing of this process may still
    /// run. Blocks (its own small runtime and client; the old ones are gone).
    pub fn hand_over(self) {
        let held: Vec<_> = std::mem::take(&mut *self.lock());
        for (_, watchdog) in &held {
            watchdog.disarm();
        }
        self.gauge.set(false);
        self.gauge.set_shards(0);
        if held.is_empty() && self.shards == 1 {
            return; // never led, no membership to leave
        }
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(err) => {
                tracing::warn!(error = %err, "cannot release the leases; they expire");
                return;
            }
        };
        runtime.block_on(async {
            let client = match Client::try_from((*self.kube_config).clone()) {
                Ok(client) => client,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot release the leases; they expire");
                    return;
                }
            };
            for (cfg, _) in &held {
                leader::release(client.clone(), cfg).await;
            }
            if self.shards > 1 {
                self.membership(client).leave().await;
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
    // The line above is written by the log writer's thread: let it out, within a
    // small part of the stop budget (`leader::timing`).
    flowline_telemetry::log_writer::flush_process_within(std::time::Duration::from_millis(100));
    std::process::exit(EXIT_LOST_LEADERSHIP);
}
