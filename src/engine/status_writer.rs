//! Coalesced status writes: a fast run costs a couple of API writes, not one per
//! step transition, while a slow run's progress still shows within a second.

use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;

use crate::crd::{Run, RunStatus};

/// Field manager of every status write of the controllers.
pub const FIELD_MANAGER: &str = "flowline-controller";
/// Longest a changed status waits before it is written.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(500);

pub struct StatusWriter {
    api: Api<Run>,
    name: String,
    tx: watch::Sender<RunStatus>,
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
        let flusher = tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let status = rx.borrow_and_update().clone();
                write(&flush_api, &flush_name, &status).await;
                tokio::time::sleep(FLUSH_INTERVAL).await;
            }
        });
        StatusWriter {
            api,
            name,
            tx,
            flusher,
        }
    }

    pub fn update(&self, status: &RunStatus) {
        self.tx.send_replace(status.clone());
    }

    /// Records the final status and waits until it is written.
    pub async fn finish(self, status: &RunStatus) {
        // The flusher may be sleeping out its interval; the final write must not wait
        // for it, and must come after any write it has in flight.
        self.flusher.abort();
        let _ = self.flusher.await;
        write(&self.api, &self.name, status).await;
    }
}
