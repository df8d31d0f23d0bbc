//! Concurrency admission: whether a run that has not started may start now, given the
//! other runs of its concurrency group. Pure; the run controller gathers the group
//! (its watch cache plus the runs it executes itself) and applies the answer.

pub mod account_bound;
pub mod group_summaries;
pub mod timing;
pub mod unrecorded;

use jiff::Timestamp;
use kube::ResourceExt;

use crate::crd::{Concurrency, ConcurrencyPolicy, Run, RunPhase};
use crate::engine::concurrency_key;

/// Where a waiting run stands: by priority (1 first), then creation time
/// (milliseconds), then name. Fixed for a run once it is pinned.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Order {
    pub priority: u8,
    pub created: Timestamp,
    pub name: String,
}

impl Order {
    /// Creation order alone, priority aside (`cancel_in_progress` keeps the newest).
    fn age(&self) -> (Timestamp, &str) {
        (self.created, &self.name)
    }
}

/// Another unfinished run of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub order: Order,
    pub state: MemberState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Executing (or admitted, its `running` status still on its way); holds a slot.
    Active { cancel_requested: bool },
    /// Not started: queued, or not yet decided.
    Waiting,
}

/// What to do with the run being admitted.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Start,
    /// Wait (status `queued`) until a slot frees.
    Queue,
    /// Ask these running runs of the group (by name) to stop; then start at once when
    /// `start`, else wait (status `queued`) until a slot frees as they stop.
    CancelOthers {
        names: Vec<String>,
        start: bool,
    },
    /// Record the run as cancelled at once, with this error.
    CancelSelf(String),
}

/// Decides the admission of the run at `this` into its group (`others`: the group's
/// other unfinished runs), under `concurrency`. `group` names the group in messages.
///
/// - `queue`: the run starts when the running runs plus the waiting runs created before
///   it leave a slot, so queued runs start in creation order; otherwise it waits.
/// - `cancel_newest`: the same test, but a run that would wait is cancelled instead.
/// - `cancel_in_progress`: the newest `limit` runs of the group (running or waiting)
///   keep going; the older running ones are asked to stop, and a run that is itself
///   among the older ones (a newer run was admitted first) is cancelled. A run being
///   stopped holds its slot until it has stopped, so the limit holds throughout: the
///   new run starts when the group's running runs leave it a slot, else it waits.
pub fn admit(concurrency: &Concurrency, group: &str, this: &Order, others: &[Member]) -> Admission {
    let limit = concurrency.limit.max(1) as usize;
    match concurrency.policy {
        ConcurrencyPolicy::Queue | ConcurrencyPolicy::CancelNewest => {
            let running = others
                .iter()
                .filter(|m| matches!(m.state, MemberState::Active { .. }))
                .count();
            let ahead = others
                .iter()
                .filter(|m| m.state == MemberState::Waiting && m.order < *this)
                .count();
            if running + ahead < limit {
                Admission::Start
            } else if concurrency.policy == ConcurrencyPolicy::Queue {
                Admission::Queue
            } else {
                Admission::CancelSelf(format!(
                    "concurrency limit reached: {running} of {limit} runs of {} running \
                     (policy cancel_newest cancels the new run)",
                    describe(group)
                ))
            }
        }
        ConcurrencyPolicy::CancelInProgress => {
            // Runs already asked to stop are not contenders, but hold their slot.
            let mut contenders: Vec<(&Order, bool)> = others
                .iter()
                .filter_map(|m| match m.state {
                    MemberState::Active {
                        cancel_requested: true,
                    } => None,
                    MemberState::Active { .. } => Some((&m.order, true)),
                    MemberState::Waiting => Some((&m.order, false)),
                })
                .collect();
            contenders.push((this, false));
            contenders.sort_by(|a, b| b.0.age().cmp(&a.0.age()));
            let (_, older) = contenders.split_at(limit.min(contenders.len()));
            if older.iter().any(|(order, _)| *order == this) {
                return Admission::CancelSelf(format!(
                    "superseded by a newer run of {} (policy cancel_in_progress)",
                    describe(group)
                ));
            }
            let names: Vec<String> = older
                .iter()
                .filter(|(_, active)| *active)
                .map(|(order, _)| order.name.clone())
                .collect();
            let running = others
                .iter()
                .filter(|m| matches!(m.state, MemberState::Active { .. }))
                .count();
            let start = running < limit;
            match (names.is_empty(), start) {
                (true, true) => Admission::Start,
                (true, false) => Admission::Queue,
                (false, start) => Admission::CancelOthers { names, start },
            }
        }
    }
}

/// The concurrency control `run` must pass before it starts: set in its pinned version,
/// and the run not started yet (no status, or `queued`). A run recorded `running` was
/// admitted before (by this process or an earlier leader) and resumes without one.
pub fn needs_admission(run: &Run) -> Option<&Concurrency> {
    let concurrency = run.spec.workflow.as_ref()?.concurrency.as_ref()?;
    (!run.has_started()).then_some(concurrency)
}

/// Where the run controller's cache keeps a finished run's rendered group, its payload
/// gone (see [`compact_for_cache`]). Set only in memory, never written.
const CACHED_GROUP: &str = "flowline.io/cached-concurrency-group";

/// The concurrency group of `run`: its pinned version's key rendered over its trigger
/// (no concurrency setting or no key: the workflow's one group).
pub fn group_of(run: &Run) -> Result<String, String> {
    if is_compacted(run)
        && let Some(group) = run.annotations().get(CACHED_GROUP)
    {
        return Ok(group.clone());
    }
    let key = run
        .spec
        .workflow
        .as_ref()
        .and_then(|w| w.concurrency.as_ref())
        .and_then(|c| c.key.as_deref());
    concurrency_key::render(key, run)
}

/// What the operator's run cache keeps of `run` (one cache that the run controller,
/// the workflow controller and the delivery worker share: `controller::run_cache`).
/// An unfinished run whole: it may be queued, admitted or resumed from the cache. A
/// finished one only what they read of it: identity, phase and times, its version's
/// concurrency setting and its rendered group (admission, when it frees a slot), its
/// rate limit and debounce keys and whether it started ([`timing`]), and its pending
/// events whole (the delivery worker sends their data), so its payload, steps and
/// records can go. Any value a user put in the annotations these are kept in is
/// dropped first.
pub fn compact_for_cache(run: &mut Run) {
    forget_cached(run);
    if !run.phase().is_finished() {
        return;
    }
    cache_what_admission_reads(run);
    let version = run.spec.workflow.take();
    run.drop_details(crate::crd::EventDetail::Whole);
    run.spec.workflow = version.map(|version| crate::crd::WorkflowSnapshot {
        steps: Vec::new(),
        ..version
    });
}

/// Marks a run whose rendered group and keys were filed in its annotations by
/// [`compact_for_cache`] or [`summarize`] (its payload, which they are rendered from,
/// then goes). Set only in memory, never written; a user's own value is dropped
/// first, so a run can never pass off a group or a key of its choosing.
const CACHED_ADMISSION: &str = "flowline.io/cached-admission";

/// Whether admission reads `run`'s group and keys from its annotations.
fn is_compacted(run: &Run) -> bool {
    run.annotations().contains_key(CACHED_ADMISSION)
}

/// Drops every annotation a compaction files, whoever set it.
fn forget_cached(run: &mut Run) {
    run.annotations_mut().remove(CACHED_GROUP);
    run.annotations_mut().remove(CACHED_ADMISSION);
    timing::forget_cached(run);
}

/// Files in `run`'s annotations what admission reads of it once its payload is gone:
/// its rendered concurrency group, its rate limit and debounce keys, its start.
fn cache_what_admission_reads(run: &mut Run) {
    let concurrency = run
        .spec
        .workflow
        .as_ref()
        .and_then(|w| w.concurrency.clone());
    if concurrency.is_some()
        && let Ok(group) = group_of(run)
    {
        run.annotations_mut().insert(CACHED_GROUP.into(), group);
    }
    timing::cache_keys(run);
    run.annotations_mut()
        .insert(CACHED_ADMISSION.into(), "true".into());
}

/// What a cache of run summaries (the API's, which drops every run's payload and
/// pinned version) keeps so that [`unrecorded::Unrecorded`] can tell whether a run
/// waits: for a run of a version that holds runs back, its group, keys and start in
/// its annotations, and, returned, its version without steps or output template (the
/// settings admission reads). The version is taken out of `run` (not copied: this
/// runs on every watch event of such a run); call it before the details are dropped,
/// and put the returned version back after. Any value a user put in those annotations
/// is dropped first.
pub fn summarize(run: &mut Run) -> Option<crate::crd::WorkflowSnapshot> {
    forget_cached(run);
    if !(run.spec.workflow.as_ref()).is_some_and(|v| v.holds_runs_back()) {
        return None;
    }
    cache_what_admission_reads(run);
    let version = run.spec.workflow.take()?;
    Some(crate::crd::WorkflowSnapshot {
        steps: Vec::new(),
        output: None,
        ..version
    })
}

/// Where `run` stands among waiting runs.
pub fn order_of(run: &Run) -> Order {
    Order {
        priority: run.spec.priority.unwrap_or(crate::crd::DEFAULT_PRIORITY),
        created: crate::crd::timestamps::created_at(&run.metadata),
        name: run.name_any(),
    }
}

/// What this process knows of a run that its watch cache may not show yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    /// Nothing: the cache is all there is.
    Unknown,
    /// This process executes it (it may not show `running` yet).
    Executing,
    /// This process wrote its final status (it may still show `running` or `queued`).
    Ended,
}

/// How `run` counts in its group as the leader sees it; `None`: not at all (finished,
/// or cancelled before it started).
pub fn classify(run: &Run, local: Local) -> Option<MemberState> {
    let cancel_requested = run.spec.cancel;
    match local {
        Local::Ended => return None,
        Local::Executing => return Some(MemberState::Active { cancel_requested }),
        Local::Unknown => {}
    }
    match run.status.as_ref().map(|s| s.phase) {
        Some(phase) if phase.is_finished() => None,
        Some(RunPhase::Running) => Some(MemberState::Active { cancel_requested }),
        // Not started: it will be marked cancelled, or admitted...
        _ if cancel_requested => None,
        _ => match run.spec.workflow.as_ref() {
            Some(wf) if wf.concurrency.is_some() => Some(MemberState::Waiting),
            // ...or, pinned to a version without a limit, it starts without waiting.
            Some(_) => Some(MemberState::Active {
                cancel_requested: false,
            }),
            // Unpinned: decided once pinned.
            None => None,
        },
    }
}

/// The runs to decide again when a slot of their group frees (`members`: the group's
/// unfinished runs): under `queue` and `cancel_newest` the oldest waiting ones, as many
/// as the running members leave slots free; under `cancel_in_progress` every waiting
/// one (each is either among the newest and starts, or superseded and cancelled).
/// Pure.
pub fn hand_over(concurrency: &Concurrency, members: &mut [Member]) -> Vec<Order> {
    let running = members
        .iter()
        .filter(|m| matches!(m.state, MemberState::Active { .. }))
        .count();
    let free = match concurrency.policy {
        ConcurrencyPolicy::CancelInProgress => usize::MAX,
        _ => (concurrency.limit.max(1) as usize).saturating_sub(running),
    };
    members.sort_by(|a, b| a.order.cmp(&b.order));
    members
        .iter()
        .filter(|m| m.state == MemberState::Waiting)
        .take(free)
        .map(|m| m.order.clone())
        .collect()
}

/// A group as a look at one of its waiting runs needs it: how many of its runs hold a
/// slot, and its waiting runs in creation order. Kept up to date run by run
/// (`group_summaries`), it answers for each waiting run with a binary search, so
/// looking again at n queued runs costs n searches instead of n walks over n runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupSummary {
    active: usize,
    waiting: Vec<Order>,
}

impl GroupSummary {
    pub fn of(members: impl IntoIterator<Item = Member>) -> Self {
        let mut summary = GroupSummary::default();
        for member in members {
            summary.add(member);
        }
        summary
    }

    /// Counts `member` in.
    pub fn add(&mut self, member: Member) {
        match member.state {
            MemberState::Active { .. } => self.active += 1,
            MemberState::Waiting => {
                let at = self.waiting.partition_point(|o| *o < member.order);
                self.waiting.insert(at, member.order);
            }
        }
    }

    /// Counts out `member`, as it was counted in.
    pub fn remove(&mut self, member: &Member) {
        match member.state {
            MemberState::Active { .. } => self.active = self.active.saturating_sub(1),
            MemberState::Waiting => {
                if let Ok(at) = self.waiting.binary_search(&member.order) {
                    self.waiting.remove(at);
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.active == 0 && self.waiting.is_empty()
    }

    /// Whether the waiting run at `this`, a member of the group, must go on waiting
    /// under `policy: queue` and `limit`: what [`admit`] answers with the group's
    /// other members, since a waiting run is never among the active ones and is not
    /// ahead of itself.
    pub fn must_wait(&self, limit: u32, this: &Order) -> bool {
        let ahead = self.waiting.partition_point(|order| order < this);
        self.active + ahead >= limit.max(1) as usize
    }
}

fn describe(group: &str) -> String {
    if group == crate::engine::concurrency_key::WORKFLOW_GROUP {
        "this workflow".to_string()
    } else {
        format!("concurrency group \"{group}\"")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The run `r{n}`, created at `n` ms.
    pub(crate) fn order(n: i64) -> Order {
        Order {
            priority: crate::crd::DEFAULT_PRIORITY,
            created: Timestamp::from_millisecond(n).unwrap(),
            name: format!("r{n}"),
        }
    }

    fn active(n: i64) -> Member {
        Member {
            order: order(n),
            state: MemberState::Active {
                cancel_requested: false,
            },
        }
    }

    fn stopping(n: i64) -> Member {
        Member {
            order: order(n),
            state: MemberState::Active {
                cancel_requested: true,
            },
        }
    }

    fn waiting(n: i64) -> Member {
        Member {
            order: order(n),
            state: MemberState::Waiting,
        }
    }

    #[test]
    fn a_summary_answers_as_admission_does_for_every_waiting_run_of_a_queue() {
        // Groups of up to 7 runs, each active, stopping or waiting, in every
        // combination, under limits 1 to 4: for each waiting run, the summary of the
        // whole group must answer what admission answers with the others.
        let states: [fn(i64) -> Member; 3] = [active, stopping, waiting];
        for size in 0..=7u32 {
            for pattern in 0..3u32.pow(size) {
                let members: Vec<Member> = (0..size)
                    .map(|i| states[(pattern / 3u32.pow(i) % 3) as usize](i64::from(i)))
                    .collect();
                let summary = GroupSummary::of(members.iter().cloned());
                for limit_n in 1..=4 {
                    let concurrency = limit(limit_n, ConcurrencyPolicy::Queue);
                    for this in members.iter().filter(|m| m.state == MemberState::Waiting) {
                        let others: Vec<Member> =
                            members.iter().filter(|m| m != &this).cloned().collect();
                        let admitted = admit(&concurrency, "g", &this.order, &others);
                        assert_eq!(
                            summary.must_wait(limit_n, &this.order),
                            admitted == Admission::Queue,
                            "{members:?}, limit {limit_n}, run {:?}: admission {admitted:?}",
                            this.order
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_summary_counts_members_out_as_it_counted_them_in() {
        let all = [
            active(1),
            waiting(5),
            stopping(2),
            waiting(3),
            waiting(9),
            active(4),
        ];
        let mut summary = GroupSummary::of(all.iter().cloned());
        for gone in [&all[1], &all[0], &all[4]] {
            summary.remove(gone);
        }
        assert_eq!(
            summary,
            GroupSummary::of([stopping(2), waiting(3), active(4)]),
            "the same as built from the members left"
        );
        summary.add(waiting(0));
        assert!(summary.must_wait(3, &order(3)), "2 active, r0 ahead");
        assert!(!summary.must_wait(4, &order(3)));
        for member in [stopping(2), waiting(3), active(4), waiting(0)] {
            summary.remove(&member);
        }
        assert!(summary.is_empty());
    }

    fn limit(limit: u32, policy: ConcurrencyPolicy) -> Concurrency {
        Concurrency {
            limit,
            key: None,
            policy,
        }
    }

    fn run_with(status: serde_json::Value, cancel: bool, concurrency: serde_json::Value) -> Run {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n"},
            "spec": {"workflowRef": "wf", "cancel": cancel, "payload": {"c": "acme"},
                     "workflow": {"generation": 1, "name": "W", "steps": [], "concurrency": concurrency}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn only_runs_that_have_not_started_need_admission() {
        let limited = serde_json::json!({"limit": 1});
        let none = serde_json::Value::Null;
        assert!(needs_admission(&run_with(none.clone(), false, limited.clone())).is_some());
        let queued = serde_json::json!({"phase": "queued"});
        assert!(needs_admission(&run_with(queued, false, limited.clone())).is_some());
        let running = serde_json::json!({"phase": "running"});
        assert!(needs_admission(&run_with(running, false, limited)).is_none());
        assert!(needs_admission(&run_with(none.clone(), false, none)).is_none());
    }

    #[test]
    fn members_count_by_what_they_are_doing() {
        let limited = serde_json::json!({"limit": 1});
        let active = MemberState::Active {
            cancel_requested: false,
        };
        let r = |status, cancel| run_with(status, cancel, limited.clone());
        let cached = Local::Unknown;
        assert_eq!(
            classify(&r(serde_json::json!({"phase": "running"}), false), cached),
            Some(active)
        );
        assert_eq!(
            classify(&r(serde_json::json!({"phase": "queued"}), false), cached),
            Some(MemberState::Waiting)
        );
        assert_eq!(
            classify(&r(serde_json::Value::Null, false), cached),
            Some(MemberState::Waiting)
        );
        // Admitted here, its running status not seen yet: it holds its slot.
        assert_eq!(
            classify(&r(serde_json::Value::Null, false), Local::Executing),
            Some(active)
        );
        // Finished here, the cache still showing it running: its slot is free.
        assert_eq!(
            classify(
                &r(serde_json::json!({"phase": "running"}), false),
                Local::Ended
            ),
            None
        );
        assert_eq!(
            classify(&r(serde_json::json!({"phase": "succeeded"}), false), cached),
            None
        );
        assert_eq!(
            classify(&r(serde_json::json!({"phase": "queued"}), true), cached),
            None
        );
        assert_eq!(
            classify(&r(serde_json::json!({"phase": "running"}), true), cached),
            Some(MemberState::Active {
                cancel_requested: true
            })
        );
        // A version without a limit starts at once.
        assert_eq!(
            classify(
                &run_with(serde_json::Value::Null, false, serde_json::Value::Null),
                cached
            ),
            Some(active)
        );
    }

    #[test]
    fn groups_come_from_the_pinned_key() {
        let keyed = serde_json::json!({"limit": 1, "key": "{{ trigger.payload.c }}"});
        assert_eq!(
            group_of(&run_with(serde_json::Value::Null, false, keyed)).unwrap(),
            "acme"
        );
        let unkeyed = serde_json::json!({"limit": 1});
        assert_eq!(
            group_of(&run_with(serde_json::Value::Null, false, unkeyed)).unwrap(),
            ""
        );
        let broken = serde_json::json!({"limit": 1, "key": "{{ trigger.payload.missing }}"});
        assert!(group_of(&run_with(serde_json::Value::Null, false, broken)).is_err());
    }

    #[test]
    fn the_cache_keeps_a_finished_runs_group_not_its_payload() {
        let keyed = serde_json::json!({"limit": 1, "key": "{{ trigger.payload.c }}"});
        let mut finished = run_with(
            serde_json::json!({"phase": "succeeded", "pendingEvents": [{
                "id": "evt_1", "kind": "run.succeeded",
                "timestamp": "2026-11-25T00:00:00Z", "data": {"run_id": "r"}}]}),
            false,
            keyed.clone(),
        );
        finished.spec.workflow.as_mut().unwrap().steps = serde_json::from_value(
            serde_json::json!([{"id": "a", "action": "delay", "with": {"ms": 1}}]),
        )
        .unwrap();
        compact_for_cache(&mut finished);
        assert_eq!(finished.spec.payload, None);
        let version = finished.spec.workflow.as_ref().unwrap();
        assert!(version.steps.is_empty());
        assert_eq!(version.concurrency.as_ref().unwrap().limit, 1);
        assert_eq!(group_of(&finished).unwrap(), "acme");
        // The delivery worker reads the same cache: an event's data stays.
        let events = &finished.status.as_ref().unwrap().pending_events;
        assert_eq!(events[0].data, serde_json::json!({"run_id": "r"}));

        // An unfinished run stays whole, and a group a user wrote in the annotation is
        // not believed.
        let mut queued = run_with(serde_json::json!({"phase": "queued"}), false, keyed);
        queued
            .annotations_mut()
            .insert(CACHED_GROUP.into(), "someone-else".into());
        compact_for_cache(&mut queued);
        assert!(queued.spec.payload.is_some());
        assert_eq!(group_of(&queued).unwrap(), "acme");
    }

    #[test]
    fn queue_starts_while_there_is_room() {
        let c = limit(2, ConcurrencyPolicy::Queue);
        assert_eq!(admit(&c, "", &order(5), &[]), Admission::Start);
        assert_eq!(admit(&c, "", &order(5), &[active(1)]), Admission::Start);
        assert_eq!(
            admit(&c, "", &order(5), &[active(1), active(2)]),
            Admission::Queue
        );
    }

    #[test]
    fn queue_keeps_creation_order() {
        let c = limit(2, ConcurrencyPolicy::Queue);
        // One slot free, an older run waits for it: this one waits too.
        assert_eq!(
            admit(&c, "", &order(5), &[active(1), waiting(3)]),
            Admission::Queue
        );
        // The older run takes it; a younger waiting run does not count.
        assert_eq!(
            admit(&c, "", &order(3), &[active(1), waiting(5)]),
            Admission::Start
        );
        // Two free slots: the second-oldest waiting run may start too.
        assert_eq!(
            admit(&c, "", &order(5), &[waiting(3), waiting(7)]),
            Admission::Start
        );
        // Same creation time: the name decides.
        let twin = Order {
            priority: crate::crd::DEFAULT_PRIORITY,
            created: order(3).created,
            name: "a".into(),
        };
        let c1 = limit(1, ConcurrencyPolicy::Queue);
        assert_eq!(admit(&c1, "", &twin, &[waiting(3)]), Admission::Start);
        assert_eq!(
            admit(
                &c1,
                "",
                &order(3),
                &[Member {
                    order: twin,
                    state: MemberState::Waiting
                }]
            ),
            Admission::Queue
        );
    }

    #[test]
    fn a_run_being_cancelled_holds_its_slot_until_it_stops() {
        let c = limit(1, ConcurrencyPolicy::Queue);
        assert_eq!(admit(&c, "", &order(5), &[stopping(1)]), Admission::Queue);
    }

    #[test]
    fn cancel_newest_cancels_the_run_that_would_wait() {
        let c = limit(1, ConcurrencyPolicy::CancelNewest);
        assert_eq!(admit(&c, "", &order(5), &[]), Admission::Start);
        match admit(&c, "acme", &order(5), &[active(1)]) {
            Admission::CancelSelf(e) => {
                assert!(
                    e.contains("1 of 1 runs of concurrency group \"acme\""),
                    "{e}"
                );
                assert!(e.contains("cancel_newest"), "{e}");
            }
            other => panic!("expected CancelSelf, got {other:?}"),
        }
        match admit(&c, "", &order(5), &[waiting(1)]) {
            Admission::CancelSelf(e) => assert!(e.contains("this workflow"), "{e}"),
            other => panic!("expected CancelSelf, got {other:?}"),
        }
    }

    #[test]
    fn cancel_in_progress_keeps_the_newest_runs() {
        let c = limit(1, ConcurrencyPolicy::CancelInProgress);
        assert_eq!(admit(&c, "", &order(5), &[]), Admission::Start);
        // The older runs are asked to stop; their slots free only as they stop.
        assert_eq!(
            admit(&c, "", &order(5), &[active(1), active(2)]),
            Admission::CancelOthers {
                names: vec!["r2".into(), "r1".into()],
                start: false
            }
        );
        // Runs already stopping are not cancelled again; this one waits for them.
        assert_eq!(admit(&c, "", &order(5), &[stopping(1)]), Admission::Queue);
        // A newer run was admitted first: this one is superseded.
        match admit(&c, "", &order(5), &[active(9)]) {
            Admission::CancelSelf(e) => assert!(e.contains("superseded"), "{e}"),
            other => panic!("expected CancelSelf, got {other:?}"),
        }
        // Older waiting runs cancel themselves when they are decided.
        assert_eq!(admit(&c, "", &order(5), &[waiting(1)]), Admission::Start);
    }

    #[test]
    fn cancel_in_progress_only_makes_the_room_it_needs() {
        let c = limit(3, ConcurrencyPolicy::CancelInProgress);
        assert_eq!(
            admit(&c, "", &order(9), &[active(1), active(2)]),
            Admission::Start
        );
        assert_eq!(
            admit(
                &c,
                "",
                &order(9),
                &[active(1), active(2), active(3), active(4)]
            ),
            Admission::CancelOthers {
                names: vec!["r2".into(), "r1".into()],
                start: false
            }
        );
        // A slot is free now: cancel the oldest running run and start at once.
        let c = limit(2, ConcurrencyPolicy::CancelInProgress);
        assert_eq!(
            admit(&c, "", &order(9), &[active(1), waiting(3)]),
            Admission::CancelOthers {
                names: vec!["r1".into()],
                start: true
            }
        );
    }

    #[test]
    fn a_freed_slot_goes_to_the_oldest_waiting_runs() {
        let c = limit(2, ConcurrencyPolicy::Queue);
        let mut members = vec![waiting(7), active(1), waiting(3), waiting(5)];
        assert_eq!(hand_over(&c, &mut members), vec![order(3)]);
        let mut members = vec![waiting(7), waiting(3), waiting(5)];
        assert_eq!(hand_over(&c, &mut members), vec![order(3), order(5)]);
        // No slot free (one run still stopping): nobody.
        let mut members = vec![active(1), stopping(2), waiting(3)];
        assert_eq!(hand_over(&c, &mut members), Vec::<Order>::new());
        // cancel_in_progress: every waiting run decides for itself.
        let c = limit(1, ConcurrencyPolicy::CancelInProgress);
        let mut members = vec![active(1), waiting(3), waiting(5)];
        assert_eq!(hand_over(&c, &mut members), vec![order(3), order(5)]);
    }

    /// `order(n)` with priority `p`.
    fn prioritized(n: i64, p: u8) -> Order {
        Order {
            priority: p,
            ..order(n)
        }
    }

    #[test]
    fn waiting_runs_start_by_priority_then_age_except_under_cancel_in_progress() {
        let queue = limit(1, ConcurrencyPolicy::Queue);
        let wait = |o: Order| Member {
            order: o,
            state: MemberState::Waiting,
        };
        // One slot free; an older run of priority 3 and a newer one of priority 1 wait.
        let (old_normal, new_urgent) = (prioritized(1, 3), prioritized(9, 1));
        for (this, other, expected) in [
            (&new_urgent, &old_normal, Admission::Start),
            (&old_normal, &new_urgent, Admission::Queue),
            // Same priority: the older first.
            (&prioritized(1, 2), &prioritized(9, 2), Admission::Start),
            (&prioritized(9, 2), &prioritized(1, 2), Admission::Queue),
            // Priority 5 waits behind anything more urgent, however old it is.
            (&prioritized(0, 5), &prioritized(9, 4), Admission::Queue),
        ] {
            assert_eq!(
                admit(&queue, "", this, &[wait(other.clone())]),
                expected,
                "{this:?} against {other:?}"
            );
        }
        // Handing over a freed slot picks the most urgent, then the oldest.
        let mut members = vec![
            wait(prioritized(1, 3)),
            wait(prioritized(2, 5)),
            wait(prioritized(3, 1)),
            wait(prioritized(4, 1)),
        ];
        let c2 = limit(2, ConcurrencyPolicy::Queue);
        assert_eq!(
            hand_over(&c2, &mut members),
            vec![prioritized(3, 1), prioritized(4, 1)]
        );
        let summary = GroupSummary::of(members.iter().cloned());
        assert!(!summary.must_wait(2, &prioritized(4, 1)));
        assert!(summary.must_wait(2, &prioritized(1, 3)));
        // cancel_in_progress keeps the newest, whatever their priority.
        let newest = limit(1, ConcurrencyPolicy::CancelInProgress);
        match admit(&newest, "", &prioritized(1, 1), &[wait(prioritized(9, 5))]) {
            Admission::CancelSelf(why) => assert!(why.contains("superseded"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
