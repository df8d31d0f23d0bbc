//! Leader election with a coordination.k8s.io Lease, so that of several operator
//! replicas at most one runs the controllers (executes runs, delivers webhooks) at
//! any moment. The API is not gated: every replica serves it.
//!
//! The scheme is client-go's. A follower never compares the holder's `renewTime` with
//! its own wall clock (clocks of two machines may disagree by any amount): it
//! remembers the last Lease record it read and the monotonic instant it first saw
//! it, and takes the lease only once that record has stayed unchanged for a whole
//! lease duration. The leader renews every retry period; every request runs under a
//! deadline, so a stalled connection to the API server cannot hang the loop.
//!
//! Why two leaders cannot overlap: let `s` be the instant the leader started its
//! last successful renewal. Its write reached the API server after `s`, so a follower
//! saw that record after `s` and may take over only a lease duration `D` later — not
//! before `s + D`. The leader gives up at `s + R` (the renew deadline) and its
//! watchdog thread ends the process then, within `STOP_BUDGET`; `R + STOP_BUDGET ≤ D`
//! is checked at start-up. This holds as long as the two machines' clocks run at
//! about the same rate (with the defaults, one may run up to `D / (R + STOP_BUDGET)`,
//! about 1.4 times, faster than the other). A follower that replaces a record it saw
//! expire while the leader did renew meanwhile gets a conflict: the replace carries
//! the resourceVersion it saw.
//!
//! Not covered (Kubernetes has no fencing tokens): a request the old leader sent
//! before it stopped can reach the API server later, and a process frozen past its
//! deadline (SIGSTOP, a paused VM) runs a moment longer when it thaws.
//!
//! `decide` holds the pure decisions, `timing` the durations, `watchdog` the thread;
//! this file does the reads and writes.

pub mod members;

use flowline_core::leader::{decide, timing, watchdog};

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use decide::Holding;
pub use decide::{Observation, Record, count_agrees, observe, stamped_count};
pub use timing::{Timing, TimingError, parse_seconds};
pub use watchdog::Watchdog;

/// Settings of one elector.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub timing: Timing,
    /// The election this Lease belongs to (the name of its shard 0, the leader's
    /// Lease) and the shard count this replica runs with: both are stamped on every
    /// Lease it writes, so replicas configured with another count can tell (see
    /// [`decide::count_agrees`]).
    pub election: String,
    pub shards: u32,
}

pub use flowline_core::leader::SHARDS_ANNOTATION;
/// Label of a shard Lease: which election it belongs to (a hash: a label value is
/// limited to 63 characters, a Lease name is not).
const ELECTION_LABEL: &str = "flowline.io/shards-of";

fn election_label(election: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(format!("shards/{election}").as_bytes())[..12])
}

/// Stamps `lease` with this replica's election and shard count.
fn stamp(lease: &mut Lease, cfg: &LeaseConfig) {
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(SHARDS_ANNOTATION.into(), cfg.shards.to_string());
    lease
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(ELECTION_LABEL.into(), election_label(&cfg.election));
}

/// Every shard Lease of `cfg`'s election: those stamped with it, and its shard 0 by
/// name (a leader's Lease written before shards existed carries no stamp).
pub async fn election_leases(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
) -> Result<Vec<Lease>, kube::Error> {
    let selector = format!("{ELECTION_LABEL}={}", election_label(&cfg.election));
    let mut leases = api
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?
        .items;
    if !leases.iter().any(|l| l.name_any() == cfg.election)
        && let Some(first) = api.get_opt(&cfg.election).await?
    {
        leases.push(first);
    }
    Ok(leases)
}

/// Why a leader stopped leading.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Lost {
    #[error("the lease is no longer ours (holder now: {holder:?})")]
    Taken { holder: Option<String> },
    #[error("the lease was not renewed within the renew deadline ({0:?})")]
    Deadline(Duration),
}

/// What one renewal attempt found.
enum Renewal {
    Renewed,
    Lost(Option<String>),
    /// The Lease changed between our read and our write: read again.
    Conflict,
}

fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409)
}

/// One attempt to take the lease; true when this replica holds it now. With
/// `take_free` false, a free lease (never held, or released) is only looked at, not
/// taken: a replica that holds its share of shards leaves free ones to the others,
/// and still takes over one whose holder stopped renewing.
async fn try_acquire(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    seen: &mut Option<Observation>,
    take_free: bool,
) -> Result<bool, kube::Error> {
    let Some(lease) = api.get_opt(&cfg.name).await? else {
        if !take_free {
            return Ok(false);
        }
        let mut lease = Lease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                ..Default::default()
            },
            spec: Some(decide::spec_for(
                &cfg.identity,
                &cfg.timing,
                None,
                Timestamp::now(),
            )),
        };
        stamp(&mut lease, cfg);
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false), // another replica created it first
            Err(e) => Err(e),
        };
    };
    // The instant is taken after the read came back: see `decide::observe`.
    let now = Instant::now();
    let observed = decide::observe(seen.take(), Record::of(&lease), now);
    let may = decide::may_acquire(&observed, &cfg.identity, cfg.timing.lease, now)
        && (take_free || observed.record.holder.is_some());
    *seen = Some(observed);
    if !may {
        return Ok(false);
    }
    write_ours(api, cfg, lease).await
}

/// Writes this replica as the holder of `lease` (as read); false on a conflict. The
/// resourceVersion in `lease` makes this a compare-and-swap: if the lease changed
/// after our read (the holder renewed, another follower took it first), it fails.
async fn write_ours(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    mut lease: Lease,
) -> Result<bool, kube::Error> {
    lease.spec = Some(decide::spec_for(
        &cfg.identity,
        &cfg.timing,
        lease.spec.as_ref(),
        Timestamp::now(),
    ));
    stamp(&mut lease, cfg);
    match api
        .replace(&lease.name_any(), &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_conflict(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// One attempt of the leader to renew.
async fn try_renew(api: &Api<Lease>, cfg: &LeaseConfig) -> Result<Renewal, kube::Error> {
    let lease = api.get_opt(&cfg.name).await?;
    let Some(lease) = lease else {
        return Ok(Renewal::Lost(None));
    };
    if let Holding::Lost { holder } = decide::holding(Some(&Record::of(&lease)), &cfg.identity) {
        return Ok(Renewal::Lost(holder));
    }
    Ok(if write_ours(api, cfg, lease).await? {
        Renewal::Renewed
    } else {
        Renewal::Conflict
    })
}

/// Waits until this replica holds the lease; returns the instant the successful
/// attempt started (the renew deadline counts from there), or None on shutdown.
pub async fn acquire(
    client: Client,
    cfg: &LeaseConfig,
    shutdown: &CancellationToken,
) -> Option<Instant> {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut seen = None;
    loop {
        if let Some(started) = attempt(&api, cfg, &mut seen, true).await {
            return Some(started);
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(cfg.timing.retry_period) => {}
        }
    }
}

/// One bounded attempt to take the lease (see [`try_acquire`] for `take_free`):
/// the instant it started when this replica holds the lease now. `seen` carries
/// what the previous attempts observed.
pub async fn attempt(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    seen: &mut Option<Observation>,
    take_free: bool,
) -> Option<Instant> {
    let started = Instant::now();
    // A follower holds nothing, so any bound works; the renew deadline keeps a
    // stalled connection from stopping the attempts for long.
    let attempt = tokio::time::timeout(
        cfg.timing.renew_deadline,
        try_acquire(api, cfg, seen, take_free),
    );
    match attempt.await {
        Ok(Ok(true)) => {
            tracing::info!(identity = %cfg.identity, lease = %cfg.name, "became leader");
            return Some(started);
        }
        Ok(Ok(false)) => {}
        Ok(Err(err)) => {
            tracing::warn!(error = %err, lease = %cfg.name, "lease acquisition failed; retrying")
        }
        Err(_) => tracing::warn!(lease = %cfg.name, "lease acquisition timed out; retrying"),
    }
    None
}

/// Renews the lease every retry period, moving the watchdog's deadline on with every
/// success; returns when leadership is lost — taken by someone else, or not renewed
/// within the renew deadline counted from `acquired` or the last renewal. Each attempt
/// is bounded by the time left until that deadline, so it returns at the deadline
/// even when the API server never answers.
pub async fn keep(
    client: Client,
    cfg: &LeaseConfig,
    acquired: Instant,
    watchdog: &Watchdog,
) -> Lost {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let timing = &cfg.timing;
    let mut last = acquired;
    let expired = Lost::Deadline(timing.renew_deadline);
    loop {
        let Some(left) = decide::renew_budget(last, timing, Instant::now()) else {
            return expired;
        };
        tokio::time::sleep(timing.retry_period.min(left)).await;
        // Taken before the request is sent: the write it makes lands after this.
        let started = Instant::now();
        let Some(budget) = decide::renew_budget(last, timing, started) else {
            return expired;
        };
        match tokio::time::timeout(budget, try_renew(&api, cfg)).await {
            Ok(Ok(Renewal::Renewed)) => {
                last = started;
                watchdog.extend(started + timing.renew_deadline);
            }
            Ok(Ok(Renewal::Lost(holder))) => return Lost::Taken { holder },
            Ok(Ok(Renewal::Conflict)) => {
                tracing::warn!("the lease changed while renewing; reading it again");
            }
            Ok(Err(err)) => tracing::warn!(error = %err, "lease renewal failed"),
            Err(_) => tracing::warn!(?budget, "lease renewal got no answer in time"),
        }
    }
}

/// Gives the lease up, so another replica takes over at once instead of waiting for
/// it to expire. Only for a process that has stopped all its leader work: a free
/// lease may be taken immediately.
pub async fn release(client: Client, cfg: &LeaseConfig) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let give_up = async {
        let mut lease = api.get_opt(&cfg.name).await?;
        let Some(lease) = lease
            .as_mut()
            .filter(|l| decide::holding(Some(&Record::of(l)), &cfg.identity) == Holding::Mine)
        else {
            return Ok(());
        };
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.renew_time = None;
        }
        api.replace(&cfg.name, &PostParams::default(), lease)
            .await
            .map(|_| ())
    };
    match tokio::time::timeout(cfg.timing.renew_deadline, give_up).await {
        Ok(Ok(())) => tracing::info!("released the leader-election lease"),
        Ok(Err(err)) => tracing::warn!(error = %err, "could not release the lease; it expires"),
        Err(_) => tracing::warn!("releasing the lease got no answer in time; it expires"),
    }
}
