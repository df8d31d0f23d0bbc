//! Who is there to share the shards: with `--shards` above 1, every controller
//! replica holds one of a fixed number of member Leases (`<lease>-member-<i>`,
//! `i < --member-slots`) and keeps it fresh, and reads the others' to know how many
//! replicas are alive, so that each takes only its fair share of the free shards and
//! a replica that starts a moment later still finds some left. The names are known in
//! advance, so RBAC can name them (the chart grants `update` on exactly those); a
//! slot whose holder stopped renewing is taken over by the next replica that needs
//! one, with the read's resourceVersion as precondition, so two replicas never both
//! take it.
//!
//! Membership only balances; it never decides who may execute what. Whether a
//! member is alive is judged by comparing its renew time with this replica's clock,
//! which two machines may disagree on: a wrong count makes one replica take one
//! shard more or less than its share, never two replicas hold one shard (that is the
//! shard Leases' job, see the `leader` module). A replica that finds every slot held
//! still counts itself, and only the others cannot count it.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};
use sha2::{Digest, Sha256};

/// The most shards one replica takes when `live` replicas share `shards`: all of
/// them are held once every replica holds its share. Pure.
pub fn fair_share(shards: u32, live: u32) -> u32 {
    shards.div_ceil(live.max(1))
}

/// The name of member slot `slot` of the election `lease`.
pub fn slot_name(lease: &str, slot: u32) -> String {
    format!("{lease}-member-{slot}")
}

/// The label value that groups the members of `lease` (a hash: a label value is
/// limited to 63 characters, a Lease name is not).
fn group_of(lease: &str) -> String {
    hex::encode(&Sha256::digest(lease.as_bytes())[..12])
}

/// The order in which the replica `identity` looks at `shards` shards: from a
/// place of its own, so replicas starting together mostly try different free
/// shards first instead of all racing for shard 0. Pure.
pub fn rotation(identity: &str, shards: u32) -> Vec<u32> {
    let shards = shards.max(1);
    let digest = Sha256::digest(identity.as_bytes());
    let first = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) % shards;
    (0..shards).map(|i| (first + i) % shards).collect()
}

const GROUP_LABEL: &str = "flowline.io/members-of";

/// How many replicas are alive: this one, and every member of `members` held by
/// another identity and renewed within `fresh` of `now`. Pure.
pub fn live(members: &[Lease], identity: &str, now: Timestamp, fresh: Duration) -> u32 {
    let others = members
        .iter()
        .filter(|lease| holder(lease) != Some(identity) && renewed_within(lease, now, fresh))
        .count();
    u32::try_from(others).unwrap_or(u32::MAX).saturating_add(1)
}

fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

fn renewed_within(lease: &Lease, now: Timestamp, window: Duration) -> bool {
    let Some(renewed) = lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()) else {
        return false;
    };
    let window = jiff::SignedDuration::try_from(window).unwrap_or(jiff::SignedDuration::MAX);
    now.duration_since(renewed.0) <= window
}

/// What a heartbeat writes, decided from the members listed.
#[derive(Debug, PartialEq)]
pub enum Claim {
    /// Renew the slot this replica holds (the listed object: its resourceVersion is
    /// the precondition).
    Renew(Lease),
    /// Take a slot no live replica holds: create it (`None`) or take over the
    /// listed object of a holder that stopped renewing.
    Take { slot: u32, existing: Option<Lease> },
    /// Every slot is held by a live replica.
    NoneFree,
}

/// The claim of `identity` among `members` of the election `lease` with `slots`
/// slots: its own slot if it holds one, else the first slot that is missing or whose
/// holder has not renewed within `fresh`. Pure.
pub fn claim(
    members: &[Lease],
    lease: &str,
    identity: &str,
    slots: u32,
    now: Timestamp,
    fresh: Duration,
) -> Claim {
    let slot_of = |slot: u32| {
        let name = slot_name(lease, slot);
        members
            .iter()
            .find(|m| m.metadata.name.as_deref() == Some(name.as_str()))
    };
    if let Some(own) = (0..slots)
        .filter_map(slot_of)
        .find(|m| holder(m) == Some(identity))
    {
        return Claim::Renew(own.clone());
    }
    for slot in 0..slots {
        match slot_of(slot) {
            None => {
                return Claim::Take {
                    slot,
                    existing: None,
                };
            }
            Some(m) if !renewed_within(m, now, fresh) => {
                return Claim::Take {
                    slot,
                    existing: Some(m.clone()),
                };
            }
            Some(_) => {}
        }
    }
    Claim::NoneFree
}

/// One replica's membership.
pub struct Membership {
    api: Api<Lease>,
    lease: String,
    identity: String,
    slots: u32,
    fresh: Duration,
}

impl Membership {
    /// The membership of `identity` in the election of `lease` (in `namespace`),
    /// among `slots` member slots; a member counts as alive while it renewed within
    /// `fresh`.
    pub fn new(
        client: Client,
        namespace: &str,
        lease: &str,
        identity: &str,
        slots: u32,
        fresh: Duration,
    ) -> Self {
        Membership {
            api: Api::namespaced(client, namespace),
            lease: lease.to_string(),
            identity: identity.to_string(),
            slots: slots.max(1),
            fresh,
        }
    }

    async fn members(&self) -> Result<Vec<Lease>, kube::Error> {
        let group = format!("{GROUP_LABEL}={}", group_of(&self.lease));
        Ok(self
            .api
            .list(&ListParams::default().labels(&group))
            .await?
            .items)
    }

    /// `lease` (a listed member, or a new one named `name`) held by this replica and
    /// renewed at `renewed` (`None`: released).
    fn held(&self, lease: Option<Lease>, name: String, renewed: Option<Timestamp>) -> Lease {
        let mut lease = lease.unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(name),
                labels: Some([(GROUP_LABEL.to_string(), group_of(&self.lease))].into()),
                ..Default::default()
            },
            spec: None,
        });
        lease.spec = Some(LeaseSpec {
            holder_identity: renewed.map(|_| self.identity.clone()),
            renew_time: renewed.map(MicroTime),
            lease_duration_seconds: i32::try_from(self.fresh.as_secs()).ok(),
            ..Default::default()
        });
        lease
    }

    /// Renews this replica's member slot (taking a free one the first time, or when
    /// another replica took it over), and counts the members alive. Replicas starting
    /// together race for the same free slot: the losers (a conflict) look again at
    /// once, so every replica holds a slot, and is counted, after its first heartbeat.
    pub async fn heartbeat(&self) -> Result<u32, kube::Error> {
        let mut attempts = self.slots;
        loop {
            let now = Timestamp::now();
            let members = self.members().await?;
            match self.write(&members, now).await {
                Err(kube::Error::Api(e)) if e.code == 409 && attempts > 0 => attempts -= 1,
                written => {
                    written?;
                    return Ok(live(&members, &self.identity, now, self.fresh));
                }
            }
        }
    }

    /// Writes what [`claim`] says of `members`.
    async fn write(&self, members: &[Lease], now: Timestamp) -> Result<(), kube::Error> {
        let params = PostParams::default();
        match claim(
            members,
            &self.lease,
            &self.identity,
            self.slots,
            now,
            self.fresh,
        ) {
            Claim::Renew(own) => {
                let name = own.name_any();
                let renewed = self.held(Some(own), name.clone(), Some(now));
                self.api.replace(&name, &params, &renewed).await?;
            }
            Claim::Take {
                slot,
                existing: None,
            } => {
                let taken = self.held(None, slot_name(&self.lease, slot), Some(now));
                self.api.create(&params, &taken).await?;
            }
            Claim::Take {
                slot,
                existing: Some(stale),
            } => {
                let name = slot_name(&self.lease, slot);
                let taken = self.held(Some(stale), name.clone(), Some(now));
                self.api.replace(&name, &params, &taken).await?;
            }
            Claim::NoneFree => tracing::warn!(
                slots = self.slots,
                "every member slot is held by a live replica; this replica counts itself \
                 but the others cannot count it (raise --member-slots)"
            ),
        }
        Ok(())
    }

    /// Releases this replica's member slot (a clean shutdown), so the others count
    /// one replica fewer at once and the slot is free for the next.
    pub async fn leave(&self) {
        let released = async {
            let members = self.members().await?;
            let Some(own) = members
                .into_iter()
                .find(|m| holder(m) == Some(self.identity.as_str()))
            else {
                return Ok(());
            };
            let name = own.name_any();
            let released = self.held(Some(own), name.clone(), None);
            self.api
                .replace(&name, &PostParams::default(), &released)
                .await
                .map(|_| ())
        };
        if let Err(err) = released.await {
            tracing::warn!(error = %err, "could not release this replica's member slot; it goes stale");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_replica_takes_at_most_its_share() {
        assert_eq!(fair_share(1, 1), 1);
        assert_eq!(fair_share(3, 1), 3);
        assert_eq!(fair_share(3, 2), 2);
        assert_eq!(fair_share(3, 3), 1);
        assert_eq!(fair_share(3, 5), 1);
        assert_eq!(fair_share(4, 3), 2);
        // A count of 0 (impossible: a replica counts itself) is read as 1.
        assert_eq!(fair_share(4, 0), 4);
    }

    #[test]
    fn every_shard_is_looked_at_once_from_a_place_of_the_replica() {
        for identity in ["a", "b", "pod-7-op-x"] {
            let mut order = rotation(identity, 5);
            assert_eq!(order.len(), 5);
            let first = order[0];
            assert_eq!(order[1], (first + 1) % 5);
            order.sort_unstable();
            assert_eq!(order, vec![0, 1, 2, 3, 4]);
        }
        let firsts: std::collections::HashSet<u32> = (0..20)
            .map(|i| rotation(&format!("replica-{i}"), 3)[0])
            .collect();
        assert_eq!(firsts.len(), 3, "replicas start from different shards");
        assert_eq!(rotation("x", 1), vec![0]);
    }

    fn member(name: &str, holder: &str, renewed: Option<Timestamp>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: renewed.map(MicroTime),
                ..Default::default()
            }),
        }
    }

    fn at() -> Timestamp {
        "2026-11-25T12:00:00Z".parse().unwrap()
    }

    fn ago(seconds: i64) -> Option<Timestamp> {
        Some(at() - jiff::SignedDuration::from_secs(seconds))
    }

    #[test]
    fn only_other_members_renewed_recently_count_besides_this_one() {
        let fresh = Duration::from_secs(10);
        let members = [
            member("l-member-0", "me", ago(30)),
            member("l-member-1", "a", ago(0)),
            member("l-member-2", "b", ago(9)),
            member("l-member-3", "c", ago(11)),
            member("l-member-4", "d", None),
            // A member Lease named after its holder (older replicas) counts too.
            member("l-member-host-1-op-x", "e", ago(1)),
        ];
        assert_eq!(live(&members, "me", at(), fresh), 4);
        // Nobody listed yet: this replica alone.
        assert_eq!(live(&[], "me", at(), fresh), 1);
    }

    #[test]
    fn a_replica_renews_its_slot_or_takes_the_first_missing_or_stale_one() {
        let fresh = Duration::from_secs(10);
        let live_a = member("l-member-0", "a", ago(1));
        let stale_b = member("l-member-1", "b", ago(11));
        let mine = member("l-member-2", "me", ago(30));
        let outside = member("l-member-3", "me", ago(0));
        type Row<'a> = (&'a str, Vec<Lease>, u32, Claim);
        let table: Vec<Row> = vec![
            (
                "none listed: slot 0 is created",
                vec![],
                3,
                Claim::Take {
                    slot: 0,
                    existing: None,
                },
            ),
            (
                "its own slot is renewed, even when it went stale",
                vec![live_a.clone(), stale_b.clone(), mine.clone()],
                3,
                Claim::Renew(mine.clone()),
            ),
            (
                "a stale holder's slot is taken over with its version",
                vec![live_a.clone(), stale_b.clone()],
                3,
                Claim::Take {
                    slot: 1,
                    existing: Some(stale_b.clone()),
                },
            ),
            (
                "a gap is created",
                vec![stale_b.clone()],
                3,
                Claim::Take {
                    slot: 0,
                    existing: None,
                },
            ),
            (
                "every slot held by a live replica",
                vec![live_a.clone(), member("l-member-1", "b", ago(0))],
                2,
                Claim::NoneFree,
            ),
            (
                "a Lease beyond the slots is not a slot",
                vec![live_a.clone(), outside],
                1,
                Claim::NoneFree,
            ),
        ];
        for (case, members, slots, want) in table {
            assert_eq!(
                claim(&members, "l", "me", slots, at(), fresh),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn slot_names_are_known_in_advance() {
        assert_eq!(
            slot_name("flowline-controller", 3),
            "flowline-controller-member-3"
        );
    }

    #[test]
    fn groups_are_valid_label_values() {
        let group = group_of(&"l".repeat(300));
        assert_eq!(group.len(), 24);
        assert!(group.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
