//! Waits that are not written yet. A run that must wait for its concurrency group,
//! its rate limit or its debounce is recorded `queued` (a status write, which kubectl
//! and field selectors see) only once it has waited [`QUEUED_SETTLE`]. Most waits in a
//! burst end sooner, and a write for each would slow the very drain it reports: the API
//! server takes every write in turn, so 1,000 runs arriving into a limit paid 1,000
//! extra writes while they drained. Until a wait is written, `/v1` shows the run
//! `queued` from its caches, decided by the same admission code the operator runs
//! ([`Unrecorded`]).
//!
//! A wait for the account's bound (`--max-runs-per-account`, `--max-running-runs`) is
//! written at once: it depends on what one operator process executes, which no cache
//! shows.

use std::collections::HashMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::timing::{Gate, Ledger};
use super::{
    Admission, GroupSummary, Local, Member, admit, classify, group_of, needs_admission, order_of,
};
use crate::crd::{ConcurrencyPolicy, QueuedFor, Run};

/// How long a run waits before its wait is written.
pub const QUEUED_SETTLE: Duration = Duration::from_secs(10);

/// Whether `run` may be waiting without its wait recorded: no status yet, and pinned
/// to a version with a concurrency limit, a rate limit or a debounce. Only such runs
/// need [`Unrecorded`]; a view of any other takes its status as it is.
pub fn may_wait_unrecorded(run: &Run) -> bool {
    run.status.is_none()
        && (run.spec.workflow.as_ref()).is_some_and(|version| version.holds_runs_back())
}

/// A run whose gate (a rate limit's window, a debounce) opens sooner than this is
/// about to start: its wait is not written even once settled. A drain longer than
/// [`QUEUED_SETTLE`] otherwise wrote the waits of every run it had not reached at
/// once, moments before most of them started, and those writes held the starts back.
pub const ABOUT_TO_START: Duration = Duration::from_secs(5);

/// How much longer the `queued` record of `run`, which must wait for `waits_for`, is
/// put off at `now`; None: write it now (its wait has settled, it is the account's
/// bound, or it has a status already). A wait whose gate opens at `opens_at`, within
/// [`ABOUT_TO_START`], is put off until then.
pub fn record_put_off(
    run: &Run,
    waits_for: QueuedFor,
    opens_at: Option<Timestamp>,
    now: Timestamp,
) -> Option<Duration> {
    if run.status.is_some() || waits_for == QueuedFor::Account {
        return None;
    }
    let mut until = crate::crd::timestamps::created_at(&run.metadata) + QUEUED_SETTLE;
    if let Some(opens_at) = opens_at
        && opens_at.duration_since(now)
            < SignedDuration::try_from(ABOUT_TO_START).unwrap_or_default()
    {
        until = until.max(opens_at);
    }
    let left = until.duration_since(now);
    (left.is_positive()).then(|| left.unsigned_abs())
}

/// One workflow's runs as a cache holds them, ready to tell which of its runs
/// without a status wait, and for what.
pub struct Unrecorded {
    ledger: Ledger,
    /// Each concurrency group's unfinished runs.
    groups: HashMap<String, Vec<Member>>,
    /// The same, summarized, for `policy: queue`.
    summaries: HashMap<String, GroupSummary>,
}

impl Unrecorded {
    /// From every run of one workflow (summaries of [`super::summarize`] or whole
    /// runs).
    pub fn of<'a>(runs: impl IntoIterator<Item = &'a Run>) -> Self {
        let ledger = Ledger::default();
        let mut groups: HashMap<String, Vec<Member>> = HashMap::new();
        for run in runs {
            ledger.observe(run);
            let Some(state) = run
                .spec
                .workflow
                .as_ref()
                .filter(|v| v.concurrency.is_some())
                .and_then(|_| classify(run, Local::Unknown))
            else {
                continue;
            };
            if let Ok(group) = group_of(run) {
                groups.entry(group).or_default().push(Member {
                    order: order_of(run),
                    state,
                });
            }
        }
        let summaries = groups
            .iter()
            .map(|(group, members)| (group.clone(), GroupSummary::of(members.iter().cloned())))
            .collect();
        Unrecorded {
            ledger,
            groups,
            summaries,
        }
    }

    /// What `run` (of this workflow) waits for at `now`, when it has no status yet
    /// and its admission says it must wait: its rate limit or debounce first (a run
    /// they hold back does not contend for a slot yet), then its concurrency group.
    /// None for a run that may start, has a status (the operator's word), is
    /// cancelled, or is about to be ended without starting (superseded, a key that
    /// cannot be rendered, `cancel_newest` with no slot).
    pub fn waits_for(&self, run: &Run, now: Timestamp) -> Option<QueuedFor> {
        if !may_wait_unrecorded(run) || run.spec.cancel {
            return None;
        }
        match self.ledger.gate_for(run, now) {
            Ok((Gate::Open, _)) => {}
            Ok((Gate::Until(_), waits_for)) => {
                return Some(waits_for.unwrap_or(QueuedFor::RateLimit));
            }
            Ok((Gate::Superseded { .. }, _)) | Err(_) => return None,
        }
        let concurrency = needs_admission(run)?;
        let group = group_of(run).ok()?;
        let this = order_of(run);
        let waits = match concurrency.policy {
            ConcurrencyPolicy::Queue => self
                .summaries
                .get(&group)
                .is_some_and(|s| s.must_wait(concurrency.limit, &this)),
            ConcurrencyPolicy::CancelNewest | ConcurrencyPolicy::CancelInProgress => {
                let name = run.name_any();
                let others: Vec<Member> = (self.groups.get(&group).into_iter().flatten())
                    .filter(|m| m.order.name != name)
                    .cloned()
                    .collect();
                matches!(
                    admit(concurrency, &group, &this, &others),
                    Admission::Queue | Admission::CancelOthers { start: false, .. }
                )
            }
        };
        waits.then_some(QueuedFor::Concurrency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const NOW: i64 = 1_800_000_000_000;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).unwrap()
    }

    /// A run of a version with `settings` (concurrency, rateLimit, debounce), created
    /// `created` ms, with `status` and `payload`.
    fn run(name: &str, settings: Value, created: i64, status: Value, payload: Value) -> Run {
        let mut version = json!({"generation": 1, "name": "W",
            "steps": [{"id": "a", "action": "delay", "with": {"ms": 1}}]});
        for (k, v) in settings.as_object().unwrap() {
            version[k] = v.clone();
        }
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": name, "namespace": "n", "uid": name,
                "annotations": {"flowline.io/created-at": at(created).to_string()}},
            "spec": {"workflowRef": "wf", "workflow": version, "payload": payload},
            "status": status,
        }))
        .unwrap()
    }

    fn limit(n: u32, policy: &str) -> Value {
        json!({"concurrency": {"limit": n, "policy": policy, "key": "{{ trigger.payload.doc }}"}})
    }

    /// The summaries a cache of them holds.
    fn summarized(mut runs: Vec<Run>) -> Vec<Run> {
        for run in &mut runs {
            let kept = super::super::summarize(run);
            run.drop_details(crate::crd::EventDetail::IdentityOnly);
            run.spec.workflow = kept;
        }
        runs
    }

    fn waits(runs: &[Run], name: &str, now: i64) -> Option<QueuedFor> {
        let unrecorded = Unrecorded::of(runs);
        let run = runs.iter().find(|r| r.name_any() == name).unwrap();
        unrecorded.waits_for(run, at(now))
    }

    #[test]
    fn a_wait_is_written_once_it_has_settled_or_at_once_for_the_account() {
        let settle = QUEUED_SETTLE.as_millis() as i64;
        let new = run("r", limit(1, "queue"), NOW, Value::Null, json!({}));
        let queued = run(
            "q",
            limit(1, "queue"),
            NOW,
            json!({"phase": "queued"}),
            json!({}),
        );
        // (what, run, waits for, now, put off)
        let soon = ABOUT_TO_START.as_millis() as i64;
        let ms = |ms: i64| Some(Duration::from_millis(ms as u64));
        // (what, run, waits for, its gate opens at, now, put off)
        type Row<'a> = (
            &'a str,
            &'a Run,
            QueuedFor,
            Option<i64>,
            i64,
            Option<Duration>,
        );
        let rows: Vec<Row> = vec![
            (
                "just created",
                &new,
                QueuedFor::Concurrency,
                None,
                NOW,
                Some(QUEUED_SETTLE),
            ),
            (
                "half-way",
                &new,
                QueuedFor::RateLimit,
                None,
                NOW + settle / 2,
                Some(QUEUED_SETTLE / 2),
            ),
            (
                "settled",
                &new,
                QueuedFor::Debounce,
                None,
                NOW + settle,
                None,
            ),
            (
                "long after",
                &new,
                QueuedFor::Concurrency,
                None,
                NOW + 10 * settle,
                None,
            ),
            (
                "settled, but its gate opens in a second: put off until then",
                &new,
                QueuedFor::RateLimit,
                Some(NOW + settle + 1_000),
                NOW + settle,
                ms(1_000),
            ),
            (
                "settled, and its gate opens later than that: written",
                &new,
                QueuedFor::RateLimit,
                Some(NOW + settle + soon),
                NOW + settle,
                None,
            ),
            (
                "not settled yet, its gate about to open: put off until the later",
                &new,
                QueuedFor::Debounce,
                Some(NOW + 1_000),
                NOW,
                Some(QUEUED_SETTLE),
            ),
            (
                "the account's bound",
                &new,
                QueuedFor::Account,
                None,
                NOW,
                None,
            ),
            (
                "recorded already",
                &queued,
                QueuedFor::Concurrency,
                Some(NOW + 1_000),
                NOW,
                None,
            ),
        ];
        for (what, run, waits_for, opens_at, now, put_off) in rows {
            assert_eq!(
                record_put_off(run, waits_for, opens_at.map(at), at(now)),
                put_off,
                "{what}"
            );
        }
    }

    #[test]
    fn a_queue_shows_the_runs_beyond_its_free_slots_waiting_in_order() {
        let runs = summarized(vec![
            run(
                "running",
                limit(2, "queue"),
                NOW,
                json!({"phase": "running"}),
                json!({"doc": "a"}),
            ),
            run(
                "first",
                limit(2, "queue"),
                NOW + 1,
                Value::Null,
                json!({"doc": "a"}),
            ),
            run(
                "second",
                limit(2, "queue"),
                NOW + 2,
                Value::Null,
                json!({"doc": "a"}),
            ),
            run(
                "other-doc",
                limit(2, "queue"),
                NOW + 3,
                Value::Null,
                json!({"doc": "b"}),
            ),
            run(
                "done",
                limit(2, "queue"),
                NOW - 5,
                json!({"phase": "succeeded"}),
                json!({"doc": "a"}),
            ),
        ]);
        let rows = [
            ("the oldest waiting run takes the free slot", "first", None),
            (
                "the next waits for its group",
                "second",
                Some(QueuedFor::Concurrency),
            ),
            ("another group has its own slots", "other-doc", None),
            (
                "a run with a status is the operator's word",
                "running",
                None,
            ),
        ];
        for (what, name, expected) in rows {
            assert_eq!(waits(&runs, name, NOW + 10), expected, "{what}");
        }
    }

    #[test]
    fn cancel_policies_show_a_wait_only_while_older_runs_stop() {
        let newest = |policy| {
            summarized(vec![
                run(
                    "old",
                    limit(1, policy),
                    NOW,
                    json!({"phase": "running"}),
                    json!({"doc": "a"}),
                ),
                run(
                    "new",
                    limit(1, policy),
                    NOW + 1,
                    Value::Null,
                    json!({"doc": "a"}),
                ),
            ])
        };
        assert_eq!(
            waits(&newest("cancel_in_progress"), "new", NOW + 5),
            Some(QueuedFor::Concurrency),
            "it waits for the run it stops"
        );
        assert_eq!(
            waits(&newest("cancel_newest"), "new", NOW + 5),
            None,
            "it is cancelled rather than queued"
        );
    }

    #[test]
    fn rate_limits_and_debounces_show_the_runs_they_hold_back() {
        let rate = json!({"rateLimit": {"limit": 1, "periodMs": 60_000}});
        let limited = summarized(vec![
            run(
                "started",
                rate.clone(),
                NOW,
                json!({"phase": "succeeded", "startedAt": at(NOW).to_string()}),
                json!({}),
            ),
            run("next", rate.clone(), NOW + 1, Value::Null, json!({})),
        ]);
        assert_eq!(
            waits(&limited, "next", NOW + 10),
            Some(QueuedFor::RateLimit)
        );
        assert_eq!(
            waits(&limited, "next", NOW + 60_001),
            None,
            "the window passed"
        );

        let debounce = json!({"debounce": {"periodMs": 5_000}});
        let burst = summarized(vec![
            run("older", debounce.clone(), NOW, Value::Null, json!({})),
            run("newest", debounce.clone(), NOW + 1, Value::Null, json!({})),
        ]);
        assert_eq!(waits(&burst, "newest", NOW + 10), Some(QueuedFor::Debounce));
        assert_eq!(
            waits(&burst, "older", NOW + 10),
            None,
            "superseded: it ends"
        );
        assert_eq!(
            waits(&burst, "newest", NOW + 5_002),
            None,
            "its period passed"
        );
    }

    #[test]
    fn runs_without_flow_control_or_cancelled_never_show_a_wait() {
        let plain = summarized(vec![run("plain", json!({}), NOW, Value::Null, json!({}))]);
        assert_eq!(waits(&plain, "plain", NOW), None);
        let mut cancelled = run("c", limit(1, "queue"), NOW + 1, Value::Null, json!({}));
        cancelled.spec.cancel = true;
        let runs = summarized(vec![
            run(
                "running",
                limit(1, "queue"),
                NOW,
                json!({"phase": "running"}),
                json!({}),
            ),
            cancelled,
        ]);
        assert_eq!(waits(&runs, "c", NOW + 5), None);
    }

    #[test]
    fn a_summary_keeps_what_admission_reads_and_nothing_a_user_set() {
        let mut forged = run(
            "r",
            limit(1, "queue"),
            NOW,
            Value::Null,
            json!({"doc": "real"}),
        );
        forged.annotations_mut().extend([
            (
                "flowline.io/cached-admission".to_string(),
                "true".to_string(),
            ),
            (
                "flowline.io/cached-concurrency-group".to_string(),
                "forged".to_string(),
            ),
        ]);
        let summary = summarized(vec![forged]).remove(0);
        assert_eq!(group_of(&summary).unwrap(), "real");
        let version = summary.spec.workflow.as_ref().unwrap();
        assert!(version.steps.is_empty() && version.concurrency.is_some());
        assert!(summary.spec.payload.is_none());
        let plain = summarized(vec![run("p", json!({}), NOW, Value::Null, json!({}))]).remove(0);
        assert!(
            plain.spec.workflow.is_none(),
            "nothing kept without flow control"
        );
    }
}
