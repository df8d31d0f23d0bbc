//! The delivery worker (leader only): watches the events Runs and Workflows hold,
//! sends each to the webhooks that subscribe to it, retries on the schedule, and
//! records attempts and acknowledgements in the Webhook's status, at most one write
//! per webhook per second (docs/design/delivery.md).
//!
//! One task owns all the state; attempts, retry timers and status writes run as
//! tasks that report back through a channel, so no lock is held across I/O.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::secrets::{ROTATED_ANNOTATION, SecretCache};
use super::sender::{Attempted, Outgoing, SendError, Sender};
use flowline_core::crd::{DeliveryAttempt, Run, Webhook, WebhookStatus, Workflow};
use flowline_core::delivery::after_attempt::{self, Decision};
use flowline_core::delivery::lane::Lane;
use flowline_core::delivery::ledger::{Ledger, SETTLE};
use flowline_core::delivery::outbox::{self, Event};
use flowline_core::delivery::ready;
use flowline_core::delivery::schedule::{self, RetrySchedule};
use flowline_core::delivery::settled;
use flowline_core::delivery::unseen::{self, Cut, HolderKind};
use flowline_kube::lenient::{self, DecodedStore, Lenient};
use flowline_kube::shared_watch::{Observed, SharedWatch};
use flowline_telemetry::delivery_metrics::DeliveryMetrics;
use flowline_telemetry::undecodable;

/// Field manager of the worker's Webhook status writes.
pub const FIELD_MANAGER: &str = "flowline-delivery";
/// Annotation through which the API asks for a delivery to be sent again: a JSON list
/// of `{"id": "rdl_…", "delivery": "<attempt id>"}`, newest last.
pub const REDELIVER_ANNOTATION: &str = "flowline.io/redeliver";
/// Attempts shown in the status (and by `GET …/deliveries`).
pub const RECENT_ATTEMPTS: usize = 50;
/// Redelivery requests kept in the annotation by the API.
pub const REDELIVERY_REQUESTS: usize = 20;
/// Handled request ids remembered (more than the API keeps, so none is redone).
const HANDLED_REDELIVERIES: usize = 2 * REDELIVERY_REQUESTS;
/// Status writes per webhook are at least this far apart. What a SIGKILL makes the next
/// worker re-send is about this much of deliveries plus those in flight (the chaos test
/// measured up to 5.4 % of deliveries re-sent at 250 ms, ~5 % at 1 s); ten writes a
/// second per busy webhook is still cheap (about one write per 1,300 deliveries at
/// full speed).
const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct Settings {
    /// Watch one namespace, or all.
    pub namespace: Option<String>,
    pub schedule: RetrySchedule,
    /// Attempts in flight per webhook: one slow receiver holds only its own slots.
    pub concurrency: usize,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct RedeliveryRequest {
    pub id: String,
    pub delivery: String,
}

/// The redelivery requests an annotation value holds (none when it is malformed).
pub fn redelivery_requests(hook: &Webhook) -> Vec<RedeliveryRequest> {
    hook.annotations()
        .get(REDELIVER_ANNOTATION)
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

#[derive(Clone)]
struct Job {
    event: Arc<Event>,
    attempt: u32,
    /// Sent on request: one attempt, outside the event's retry series.
    redelivery: bool,
}

enum Input {
    Hook(ObjectRef<Webhook>),
    Run(ObjectRef<Run>),
    Workflow(ObjectRef<Workflow>),
    /// A Run or Workflow was deleted: its events not yet seen never will be.
    Deleted {
        namespace: String,
        holder: unseen::Holder,
    },
    /// A list of `kind` completed that began at registration `mark` (see
    /// [`unseen::relisted`]).
    Relisted {
        kind: HolderKind,
        mark: u64,
    },
    Attempted {
        hook: ObjectRef<Webhook>,
        uid: String,
        job: Job,
        attempted: Attempted,
    },
    Due {
        hook: ObjectRef<Webhook>,
        uid: String,
        job: Job,
    },
    Written {
        hook: ObjectRef<Webhook>,
        ok: bool,
    },
}

struct HookState {
    uid: String,
    hook: Arc<Webhook>,
    ledger: Ledger,
    /// Written as `status` except `recentAttempts`, kept in `recent` (newest first)
    /// so recording an attempt does not shift the whole list.
    status: WebhookStatus,
    recent: VecDeque<DeliveryAttempt>,
    /// Attempts due now, taken by at most `concurrency` tasks.
    lane: Arc<Lane<Job, Arc<Webhook>>>,
    /// Attempts waiting for their retry time.
    waiting: usize,
    dirty: bool,
    writing: bool,
}

/// Only decoded objects: an undecodable one is as absent as a deleted one.
struct Stores {
    hooks: DecodedStore<Webhook>,
    runs: DecodedStore<Run>,
    workflows: DecodedStore<Workflow>,
}

struct Worker {
    client: Client,
    sender: Sender,
    secrets: Arc<SecretCache>,
    settings: Settings,
    metrics: DeliveryMetrics,
    stores: Stores,
    hooks: HashMap<ObjectRef<Webhook>, HookState>,
    tx: mpsc::UnboundedSender<Input>,
    /// Until then a previous leader's writes may still land (see [`SETTLE`]).
    grace_until: Timestamp,
}

/// Watches `api` into a store, telling the worker of every change ([`on_event`]).
fn watch<K>(
    api: Api<Lenient<K>>,
    client: &Client,
    tell: impl FnMut(&Observed<K>) + Send + 'static,
    compact: fn(&mut K),
    shutdown: CancellationToken,
) -> DecodedStore<K>
where
    K: flowline_kube::lenient::Watched,
{
    let (reader, events) = lenient::compact_reflector(api, watcher::Config::default(), compact);
    undecodable::spawn_watch(events, Some(client.clone()), shutdown, tell);
    reader
}

/// What the worker is told of each watch event of a kind: every change (`wrap`). For
/// the kinds that hold events (`holder`), also deletions and completed lists, which
/// release events of this process that can no longer be seen.
fn on_event<K>(
    tx: mpsc::UnboundedSender<Input>,
    wrap: fn(ObjectRef<K>) -> Input,
    holder: Option<HolderKind>,
) -> impl FnMut(&Observed<K>) + Send + 'static
where
    K: flowline_kube::lenient::Watched,
{
    // Taken when a list begins (before its request is sent), handed over when it ends.
    let mut mark = 0;
    move |event| match event {
        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
            let _ = tx.send(wrap(o.key()));
        }
        Ok(watcher::Event::Delete(o)) => {
            let _ = tx.send(wrap(o.key()));
            if let Some(kind) = holder {
                let _ = tx.send(Input::Deleted {
                    namespace: o.namespace().unwrap_or_default(),
                    holder: unseen::Holder::new(kind, o.meta()),
                });
            }
        }
        Ok(watcher::Event::Init) => mark = unseen::mark(),
        Ok(watcher::Event::InitDone) => {
            if let Some(kind) = holder {
                let _ = tx.send(Input::Relisted { kind, mark });
            }
        }
        Err(err) => tracing::warn!(error = %err, "delivery watch error; retrying"),
    }
}

/// The worker until `shutdown`, which then writes what it has not written yet. Its
/// watches start, and it subscribes to `runs` (the operator's shared watch of the Runs),
/// when called: a shared watch not begun yet lists once for it and the other components.
pub fn run(
    client: Client,
    sender: Sender,
    settings: Settings,
    metrics: DeliveryMetrics,
    runs: SharedWatch<Run>,
    seal: Arc<flowline_core::sealed::SealKey>,
    shutdown: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let grace_until = Timestamp::now() + SETTLE;
    // From now on, events this process creates in the scope are kept until seen.
    let _watching = unseen::watching(settings.namespace.clone());
    let (tx, rx) = mpsc::unbounded_channel();
    let ns = settings.namespace.clone();
    let stores = Stores {
        hooks: watch(
            flowline_kube::scoped_api(&client, ns.as_deref()),
            &client,
            on_event(tx.clone(), Input::Hook, None),
            |_| {},
            shutdown.clone(),
        ),
        // The worker reads a run's events (with their data) and identity, which the
        // operator's shared run cache keeps. Undecodable Runs are reported once, by the
        // workflow controller, which shares that watch in the same process.
        runs: {
            runs.subscribe(on_event(tx.clone(), Input::Run, Some(HolderKind::Run)));
            runs.decoded()
        },
        workflows: watch(
            flowline_kube::scoped_api(&client, ns.as_deref()),
            &client,
            on_event(tx.clone(), Input::Workflow, Some(HolderKind::Workflow)),
            // The worker reads a workflow's events and metadata; its steps (most of a
            // workflow's bytes) are not kept.
            |wf| wf.spec.steps = Vec::new(),
            shutdown.clone(),
        ),
    };
    work(
        Worker {
            secrets: Arc::new(SecretCache::new(client.clone(), seal)),
            client,
            sender,
            settings,
            metrics,
            stores,
            hooks: HashMap::new(),
            tx,
            grace_until,
        },
        rx,
        _watching,
        shutdown,
    )
}

async fn work(
    mut worker: Worker,
    mut rx: mpsc::UnboundedReceiver<Input>,
    _watching: unseen::Watching,
    shutdown: CancellationToken,
) {
    let stores = &worker.stores;
    let ready = async {
        let _ = stores.hooks.wait_until_ready().await;
        let _ = stores.runs.wait_until_ready().await;
        let _ = stores.workflows.wait_until_ready().await;
    };
    tokio::select! {
        _ = ready => {},
        _ = shutdown.cancelled() => return,
    }
    // Everything listed so far; later changes arrive through the channel (and the
    // ones already queued are harmless repeats).
    for hook in worker.stores.hooks.state() {
        worker.on_hook(ObjectRef::from_obj(&*hook));
    }
    tracing::info!(webhooks = worker.hooks.len(), "delivery worker started");
    let mut tick = tokio::time::interval(FLUSH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(input) = rx.recv() => worker.handle(input),
            _ = tick.tick() => worker.flush(),
        }
    }
    worker.final_flush().await;
}

impl Worker {
    fn handle(&mut self, input: Input) {
        match input {
            Input::Hook(r) => self.on_hook(r),
            Input::Run(r) => {
                if let Some(run) = self.stores.runs.get(&r) {
                    let (workflow, events) = outbox::of_run(&run);
                    let ns = run.namespace().unwrap_or_default();
                    self.offer(&ns, workflow, events, run.uid(), None);
                }
            }
            Input::Workflow(r) => {
                if let Some(wf) = self.stores.workflows.get(&r) {
                    let (workflow, events) = outbox::of_workflow(&wf);
                    self.offer(
                        &wf.namespace().unwrap_or_default(),
                        &workflow,
                        events,
                        None,
                        None,
                    );
                }
            }
            Input::Deleted { namespace, holder } => unseen::gone(&namespace, &holder),
            Input::Relisted { kind, mark } => self.relisted(kind, mark),
            Input::Attempted {
                hook,
                uid,
                job,
                attempted,
            } => self.on_attempted(hook, &uid, job, attempted),
            Input::Due { hook, uid, job } => {
                if let Some(state) = self.hooks.get_mut(&hook).filter(|s| s.uid == uid) {
                    state.waiting -= 1;
                    if state.status.enabled {
                        self.enqueue(&hook, job, false);
                    }
                }
            }
            Input::Written { hook, ok } => {
                if let Some(state) = self.hooks.get_mut(&hook) {
                    state.writing = false;
                    state.dirty |= !ok;
                }
            }
        }
    }

    fn on_hook(&mut self, r: ObjectRef<Webhook>) {
        let Some(hook) = self.stores.hooks.get(&r) else {
            if let Some(gone) = self.hooks.remove(&r) {
                gone.lane.close();
            }
            return;
        };
        let uid = hook.uid().unwrap_or_default();
        let (rescan, new) = match self.hooks.get_mut(&r) {
            Some(state) if state.uid == uid => {
                let spec_changed = state.hook.spec != hook.spec;
                if state.hook.annotations().get(ROTATED_ANNOTATION)
                    != hook.annotations().get(ROTATED_ANNOTATION)
                {
                    self.secrets.invalidate(&hook);
                }
                state.hook = hook.clone();
                state.lane.set_context(hook.clone());
                // A changed spec (or a status never written) gets its Ready condition
                // and observed generation written.
                state.dirty |=
                    ready::stale(&state.status, &hook.spec.events, hook.metadata.generation);
                (spec_changed, false)
            }
            _ => {
                let created = settled::created(&hook);
                let mut status = hook.status.clone().unwrap_or_default();
                let recent = std::mem::take(&mut status.recent_attempts).into();
                self.hooks.insert(
                    r.clone(),
                    HookState {
                        uid,
                        ledger: Ledger::from_status(Some(&status), created),
                        status,
                        recent,
                        hook: hook.clone(),
                        lane: Lane::new(hook.clone(), self.settings.concurrency),
                        waiting: 0,
                        dirty: false,
                        writing: false,
                    },
                );
                (true, true)
            }
        };
        if rescan {
            self.scan_for(&r);
        }
        if new && let Some(state) = self.hooks.get_mut(&r) {
            // The stores are synced and every event was just offered: what the status
            // lists that the scan did not match no longer exists.
            state.dirty |= state.ledger.synced();
            state.dirty |= ready::stale(&state.status, &hook.spec.events, hook.metadata.generation);
        }
        self.redeliveries(&r);
    }

    /// Offers every event of the hook's namespace to it (a new or changed webhook).
    fn scan_for(&mut self, r: &ObjectRef<Webhook>) {
        let ns = r.namespace.clone().unwrap_or_default();
        let in_ns = |o: &kube::api::ObjectMeta| o.namespace.as_deref() == Some(ns.as_str());
        for run in self.stores.runs.state() {
            if in_ns(&run.metadata) {
                let (workflow, events) = outbox::of_run(&run);
                self.offer(&ns, workflow, events, run.uid(), Some(r));
            }
        }
        for wf in self.stores.workflows.state() {
            if in_ns(&wf.metadata) {
                let (workflow, events) = outbox::of_workflow(&wf);
                self.offer(&ns, &workflow, events, None, Some(r));
            }
        }
    }

    /// Queues the events for the subscribed webhooks of `ns` (or only `only`) that
    /// still owe them.
    fn offer(
        &mut self,
        ns: &str,
        workflow: &str,
        events: &[flowline_core::crd::PendingEvent],
        run_uid: Option<String>,
        only: Option<&ObjectRef<Webhook>>,
    ) {
        if events.is_empty() {
            return;
        }
        for pending in events {
            unseen::seen(ns, &pending.id);
        }
        // Built on first use and shared by every webhook the event goes to.
        let mut built: Vec<Option<Arc<Event>>> = vec![None; events.len()];
        let targets: Vec<ObjectRef<Webhook>> = self
            .hooks
            .keys()
            .filter(|k| k.namespace.as_deref() == Some(ns) && only.is_none_or(|o| o == *k))
            .cloned()
            .collect();
        for key in targets {
            let Some(state) = self.hooks.get_mut(&key) else {
                continue;
            };
            if !state.status.enabled {
                continue;
            }
            let mut later = Vec::new();
            let mut due = Vec::new();
            for (pending, event) in events.iter().zip(built.iter_mut()) {
                if !outbox::subscribes(&state.hook, pending.kind, workflow) {
                    continue;
                }
                let Some(admission) = state.ledger.admit(&pending.id, pending.timestamp) else {
                    continue;
                };
                let job = Job {
                    event: event
                        .get_or_insert_with(|| {
                            Arc::new(Event::new(pending, workflow).of_run_uid(run_uid.clone()))
                        })
                        .clone(),
                    attempt: admission.attempt,
                    redelivery: false,
                };
                match admission.not_before.and_then(until) {
                    Some(wait) => later.push((wait, job)),
                    None => due.push(job),
                }
            }
            for (wait, job) in later {
                self.schedule(&key, wait, job);
            }
            for job in due {
                self.enqueue(&key, job, false);
            }
        }
    }

    fn schedule(&mut self, key: &ObjectRef<Webhook>, wait: Duration, job: Job) {
        let Some(state) = self.hooks.get_mut(key) else {
            return;
        };
        state.waiting += 1;
        let (tx, hook, uid) = (self.tx.clone(), key.clone(), state.uid.clone());
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = tx.send(Input::Due { hook, uid, job });
        });
    }

    /// Queues an attempt that is due; starts a task for it when the webhook has a free
    /// slot. Tasks take further jobs from the lane themselves.
    fn enqueue(&self, key: &ObjectRef<Webhook>, job: Job, urgent: bool) {
        let Some(state) = self.hooks.get(key) else {
            return;
        };
        if !state.lane.push(job, urgent) {
            return;
        }
        let (lane, tx, hook_ref, uid) = (
            state.lane.clone(),
            self.tx.clone(),
            key.clone(),
            state.uid.clone(),
        );
        let (sender, secrets) = (self.sender.clone(), self.secrets.clone());
        tokio::spawn(async move {
            while let Some((job, hook)) = lane.next() {
                let attempted = attempt(&sender, &secrets, &hook, &job).await;
                let _ = tx.send(Input::Attempted {
                    hook: hook_ref.clone(),
                    uid: uid.clone(),
                    job,
                    attempted,
                });
            }
        });
    }

    fn on_attempted(&mut self, key: ObjectRef<Webhook>, uid: &str, job: Job, done: Attempted) {
        let Some(state) = self.hooks.get_mut(&key).filter(|s| s.uid == uid) else {
            return;
        };
        let now = flowline_core::clock::now_ms();
        let (status_code, error, retry_after) = match &done.result {
            Ok(r) => (Some(r.status), None, r.retry_after),
            // Kept in the Webhook's status and shown by the deliveries API: capped.
            Err(e) => (
                None,
                Some(flowline_core::limits::cap_error(e.to_string())),
                None,
            ),
        };
        let outcome = match &done.result {
            Ok(r) if schedule::status_is_success(r.status) => "delivered",
            Ok(_) => "http_error",
            Err(SendError::Refused(_) | SendError::InsecureScheme) => "refused",
            Err(_) => "transport_error",
        };
        self.metrics.record(outcome, done.duration.as_secs_f64());
        let s = &mut state.status;
        state.recent.push_front(DeliveryAttempt {
            id: flowline_core::ids::new_token_id("dlv"),
            event_id: job.event.id.clone(),
            event: job.event.kind,
            attempt: job.attempt,
            status_code,
            error,
            duration_ms: u64::try_from(done.duration.as_millis()).unwrap_or(u64::MAX),
            at: now,
        });
        state.recent.truncate(RECENT_ATTEMPTS);
        s.last_delivery_at = Some(now);
        s.last_status_code = status_code;
        state.dirty = true;
        let decision = after_attempt::decide(
            &after_attempt::Attempt {
                status_code,
                retry_after,
                number: job.attempt,
                redelivery: job.redelivery,
                failing_since: s.failing_since,
                now,
                jitter: rand::random(),
            },
            &self.settings.schedule,
        );
        if decision.is_failure() {
            s.consecutive_failures += 1;
            s.failing_since.get_or_insert(now);
        } else {
            s.consecutive_failures = 0;
            s.failing_since = None;
        }
        match decision {
            Decision::Delivered { settle } => {
                if settle {
                    state.ledger.settle(&job.event.id);
                }
            }
            Decision::Disable(reason) => disable(state, reason),
            Decision::Retry { attempt, wait, at } => {
                state.ledger.failed(&job.event.id, at);
                self.schedule(&key, wait, Job { attempt, ..job });
            }
            Decision::GiveUp => {
                tracing::warn!(webhook = %key, event = %job.event.id, attempts = job.attempt, "retries exhausted; the delivery series failed");
                state.ledger.settle(&job.event.id);
            }
            Decision::Recorded => {}
        }
    }

    /// Carries out the redelivery requests the API left in the annotation.
    fn redeliveries(&mut self, key: &ObjectRef<Webhook>) {
        let Some(state) = self.hooks.get(key) else {
            return;
        };
        let requests: Vec<RedeliveryRequest> = redelivery_requests(&state.hook)
            .into_iter()
            .filter(|r| !state.status.handled_redeliveries.contains(&r.id))
            .collect();
        if requests.is_empty() {
            return;
        }
        let ns = key.namespace.clone().unwrap_or_default();
        let mut jobs = Vec::new();
        for request in &requests {
            let Some(previous) = state.recent.iter().find(|a| a.id == request.delivery) else {
                tracing::warn!(webhook = %key, delivery = %request.delivery, "redelivery of an unknown attempt ignored");
                continue;
            };
            let last_attempt = state
                .recent
                .iter()
                .filter(|a| a.event_id == previous.event_id)
                .map(|a| a.attempt)
                .max()
                .unwrap_or(previous.attempt);
            match self.find_event(&ns, &previous.event_id) {
                Some(event) => jobs.push(Job {
                    event: Arc::new(event),
                    attempt: last_attempt + 1,
                    redelivery: true,
                }),
                None => {
                    tracing::warn!(webhook = %key, event = %previous.event_id, "redelivery of an event that no longer exists ignored")
                }
            }
        }
        let Some(state) = self.hooks.get_mut(key) else {
            return;
        };
        for request in requests {
            state.status.handled_redeliveries.push(request.id);
        }
        let excess = state
            .status
            .handled_redeliveries
            .len()
            .saturating_sub(HANDLED_REDELIVERIES);
        state.status.handled_redeliveries.drain(..excess);
        state.dirty = true;
        for job in jobs.into_iter().rev() {
            self.enqueue(key, job, true);
        }
    }

    fn find_event(&self, ns: &str, id: &str) -> Option<Event> {
        let in_ns = |m: &kube::api::ObjectMeta| m.namespace.as_deref() == Some(ns);
        let runs = self.stores.runs.state();
        let workflows = self.stores.workflows.state();
        outbox::find(
            runs.iter().filter(|r| in_ns(&r.metadata)).map(|r| &**r),
            workflows
                .iter()
                .filter(|w| in_ns(&w.metadata))
                .map(|w| &**w),
            id,
        )
    }

    /// A list of `kind` completed: events of objects it no longer has are released
    /// (see [`unseen::relisted`]).
    fn relisted(&self, kind: HolderKind, mark: u64) {
        let present = |ns: &str, holder: &unseen::Holder| {
            let uid = match kind {
                HolderKind::Run => self
                    .stores
                    .runs
                    .get_by(&lenient::store_key(Some(ns), &holder.name))
                    .and_then(|o| o.uid()),
                HolderKind::Workflow => self
                    .stores
                    .workflows
                    .get_by(&lenient::store_key(Some(ns), &holder.name))
                    .and_then(|o| o.uid()),
            };
            uid.as_deref() == Some(holder.uid.as_str())
        };
        unseen::relisted(self.settings.namespace.as_deref(), kind, mark, present);
    }

    /// Writes the status of every webhook with something new, at most once per
    /// interval each; the watermark moves only within such writes (one is also made
    /// when moving it would shrink `acknowledged`).
    fn flush(&mut self) {
        let mut cuts = Cuts::default();
        let in_grace = Timestamp::now() < self.grace_until;
        let mut depth = 0;
        for (key, state) in &mut self.hooks {
            depth += state.lane.len() + state.waiting;
            if state.writing {
                continue;
            }
            let cut = cuts.of(key);
            if !state.dirty && !state.ledger.can_compact(cut, in_grace) {
                continue;
            }
            let status = state.status_to_write(cut, in_grace);
            state.dirty = false;
            state.writing = true;
            let api: Api<Webhook> =
                Api::namespaced(self.client.clone(), key.namespace.as_deref().unwrap_or(""));
            let (tx, hook) = (self.tx.clone(), key.clone());
            let writes = self.metrics.status_writes.clone();
            tokio::spawn(async move {
                writes.inc();
                let ok = write_status(&api, &hook.name, &status).await;
                let _ = tx.send(Input::Written { hook, ok });
            });
        }
        self.metrics.queue_depth.set(depth as i64);
    }

    async fn final_flush(&mut self) {
        let mut cuts = Cuts::default();
        let in_grace = Timestamp::now() < self.grace_until;
        let mut writes = Vec::new();
        for (key, state) in &mut self.hooks {
            if !state.dirty {
                continue;
            }
            let status = state.status_to_write(cuts.of(key), in_grace);
            let api: Api<Webhook> =
                Api::namespaced(self.client.clone(), key.namespace.as_deref().unwrap_or(""));
            let name = key.name.clone();
            writes.push(async move { write_status(&api, &name, &status).await });
        }
        let _ =
            tokio::time::timeout(Duration::from_secs(5), futures::future::join_all(writes)).await;
    }
}

/// One [`Cut`] per namespace for one pass over the webhooks.
#[derive(Default)]
struct Cuts(HashMap<String, Cut>);

impl Cuts {
    fn of(&mut self, hook: &ObjectRef<Webhook>) -> Cut {
        let ns = hook.namespace.as_deref().unwrap_or_default();
        *self
            .0
            .entry(ns.to_string())
            .or_insert_with(|| unseen::cut(ns))
    }
}

impl HookState {
    /// Moves the watermark as far as it may go and returns the whole status to write.
    fn status_to_write(&mut self, cut: Cut, in_grace: bool) -> WebhookStatus {
        self.ledger.advance(cut, in_grace);
        self.ledger.write_into(&mut self.status);
        ready::apply(
            &mut self.status,
            &self.hook.spec.events,
            self.hook.metadata.generation,
            Timestamp::now(),
        );
        self.status.recent_attempts = self.recent.iter().cloned().collect();
        self.status.clone()
    }
}

fn disable(state: &mut HookState, reason: &str) {
    tracing::warn!(webhook = %state.hook.name_any(), reason, "webhook disabled");
    state.status.enabled = false;
    state.status.disabled_reason = Some(reason.to_string());
    state.lane.close();
}

/// How long until `at`, if it is in the future.
fn until(at: Timestamp) -> Option<Duration> {
    let wait = at.duration_since(Timestamp::now());
    Duration::try_from(wait).ok().filter(|d| !d.is_zero())
}

async fn attempt(sender: &Sender, secrets: &SecretCache, hook: &Webhook, job: &Job) -> Attempted {
    let keys = match secrets.keys(hook).await {
        Ok(keys) => keys,
        Err(err) => {
            return Attempted {
                result: Err(SendError::Request(err.to_string())),
                duration: Duration::ZERO,
            };
        }
    };
    sender
        .send(Outgoing {
            url: &hook.spec.url,
            webhook_allows_http: hook.spec.allow_insecure_http,
            event_id: &job.event.id,
            kind: job.event.kind,
            attempt: job.attempt,
            body: job.event.body.clone(),
            secrets: &keys,
            run_uid: job.event.run_uid.as_deref(),
        })
        .await
}

/// Server-side apply of the whole status under the worker's field manager, so fields
/// it no longer sets (an emptied `retrying`) are removed, and nobody else's are touched.
async fn write_status(api: &Api<Webhook>, name: &str, status: &WebhookStatus) -> bool {
    let patch = serde_json::json!({
        "apiVersion": "flowline.io/v1",
        "kind": "Webhook",
        "status": status,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api.patch_status(name, &params, &Patch::Apply(&patch)).await {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Err(err) => {
            tracing::warn!(webhook = name, error = %err, "webhook status write failed; retrying");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(annotation: Option<&str>) -> Webhook {
        let mut hook: Webhook = serde_json::from_value(serde_json::json!({
            "apiVersion": "flowline.io/v1", "kind": "Webhook",
            "metadata": {"name": "wh", "namespace": "n"},
            "spec": {"url": "https://example.com", "events": ["run.started"]}
        }))
        .unwrap();
        if let Some(value) = annotation {
            hook.metadata.annotations =
                Some([(REDELIVER_ANNOTATION.to_string(), value.to_string())].into());
        }
        hook
    }

    #[test]
    fn redelivery_requests_are_read_from_the_annotation() {
        let h = hook(Some(r#"[{"id": "rdl_1", "delivery": "dlv_a"}]"#));
        assert_eq!(
            redelivery_requests(&h),
            vec![RedeliveryRequest {
                id: "rdl_1".into(),
                delivery: "dlv_a".into()
            }]
        );
        assert!(redelivery_requests(&hook(None)).is_empty());
        assert!(
            redelivery_requests(&hook(Some("not json"))).is_empty(),
            "a hand-edited, malformed annotation is ignored, not fatal"
        );
    }

    #[test]
    fn only_future_times_are_waited_for() {
        let now = Timestamp::now();
        assert_eq!(until(now - jiff::SignedDuration::from_secs(5)), None);
        let wait = until(now + jiff::SignedDuration::from_secs(60)).unwrap();
        assert!(wait > Duration::from_secs(55) && wait <= Duration::from_secs(60));
    }
}
