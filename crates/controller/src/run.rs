//! The Run controller: decides what a Run needs (pin it to its workflow version,
//! start, cancel, fail at once) and hands execution to the engine. Execution state
//! lives in the Run's status, so a restarted operator picks up where the last one
//! stopped; a periodic resync of unfinished runs is the backstop when no watch event
//! arrives. A Run or Workflow deleted while a run executes stops that execution.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::backoff::{ReconcileBackoff, object_key};
use super::freshness::FreshRecord;
use super::queue::Queue;
use super::run_cache::RunCache;
use super::shard::Shards;
use flowline_core::admission::account_bound::{AccountBound, Take};
use flowline_core::admission::timing::{self, Gate, Ledger};
use flowline_core::admission::unrecorded;
use flowline_core::admission::{self, Admission};
use flowline_core::cached_read;
use flowline_core::crd::{
    ConcurrencyPolicy, Executor, QueuedFor, Run, RunPhase, RunStatus, StepPhase, Workflow,
    WorkflowSnapshot,
};
use flowline_core::engine::subworkflow;
use flowline_core::triage::{
    ChildEnded, Decision, LookAgain, Need, Observed, Read, Upkeep, WorkflowRead, look_again, triage,
};
use flowline_engine::runner::{self, Engine, Outside};
use flowline_engine::status_writer::StatusWriter;
use flowline_kube::lenient::{self, DecodedStore, Lenient};
use flowline_kube::name_index::SharedNameIndex;
use flowline_telemetry::engine_metrics::{ControllerLabel, EngineTelemetry};

pub use flowline_core::triage::RESYNC_UNFINISHED;

/// How long a run finished here counts as finished without the cache confirming it.
const ENDED_MEMORY: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
}

/// How many times in a row a run is held for a gate about to open before it is left to
/// be looked at again.
const MAX_HOLDS: usize = 4;

/// Reconciles in flight at once. Unbounded, a start-up over 10,000 runs spawned one
/// task per run at once (about 9 KB each: 89 MB at the peak, which the allocator
/// keeps); a reconcile only decides and spawns the execution, so a bound costs no
/// throughput.
const RECONCILE_CONCURRENCY: u16 = 64;

pub struct Context {
    pub client: Client,
    pub engine: Engine,
    /// Watch only this namespace (tests, namespaced installs); None = all.
    pub namespace: Option<String>,
    /// Runs this process is executing, by uid.
    executing: Mutex<HashMap<String, Execution>>,
    /// Runs whose final status this process wrote, by uid, until its cache shows them
    /// finished: their slots are free although the cache may still show them running.
    ended: Mutex<HashMap<String, Instant>>,
    /// Concurrency control: the group of a run, waking queued runs.
    queue: Queue,
    /// Rate limits and debounces: the starts and waiting runs of each key.
    gates: Ledger,
    /// The shards this process executes (all runs without sharding).
    shards: Arc<Shards>,
    /// How many runs an account may execute here at once (shared by the contexts of
    /// every namespace of this process).
    account_bound: Arc<AccountBound>,
    /// Every context of this process (one per watched namespace): a place of the
    /// operator-wide bound freed in one namespace may go to a run of another.
    peers: Arc<Mutex<Vec<std::sync::Weak<Context>>>>,
    /// When each run whose reconcile failed is tried again.
    backoff: ReconcileBackoff,
    /// The `wait_for_event` steps caught up with events their fan-out missed.
    event_waits: Arc<super::catch_up::EventWaits>,
    /// What decides whether the caches may stand in for a new run's fresh read.
    fresh: FreshRecord,
    /// The workflows, compact (no steps: only a pinned run, which carries its own, is
    /// decided from this cache). Set when the controller starts.
    workflows: OnceLock<DecodedStore<Workflow>>,
}

/// What admission gave a run that is ready to execute.
enum Admitted {
    /// Execute it (it is registered); first cancel these runs of its group.
    Start {
        registration: Registration,
        cancel: CancellationToken,
        approvals: Approvals,
        cancel_others: Vec<String>,
    },
    /// Wait for a slot; first cancel these runs of its group; record it `queued` for
    /// what `mark` says when it is set (a run that waits for its account's bound keeps a
    /// status it has: a run that started never goes back to `queued`), unless its gate
    /// opens soon (`opens_at`).
    Queue {
        cancel_others: Vec<String>,
        mark: Option<QueuedFor>,
        opens_at: Option<jiff::Timestamp>,
    },
    /// Record it as ended, with this phase and error.
    End(RunPhase, String),
    /// Its rate limit's window or its debounce opens at this time, a moment from now
    /// ([`timing::LEAD`]): admission is asked again then, without another read.
    Hold(jiff::Timestamp),
}

/// Whether a run that has not started must wait, judged from the cache alone, and when
/// a time it waits for comes (a rate limit's window, a debounce).
struct Waits {
    waits: bool,
    opens_at: Option<jiff::Timestamp>,
    /// What it waits for, when it waits.
    waits_for: Option<QueuedFor>,
}

/// One run this process is executing.
struct Execution {
    namespace: String,
    workflow: String,
    name: String,
    cancel: CancellationToken,
    /// Passes on to the execution what the watch sees that may end its waiting steps.
    outside: tokio::sync::watch::Sender<Outside>,
}

impl Execution {
    /// Tells the queue that its run started or ended here, so concurrency counts it
    /// again.
    fn changed(&self, queue: &Queue) {
        queue.touch(&self.namespace, &self.workflow, &self.name);
    }
}

/// What an execution sees of its run's decisions and children.
type Approvals = tokio::sync::watch::Receiver<Outside>;

/// Keeps a run registered as executing while its task lives: dropped when the task
/// ends, however it ends, so a run is never "executing" in a process that is not.
struct Registration {
    ctx: Arc<Context>,
    uid: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut executing = self.ctx.lock();
        if let Some(execution) = executing.remove(&self.uid) {
            execution.changed(&self.ctx.queue);
            self.ctx.engine.telemetry.runs_in_progress.dec();
            self.ctx.account_bound.release(&execution.namespace);
            self.ctx.wake_account(&execution.namespace);
        }
    }
}

impl Context {
    pub fn new(
        client: Client,
        http: flowline_egress::GuardedClient,
        default_executor: Executor,
        namespace: Option<String>,
        telemetry: EngineTelemetry,
        public_url: String,
        jobs: flowline_engine::job::JobSettings,
    ) -> Arc<Self> {
        Self::joined(Context {
            engine: Engine {
                client: client.clone(),
                http,
                telemetry,
                default_executor,
                jobs,
                public_url,
                attempts: Default::default(),
            },
            client,
            namespace,
            executing: Mutex::new(HashMap::new()),
            ended: Mutex::new(HashMap::new()),
            queue: Queue::default(),
            gates: Ledger::default(),
            shards: Arc::new(Shards::all()),
            account_bound: Arc::default(),
            peers: Arc::default(),
            backoff: ReconcileBackoff::default(),
            event_waits: Arc::default(),
            fresh: FreshRecord::default(),
            workflows: OnceLock::new(),
        })
    }

    /// `ctx`, made known to its peers.
    fn joined(ctx: Context) -> Arc<Self> {
        let ctx = Arc::new(ctx);
        let mut peers = ctx.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.retain(|peer| peer.strong_count() > 0);
        peers.push(Arc::downgrade(&ctx));
        drop(peers);
        ctx
    }

    /// How many runs one account may execute here at once (unbounded unless set).
    pub fn account_bound(&self) -> &AccountBound {
        &self.account_bound
    }

    /// How many step attempts execute here at once (unbounded unless set).
    pub fn attempt_bound(&self) -> &flowline_engine::runner::AttemptBound {
        &self.engine.attempts
    }

    /// Wakes the run next in turn for a place of the account bounds after one of
    /// `namespace` freed (or left its turn), if a place is free: the first that still
    /// waits (one deleted or finished meanwhile is passed over). Under the
    /// operator-wide bound it may be a run of another namespace, woken through the
    /// context watching it.
    fn wake_account(&self, namespace: &str) {
        while let Some((namespace, name)) =
            self.account_bound.next_waiting(namespace, Instant::now())
        {
            let peers: Vec<Arc<Context>> = self
                .peers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .collect();
            let watching = peers.iter().filter(|peer| {
                peer.namespace.is_none() || peer.namespace.as_deref() == Some(&namespace)
            });
            for peer in watching {
                if let Some(run) = peer.queue.cached(&namespace, &name)
                    && !run.phase().is_finished()
                {
                    peer.queue.wake(&run);
                    return;
                }
            }
        }
    }

    /// The same engine and settings, watching `namespace` (None = all). Each
    /// namespace of a list gets its own controller and so its own context.
    pub fn in_namespace(&self, namespace: Option<String>) -> Arc<Self> {
        self.in_shards(namespace, self.shards.clone())
    }

    /// [`Context::in_namespace`], executing only the runs of the shards `shards`
    /// holds (shared by the contexts of every namespace of this process).
    pub fn in_shards(&self, namespace: Option<String>, shards: Arc<Shards>) -> Arc<Self> {
        Self::joined(Context {
            client: self.client.clone(),
            engine: self.engine.clone(),
            namespace,
            executing: Mutex::new(HashMap::new()),
            ended: Mutex::new(HashMap::new()),
            queue: Queue::default(),
            gates: Ledger::default(),
            shards,
            account_bound: self.account_bound.clone(),
            peers: self.peers.clone(),
            backoff: ReconcileBackoff::default(),
            event_waits: Arc::default(),
            fresh: FreshRecord::default(),
            workflows: OnceLock::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Execution>> {
        self.executing.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn token(&self, uid: &str) -> Option<CancellationToken> {
        self.lock().get(uid).map(|e| e.cancel.clone())
    }

    /// The cached `run` and its cached workflow, when they may stand in for a fresh
    /// read of both ([`cached_read`]): a new run then starts without a round trip.
    fn cached_read(&self, run: &Arc<Run>) -> Option<Read> {
        let namespace = run.namespace().unwrap_or_default();
        let workflow = (self.workflows.get()?)
            .get(&ObjectRef::new(&run.spec.workflow_ref).within(&namespace))?;
        let freshness = self.fresh.of(run, &self.shards);
        cached_read::stands_in(run, Some(&workflow), freshness).then(|| Read {
            run: Some(run.clone()),
            workflow: WorkflowRead::Found(workflow),
        })
    }

    /// Passes `run`'s decisions, and which of the children it waits for ended, on to
    /// its execution here, if any and if they changed: an approval decided (or a child
    /// ended) while other branches of the run still execute is settled at once instead
    /// of when the run parks.
    fn offer_approvals(&self, uid: &str, run: &Run) {
        let Some(execution) = self.lock().get(uid).map(|e| e.outside.clone()) else {
            return;
        };
        let namespace = run.namespace().unwrap_or_default();
        let ended = run.status.as_ref().map_or_else(Default::default, |status| {
            subworkflow::ended_children(status, |child| self.queue.ended(&namespace, child))
        });
        execution.send_if_modified(|seen| {
            // Children reported ended stay so (`child_ended` may know more than the
            // cached status shows).
            let mut now = Outside::of(run);
            now.ended_children = ended;
            now.ended_children
                .extend(seen.ended_children.iter().cloned());
            let changed = *seen != now;
            if changed {
                *seen = now;
            }
            changed
        });
    }

    /// Tells the execution here of run `parent` (if any) that its child `child` ended:
    /// a step waiting for it is settled at once, even before the parent's status
    /// showing that it waits for this child has been written.
    fn child_ended(&self, namespace: &str, parent: &str, child: &str) {
        let executing = self.lock();
        let Some(execution) = executing
            .values()
            .find(|e| e.name == parent && e.namespace == namespace)
        else {
            return;
        };
        execution
            .outside
            .send_if_modified(|seen| seen.ended_children.insert(child.to_string()));
    }

    /// Registers `run` as executing here, in the locked registry `executing`.
    fn register(
        self: &Arc<Self>,
        executing: &mut HashMap<String, Execution>,
        run: &Run,
        uid: &str,
    ) -> (Registration, CancellationToken, Approvals) {
        let cancel = CancellationToken::new();
        let (outside, seen) = tokio::sync::watch::channel(Outside::of(run));
        let execution = Execution {
            namespace: run.namespace().unwrap_or_default(),
            workflow: run.spec.workflow_ref.clone(),
            name: run.name_any(),
            cancel: cancel.clone(),
            outside,
        };
        execution.changed(&self.queue);
        if executing.insert(uid.to_string(), execution).is_none() {
            self.engine.telemetry.runs_in_progress.inc();
        }
        let registration = Registration {
            ctx: self.clone(),
            uid: uid.to_string(),
        };
        (registration, cancel, seen)
    }

    /// Admits `run` (ready to execute) under its workflow version's concurrency control,
    /// registering it when it may start. Deciding and registering happen under the
    /// registry's lock, so two runs can never take the same slot, and a run admitted
    /// here holds its slot from this moment, before its `running` status is written.
    fn admit(self: &Arc<Self>, run: &Run, uid: &str) -> Admitted {
        let namespace = run.namespace().unwrap_or_default();
        // Its workflow admits it; its account's bound has the last word. A run refused
        // there waits without cancelling anything: admission is asked again when it is
        // woken. A run that started (resumed, or woken from parking) waits too, keeping
        // its status.
        let order = admission::order_of(run);
        let now = flowline_core::clock::now_ms();
        let start = |ctx: &Arc<Self>, executing: &mut _, cancel_others| match ctx
            .account_bound
            .take(&namespace, &order, Instant::now())
        {
            Take::Taken => {
                if !run.has_started() {
                    // A rate limit counts it from now, before its status shows it.
                    ctx.gates.started_here(run, now);
                }
                let (registration, cancel, approvals) = ctx.register(executing, run, uid);
                Admitted::Start {
                    registration,
                    cancel,
                    approvals,
                    cancel_others,
                }
            }
            Take::Wait => Admitted::Queue {
                cancel_others: Vec::new(),
                mark: run.status.is_none().then_some(QueuedFor::Account),
                opens_at: None,
            },
        };
        // Refused by its workflow: a place of its account it may have been woken for
        // goes to the account's next waiting run.
        let queue = |ctx: &Arc<Self>, cancel_others, waits_for, opens_at| {
            ctx.account_bound.forget(&namespace, &order);
            ctx.wake_account(&namespace);
            Admitted::Queue {
                cancel_others,
                mark: (run.phase() != RunPhase::Queued).then_some(waits_for),
                opens_at,
            }
        };
        let mut executing = self.lock();
        // Time comes first: a run its rate limit or debounce holds back does not
        // contend for a slot yet.
        match self.gates.gate_for(run, now) {
            Ok((Gate::Open, _)) => {}
            Ok((Gate::Until(opens_at), waits_for)) => {
                let waits_for = waits_for.unwrap_or(QueuedFor::RateLimit);
                if timing::imminent(opens_at, now) {
                    return Admitted::Hold(opens_at);
                }
                return queue(self, Vec::new(), waits_for, Some(opens_at));
            }
            Ok((Gate::Superseded { by }, _)) => {
                return Admitted::End(RunPhase::Cancelled, format!("superseded by {by}"));
            }
            Err(error) => return Admitted::End(RunPhase::Failed, error),
        }
        match self.admission_with(run, &executing) {
            None | Some(Ok(Admission::Start)) => start(self, &mut executing, Vec::new()),
            Some(Ok(Admission::CancelOthers { names, start: true })) => {
                start(self, &mut executing, names)
            }
            Some(Ok(Admission::CancelOthers {
                names,
                start: false,
            })) => queue(self, names, QueuedFor::Concurrency, None),
            Some(Ok(Admission::Queue)) => queue(self, Vec::new(), QueuedFor::Concurrency, None),
            Some(Ok(Admission::CancelSelf(error))) => Admitted::End(RunPhase::Cancelled, error),
            Some(Err(error)) => Admitted::End(RunPhase::Failed, error),
        }
    }

    /// What concurrency control says of `run` now, from the cache and the registry
    /// (`executing`, held by the caller): None for a run not under it, an error when its
    /// group key cannot be rendered.
    fn admission_with(
        &self,
        run: &Run,
        executing: &HashMap<String, Execution>,
    ) -> Option<Result<Admission, String>> {
        let concurrency = admission::needs_admission(run)?;
        let group = match admission::group_of(run) {
            Ok(group) => group,
            Err(error) => return Some(Err(error)),
        };
        let others = self
            .queue
            .members(run, &group, |uid| self.local(executing, uid));
        Some(Ok(admission::admit(
            concurrency,
            &group,
            &admission::order_of(run),
            &others,
        )))
    }

    /// What this process knows of the run `uid` that its cache may not show yet
    /// (`executing`: the registry, held by the caller).
    fn local(&self, executing: &HashMap<String, Execution>, uid: &str) -> admission::Local {
        if executing.contains_key(uid) {
            admission::Local::Executing
        } else if self.ended_lock().contains_key(uid) {
            admission::Local::Ended
        } else {
            admission::Local::Unknown
        }
    }

    fn ended_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.ended.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that the final status of the run `uid` landed; forgets entries the cache
    /// never confirmed (a run deleted at once) after [`ENDED_MEMORY`].
    fn note_ended(&self, uid: &str) {
        let now = Instant::now();
        let mut ended = self.ended_lock();
        ended.retain(|_, at| now.duration_since(*at) < ENDED_MEMORY);
        ended.insert(uid.to_string(), now);
    }

    /// Wakes the runs the slot of `freed` may start now.
    fn hand_over(&self, freed: &Run) {
        let executing = self.lock();
        self.queue
            .wake_group(freed, |uid| self.local(&executing, uid));
    }

    /// Whether a run (not executing here) would have to wait, judged from the cache
    /// alone. Under `policy: queue`, the policy that lets queues grow long, from its
    /// group's summary: the periodic look at n queued runs then costs one walk over
    /// the group and n binary searches, not n walks.
    fn still_queued(&self, run: &Run) -> Waits {
        let namespace = run.namespace().unwrap_or_default();
        let order = admission::order_of(run);
        let now = flowline_core::clock::now_ms();
        match self.gates.gate_for(run, now) {
            // About to open: read it now, so it starts when the gate opens, not a read's
            // round trip later (a round trip each period adds up: 100 runs a second
            // became 65).
            Ok((Gate::Open, _)) => {}
            Ok((Gate::Until(opens_at), _)) if timing::imminent(opens_at, now) => {}
            Ok((Gate::Until(opens_at), waits_for)) => {
                // It waits for a time, not for its account: a place it may have been
                // woken for goes to the account's next waiting run.
                self.account_bound.forget(&namespace, &order);
                self.wake_account(&namespace);
                return Waits {
                    waits: true,
                    opens_at: Some(opens_at),
                    waits_for,
                };
            }
            // Superseded, or its key cannot be rendered: ended on a fresh read.
            Ok((Gate::Superseded { .. }, _)) | Err(_) => {
                return Waits {
                    waits: false,
                    opens_at: None,
                    waits_for: None,
                };
            }
        }
        let executing = self.lock();
        let group_full = if let Some(concurrency) = admission::needs_admission(run)
            && concurrency.policy == ConcurrencyPolicy::Queue
            && let Ok(group) = admission::group_of(run)
        {
            self.queue.must_wait(run, concurrency.limit, &group, |uid| {
                self.local(&executing, uid)
            })
        } else {
            matches!(
                self.admission_with(run, &executing),
                Some(Ok(Admission::Queue))
            )
        };
        if group_full {
            // It waits for its group, not its account: had it been woken for a place
            // of its account, the place goes to the account's next waiting run.
            self.account_bound.forget(&namespace, &order);
            self.wake_account(&namespace);
            return Waits {
                waits: true,
                opens_at: None,
                waits_for: Some(QueuedFor::Concurrency),
            };
        }
        // Its account is at its bound, or older runs of it wait: it waits (recorded,
        // to be woken in its turn).
        let waits = self
            .account_bound
            .must_wait(&namespace, &order, Instant::now());
        if waits {
            // Had it been woken for a place, the place goes to the account's next.
            self.wake_account(&namespace);
        }
        Waits {
            waits,
            opens_at: None,
            waits_for: waits.then_some(QueuedFor::Account),
        }
    }

    /// Stops the executions [`stops_for`] picks for a deletion.
    fn stop_for(&self, deleted: &Deleted) {
        for execution in self
            .lock()
            .iter()
            .filter_map(|(uid, e)| stops_for(deleted, uid, &e.namespace, &e.workflow).then_some(e))
        {
            execution.cancel.cancel();
        }
    }
}

/// An object whose deletion stops executions.
#[derive(Debug)]
pub enum Deleted {
    Run { uid: String },
    Workflow { namespace: String, name: String },
}

/// Whether the deletion of `deleted` stops the execution of the run `uid` (of
/// `workflow` in `namespace`): its own Run, or its Workflow. Pure.
pub fn stops_for(deleted: &Deleted, uid: &str, namespace: &str, workflow: &str) -> bool {
    match deleted {
        Deleted::Run { uid: gone } => gone == uid,
        Deleted::Workflow {
            namespace: ns,
            name,
        } => ns == namespace && name == workflow,
    }
}

/// The run `name` as the API server has it now: None when it is gone or cannot be
/// decoded (the watchers report that).
async fn read_run(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Option<Arc<Run>>, ReconcileError> {
    let runs: Api<Lenient<Run>> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(match runs.get_opt(name).await? {
        Some(Lenient::Decoded(fresh)) => Some(fresh),
        _ => None,
    })
}

async fn read_workflow(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<WorkflowRead, ReconcileError> {
    let workflows: Api<Lenient<Workflow>> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(match workflows.get_opt(name).await? {
        None => WorkflowRead::Missing,
        Some(Lenient::Decoded(wf)) => WorkflowRead::Found(wf),
        Some(Lenient::Undecodable(failure)) => WorkflowRead::Undecodable(format!(
            "workflow {name} cannot be decoded: {}",
            failure.error
        )),
    })
}

/// Applies what [`triage`] decides, step by step, until it reaches a final decision.
/// Every failure is returned: the controller looks at the run again after a backoff
/// ([`error_policy`]).
async fn reconcile(object: Arc<Lenient<Run>>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let cached = object.decoded();
    let uid = cached.and_then(|run| run.uid()).unwrap_or_default();
    let namespace = object.namespace().unwrap_or_default();
    let child_ended = |child: &str| ctx.queue.ended(&namespace, child);
    let mut observed = Observed {
        child_ended: ChildEnded(&child_ended),
        ..Observed::first_look(
            cached.map(|run| &**run),
            cached.is_some_and(|run| ctx.shards.owns(run)),
            ctx.token(&uid).is_some(),
            flowline_core::clock::now_ms(),
        )
    };
    loop {
        let decision = triage(&observed);
        tracing::trace!(run = %object.name_any(), ?decision, "run triaged");
        let Some(run) = cached else {
            // Undecodable: left alone (the watchers report it).
            return Ok(Action::await_change());
        };
        let then = decision
            .is_final()
            .then(|| action(look_again(&decision, &observed)));
        match decision {
            Decision::Upkeep(upkeep) => {
                keep_up(&ctx, run, &uid, upkeep).await?;
                observed.kept_up = true;
            }
            Decision::AskSlot => {
                let still = ctx.still_queued(run);
                observed.waits_for_slot = Some(still.waits);
                observed.slot_opens_at = still.opens_at;
                observed.queued_for = still.waits_for;
            }
            Decision::Read => {
                observed.read = Some(match ctx.cached_read(run) {
                    Some(cached) => cached,
                    None => read(&ctx, run).await?,
                })
            }
            Decision::MarkQueued => {
                let waits_for = observed.queued_for.unwrap_or(QueuedFor::Concurrency);
                mark_queued(&ctx, run, waits_for, observed.slot_opens_at).await
            }
            Decision::SyncQueuedLabels => super::run_labels::sync(&ctx.client, run).await?,
            Decision::Act(need) => {
                // The run as last read: fresh when it was read.
                let (current, workflow) = match &observed.read {
                    Some(read) => (
                        read.run.clone().unwrap_or_else(|| run.clone()),
                        read.workflow.found().cloned(),
                    ),
                    None => (run.clone(), None),
                };
                act(&ctx, current, workflow.as_deref(), &uid, need).await?;
            }
            Decision::LeaveAlone | Decision::LookAgainAfter(_) | Decision::WaitUnrecorded(_) => {}
        }
        if let Some(then) = then {
            return Ok(then);
        }
        // What changed while that step awaited: an execution that ended.
        observed.executing = ctx.token(&uid).is_some();
        observed.now = flowline_core::clock::now_ms();
    }
}

/// The controller's action for `look_again`.
fn action(look_again: LookAgain) -> Action {
    match look_again {
        LookAgain::WhenChanged => Action::await_change(),
        LookAgain::After(wait) => Action::requeue(wait),
    }
}

/// Brings in line what follows from the cached `run` ([`Upkeep`]).
async fn keep_up(
    ctx: &Arc<Context>,
    run: &Run,
    uid: &str,
    upkeep: Upkeep,
) -> Result<(), ReconcileError> {
    if upkeep.sync_labels {
        super::run_labels::sync(&ctx.client, run).await?;
    }
    if upkeep.release_slot {
        ctx.ended_lock().remove(uid);
        ctx.event_waits.forget(uid);
        ctx.hand_over(run);
    }
    ctx.event_waits.catch_up(&ctx.client, run, uid).await?;
    if upkeep.offer_approvals {
        ctx.offer_approvals(uid, run);
    }
    Ok(())
}

/// The run and its workflow as the API server has them, read together: one round
/// trip before a run starts, not two.
async fn read(ctx: &Context, run: &Run) -> Result<Read, ReconcileError> {
    let (namespace, name) = (run.namespace().unwrap_or_default(), run.name_any());
    let (workflow, fresh) = tokio::try_join!(
        read_workflow(ctx, &namespace, &run.spec.workflow_ref),
        read_run(ctx, &namespace, &name),
    )?;
    Ok(Read {
        run: fresh,
        workflow,
    })
}

/// Does what `run` needs (its `workflow` as read, if it was).
async fn act(
    ctx: &Arc<Context>,
    run: Arc<Run>,
    workflow: Option<&Workflow>,
    uid: &str,
    need: Need,
) -> Result<(), ReconcileError> {
    match need {
        Need::Nothing => {}
        Need::StopExecution => {
            if let Some(t) = ctx.token(uid) {
                t.cancel();
            }
        }
        Need::MarkCancelled => {
            let reason = (run.spec.cancel_reason.clone()).map(flowline_core::limits::cap_error);
            end_without_executing(ctx, &run, workflow, RunPhase::Cancelled, reason).await;
        }
        Need::Fail(error) => {
            tracing::info!(run = %run.name_any(), %error, "run cannot execute");
            end_without_executing(ctx, &run, workflow, RunPhase::Failed, Some(error)).await;
        }
        Need::Pin => {
            if let Some(wf) = workflow {
                claim(&ctx.client, &run, wf, Claim::PIN).await?;
            }
            // Its own watch event brings the pinned run back here to execute.
        }
        Need::Adopt { pin } => {
            if let Some(wf) = workflow {
                tracing::info!(run = %run.name_any(), workflow = %wf.name_any(), pin,
                    "adopting a run created without its workflow's owner reference");
                claim(&ctx.client, &run, wf, Claim { pin, adopt: true }).await?;
            }
            // Its own watch event brings the adopted run back here for the rest.
        }
        Need::Execute => execute_admitted(ctx, run, workflow, uid).await?,
    }
    Ok(())
}

/// Executes `run` as concurrency control admits it: now (in a task of its own), after
/// it waits for a slot, or not at all.
async fn execute_admitted(
    ctx: &Arc<Context>,
    run: Arc<Run>,
    workflow: Option<&Workflow>,
    uid: &str,
) -> Result<(), ReconcileError> {
    let namespace = run.namespace().unwrap_or_default();
    let mut admitted = ctx.admit(&run, uid);
    // Held for a gate about to open: asked again when it opens. The gate may have moved
    // a moment on meanwhile (a start this process counted at its admission, recorded a
    // few milliseconds later by its status): held again, up to [`MAX_HOLDS`] times.
    for _ in 0..MAX_HOLDS {
        let Admitted::Hold(opens_at) = admitted else {
            break;
        };
        let wait = opens_at.duration_since(flowline_core::clock::now_ms());
        tokio::time::sleep(wait.try_into().unwrap_or_default()).await;
        admitted = ctx.admit(&run, uid);
    }
    match admitted {
        Admitted::Start {
            registration,
            cancel,
            approvals,
            cancel_others,
        } => {
            ctx.fresh.touch(uid);
            for name in cancel_others {
                request_cancel(&ctx.client, &namespace, &name).await?;
            }
            let engine = ctx.engine.clone();
            let ctx = ctx.clone();
            let uid = uid.to_string();
            tokio::spawn(async move {
                let landed =
                    runner::execute(engine.clone(), (*run).clone(), cancel, approvals).await;
                if landed.as_ref().is_some_and(|s| !s.phase.is_finished()) {
                    // Parked: it keeps its slot (it is `running`), holds no task, and
                    // is looked at again at once (a decision may have arrived while it
                    // executed), then when a step is due.
                    drop(registration);
                    ctx.queue.wake(&run);
                    return;
                }
                if landed.is_some() {
                    ctx.note_ended(&uid);
                }
                drop(registration);
                // Hand its slot on now, not when the cache shows it finished: the
                // next queued run starts one watch round trip sooner.
                ctx.hand_over(&run);
                if let Some(status) = landed {
                    runner::report(&engine, &run, &status).await;
                }
            });
        }
        Admitted::Queue {
            cancel_others,
            mark,
            opens_at,
        } => {
            for name in cancel_others {
                request_cancel(&ctx.client, &namespace, &name).await?;
            }
            if let Some(waits_for) = mark {
                mark_queued(ctx, &run, waits_for, opens_at).await;
            }
        }
        Admitted::End(phase, error) => {
            tracing::info!(run = %run.name_any(), %error, "run not admitted");
            end_without_executing(ctx, &run, workflow, phase, Some(error)).await;
        }
        // Still held (a clock step): looked at again at once, not at the next resync.
        // Its gate opens within a moment, so its wait is not written
        // ([`unrecorded::record_put_off`]).
        Admitted::Hold(_) => ctx.queue.wake(&run),
    }
    Ok(())
}

/// What one [`claim`] write records on a run of a workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Claim {
    /// The workflow version it executes (`spec.workflow`).
    pin: bool,
    /// The workflow's controller owner reference, next to the run's other owners.
    adopt: bool,
}

impl Claim {
    const PIN: Claim = Claim {
        pin: true,
        adopt: false,
    };
}

/// The merge patch of a [`Claim`] of `run` by `wf`: conditional on the Run's
/// resourceVersion, so the owner reference list it replaces (a merge patch replaces
/// lists whole) is the one read. The owner reference is the API's: `wf`'s controller
/// owner reference (`controller: true`, no `blockOwnerDeletion`). Pure.
fn claim_patch(run: &Run, wf: &Workflow, claim: Claim) -> serde_json::Value {
    use kube::Resource;
    let mut patch = serde_json::json!({"metadata": {"resourceVersion": run.resource_version()}});
    if claim.pin {
        let snapshot = WorkflowSnapshot::of(wf);
        if snapshot.waits_for_events() {
            patch["metadata"]["labels"] =
                serde_json::json!({ flowline_core::crd::labels::WAITS_FOR_EVENTS: "true" });
        }
        patch["spec"] = serde_json::json!({"workflow": snapshot});
        // A Run applied without a priority takes its workflow's, before it can wait.
        if run.spec.priority.is_none()
            && let Some(priority) = wf.spec.priority
        {
            patch["spec"]["priority"] = serde_json::json!(priority);
        }
    }
    if claim.adopt
        && let Some(owner) = wf.controller_owner_ref(&())
    {
        let mut owners = run.owner_references().to_vec();
        if !owners.iter().any(|o| o.uid == owner.uid) {
            owners.push(owner);
        }
        patch["metadata"]["ownerReferences"] = serde_json::json!(owners);
    }
    patch
}

/// Records the workflow version a Run created without one executes, and gives a Run
/// created without an owner its workflow's owner reference, as `claim` says: one
/// write. It is conditional on the Run's resourceVersion: a run that changed meanwhile
/// (or is gone) is decided again from its watch event; any other failure is returned.
async fn claim(
    client: &Client,
    run: &Run,
    wf: &Workflow,
    claim: Claim,
) -> Result<(), ReconcileError> {
    let api: Api<Run> = Api::namespaced(client.clone(), &run.namespace().unwrap_or_default());
    let patch = claim_patch(run, wf, claim);
    let params = kube::api::PatchParams {
        field_manager: Some(flowline_engine::status_writer::FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api
        .patch(&run.name_any(), &params, &kube::api::Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Asks the run `name` to stop (`spec.cancel`), as the API's cancel does: a run
/// superseded under `cancel_in_progress`. A run already gone needs nothing.
async fn request_cancel(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<(), ReconcileError> {
    let api: Api<Run> = Api::namespaced(client.clone(), namespace);
    let params = kube::api::PatchParams {
        field_manager: Some(flowline_engine::status_writer::FIELD_MANAGER.into()),
        ..Default::default()
    };
    let patch = serde_json::json!({"spec": {"cancel": true}});
    match api
        .patch(name, &params, &kube::api::Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Records that `run` waits (for `waits_for`): status `queued`, its steps pending, no
/// start time yet (its run timeout counts from when it leaves the queue). Not before
/// its wait has settled ([`unrecorded::record_put_off`]): a later look writes it then.
async fn mark_queued(
    ctx: &Context,
    run: &Run,
    waits_for: QueuedFor,
    opens_at: Option<jiff::Timestamp>,
) {
    let Some(version) = run.spec.workflow.as_ref() else {
        return;
    };
    let now = flowline_core::clock::now_ms();
    if unrecorded::record_put_off(run, waits_for, opens_at, now).is_some() {
        return;
    }
    ctx.fresh.touch(&run.uid().unwrap_or_default());
    let mut status = runner::initial_status(run, version);
    status.phase = RunPhase::Queued;
    status.started_at = None;
    status.queued_for = Some(waits_for);
    let api: Api<Run> = Api::namespaced(ctx.client.clone(), &run.namespace().unwrap_or_default());
    write_once(api, run, status).await;
}

/// Records a final status for a run that is not (or no longer) executing here.
async fn end_without_executing(
    ctx: &Context,
    run: &Run,
    workflow: Option<&Workflow>,
    phase: RunPhase,
    error: Option<String>,
) {
    // The step records of the version it runs (or would have run).
    let version = run
        .spec
        .workflow
        .clone()
        .or_else(|| workflow.map(WorkflowSnapshot::of));
    let mut status = match &version {
        Some(wf) => runner::initial_status(run, wf),
        None => run.status.clone().unwrap_or_default(),
    };
    status.started_at.get_or_insert_with(|| run.started_at());
    ctx.fresh.touch(&run.uid().unwrap_or_default());
    let unfinished = if phase == RunPhase::Cancelled {
        StepPhase::Cancelled
    } else {
        StepPhase::Pending
    };
    runner::finish(&mut status, phase, error, unfinished);
    // A parked run cancelled (or failed) here: the children it waited for go too.
    flowline_engine::call::cancel_children(&ctx.client, run, &status, phase == RunPhase::Cancelled)
        .await;
    if let Some(kind) = flowline_core::engine::events::final_kind(phase) {
        let workflow_name = version
            .as_ref()
            .map(|wf| wf.name.as_str())
            .unwrap_or(&run.spec.workflow_ref);
        flowline_core::engine::events::record(&mut status, kind, run, workflow_name);
    }
    let api: Api<Run> = Api::namespaced(ctx.client.clone(), &run.namespace().unwrap_or_default());
    write_once(api, run, status).await;
}

/// One status write by the controller itself (not an execution): conditional on the
/// Run as read, under an execution id of its own like every writer of a run's status.
async fn write_once(api: Api<Run>, run: &Run, mut status: RunStatus) {
    status.execution_id = Some(flowline_core::ids::new_id("exec"));
    let fence = CancellationToken::new();
    StatusWriter::start(api, run, RunStatus::default(), &fence)
        .finish(&status)
        .await;
}

/// A failed reconcile is tried again after the run's own backoff ([`ReconcileBackoff`]),
/// which a successful one resets.
fn error_policy(run: Arc<Lenient<Run>>, err: &ReconcileError, ctx: Arc<Context>) -> Action {
    ctx.engine
        .telemetry
        .reconcile_errors
        .get_or_create(&ControllerLabel { controller: "run" })
        .inc();
    let key = object_key(run.namespace().as_deref(), &run.name_any());
    let retry_in = ctx.backoff.failed(&key, Instant::now());
    tracing::warn!(run = %key, error = %err, ?retry_in, "run reconcile failed; retrying");
    Action::requeue(retry_in)
}

/// The deletions of `K` objects in the controller's scope, as [`Deleted`], from a
/// metadata-only watch.
fn deletions<K>(
    ctx: &Context,
    describe: fn(kube::core::PartialObjectMeta<K>) -> Deleted,
) -> futures::stream::BoxStream<'static, Deleted>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    use kube::runtime::WatchStreamExt;
    let api: Api<kube::core::PartialObjectMeta<K>> =
        flowline_kube::scoped_api(&ctx.client, ctx.namespace.as_deref());
    watcher(api, watcher::Config::default())
        .default_backoff()
        .filter_map(move |event| async move {
            match event {
                Ok(watcher::Event::Delete(meta)) => Some(describe(meta)),
                _ => None,
            }
        })
        .boxed()
}

/// Stops executions whose Run (`runs`: from the shared watch) or Workflow is deleted
/// (the controller's own watch does not reconcile deleted objects).
async fn stop_deleted(
    ctx: Arc<Context>,
    runs: futures::stream::BoxStream<'static, Deleted>,
    shutdown: CancellationToken,
) {
    let workflows = deletions::<Workflow>(&ctx, |meta| Deleted::Workflow {
        namespace: meta.namespace().unwrap_or_default(),
        name: meta.name_any(),
    });
    let mut deletions = futures::stream::select(runs, workflows);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            next = deletions.next() => match next {
                Some(deleted) => {
                    tracing::info!(?deleted, "deleted: stopping the executions it owns");
                    ctx.stop_for(&deleted);
                    if let Deleted::Run { uid } = &deleted {
                        ctx.event_waits.forget(uid);
                    }
                }
                None => return,
            },
        }
    }
}

/// The controller over `runs` (the operator's shared watch of the namespace's Runs,
/// `run_cache`), until `shutdown`. Subscribes when called, so a watch not begun yet
/// lists once for it and the other components.
pub fn run(
    ctx: Arc<Context>,
    runs: RunCache,
    shutdown: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let RunCache {
        watch: runs,
        by_workflow,
    } = runs;
    // Every run the watch shows (listed or changed) is reconciled, after the store
    // holds that version.
    let trigger = runs.select(|event| match event {
        Ok(watcher::Event::Apply(run) | watcher::Event::InitApply(run)) => Some(Ok(run.clone())),
        _ => None,
    });
    // The workflows a new run is decided with when the caches may stand in for its
    // fresh read (undecodable ones are reported by the workflow controller's watch).
    let workflows: Api<Lenient<Workflow>> =
        flowline_kube::scoped_api(&ctx.client, ctx.namespace.as_deref());
    let (workflows, workflow_events) =
        lenient::compact_reflector(workflows, watcher::Config::default(), |wf| {
            wf.spec.steps.clear()
        });
    flowline_telemetry::undecodable::spawn_watch(workflow_events, None, shutdown.clone(), |_| {});
    if ctx.workflows.set(workflows).is_err() {
        tracing::warn!("a run controller context was started twice");
    }
    // A run that changed in the cache (the store holds the change when observers see
    // it) makes its groups' summaries stale.
    let observer = ctx.clone();
    runs.subscribe(move |event| {
        let queue = &observer.queue;
        if let Ok(event) = event {
            observer.fresh.observe(event, &observer.shards);
        }
        match event {
            Ok(
                watcher::Event::Apply(run)
                | watcher::Event::InitApply(run)
                | watcher::Event::Delete(run),
            ) => match run.decoded() {
                Some(run) => {
                    let namespace = run.namespace().unwrap_or_default();
                    queue.touch(&namespace, &run.spec.workflow_ref, &run.name_any());
                    // The runs of its keys the change concerns are looked at again: the
                    // older runs of its debounce key it supersedes, the runs behind it
                    // in its rate limit's queue when it leaves it without starting.
                    let concerned = if matches!(event, Ok(watcher::Event::Delete(_))) {
                        observer.gates.forget(run)
                    } else {
                        observer.gates.observe(run)
                    };
                    for name in concerned {
                        queue.wake_named(&namespace, &name);
                    }
                    // A child that ended (or is gone) wakes the run waiting for it.
                    if let Some(parent) = &run.spec.parent
                        && (run.phase().is_finished()
                            || matches!(event, Ok(watcher::Event::Delete(_))))
                    {
                        observer.child_ended(&namespace, &parent.run_id, &run.name_any());
                        queue.wake_named(&namespace, &parent.run_id);
                    }
                }
                None => queue.touch_namespace(&run.namespace().unwrap_or_default()),
            },
            Ok(watcher::Event::Init) => {
                observer.gates.relisted();
                queue.touch_all();
            }
            Ok(watcher::Event::InitDone) => queue.touch_all(),
            Err(_) => {}
        }
    });
    let deleted = runs
        .select(|event| match event {
            Ok(watcher::Event::Delete(run)) => Some(Deleted::Run {
                uid: run.uid().unwrap_or_default(),
            }),
            _ => None,
        })
        .boxed();
    control_loop(ctx, trigger, deleted, runs.store(), by_workflow, shutdown)
}

async fn control_loop(
    ctx: Arc<Context>,
    trigger: impl futures::Stream<Item = Result<Lenient<Run>, watcher::Error>> + Send + 'static,
    deleted: futures::stream::BoxStream<'static, Deleted>,
    store: kube::runtime::reflector::Store<Lenient<Run>>,
    by_workflow: SharedNameIndex<Run>,
    shutdown: CancellationToken,
) {
    let jobs: Api<k8s_openapi::api::batch::v1::Job> =
        flowline_kube::scoped_api(&ctx.client, ctx.namespace.as_deref());
    tokio::spawn(stop_deleted(ctx.clone(), deleted, shutdown.clone()));
    let controller = Controller::for_stream(trigger, store).with_config(
        kube::runtime::controller::Config::default().concurrency(RECONCILE_CONCURRENCY),
    );
    let wake = ctx.queue.attach(controller.store(), by_workflow);
    {
        let (ctx, shutdown) = (ctx.clone(), shutdown.clone());
        tokio::spawn(async move {
            let gauge = ctx.engine.telemetry.runs_queued.clone();
            let shards = ctx.shards.clone();
            ctx.queue
                .count_queued(gauge, move |run| shards.owns(run), shutdown)
                .await;
        });
    }
    // Step Jobs are owned by their Run: a Job's progress wakes the Run at once (after a
    // restart, that is what resumes a run whose step was running in a Job).
    let step_jobs = watcher::Config::default().labels(flowline_core::crd::labels::RUN);
    controller
        .owns(jobs, step_jobs)
        .reconcile_on(wake)
        .reconcile_all_on(ctx.shards.gains())
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(
            |run, ctx| async move {
                let key = object_key(run.namespace().as_deref(), &run.name_any());
                let timer = ctx.engine.telemetry.reconcile_timer("run");
                ctx.backoff
                    .track(&key, timer.time(reconcile(run, ctx.clone())))
                    .await
            },
            error_policy,
            ctx,
        )
        .for_each(|result| {
            if let Err(err) = result {
                tracing::debug!(error = %err, "run reconcile error");
            }
            futures::future::ready(())
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(status: serde_json::Value, cancel: bool) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n", "uid": "u"},
            "spec": {"workflowRef": "wf", "cancel": cancel},
            "status": status,
        }))
        .unwrap()
    }

    fn workflow(state: &str, executor: Option<&str>) -> Workflow {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Workflow",
            "metadata": {"name": "wf", "namespace": "n", "generation": 4},
            "spec": {"name": "W", "state": state, "executor": executor, "steps": [{"id": "a", "action": "delay", "with": {"ms": 1}}]},
        }))
        .unwrap()
    }

    /// The pinning write is conditional on the Run as read and carries the version; a
    /// conflict or a gone Run is left to the next watch event, any other failure
    /// surfaces (the controller retries it).
    #[tokio::test]
    async fn pin_writes_the_version_conditionally_and_returns_other_failures() {
        use flowline_kube::mock_api;
        let wf = workflow("active", None);
        let mut r = run(json!(null), false);
        r.metadata.resource_version = Some("41".into());
        for code in [200, 409, 404] {
            let (client, log) = mock_api::client(move |_| {
                let body = if code == 200 {
                    json!({"apiVersion": "flowline.io/v1", "kind": "Run",
                           "metadata": {"name": "r", "namespace": "n"}, "spec": {"workflowRef": "wf"}})
                } else {
                    mock_api::status(code)
                };
                (code, body)
            });
            claim(&client, &r, &wf, Claim::PIN)
                .await
                .unwrap_or_else(|e| panic!("{code}: {e}"));
            let seen = mock_api::seen(&log);
            assert_eq!(seen.len(), 1, "one write, no retry of a {code}");
            assert_eq!(seen[0].method, "PATCH");
            assert_eq!(seen[0].path, "/apis/flowline.io/v1/namespaces/n/runs/r");
            assert_eq!(seen[0].body["metadata"]["resourceVersion"], "41");
            assert_eq!(seen[0].body["spec"]["workflow"]["generation"], 4);
        }
        let (failing, _) = mock_api::client(|_| (500, mock_api::status(500)));
        assert!(
            claim(&failing, &r, &wf, Claim::PIN).await.is_err(),
            "a 500 is not swallowed"
        );
    }

    /// Adopting adds the workflow's controller owner reference (the API's shape) to
    /// the run's other owners, in the write that pins it when asked, conditional on
    /// the run as read; a run already naming the workflow gets no duplicate.
    #[test]
    fn claim_patches_pin_and_adopt_in_one_conditional_write() {
        let mut wf = workflow("active", None);
        wf.metadata.uid = Some("wf-uid".into());
        let mut r = run(json!(null), false);
        r.metadata.resource_version = Some("41".into());
        let api_owner = json!({"apiVersion": "flowline.io/v1", "kind": "Workflow",
            "name": "wf", "uid": "wf-uid", "controller": true});
        let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "cm-uid"});
        let mut with_other = r.clone();
        with_other.metadata.owner_references =
            Some(vec![serde_json::from_value(other.clone()).unwrap()]);
        let mut owned = r.clone();
        owned.metadata.owner_references =
            Some(vec![serde_json::from_value(api_owner.clone()).unwrap()]);
        let adopt = Claim {
            pin: false,
            adopt: true,
        };
        let both = Claim {
            pin: true,
            adopt: true,
        };
        let rows = [
            ("pin only", &r, Claim::PIN, None, true),
            ("adopt only", &r, adopt, Some(json!([api_owner])), false),
            ("pin and adopt", &r, both, Some(json!([api_owner])), true),
            (
                "other owners kept",
                &with_other,
                adopt,
                Some(json!([other, api_owner])),
                false,
            ),
            (
                "no duplicate",
                &owned,
                adopt,
                Some(json!([api_owner])),
                false,
            ),
        ];
        for (name, run, claim, owners, pinned) in rows {
            let patch = claim_patch(run, &wf, claim);
            assert_eq!(patch["metadata"]["resourceVersion"], "41", "{name}");
            assert_eq!(
                patch["metadata"].get("ownerReferences").cloned(),
                owners,
                "{name}"
            );
            assert_eq!(
                patch["spec"]["workflow"]["generation"].as_i64().is_some(),
                pinned,
                "{name}"
            );
        }
        let api_run_of = |wf: &Workflow| {
            Run::of_workflow(
                wf,
                "r",
                flowline_core::crd::RunTrigger::Manual,
                None,
                flowline_core::clock::now_ms(),
            )
        };
        // The reference is exactly the one the API gives the runs it creates.
        let api_run = api_run_of(&wf);
        assert_eq!(
            json!(api_run.metadata.owner_references),
            claim_patch(&r, &wf, adopt)["metadata"]["ownerReferences"]
        );
        // Pinning a workflow with a `wait_for_event` step labels the run as the API's
        // runs of it are labelled; other pins touch no label.
        assert!(
            claim_patch(&r, &wf, both)["metadata"]
                .get("labels")
                .is_none()
        );
        wf.spec.steps = serde_json::from_value(
            json!([{"id": "w", "action": "wait_for_event", "with": {"event": "e"}}]),
        )
        .unwrap();
        let label = flowline_core::crd::labels::WAITS_FOR_EVENTS;
        let api_run = api_run_of(&wf);
        assert_eq!(
            api_run.labels().get(label).map(String::as_str),
            Some("true")
        );
        assert_eq!(
            claim_patch(&r, &wf, Claim::PIN)["metadata"]["labels"][label],
            "true"
        );
    }

    /// A superseded run is asked to stop through `spec.cancel`; one already gone needs
    /// nothing; any other failure surfaces.
    #[tokio::test]
    async fn request_cancel_sets_spec_cancel_and_returns_other_failures() {
        use flowline_kube::mock_api;
        let (client, log) = mock_api::client(|_| {
            (
                200,
                json!({"apiVersion": "flowline.io/v1", "kind": "Run",
                         "metadata": {"name": "old", "namespace": "n"}, "spec": {"workflowRef": "wf"}}),
            )
        });
        request_cancel(&client, "n", "old").await.unwrap();
        let seen = mock_api::seen(&log);
        assert_eq!(
            (
                seen[0].method.as_str(),
                seen[0].path.as_str(),
                &seen[0].body
            ),
            (
                "PATCH",
                "/apis/flowline.io/v1/namespaces/n/runs/old",
                &json!({"spec": {"cancel": true}})
            )
        );
        let (gone, _) = mock_api::client(|_| (404, mock_api::status(404)));
        request_cancel(&gone, "n", "old").await.unwrap();
        let (failing, _) = mock_api::client(|_| (503, mock_api::status(503)));
        assert!(request_cancel(&failing, "n", "old").await.is_err());
    }

    #[test]
    fn deletions_stop_the_runs_they_own() {
        let run_gone = Deleted::Run { uid: "u1".into() };
        assert!(stops_for(&run_gone, "u1", "n", "wf"));
        assert!(!stops_for(&run_gone, "u2", "n", "wf"));
        let wf_gone = Deleted::Workflow {
            namespace: "n".into(),
            name: "wf".into(),
        };
        assert!(stops_for(&wf_gone, "u1", "n", "wf"));
        assert!(
            !stops_for(&wf_gone, "u1", "other", "wf"),
            "same name, other namespace"
        );
        assert!(!stops_for(&wf_gone, "u1", "n", "wf2"));
    }

    /// The caches stand in for the read of a new run born watched in a held shard and
    /// owned by the cached workflow, and only then: a listed run, one this process
    /// touched, or one whose workflow is not cached is read from the API server.
    #[tokio::test]
    async fn the_caches_stand_in_for_the_read_of_a_new_run_only_when_it_was_born_watched() {
        let (client, _) = flowline_kube::mock_api::client(|_| (500, json!({})));
        let ctx = Context::new(
            client,
            flowline_egress::GuardedClient::new(Default::default()).unwrap(),
            Executor::Inline,
            Some("n".into()),
            EngineTelemetry::new(&Default::default(), None),
            "http://127.0.0.1:8080".into(),
            Default::default(),
        );
        let mut wf = workflow("active", None);
        wf.metadata.uid = Some("wf-uid".into());
        let new_run = |uid: &str| {
            let mut r = run(serde_json::Value::Null, false);
            r.metadata.uid = Some(uid.into());
            r.metadata.name = Some(format!("r-{uid}"));
            r.spec.workflow = Some(WorkflowSnapshot::of(&wf));
            r.metadata.owner_references = Some(vec![
                serde_json::from_value(json!({
                "apiVersion": "flowline.io/v1", "kind": "Workflow", "name": "wf",
                "uid": "wf-uid", "controller": true}))
                .unwrap(),
            ]);
            Arc::new(r)
        };
        let (born, listed, touched) = (new_run("born"), new_run("listed"), new_run("touched"));
        ctx.fresh.list_begins(&ctx.shards);
        ctx.fresh.listed(&listed);
        for r in [&born, &listed, &touched] {
            ctx.fresh.changed(r);
        }
        ctx.fresh.touch("touched");
        assert!(
            ctx.cached_read(&born).is_none(),
            "no workflow cache yet: read"
        );

        let (reader, mut writer) = kube::runtime::reflector::store();
        writer.apply_watcher_event(&watcher::Event::Apply(Lenient::Decoded(Arc::new(wf))));
        assert!(ctx.workflows.set(DecodedStore::from(reader)).is_ok());
        let read = ctx
            .cached_read(&born)
            .expect("born watched: the caches stand in");
        assert!(Arc::ptr_eq(read.run.as_ref().unwrap(), &born));
        assert_eq!(
            read.workflow.found().unwrap().metadata.uid.as_deref(),
            Some("wf-uid")
        );
        assert!(ctx.cached_read(&listed).is_none(), "listed: read");
        assert!(ctx.cached_read(&touched).is_none(), "touched here: read");
    }
}
