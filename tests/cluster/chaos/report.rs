//! The figures of one scenario, printed whether it passes or not.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use super::events::{Events, Resent};
use super::kills::Restart;
use super::observer::Observer;
use super::settings::Settings;
use super::workload::Hit;

/// How long one restart took to show, from the new process's start. Progress counts
/// from when the new leader was seen: a status write the killed process had sent can
/// still land after it died.
#[derive(Debug)]
pub struct Recovery {
    pub leading: Duration,
    /// Until some Run's status changed.
    pub first_progress: Option<Duration>,
    /// Until every Run in flight at the kill had changed again.
    pub all_moving: Option<Duration>,
    /// Whether another kill came before the figures above were reached.
    pub cut_short: bool,
}

/// The recovery from `restart`; progress made after `next_kill` belongs to the next
/// generation, not to this one.
fn recovery(restart: &Restart, next_kill: Option<Instant>, observer: &Observer) -> Recovery {
    let before_next = |t: &Instant| next_kill.is_none_or(|k| *t < k);
    let since = |t: Instant| t.duration_since(restart.restarted_at);
    let all_moving = observer
        .moved(&restart.in_flight, restart.leading_at)
        .filter(before_next)
        .map(since);
    Recovery {
        leading: since(restart.leading_at),
        first_progress: observer
            .any_change_after(restart.leading_at)
            .filter(before_next)
            .map(since),
        cut_short: next_kill.is_some() && all_moving.is_none(),
        all_moving,
    }
}

/// The recovery of every restart.
pub fn recoveries(restarts: &[Restart], observer: &Observer) -> Vec<Recovery> {
    restarts
        .iter()
        .enumerate()
        .map(|(i, r)| recovery(r, restarts.get(i + 1).map(|n| n.killed_at), observer))
        .collect()
}

/// Calls of `http.request` steps: per call (a run's step, or one iteration of its
/// `forEach` step), how many, and under how many keys.
pub struct Calls {
    pub total: usize,
    /// Calls made more than once (an interrupted attempt redone).
    pub repeated: usize,
    /// Calls made under more than one Idempotency-Key.
    pub rekeyed: usize,
    /// Of those, the iterations of `forEach` steps: how many, and how many were made
    /// again (those in flight when the operator was killed; the others resume).
    pub iterations: usize,
    pub iterations_repeated: usize,
}

pub fn calls(hits: &[Hit]) -> Calls {
    let mut by_call: HashMap<(&str, Option<u64>), Vec<&str>> = HashMap::new();
    for hit in hits {
        by_call
            .entry((&hit.run, hit.item))
            .or_default()
            .push(&hit.idempotency_key);
    }
    let keys = |v: &Vec<&str>| v.iter().collect::<std::collections::HashSet<_>>().len();
    let iterations = || by_call.iter().filter(|((_, item), _)| item.is_some());
    Calls {
        total: hits.len(),
        repeated: by_call.values().filter(|v| v.len() > 1).count(),
        rekeyed: by_call.values().filter(|v| keys(v) > 1).count(),
        iterations: iterations().count(),
        iterations_repeated: iterations().filter(|(_, v)| v.len() > 1).count(),
    }
}

/// Everything the scenario measured.
pub struct Figures<'a> {
    pub settings: &'a Settings,
    pub restarts: &'a [Restart],
    pub recoveries: &'a [Recovery],
    /// Per kill, the duplicates it caused.
    pub resent: &'a [Resent],
    pub finished: usize,
    pub failed: &'a [String],
    pub stuck: &'a [String],
    pub events: &'a Events,
    pub calls: Calls,
    pub self_exits: u32,
    /// From the end of the load and the disturbances until every run had finished.
    pub settled: Duration,
    pub wall: Duration,
    pub logs: &'a std::path::Path,
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

/// A recovery figure; one not reached before the next kill is not "never".
fn reached(d: Option<Duration>, cut_short: bool) -> String {
    match d {
        None if cut_short => "not before the next kill".into(),
        d => secs(d),
    }
}

pub fn render(f: &Figures) -> String {
    let s = f.settings;
    let e = f.events;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "chaos: seed {} (FLOWLINE_CHAOS_SEED), {} runs at {:.1}/s, {} kills, lease {} s, \
         receiver fails {:.0} %",
        s.seed,
        s.runs,
        s.rate,
        f.restarts.len(),
        s.lease_seconds,
        s.fail_rate * 100.0
    );
    for (i, ((r, rec), resent)) in f
        .restarts
        .iter()
        .zip(f.recoveries)
        .zip(f.resent)
        .enumerate()
    {
        let _ = writeln!(
            out,
            "  kill {}: {:?}{}, {} runs in flight; restart → leader {}, first progress {}, \
             all in-flight moving {}; re-sent {} deliveries made up to {} before it",
            i + 1,
            r.moment,
            if r.on_moment {
                ""
            } else {
                " (moment never came)"
            },
            r.in_flight.len(),
            secs(Some(rec.leading)),
            reached(rec.first_progress, rec.cut_short),
            reached(rec.all_moving, rec.cut_short),
            resent.deliveries,
            secs(Some(resent.oldest))
        );
    }
    let _ = writeln!(
        out,
        "  runs: {} created, {} finished, {} failed, {} stuck",
        s.runs,
        f.finished,
        f.failed.len(),
        f.stuck.len()
    );
    let _ = writeln!(
        out,
        "  deliveries: {} attempts, {} delivered, {} unique events ({} ids), {} duplicates \
         = {:.1} % (max {:.1} %), {} lost",
        e.attempts,
        e.delivered,
        e.unique,
        e.ids,
        e.duplicates(),
        e.duplicate_ratio() * 100.0,
        s.max_dup * 100.0,
        e.lost.len()
    );
    let _ = writeln!(
        out,
        "  http.request calls: {} ({} made twice or more, {} under a second Idempotency-Key); \
         forEach iterations: {}, {} made again",
        f.calls.total,
        f.calls.repeated,
        f.calls.rekeyed,
        f.calls.iterations,
        f.calls.iterations_repeated
    );
    let _ = writeln!(
        out,
        "  operator exits on its own: {}; every run finished {} after the load and the \
         disturbances ended; wall time {}",
        f.self_exits,
        secs(Some(f.settled)),
        secs(Some(f.wall))
    );
    let _ = writeln!(
        out,
        "  operator logs and timeline.txt (kills, restarts, every delivery): {}",
        f.logs.display()
    );
    for (what, list) in [
        ("failed", f.failed),
        ("stuck", f.stuck),
        ("lost", &e.lost[..]),
        ("unexpected", &e.unexpected[..]),
        ("under two ids", &e.reminted[..]),
    ] {
        for item in list.iter().take(20) {
            let _ = writeln!(out, "  {what}: {item}");
        }
    }
    out
}
