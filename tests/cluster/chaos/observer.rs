//! Watches the scenario's Runs and remembers when each one changed: what the kill
//! moments wait for ("a status write just landed", "a step is running") and what the
//! recovery times are computed from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowline_core::crd::{Run, StepPhase};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::support::TestNamespace;

/// What was seen of one Run.
#[derive(Default)]
struct Track {
    /// The last status seen: a relisted object, or a change of anything else (the
    /// API creating the Run), is no progress of the engine.
    status: Option<serde_json::Value>,
    /// When the status changed.
    changes: Vec<Instant>,
    /// When a final status was seen.
    finished: Option<Instant>,
    /// Steps running in the last version seen.
    running: Vec<String>,
}

pub struct Observer {
    runs: Arc<Mutex<HashMap<String, Track>>>,
    changes: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Observer {
    /// Starts watching and returns once the initial list is in.
    pub async fn start(ns: &TestNamespace) -> Observer {
        let runs = Arc::new(Mutex::new(HashMap::new()));
        let (tx, changes) = watch::channel(0u64);
        let (synced_tx, synced) = tokio::sync::oneshot::channel();
        let state = runs.clone();
        let stream = watcher(ns.api::<Run>(), watcher::Config::default()).default_backoff();
        let task = tokio::spawn(async move {
            let mut synced_tx = Some(synced_tx);
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(run) | watcher::Event::InitApply(run))
                        if record(&mut state.lock().unwrap(), &run) =>
                    {
                        tx.send_modify(|n| *n += 1);
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(synced) = synced_tx.take() {
                            let _ = synced.send(());
                        }
                    }
                    _ => {}
                }
            }
        });
        let _ = synced.await;
        Observer {
            runs,
            changes,
            task,
        }
    }

    /// Waits for the next change of any Run; false after `within` without one.
    pub async fn next_change(&self, within: Duration) -> bool {
        let mut changes = self.changes.clone();
        changes.borrow_and_update();
        tokio::time::timeout(within, changes.changed())
            .await
            .is_ok()
    }

    /// Whether some Run is executing one of `steps` now, as written after `since` (a
    /// status written before a kill may still say "running" of a step nobody runs).
    pub fn running(&self, steps: &[&str], since: Instant) -> bool {
        let runs = self.runs.lock().unwrap();
        runs.values().any(|t| {
            t.changes.last().is_some_and(|c| *c > since)
                && t.running.iter().any(|s| steps.contains(&s.as_str()))
        })
    }

    /// Those of `names` not seen finished.
    pub fn unfinished(&self, names: &[String]) -> Vec<String> {
        let runs = self.runs.lock().unwrap();
        names
            .iter()
            .filter(|n| runs.get(*n).is_none_or(|t| t.finished.is_none()))
            .cloned()
            .collect()
    }

    /// When every one of `names` had changed after `t` (the last of them), if they all
    /// have. A run already finished by `t` (the killed process's last write can land
    /// after it died) needs no change.
    pub fn moved(&self, names: &[String], t: Instant) -> Option<Instant> {
        let runs = self.runs.lock().unwrap();
        let mut last = t;
        for name in names {
            let track = runs.get(name)?;
            if track.finished.is_some_and(|f| f <= t) {
                continue;
            }
            last = last.max(track.changes.iter().copied().find(|c| *c > t)?);
        }
        Some(last)
    }

    /// When any Run first changed after `t`.
    pub fn any_change_after(&self, t: Instant) -> Option<Instant> {
        let runs = self.runs.lock().unwrap();
        runs.values()
            .filter_map(|track| track.changes.iter().copied().find(|c| *c > t))
            .min()
    }
}

/// Records one observed version; true when its status changed.
fn record(runs: &mut HashMap<String, Track>, run: &Run) -> bool {
    let name = run.metadata.name.clone().unwrap_or_default();
    let track = runs.entry(name).or_default();
    let status = run.status.as_ref();
    let json = status.map(|s| serde_json::to_value(s).unwrap());
    if json.is_none() || track.status == json {
        return false;
    }
    track.status = json;
    track.changes.push(Instant::now());
    if status.is_some_and(|s| s.phase.is_finished()) {
        track.finished.get_or_insert_with(Instant::now);
    }
    track.running = status
        .map(|s| &s.steps[..])
        .unwrap_or_default()
        .iter()
        .filter(|s| s.status == StepPhase::Running)
        .map(|s| s.step_id.clone())
        .collect();
    true
}
