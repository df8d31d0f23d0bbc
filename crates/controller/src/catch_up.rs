//! Catching up `wait_for_event` steps with the events whose fan-out missed them.
//!
//! An event completes the steps waiting for it that its fan-out finds in the Runs it
//! lists ([`super::event`]). A step that started waiting before the event was received,
//! but whose "waiting" status landed only after that list, is not among them. So once
//! the run controller sees a run with an open wait ([`fanout::open_waits`]), it lists
//! the events of that name and completes the step with the first one received since it
//! started that matches, by the same conditional write as the fan-out. Each open wait is
//! caught up once per process: after a restart every waiting run is caught up again,
//! which covers a process killed between the status write and the catch-up.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use flowline_core::crd::EventPhase;
use flowline_core::crd::{FlowlineEvent, Run};
use flowline_core::fanout::{self, OpenWait};
use flowline_engine::status_writer::FIELD_MANAGER;
use flowline_kube::lenient::Lenient;

/// The open waits this process has caught up, by run uid.
#[derive(Default)]
pub struct EventWaits {
    caught_up: Mutex<HashMap<String, Vec<OpenWait>>>,
}

impl EventWaits {
    /// Catches up the open waits of `run` (uid `uid`) not caught up yet. An error leaves
    /// them to the next reconcile.
    pub async fn catch_up(&self, client: &Client, run: &Run, uid: &str) -> Result<(), kube::Error> {
        let open = fanout::open_waits(run);
        // Every reconcile of every run passes here: most have no open wait.
        if open.is_empty() {
            return Ok(());
        }
        let new: Vec<OpenWait> = {
            let caught_up = self.caught_up.lock().unwrap();
            let known = caught_up.get(uid);
            open.into_iter()
                .filter(|w| known.is_none_or(|k| !k.contains(w)))
                .collect()
        };
        if new.is_empty() {
            return Ok(());
        }
        let ns = run.namespace().unwrap_or_default();
        let events: Api<Lenient<FlowlineEvent>> = Api::namespaced(client.clone(), &ns);
        let typed: Api<FlowlineEvent> = Api::namespaced(client.clone(), &ns);
        let writes: Api<Run> = Api::namespaced(client.clone(), &ns);
        let mut names: Vec<&str> = new.iter().map(|w| w.event.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let since = new
                .iter()
                .filter(|w| w.event == name)
                .map(|w| w.since)
                .min()
                .expect("a wait of this name");
            let by_name = ListParams::default().fields(&format!("spec.name={name}"));
            let mut listed: Vec<FlowlineEvent> = events
                .list(&by_name)
                .await?
                .items
                .into_iter()
                .filter_map(|e| e.decoded().map(|e| FlowlineEvent::clone(e)))
                .filter(|e| e.spec.received_at > since)
                .collect();
            listed.sort_by_key(|e| e.spec.received_at);
            let mut current = run.clone();
            for event in &listed {
                let problem = &mut |why: String| {
                    tracing::warn!(event = %event.id(), %why, "catching up an event wait");
                };
                if super::event::complete_waits(&writes, event, &current, problem).await? {
                    tracing::info!(run = %run.name_any(), event = %event.id(), "event wait caught up");
                    note_resumed(&typed, event, &run.name_any()).await?;
                    match writes.get_opt(&run.name_any()).await? {
                        Some(fresh) => current = fresh,
                        None => return Ok(()),
                    }
                    if !fanout::open_waits(&current).iter().any(|w| w.event == name) {
                        break;
                    }
                }
            }
        }
        self.caught_up
            .lock()
            .unwrap()
            .entry(uid.to_string())
            .or_default()
            .extend(new);
        Ok(())
    }

    /// Forgets the run `uid` (finished or deleted).
    pub fn forget(&self, uid: &str) {
        self.caught_up.lock().unwrap().remove(uid);
    }
}

/// Lists `run` among the runs a fanned-out `event` resumed, as its fan-out would have
/// (a pending event's fan-out lists it itself): a write conditional on the event as
/// read, read again on a conflict.
async fn note_resumed(
    events: &Api<FlowlineEvent>,
    event: &FlowlineEvent,
    run: &str,
) -> Result<(), kube::Error> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let mut current = event.clone();
    for _ in 0..3 {
        let Some(status) = current
            .status
            .as_ref()
            .filter(|_| current.phase() == EventPhase::Done)
        else {
            return Ok(());
        };
        if status.resumed.iter().any(|r| r == run) {
            return Ok(());
        }
        let mut resumed = status.resumed.clone();
        resumed.push(run.to_string());
        resumed.sort();
        let patch = json!({
            "metadata": {"resourceVersion": current.resource_version()},
            "status": {"resumed": resumed},
        });
        match events
            .patch_status(&current.name_any(), &params, &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                match events.get_opt(&current.name_any()).await? {
                    Some(fresh) => current = fresh,
                    None => return Ok(()),
                }
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
