//! Sharded execution: with `--shards N`, the runs are split into N shards and each
//! shard is executed by the replica that holds its Lease (see `operator::leading`).
//! Every replica watches every run; it reconciles only those of the shards it holds.
//!
//! A run's shard follows from the run alone and never changes while it executes:
//! the runs of a workflow with a concurrency limit, a rate limit or a debounce all fall
//! in one shard (the workflow's), so one replica sees a whole group or key and its
//! queue; any other run falls
//! in the shard of its uid, which spreads one busy workflow over every replica. A run
//! not yet pinned to a workflow version is looked at by its uid's shard, whose holder
//! only pins it (a conditional write); the pinned run is then executed in its own shard.
//!
//! A replica never gives a shard back while it runs: losing a shard's Lease ends the
//! process, like losing leadership (so the set of shards held only grows, and no
//! execution of a shard can outlive its Lease).

use std::sync::atomic::{AtomicU64, Ordering};

use futures::Stream;
use kube::ResourceExt;
use sha2::{Digest, Sha256};

use flowline_core::crd::Run;

/// The most shards (one bit each in [`Shards`]).
pub const MAX_SHARDS: u32 = 64;

/// The shard of `run` among `count` shards. Pure and stable across versions and
/// processes (a SHA-256, not the standard library's hasher, whose output may change
/// between Rust releases and so between two replicas of a rolling update).
pub fn of_run(run: &Run, count: u32) -> u32 {
    if count <= 1 {
        return 0;
    }
    let grouped = run
        .spec
        .workflow
        .as_ref()
        .is_some_and(|wf| wf.holds_runs_back());
    let key = if grouped {
        format!(
            "workflow/{}/{}",
            run.namespace().unwrap_or_default(),
            run.spec.workflow_ref
        )
    } else {
        format!("run/{}", run.uid().unwrap_or_else(|| run.name_any()))
    };
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(count)) as u32
}

/// The shards this process holds, shared by its run controllers.
pub struct Shards {
    count: u32,
    owned: AtomicU64,
    /// Bumped on every shard gained: the run controllers then look at all their runs
    /// again (those of the new shard were left alone until now).
    gained: tokio::sync::watch::Sender<u64>,
}

impl Shards {
    /// `count` shards, none held yet. `count` is clamped to 1..=[`MAX_SHARDS`] (the
    /// command line refuses anything else).
    pub fn new(count: u32) -> Self {
        Shards {
            count: count.clamp(1, MAX_SHARDS),
            owned: AtomicU64::new(0),
            gained: tokio::sync::watch::Sender::new(0),
        }
    }

    /// One shard, held: a process that executes every run (the leader without
    /// sharding, tests).
    pub fn all() -> Self {
        let shards = Shards::new(1);
        shards.gain(0);
        shards
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// Records that this process holds `shard` from now on.
    pub fn gain(&self, shard: u32) {
        if shard >= self.count {
            return;
        }
        self.owned.fetch_or(1 << shard, Ordering::SeqCst);
        self.gained.send_modify(|n| *n += 1);
    }

    pub fn holds(&self, shard: u32) -> bool {
        shard < self.count && self.owned.load(Ordering::SeqCst) & (1 << shard) != 0
    }

    /// The shards this process holds, a bit each.
    pub fn held_mask(&self) -> u64 {
        self.owned.load(Ordering::SeqCst)
    }

    /// How many shards this process holds.
    pub fn held(&self) -> u32 {
        self.owned.load(Ordering::SeqCst).count_ones()
    }

    /// Whether this process executes `run`.
    pub fn owns(&self, run: &Run) -> bool {
        self.holds(of_run(run, self.count))
    }

    /// Yields once each time a shard is gained after the call.
    pub fn gains(&self) -> impl Stream<Item = ()> + Send + 'static {
        let mut seen = self.gained.subscribe();
        seen.mark_unchanged();
        futures::stream::unfold(seen, |mut seen| async move {
            seen.changed().await.ok()?;
            Some(((), seen))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use serde_json::json;

    fn run(uid: &str, workflow: &str, concurrency: bool) -> Run {
        let mut spec = json!({"workflowRef": workflow});
        if concurrency {
            spec["workflow"] =
                json!({"generation": 1, "name": "w", "concurrency": {"limit": 1}, "steps": []});
        }
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": format!("run-{uid}"), "namespace": "acct", "uid": uid},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn one_shard_holds_every_run() {
        assert_eq!(of_run(&run("a", "w", false), 1), 0);
        assert_eq!(of_run(&run("a", "w", false), 0), 0);
    }

    #[test]
    fn runs_spread_over_the_shards_by_uid() {
        let mut per_shard = [0u32; 3];
        for i in 0..300 {
            let shard = of_run(&run(&format!("uid-{i}"), "w", false), 3);
            per_shard[shard as usize] += 1;
        }
        // Roughly a third each (a fixed input: the hash is stable, so this is exact
        // from one run of the test to the next).
        assert!(
            per_shard.iter().all(|&n| (70..=130).contains(&n)),
            "{per_shard:?}"
        );
        // Stable: the same run, the same shard.
        assert_eq!(
            of_run(&run("uid-7", "w", false), 3),
            of_run(&run("uid-7", "other", false), 3)
        );
    }

    #[test]
    fn runs_of_a_limited_workflow_share_one_shard() {
        let shards: std::collections::HashSet<u32> = (0..50)
            .map(|i| of_run(&run(&format!("uid-{i}"), "limited", true), 8))
            .collect();
        assert_eq!(shards.len(), 1);
    }

    #[test]
    fn a_process_owns_the_runs_of_the_shards_it_holds() {
        let shards = Shards::new(4);
        let r = run("uid-1", "w", false);
        assert!(!shards.owns(&r));
        shards.gain(of_run(&r, 4));
        assert!(shards.owns(&r));
        assert_eq!(shards.held(), 1);
        // Out of range: ignored.
        shards.gain(9);
        assert_eq!(shards.held(), 1);
        assert!(!shards.holds(9));
        assert!(Shards::all().owns(&r));
    }

    #[tokio::test]
    async fn gains_wake_the_controllers() {
        let shards = Shards::new(2);
        shards.gain(0); // before subscribing: not reported
        let mut gains = Box::pin(shards.gains());
        shards.gain(1);
        assert_eq!(gains.next().await, Some(()));
    }
}
