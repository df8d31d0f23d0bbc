//! Coalesced status writes: a fast run costs a couple of API writes, not one per
//! step transition, while a slow run's progress still shows within a second.

use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::crd::{Run, RunStatus};

/// Field manager of every status write of the controllers.
pub const FIELD_MANAGER: &str = "flowline-controller";
/// Longest a changed status waits before it is written.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(500);

pub struct StatusWriter {
    api: Api<Run>,
    name: String,
    tx: watch::Sender<RunStatus>,
    closing: CancellationToken,
    flusher: tokio::task::JoinHandle<()>,
}

async fn write(api: &Api<Run>, name: &str, status: &RunStatus) {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    if let Err(err) = api
        .patch_status(name, &params, &Patch::Merge(json!({"status": status})))
        .await
    {
        tracing::warn!(run = name, error = %err, "status write failed; the next one carries the same state");
    }
}

impl StatusWriter {
    /// Starts a writer; the first change is written at once, later ones at most
    /// every [`FLUSH_INTERVAL`].
    pub fn start(api: Api<Run>, name: String, initial: RunStatus) -> Self {
        let (tx, mut rx) = watch::channel(initial);
        let (flush_api, flush_name) = (api.clone(), name.clone());
        let closing = CancellationToken::new();
        let stop = closing.clone();
        let flusher = tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { return },
                    _ = stop.cancelled() => return,
                }
                let status = rx.borrow_and_update().clone();
                // Never interrupted mid-request: an aborted request may still reach the
                // API server after the final write and put back a stale status.
                write(&flush_api, &flush_name, &status).await;
                tokio::select! {
                    _ = tokio::time::sleep(FLUSH_INTERVAL) => {},
                    _ = stop.cancelled() => return,
                }
            }
        });
        StatusWriter {
            api,
            name,
            tx,
            closing,
            flusher,
        }
    }

    pub fn update(&self, status: &RunStatus) {
        self.tx.send_replace(status.clone());
    }

    /// Records the final status and waits until it is written. The flusher stops
    /// without waiting out its interval, but a write it has in flight completes
    /// first, so the final write is always the last one.
    pub async fn finish(self, status: &RunStatus) {
        self.closing.cancel();
        let _ = self.flusher.await;
        write(&self.api, &self.name, status).await;
    }
}
