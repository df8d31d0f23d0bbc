//! Coalesced status writes that always land: a fast run costs a couple of API writes,
//! not one per step transition, while a slow run's progress still shows within a
//! second; and no run stays `running` because a write failed.
//!
//! Every status is bounded before it is sent ([`output::bound`]: errors capped, the
//! whole Run object within its budget). A failed write is never dropped:
//! [`write_failure::decide`] says whether to retry it after a backoff, to write it
//! again smaller, or to stop because the Run is gone. Retries always send the newest
//! status, so coalescing holds while the API server is failing too.
//!
//! A request, once sent, is never aborted: an aborted request may still reach the API
//! server after the final write and put back a stale status. Only the waits between
//! requests are cut short when the run finishes.

use std::time::Duration;

use jiff::Timestamp;
use kube::Api;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use flowline_core::crd::{Condition, Run, RunStatus};
use flowline_core::delivery::unseen::{Holder, HolderKind};
use flowline_core::engine::output;
use flowline_core::engine::run_condition;
use flowline_core::engine::write_failure::{self, Next};

/// Field manager of every status write of the controllers.
pub const FIELD_MANAGER: &str = "flowline-controller";
/// Longest a changed status waits before it is written.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(500);
/// How long the first status (`running`, the run's start) waits before it is written:
/// a run that ends within it costs one status write instead of two. Short next to
/// any step that does real work, so a run's progress still shows at once; a crash
/// within it leaves the run as it was, and the next execution starts it again.
pub const FIRST_WRITE_GRACE: Duration = Duration::from_millis(50);

pub struct StatusWriter {
    target: Target,
    tx: watch::Sender<RunStatus>,
    closing: CancellationToken,
    flusher: tokio::task::JoinHandle<Progress>,
}

/// Where statuses go, and how many bytes they may take there.
#[derive(Clone)]
struct Target {
    api: Api<Run>,
    namespace: String,
    /// The Run, as the delivery's unseen registry knows it.
    holder: Holder,
    name: String,
    budget: usize,
    /// The Run's resourceVersion, status writer, generation and conditions when this
    /// writer started.
    start_version: Option<String>,
    start_execution: Option<String>,
    start_generation: Option<i64>,
    start_conditions: Vec<Condition>,
}

impl Target {
    fn fresh_progress(&self) -> Progress {
        Progress {
            generation: self.start_generation,
            conditions: self.start_conditions.clone(),
            ..Progress::new(
                self.budget,
                self.start_version.clone(),
                self.start_execution.clone(),
            )
        }
    }
}

/// What earlier writes learned, carried from the flusher to the final write: how far
/// statuses must be shrunk to be accepted, and whether the Run is gone.
#[derive(Debug, Clone)]
struct Progress {
    /// Bytes a status may take; lowered each time one is refused as too large.
    budget: usize,
    /// How many times that happened.
    shrink: u32,
    gone: bool,
    /// The resourceVersion the next write is conditional on.
    version: Option<String>,
    /// The execution whose status the Run holds as far as this writer knows: the one it
    /// started from, then its own once a write landed.
    holder_execution: Option<String>,
    /// Another execution wrote the status: this one must stop.
    fenced: bool,
    /// The Run's generation as last read, for `observedGeneration`.
    generation: Option<i64>,
    /// The conditions last written (their transition times carry over).
    conditions: Vec<Condition>,
}

impl Progress {
    fn new(budget: usize, version: Option<String>, holder_execution: Option<String>) -> Self {
        Progress {
            budget,
            shrink: 0,
            gone: false,
            version,
            holder_execution,
            fenced: false,
            generation: None,
            conditions: Vec::new(),
        }
    }
}

/// What a conflicting write learns from the Run as it is now.
#[derive(Debug, PartialEq, Eq)]
pub enum AfterConflict {
    /// Only the spec or metadata changed (a cancel, say): write again on this version
    /// (of this generation).
    Retry {
        version: Option<String>,
        generation: Option<i64>,
    },
    /// Another execution wrote the status: stop writing and executing.
    Fenced,
    /// The Run is gone.
    Gone,
}

/// Decides after a write conflicted: `fresh` is the Run read back, `holder` the
/// execution whose status the writer expects it to hold. Pure.
pub fn after_conflict(fresh: Option<&Run>, holder: Option<&str>) -> AfterConflict {
    let Some(fresh) = fresh else {
        return AfterConflict::Gone;
    };
    let stored = fresh
        .status
        .as_ref()
        .and_then(|s| s.execution_id.as_deref());
    if stored == holder {
        AfterConflict::Retry {
            version: fresh.resource_version(),
            generation: fresh.metadata.generation,
        }
    } else {
        AfterConflict::Fenced
    }
}

impl Target {
    /// One write, conditional on `version` (when known); the new version on success.
    async fn patch(
        &self,
        status: &RunStatus,
        version: Option<&str>,
    ) -> Result<Option<String>, kube::Error> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let body = match version {
            Some(v) => json!({"metadata": {"resourceVersion": v}, "status": status}),
            None => json!({"status": status}),
        };
        self.api
            .patch_status(&self.name, &params, &Patch::Merge(body))
            .await
            .map(|run| run.resource_version())
    }

    /// After a conflict: reads the Run and decides; a failed read is retried like a
    /// failed write (None).
    async fn reread(&self, progress: &Progress) -> Option<AfterConflict> {
        match self.api.get_opt(&self.name).await {
            Ok(fresh) => Some(after_conflict(
                fresh.as_ref(),
                progress.holder_execution.as_deref(),
            )),
            Err(err) => {
                tracing::warn!(run = %self.name, error = %err, "reading the Run after a conflict failed");
                None
            }
        }
    }

    /// Writes the newest status from `latest` until one lands or the Run is gone.
    /// A wait between attempts ends early when `interrupt` fires; a request never does.
    async fn write_until_landed(
        &self,
        mut latest: impl FnMut() -> RunStatus,
        progress: &mut Progress,
        interrupt: &CancellationToken,
    ) {
        let mut waited = 0;
        while !progress.gone {
            // Conditions restate the bounded status (its capped error), within the
            // room the budget leaves for them.
            let mut status = output::bound(latest(), progress.budget);
            status.conditions = progress.conditions.clone();
            run_condition::apply(&mut status, progress.generation, Timestamp::now());
            let err = match self.patch(&status, progress.version.as_deref()).await {
                Ok(version) => {
                    progress.version = version;
                    progress.holder_execution = status.execution_id.clone();
                    progress.conditions = status.conditions;
                    return;
                }
                Err(err) => err,
            };
            if matches!(&err, kube::Error::Api(s) if s.code == 409) {
                match self.reread(progress).await {
                    Some(AfterConflict::Retry {
                        version,
                        generation,
                    }) => {
                        progress.version = version;
                        progress.generation = generation;
                        continue;
                    }
                    Some(AfterConflict::Fenced) => {
                        tracing::warn!(run = %self.name, "another execution wrote this run's status; this one stops");
                        progress.fenced = true;
                        progress.gone = true;
                        return;
                    }
                    Some(AfterConflict::Gone) => {
                        progress.gone = true;
                        return;
                    }
                    None => {}
                }
            }
            let rejection = write_failure::classify(match &err {
                kube::Error::Api(status) => Some((status.code, status.message.as_str())),
                _ => None,
            });
            let next = write_failure::decide(rejection, progress.shrink, waited, rand::random());
            tracing::warn!(run = %self.name, error = %err, ?rejection, ?next, "status write failed");
            match next {
                Next::Stop => progress.gone = true,
                Next::Shrink { level } => {
                    progress.shrink = level;
                    progress.budget = output::shrunk_budget(output::status_size(&status), level);
                }
                Next::Retry { after } => {
                    waited += 1;
                    tokio::select! {
                        _ = tokio::time::sleep(after) => {}
                        _ = interrupt.cancelled() => return,
                    }
                }
            }
        }
    }
}

impl StatusWriter {
    /// Starts a writer for `run` as read by the caller (its resourceVersion is the
    /// first write's condition); the first change is written after
    /// [`FIRST_WRITE_GRACE`] unless the writer is finished first, later ones at most
    /// every [`FLUSH_INTERVAL`]. The status budget leaves room for the Run's
    /// metadata and spec (its payload). `fence` is cancelled when another execution
    /// turns out to have written the status: the caller must stop executing.
    pub fn start(api: Api<Run>, run: &Run, initial: RunStatus, fence: &CancellationToken) -> Self {
        let target = Target {
            api,
            namespace: run.namespace().unwrap_or_default(),
            holder: Holder::new(HolderKind::Run, &run.metadata),
            name: run.name_any(),
            budget: output::status_budget(run),
            start_version: run.resource_version(),
            start_execution: run.status.as_ref().and_then(|s| s.execution_id.clone()),
            start_generation: run.metadata.generation,
            start_conditions: run
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default(),
        };
        let fence = fence.clone();
        let (tx, mut rx) = watch::channel(initial);
        let closing = CancellationToken::new();
        let (stop, flush_target) = (closing.clone(), target.clone());
        let flusher = tokio::spawn(async move {
            let mut progress = flush_target.fresh_progress();
            let mut first = true;
            loop {
                // Closing wins over a pending change: the final write carries the
                // newest status anyway, so flushing first would only cost a write.
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => break,
                    changed = rx.changed() => if changed.is_err() { break },
                }
                if std::mem::take(&mut first) {
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(FIRST_WRITE_GRACE) => {}
                    }
                }
                let latest = || rx.borrow_and_update().clone();
                flush_target
                    .write_until_landed(latest, &mut progress, &stop)
                    .await;
                if progress.fenced {
                    fence.cancel();
                }
                if progress.gone {
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(FLUSH_INTERVAL) => {},
                    _ = stop.cancelled() => break,
                }
            }
            progress
        });
        StatusWriter {
            target,
            tx,
            closing,
            flusher,
        }
    }

    pub fn update(&self, status: &RunStatus) {
        self.tx.send_replace(status.clone());
    }

    /// Records the final status and waits until it is written (or the Run is gone).
    /// The flusher stops without waiting out its interval or a backoff, but a write it
    /// has in flight completes first, so the final write is always the last one.
    /// Returns whether the final status was written.
    pub async fn finish(self, status: &RunStatus) -> bool {
        self.closing.cancel();
        let mut progress = match self.flusher.await {
            Ok(progress) => progress,
            Err(_) => self.target.fresh_progress(),
        };
        let never = CancellationToken::new();
        self.target
            .write_until_landed(|| status.clone(), &mut progress, &never)
            .await;
        if progress.fenced {
            tracing::info!(run = %self.target.name, "another execution owns the run; its final status was not written");
            // Its events are not in the Run: they must not hold delivery back.
            flowline_core::delivery::unseen::gone(&self.target.namespace, &self.target.holder);
        } else if progress.gone {
            tracing::info!(run = %self.target.name, "the run is gone; its final status was not written");
            // Its events can never be seen now: they must not hold delivery back.
            flowline_core::delivery::unseen::gone(&self.target.namespace, &self.target.holder);
        }
        !progress.gone
    }
}

#[cfg(test)]
mod tests {
    //! The writer against a scripted API server: a tower service standing in for the
    //! kube-apiserver, answering each status write as the test says and recording it.

    use std::sync::{Arc, Mutex};

    use http_body_util::BodyExt;
    use serde_json::Value;

    use super::*;
    use flowline_core::crd::{RunPhase, StepPhase, StepRecord};

    /// How the scripted server answers request `index` (0, 1, …) with a body of
    /// `len` bytes: an HTTP status and how long it takes.
    type Script = fn(index: usize, len: usize) -> (u16, Duration);

    #[derive(Default)]
    struct Recorded {
        /// The status of each write, in arrival order.
        statuses: Vec<RunStatus>,
        /// The bodies' sizes.
        sizes: Vec<usize>,
        /// `start <i>` and `end <i>` of each request, in order.
        timeline: Vec<String>,
    }

    fn answer(code: u16) -> Value {
        if code < 300 {
            json!({"apiVersion": "flowline.io/v1", "kind": "Run",
                   "metadata": {"name": "r", "namespace": "n"}, "spec": {"workflowRef": "w"}})
        } else {
            let message = match code {
                404 => "runs.flowline.io \"r\" not found",
                413 => "Request entity too large: limit is 3145728",
                _ => "Internal error occurred: try again",
            };
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "message": message, "code": code})
        }
    }

    fn scripted_api(script: Script) -> (Api<Run>, Arc<Mutex<Recorded>>) {
        let recorded = Arc::new(Mutex::new(Recorded::default()));
        let log = recorded.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let log = log.clone();
            async move {
                let body = req.into_body().collect().await?.to_bytes();
                let patch: Value = serde_json::from_slice(&body)?;
                let index = {
                    let mut log = log.lock().unwrap();
                    let index = log.statuses.len();
                    log.statuses
                        .push(serde_json::from_value(patch["status"].clone())?);
                    log.sizes.push(body.len());
                    log.timeline.push(format!("start {index}"));
                    index
                };
                let (code, delay) = script(index, body.len());
                tokio::time::sleep(delay).await;
                log.lock().unwrap().timeline.push(format!("end {index}"));
                let body = serde_json::to_vec(&answer(code))?;
                Ok::<_, tower::BoxError>(
                    http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(bytes::Bytes::from(body)))?,
                )
            }
        });
        let client = kube::Client::new(service, "n");
        (Api::namespaced(client, "n"), recorded)
    }

    fn run() -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n"}, "spec": {"workflowRef": "w"}
        }))
        .unwrap()
    }

    fn failed_with_outputs(steps: usize, output_bytes: usize) -> RunStatus {
        RunStatus {
            phase: RunPhase::Failed,
            error: Some("step s0 (fail) failed: no".into()),
            steps: (0..steps)
                .map(|i| StepRecord {
                    step_id: format!("s{i}"),
                    status: StepPhase::Succeeded,
                    output: Some(json!("o".repeat(output_bytes))),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Finishes `writer` with `status`; a writer that never lands the final status
    /// fails the test instead of hanging it.
    fn stored(version: &str, execution: Option<&str>) -> Run {
        let mut r = run();
        r.metadata.resource_version = Some(version.into());
        r.status = Some(RunStatus {
            execution_id: execution.map(str::to_string),
            ..Default::default()
        });
        r
    }

    #[test]
    fn a_conflict_is_retried_only_while_the_status_is_still_this_writers() {
        // A cancel (spec) or a label changed the version: write again on the new one.
        assert_eq!(
            after_conflict(Some(&stored("8", Some("exec-me"))), Some("exec-me")),
            AfterConflict::Retry {
                version: Some("8".into()),
                generation: None,
            }
        );
        // Before this writer's first write landed it holds what it started from.
        assert_eq!(
            after_conflict(Some(&stored("9", Some("exec-old"))), Some("exec-old")),
            AfterConflict::Retry {
                version: Some("9".into()),
                generation: None,
            }
        );
        assert_eq!(
            after_conflict(Some(&stored("9", None)), None),
            AfterConflict::Retry {
                version: Some("9".into()),
                generation: None,
            }
        );
        // Another execution wrote (a new leader; or a late write of an old one that
        // landed first): this writer is fenced off.
        assert_eq!(
            after_conflict(Some(&stored("10", Some("exec-other"))), Some("exec-me")),
            AfterConflict::Fenced
        );
        assert_eq!(
            after_conflict(Some(&stored("10", Some("exec-other"))), None),
            AfterConflict::Fenced
        );
        assert_eq!(after_conflict(None, Some("exec-me")), AfterConflict::Gone);
    }

    async fn finish_within_30s(writer: StatusWriter, status: &RunStatus) {
        tokio::time::timeout(Duration::from_secs(30), writer.finish(status))
            .await
            .expect("the final status landed");
    }

    fn statuses(recorded: &Mutex<Recorded>) -> Vec<RunStatus> {
        recorded.lock().unwrap().statuses.clone()
    }

    #[tokio::test]
    async fn a_status_refused_as_too_large_is_shrunk_until_it_lands() {
        const ACCEPTED: usize = 20_000;
        let (api, recorded) =
            scripted_api(|_, len| (if len > ACCEPTED { 413 } else { 200 }, Duration::ZERO));
        let final_status = failed_with_outputs(5, 60_000);
        finish_within_30s(
            StatusWriter::start(api, &run(), RunStatus::default(), &CancellationToken::new()),
            &final_status,
        )
        .await;
        let log = recorded.lock().unwrap();
        let landed = log.statuses.last().unwrap();
        assert!(*log.sizes.last().unwrap() <= ACCEPTED, "{:?}", log.sizes);
        assert!(
            log.sizes.windows(2).all(|w| w[1] < w[0]),
            "each retry smaller: {:?}",
            log.sizes
        );
        assert!(
            log.sizes.len() <= 1 + output::MAX_SHRINK as usize,
            "{:?}",
            log.sizes
        );
        assert_eq!(landed.phase, RunPhase::Failed);
        assert_eq!(landed.error, final_status.error);
        assert!(landed.steps.iter().all(|s| s.output_truncated));
    }

    #[tokio::test]
    async fn when_even_the_least_status_is_refused_the_writer_keeps_trying() {
        // Refused as too large five times, whatever the size, then accepted: the
        // writer reaches the least status and keeps retrying it after a backoff.
        let (api, recorded) =
            scripted_api(|index, _| (if index < 5 { 413 } else { 200 }, Duration::ZERO));
        finish_within_30s(
            StatusWriter::start(api, &run(), RunStatus::default(), &CancellationToken::new()),
            &failed_with_outputs(2, 10_000),
        )
        .await;
        let log = statuses(&recorded);
        assert_eq!(
            log.len(),
            6,
            "four shrinks, one wait, then the write that landed"
        );
        let landed = log.last().unwrap();
        assert_eq!(landed.phase, RunPhase::Failed);
        assert!(
            landed
                .steps
                .iter()
                .all(|s| s.output.is_none() && s.output_truncated)
        );
    }

    #[tokio::test]
    async fn transient_failures_are_retried_until_the_final_status_lands() {
        let (api, recorded) =
            scripted_api(|index, _| (if index < 3 { 503 } else { 200 }, Duration::ZERO));
        let final_status = failed_with_outputs(1, 10);
        finish_within_30s(
            StatusWriter::start(api, &run(), RunStatus::default(), &CancellationToken::new()),
            &final_status,
        )
        .await;
        let log = statuses(&recorded);
        assert_eq!(log.len(), 4, "three failures, then the write that landed");
        // Each write carries the Succeeded condition the writer derives.
        let without_conditions = |s: &RunStatus| RunStatus {
            conditions: Vec::new(),
            ..s.clone()
        };
        assert!(
            log.iter().all(|s| without_conditions(s) == final_status),
            "retried unchanged: not about size"
        );
        assert!(log.iter().all(|s| s.conditions.len() == 1
            && s.conditions[0].status == flowline_core::crd::ConditionStatus::False));
    }

    #[tokio::test]
    async fn a_run_that_is_gone_is_not_written_again() {
        let (api, recorded) = scripted_api(|_, _| (404, Duration::ZERO));
        let writer =
            StatusWriter::start(api, &run(), RunStatus::default(), &CancellationToken::new());
        writer.update(&failed_with_outputs(1, 10));
        finish_within_30s(writer, &failed_with_outputs(1, 10)).await;
        assert_eq!(
            statuses(&recorded).len(),
            1,
            "404 once, then no more writes"
        );
    }

    #[tokio::test]
    async fn a_failed_flush_is_retried_with_the_newest_status_and_the_final_write_is_last() {
        // The first write fails; the second is slow, so the run finishes while it is
        // in flight.
        let (api, recorded) = scripted_api(|index, _| match index {
            0 => (500, Duration::ZERO),
            1 => (200, Duration::from_millis(300)),
            _ => (200, Duration::ZERO),
        });
        let writer =
            StatusWriter::start(api, &run(), RunStatus::default(), &CancellationToken::new());
        let status = |steps| failed_with_outputs(steps, 10);
        let requests = |n| {
            let recorded = recorded.clone();
            async move {
                while recorded.lock().unwrap().statuses.len() < n {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        };
        writer.update(&status(1));
        requests(1).await;
        // Arrives during the backoff after the failure: the retry carries it.
        writer.update(&status(2));
        requests(2).await;
        finish_within_30s(writer, &status(3)).await;
        let log = recorded.lock().unwrap();
        let steps: Vec<usize> = log.statuses.iter().map(|s| s.steps.len()).collect();
        assert_eq!(
            steps,
            [1, 2, 3],
            "stale status not retried; final write last"
        );
        assert_eq!(
            log.timeline,
            ["start 0", "end 0", "start 1", "end 1", "start 2", "end 2"],
            "the write in flight completed before the final one started"
        );
    }
}
