//! Who is there to share the shards: with `--shards` above 1, every controller
//! replica keeps a small Lease of its own (`<lease>-member-<identity>`) fresh, and
//! reads the others' to know how many replicas are alive, so that each takes only
//! its fair share of the free shards and a replica that starts a moment later still
//! finds some left.
//!
//! Membership only balances; it never decides who may execute what. Whether a
//! member is alive is judged by comparing its renew time with this replica's clock,
//! which two machines may disagree on: a wrong count makes one replica take one
//! shard more or less than its share, never two replicas hold one shard (that is the
//! shard Leases' job, see the `leader` module).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use sha2::{Digest, Sha256};

/// A member whose Lease has not been renewed for this long is removed by the others
/// (it crashed without leaving; its identity never comes back).
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// The most shards one replica takes when `live` replicas share `shards`: all of
/// them are held once every replica holds its share. Pure.
pub fn fair_share(shards: u32, live: u32) -> u32 {
    shards.div_ceil(live.max(1))
}

/// The Lease name of the member `identity` of the election `lease`: a valid object
/// name whatever the identity holds (a hostname, a random suffix).
pub fn member_name(lease: &str, identity: &str) -> String {
    let cleaned: String = identity
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = format!("{lease}-member-{}", cleaned.trim_matches('-'));
    // 253 is the limit of an object name; the identity's tail (its random part) is
    // what tells two members of one host apart, so keep the end.
    let excess = name.len().saturating_sub(253);
    name[excess..].trim_start_matches('-').to_string()
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

/// How many of `members` renewed within `fresh` of `now` (this replica counts
/// itself: it has just renewed). Pure.
pub fn live(members: &[Lease], now: Timestamp, fresh: Duration) -> u32 {
    let count = members
        .iter()
        .filter(|lease| renewed_within(lease, now, fresh))
        .count();
    u32::try_from(count).unwrap_or(u32::MAX).max(1)
}

fn renewed_within(lease: &Lease, now: Timestamp, window: Duration) -> bool {
    let Some(renewed) = lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()) else {
        return false;
    };
    let window = jiff::SignedDuration::try_from(window).unwrap_or(jiff::SignedDuration::MAX);
    now.duration_since(renewed.0) <= window
}

/// One replica's membership.
pub struct Membership {
    api: Api<Lease>,
    lease: String,
    identity: String,
    fresh: Duration,
}

impl Membership {
    /// The membership of `identity` in the election of `lease` (in `namespace`);
    /// a member counts as alive while it renewed within `fresh`.
    pub fn new(
        client: Client,
        namespace: &str,
        lease: &str,
        identity: &str,
        fresh: Duration,
    ) -> Self {
        Membership {
            api: Api::namespaced(client, namespace),
            lease: lease.to_string(),
            identity: identity.to_string(),
            fresh,
        }
    }

    fn name(&self) -> String {
        member_name(&self.lease, &self.identity)
    }

    /// Renews this replica's member Lease (creating it the first time), then counts
    /// the members alive, and removes members gone for an hour.
    pub async fn heartbeat(&self) -> Result<u32, kube::Error> {
        let now = Timestamp::now();
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name()),
                labels: Some([(GROUP_LABEL.to_string(), group_of(&self.lease))].into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                renew_time: Some(MicroTime(now)),
                lease_duration_seconds: i32::try_from(self.fresh.as_secs()).ok(),
                ..Default::default()
            }),
        };
        let mut lease = serde_json::to_value(&lease).unwrap_or_default();
        lease["apiVersion"] = "coordination.k8s.io/v1".into();
        lease["kind"] = "Lease".into();
        self.api
            .patch(
                &self.name(),
                &PatchParams::apply("flowline-members").force(),
                &Patch::Apply(lease),
            )
            .await?;
        let group = format!("{GROUP_LABEL}={}", group_of(&self.lease));
        let members = self.api.list(&ListParams::default().labels(&group)).await?;
        for gone in members
            .items
            .iter()
            .filter(|l| !renewed_within(l, now, FORGET_AFTER))
        {
            // Best effort: another member may remove it first.
            let _ = self
                .api
                .delete(&gone.name_any(), &DeleteParams::default())
                .await;
        }
        Ok(live(&members.items, now, self.fresh))
    }

    /// Removes this replica's member Lease (a clean shutdown), so the others count
    /// one replica fewer at once.
    pub async fn leave(&self) {
        if let Err(err) = self
            .api
            .delete(&self.name(), &DeleteParams::default())
            .await
        {
            tracing::warn!(error = %err, "could not remove this replica's member Lease; it goes stale");
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

    #[test]
    fn member_names_are_valid_object_names() {
        assert_eq!(
            member_name("flowline-controller", "Host_1-op_AbC"),
            "flowline-controller-member-host-1-op-abc"
        );
        let long = member_name("lease", &format!("{}-tail", "x".repeat(400)));
        assert!(long.len() <= 253);
        assert!(long.ends_with("-tail"));
        assert!(!long.starts_with('-'));
    }

    fn member(renewed: Option<Timestamp>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                renew_time: renewed.map(MicroTime),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_members_renewed_recently_count() {
        let now: Timestamp = "2026-11-25T12:00:00Z".parse().unwrap();
        let fresh = Duration::from_secs(10);
        let members = [
            member(Some(now)),
            member(Some(now - jiff::SignedDuration::from_secs(9))),
            member(Some(now - jiff::SignedDuration::from_secs(11))),
            member(None),
        ];
        assert_eq!(live(&members, now, fresh), 2);
        // Nobody listed yet (the first heartbeat's own write not seen): still one.
        assert_eq!(live(&[], now, fresh), 1);
    }

    #[test]
    fn groups_are_valid_label_values() {
        let group = group_of(&"l".repeat(300));
        assert_eq!(group.len(), 24);
        assert!(group.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
