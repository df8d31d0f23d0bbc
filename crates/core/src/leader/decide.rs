//! The pure decisions of leader election: what a replica remembers of the Lease,
//! when a follower may take it, whether the leader still holds it, how long the
//! leader may keep trying to renew, and what it writes.
//!
//! Nothing here compares a timestamp written by another replica with this replica's
//! clock: a follower measures, on its own monotonic clock, how long the record has
//! stayed unchanged. Clocks of different machines may disagree by any amount; they
//! only have to run at about the same rate (see the module docs of `leader`).

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use super::timing::Timing;

/// What identifies one write of the Lease. Every write changes the resourceVersion;
/// holder and renew time are kept for the logs and for a Lease rewritten with the
/// same version (a deleted and recreated one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Who holds the lease; None when nobody does (released, or never held).
    pub holder: Option<String>,
    pub renew_time: Option<Timestamp>,
    pub resource_version: Option<String>,
    /// The lease duration the holder wrote.
    pub lease: Option<Duration>,
}

impl Record {
    pub fn of(lease: &Lease) -> Record {
        let spec = lease.spec.as_ref();
        Record {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
            resource_version: lease.metadata.resource_version.clone(),
            lease: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs),
        }
    }
}

/// The shard count the holder of `lease` runs with, as it stamped it; a Lease written
/// before shards existed was written by a replica of one shard.
pub fn stamped_count(lease: &Lease) -> u32 {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(super::SHARDS_ANNOTATION))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Whether a replica running with `shards` may hold shards of an election whose
/// Leases it observed as `leases` (each with the count stamped on it): only when no
/// Lease is held, by a holder still renewing it, under another count. Replicas of
/// two counts split runs differently, so both executing would execute some runs
/// twice (a rolling update that changes `--shards`: the new replicas wait until the
/// old ones are gone). Pure.
pub fn count_agrees(
    leases: &[(Observation, u32)],
    shards: u32,
    identity: &str,
    own_lease: Duration,
    now: Instant,
) -> bool {
    leases
        .iter()
        .all(|(seen, count)| *count == shards || may_acquire(seen, identity, own_lease, now))
}

/// A record and when this replica first saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub record: Record,
    pub since: Instant,
}

/// Remembers `record`, seen at `now`: the first time a record is seen starts its
/// clock; seeing the same record again keeps it running. `now` must be taken after
/// the read that returned `record` came back, never before it was sent: the record
/// may have been written while the read was under way.
pub fn observe(previous: Option<Observation>, record: Record, now: Instant) -> Observation {
    match previous {
        Some(seen) if seen.record == record => seen,
        _ => Observation { record, since: now },
    }
}

/// Whether this replica (a follower) may take the lease now: it is free, already
/// ours, or its record has not changed for a whole lease duration on this replica's
/// clock — the holder's (as written) or ours, whichever is longer, so a rollout that
/// changes the duration never shortens a wait.
pub fn may_acquire(seen: &Observation, identity: &str, own_lease: Duration, now: Instant) -> bool {
    match seen.record.holder.as_deref() {
        None => true,
        Some(holder) if holder == identity => true,
        Some(_) => {
            let wait = seen.record.lease.unwrap_or(own_lease).max(own_lease);
            now.saturating_duration_since(seen.since) >= wait
        }
    }
}

/// Whether the leader still holds the lease it just read (None: it is gone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holding {
    Mine,
    /// Taken, released or deleted by someone else: another replica may lead already,
    /// so this one must stop at once.
    Lost {
        holder: Option<String>,
    },
}

pub fn holding(record: Option<&Record>, identity: &str) -> Holding {
    let holder = record.and_then(|r| r.holder.clone());
    if holder.as_deref() == Some(identity) {
        Holding::Mine
    } else {
        Holding::Lost { holder }
    }
}

/// How long the leader may still spend on renewing, counted from the start of its
/// last successful renewal (or acquisition); None once the renew deadline has passed
/// and it must stop.
pub fn renew_budget(last_renewal: Instant, timing: &Timing, now: Instant) -> Option<Duration> {
    (last_renewal + timing.renew_deadline)
        .checked_duration_since(now)
        .filter(|left| !left.is_zero())
}

/// The spec this replica writes to take or renew the lease at `now`.
pub fn spec_for(
    identity: &str,
    timing: &Timing,
    previous: Option<&LeaseSpec>,
    now: Timestamp,
) -> LeaseSpec {
    let same_holder = previous.and_then(|p| p.holder_identity.as_deref()) == Some(identity);
    let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(i32::try_from(timing.lease.as_secs()).unwrap_or(i32::MAX)),
        acquire_time: if same_holder {
            previous.and_then(|p| p.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if same_holder {
            transitions
        } else {
            transitions + 1
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_agrees_unless_a_live_holder_runs_another() {
        let t0 = Instant::now();
        let lease = Duration::from_secs(10);
        let held = |holder: &str| Observation {
            record: Record {
                holder: Some(holder.into()),
                renew_time: None,
                resource_version: Some("1".into()),
                lease: Some(lease),
            },
            since: t0,
        };
        let free = Observation {
            record: Record {
                holder: None,
                renew_time: None,
                resource_version: Some("2".into()),
                lease: None,
            },
            since: t0,
        };
        let soon = t0 + Duration::from_secs(1);
        // Same count, held or not: agrees.
        assert!(count_agrees(
            &[(held("a"), 3), (free.clone(), 3)],
            3,
            "me",
            lease,
            soon
        ));
        // Another count, held by a live replica: does not.
        assert!(!count_agrees(&[(held("a"), 2)], 3, "me", lease, soon));
        // Another count, but released, or expired on this replica's clock: agrees.
        assert!(count_agrees(&[(free, 2)], 3, "me", lease, soon));
        assert!(count_agrees(&[(held("a"), 2)], 3, "me", lease, t0 + lease));
        // Nothing seen: agrees.
        assert!(count_agrees(&[], 3, "me", lease, soon));
    }

    #[test]
    fn an_unstamped_lease_counts_one_shard() {
        let mut lease = Lease::default();
        assert_eq!(stamped_count(&lease), 1);
        lease.metadata.annotations =
            Some([(super::super::SHARDS_ANNOTATION.to_string(), "4".to_string())].into());
        assert_eq!(stamped_count(&lease), 4);
    }

    fn record(holder: Option<&str>, version: &str) -> Record {
        Record {
            holder: holder.map(str::to_string),
            renew_time: Some("2026-01-01T00:00:00Z".parse().unwrap()),
            resource_version: Some(version.into()),
            lease: Some(Duration::from_secs(15)),
        }
    }

    fn timing() -> Timing {
        Timing::new(Duration::from_secs(15), None, None).unwrap()
    }

    const LEASE: Duration = Duration::from_secs(15);

    #[test]
    fn an_unchanged_record_keeps_its_first_sighting() {
        let t0 = Instant::now();
        let first = observe(None, record(Some("b"), "1"), t0);
        let again = observe(Some(first.clone()), record(Some("b"), "1"), t0 + LEASE);
        assert_eq!(again.since, t0, "same record: the clock keeps running");
        let renewed = observe(Some(again), record(Some("b"), "2"), t0 + LEASE);
        assert_eq!(renewed.since, t0 + LEASE, "a renewal restarts it");
    }

    #[test]
    fn a_held_lease_is_taken_after_a_full_duration_without_change_on_our_clock() {
        let t0 = Instant::now();
        let seen = observe(None, record(Some("b"), "1"), t0);
        assert!(!may_acquire(&seen, "a", LEASE, t0));
        assert!(!may_acquire(
            &seen,
            "a",
            LEASE,
            t0 + LEASE - Duration::from_millis(1)
        ));
        assert!(may_acquire(&seen, "a", LEASE, t0 + LEASE));
    }

    #[test]
    fn the_renew_time_written_by_another_clock_does_not_matter() {
        // b's clock is an hour behind: its renew time looks long expired, but we saw the
        // record only now, so we wait a whole duration from now.
        let t0 = Instant::now();
        let mut stale = record(Some("b"), "7");
        stale.renew_time = Some("2020-01-01T00:00:00Z".parse().unwrap());
        let seen = observe(None, stale, t0);
        assert!(!may_acquire(&seen, "a", LEASE, t0 + Duration::from_secs(1)));
    }

    #[test]
    fn a_free_or_own_lease_is_taken_at_once() {
        let t0 = Instant::now();
        assert!(may_acquire(
            &observe(None, record(None, "1"), t0),
            "a",
            LEASE,
            t0
        ));
        assert!(may_acquire(
            &observe(None, record(Some("a"), "1"), t0),
            "a",
            LEASE,
            t0
        ));
    }

    #[test]
    fn an_empty_holder_is_no_holder() {
        // How other tools (and older releases) mark a free lease.
        let lease = Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(String::new()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(Record::of(&lease).holder, None);
    }

    #[test]
    fn the_longer_of_the_written_and_our_own_duration_is_waited() {
        let t0 = Instant::now();
        let mut long = record(Some("b"), "1");
        long.lease = Some(Duration::from_secs(60));
        let seen = observe(None, long, t0);
        assert!(!may_acquire(&seen, "a", LEASE, t0 + LEASE));
        assert!(may_acquire(&seen, "a", LEASE, t0 + Duration::from_secs(60)));
        let mut short = record(Some("b"), "1");
        short.lease = Some(Duration::from_secs(1));
        let seen = observe(None, short, t0);
        assert!(!may_acquire(&seen, "a", LEASE, t0 + Duration::from_secs(2)));
    }

    #[test]
    fn the_leader_holds_only_a_lease_naming_it() {
        assert_eq!(holding(Some(&record(Some("a"), "1")), "a"), Holding::Mine);
        assert_eq!(
            holding(Some(&record(Some("b"), "1")), "a"),
            Holding::Lost {
                holder: Some("b".into())
            }
        );
        assert_eq!(
            holding(Some(&record(None, "1")), "a"),
            Holding::Lost { holder: None },
            "released by someone else: a follower may take it at once"
        );
        assert_eq!(holding(None, "a"), Holding::Lost { holder: None });
    }

    #[test]
    fn the_leader_stops_trying_at_the_renew_deadline() {
        let t = timing();
        let last = Instant::now();
        assert_eq!(renew_budget(last, &t, last), Some(t.renew_deadline));
        assert_eq!(
            renew_budget(last, &t, last + Duration::from_secs(9)),
            Some(Duration::from_secs(1))
        );
        assert_eq!(renew_budget(last, &t, last + t.renew_deadline), None);
        assert_eq!(renew_budget(last, &t, last + LEASE), None);
    }

    #[test]
    fn transitions_count_changes_of_holder() {
        let now = Timestamp::now();
        let previous = LeaseSpec {
            holder_identity: Some("b".into()),
            lease_transitions: Some(3),
            ..Default::default()
        };
        let mine = spec_for("a", &timing(), Some(&previous), now);
        assert_eq!(mine.lease_transitions, Some(4));
        assert_eq!(mine.lease_duration_seconds, Some(15));
        let renewed = spec_for("a", &timing(), Some(&mine), Timestamp::now());
        assert_eq!(renewed.lease_transitions, Some(4));
        assert_eq!(renewed.acquire_time, mine.acquire_time);
    }
}
