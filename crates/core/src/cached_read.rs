//! When the run controller's caches may stand in for the fresh read a run gets before
//! it starts ([`crate::triage::Decision::Read`]).
//!
//! A fresh read costs a round trip to the API server before every run starts: the
//! largest part of a fast run's start latency, and two of the four requests a fast
//! run makes. It guards against a cache that lags: the run may have started, ended or
//! been recorded `queued` already, by another process or by this one. For a run that
//! has no status in the cache, those cases are ruled out without a read when all of
//! these hold ([`Freshness`]):
//!
//! - **Born watched.** Its first watch event was not part of a list: it was created
//!   after this process's watch of the runs began (the watch lists again from scratch
//!   after any gap, and a listed run never counts as born watched).
//! - **Its shard was held before that watch began.** Shards are held by Lease, one
//!   holder at a time, and a process never gives one back (losing it ends the
//!   process). A run created after the watch began was therefore created while this
//!   process held its shard: no other process ever executed it or wrote its status.
//! - **Untouched here.** This process never wrote a status for it (executing it,
//!   recording it `queued`, ending it) that its cache has not shown yet.
//! - **Pinned, and owned by the cached workflow** (its owner reference names the
//!   cached workflow's uid): the version to execute is in the run itself, and the
//!   workflow it was created from is the one the cache holds (one deleted and
//!   recreated under the same name is read afresh). The cached workflow answers what
//!   the read of it would (paused, gone) with the same small lag any read has by the
//!   time the run starts.
//!
//! Any other run is read afresh, as before. The first write of a run stays
//! conditional on the version it was decided on, so what changes after the decision
//! (a cancel, a delete) is seen by the write or by the watch, exactly as after a read.

use crate::crd::{Run, Workflow};
use crate::triage::{Ownership, ownership};

/// What the run controller knows of a cached run beyond the run itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Freshness {
    /// Its first watch event came after the watch's list (it was created while watched).
    pub born_watched: bool,
    /// This process held its shard before its watch of the runs began.
    pub shard_held_before_watch: bool,
    /// This process wrote a status for it that its cache has not shown yet.
    pub touched_here: bool,
}

/// Whether the cached `run` (with its cached `workflow`, if any) may stand in for a
/// fresh read of both, given what else is known of it. Pure.
pub fn stands_in(run: &Run, workflow: Option<&Workflow>, freshness: Freshness) -> bool {
    let Some(workflow) = workflow else {
        return false;
    };
    run.status.is_none()
        && run.spec.workflow.is_some()
        && freshness.born_watched
        && freshness.shard_held_before_watch
        && !freshness.touched_here
        && workflow.metadata.uid.is_some()
        && ownership(run, workflow) == Ownership::Owned
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn run(status: Value, pinned: bool, owner: Option<&str>) -> Run {
        let mut metadata = json!({"name": "r", "namespace": "n", "uid": "run-uid"});
        if let Some(uid) = owner {
            metadata["ownerReferences"] = json!([{"apiVersion": "flowline.io/v1",
                "kind": "Workflow", "name": "wf", "uid": uid, "controller": true}]);
        }
        let mut spec = json!({"workflowRef": "wf"});
        if pinned {
            spec["workflow"] = json!({"generation": 1, "name": "W",
                "steps": [{"id": "a", "action": "delay", "with": {"ms": 1}}]});
        }
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": metadata, "spec": spec, "status": status,
        }))
        .unwrap()
    }

    fn workflow(uid: Option<&str>) -> Workflow {
        let mut metadata = json!({"name": "wf", "namespace": "n", "generation": 1});
        if let Some(uid) = uid {
            metadata["uid"] = json!(uid);
        }
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow", "metadata": metadata,
            "spec": {"name": "W", "steps": [{"id": "a", "action": "delay", "with": {"ms": 1}}]},
        }))
        .unwrap()
    }

    const FRESH: Freshness = Freshness {
        born_watched: true,
        shard_held_before_watch: true,
        touched_here: false,
    };

    #[test]
    fn only_a_pinned_owned_run_born_watched_in_a_held_shard_and_untouched_skips_the_read() {
        let new = run(Value::Null, true, Some("wf-uid"));
        let wf = workflow(Some("wf-uid"));
        let rows: Vec<(&str, Run, Option<Workflow>, Freshness, bool)> = vec![
            (
                "a new run as the API creates it",
                new.clone(),
                Some(wf.clone()),
                FRESH,
                true,
            ),
            (
                "it has a status: started, queued or ended somewhere",
                run(json!({"phase": "queued"}), true, Some("wf-uid")),
                Some(wf.clone()),
                FRESH,
                false,
            ),
            (
                "unpinned: pinning needs the workflow as it is",
                run(Value::Null, false, Some("wf-uid")),
                Some(wf.clone()),
                FRESH,
                false,
            ),
            (
                "listed, not born watched: another process may have run it",
                new.clone(),
                Some(wf.clone()),
                Freshness {
                    born_watched: false,
                    ..FRESH
                },
                false,
            ),
            (
                "its shard was gained after the watch began",
                new.clone(),
                Some(wf.clone()),
                Freshness {
                    shard_held_before_watch: false,
                    ..FRESH
                },
                false,
            ),
            (
                "this process wrote a status the cache does not show yet",
                new.clone(),
                Some(wf.clone()),
                Freshness {
                    touched_here: true,
                    ..FRESH
                },
                false,
            ),
            (
                "its workflow is not cached",
                new.clone(),
                None,
                FRESH,
                false,
            ),
            (
                "an orphan (kubectl): adopted on a fresh read",
                run(Value::Null, true, None),
                Some(wf.clone()),
                FRESH,
                false,
            ),
            (
                "owned by a workflow deleted and recreated under its name",
                run(Value::Null, true, Some("old-uid")),
                Some(wf.clone()),
                FRESH,
                false,
            ),
            (
                "a cached workflow without a uid proves nothing",
                new.clone(),
                Some(workflow(None)),
                FRESH,
                false,
            ),
        ];
        for (what, run, wf, freshness, expected) in rows {
            assert_eq!(stands_in(&run, wf.as_ref(), freshness), expected, "{what}");
        }
    }
}
