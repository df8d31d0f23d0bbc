//! Wiring of `flowline operator` and `flowline api`: connect, wait for the CRDs,
//! start the watch caches, serve the API and the operational endpoints, run until
//! SIGTERM. `leading` is the leader's life (lease, watchdog, hand-over).

mod leading;

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::cli::{ApiArgs, OperatorArgs};
use flowline_api::cache::Caches;
use flowline_api::state::ApiState;
use flowline_controller::leader;
use flowline_controller::run_cache::RunCache;
use flowline_controller::shard::Shards;
use flowline_telemetry::engine_metrics::EngineTelemetry;
use flowline_telemetry::http_metrics::HttpMetrics;
use flowline_telemetry::leader_metrics::LeaderGauge;
use flowline_telemetry::{access_log, health, metrics::Metrics};
pub use leading::{EXIT_LOST_LEADERSHIP, Leadership};

/// Which parts of Flowline this process runs, with the flags of that command.
#[derive(Debug, Clone)]
pub enum Role {
    /// `flowline operator`: the controllers, and the API unless `--no-api`.
    Operator(Box<OperatorArgs>),
    /// `flowline api`: the API alone.
    Api(Box<ApiArgs>),
}

impl Role {
    /// The API's flags (an operator has them too: the listener, the namespaces…).
    fn api(&self) -> &ApiArgs {
        match self {
            Role::Operator(args) => &args.api,
            Role::Api(args) => args,
        }
    }

    /// Whether this process serves `/v1` (and holds the API's watch caches).
    fn serves_api(&self) -> bool {
        match self {
            Role::Operator(args) => !args.no_api,
            Role::Api(_) => true,
        }
    }

    /// The process kind as `flowline_build_info` and the logs name it.
    fn name(&self) -> &'static str {
        match self {
            Role::Api(_) => "api",
            Role::Operator(args) if args.no_api => "controller",
            Role::Operator(_) => "operator",
        }
    }
}

/// What is left once [`run`] has returned.
#[must_use = "a leader releases its lease only through Stopped::finish"]
pub struct Stopped(Option<Leadership>);

impl Stopped {
    /// Hands a leader's lease over. Call only after the runtime that ran [`run`] has
    /// been dropped (see [`Leadership::hand_over`]).
    pub fn finish(self) {
        if let Some(leadership) = self.0 {
            leadership.hand_over();
        }
    }
}

pub async fn run(role: Role, connection: &flowline_kube::Connection) -> anyhow::Result<Stopped> {
    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone());

    let api = role.api();
    let readiness = health::Readiness::default();
    let crds_gate = readiness.gate("crds");
    let metrics = Metrics::default();
    flowline_telemetry::build_info::register(&metrics, role.name());
    flowline_telemetry::runtime_metrics::register(&metrics, tokio::runtime::Handle::current());
    let http_metrics = HttpMetrics::new(&metrics);
    // Checked before connecting: a timing that could let two leaders overlap is a
    // configuration error, not something to find out under load. The gauge is there
    // (at 0) from the first scrape on.
    let candidate = match &role {
        Role::Operator(args) => Some((
            args,
            args.controller.leader_timing()?,
            LeaderGauge::new(&metrics),
        )),
        Role::Api(_) => None,
    };

    // One configuration, several clients: the lease gets connections of its own.
    let kube_config = connection.config().await?;
    let client = kube::Client::try_from(kube_config.clone())?;
    let scope = api.scope();
    let seal = Arc::new(
        flowline_kube::seal_key::load(&client, &api.seal_key_namespace, &api.seal_key_secret)
            .await?,
    );

    let mut app = health::router(readiness.clone(), metrics.clone());
    // The API's watch caches are its own: a controller-only process (--no-api) does
    // not hold a second copy of every object.
    if role.serves_api() {
        let caches_gate = readiness.gate("caches");
        let caches = Caches::start(client.clone(), &scope, shutdown.clone());
        let watching = caches.clone();
        tokio::spawn(async move {
            while !watching.is_synced() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            caches_gate.open();
        });
        let state = ApiState::new(client.clone(), caches, api.api_config(), seal.clone())
            .with_metrics(http_metrics.clone());
        app = app.merge(flowline_api::router(state));
        if !api.no_console {
            app = app.merge(crate::console::router());
        }
    }
    let app = app.layer(axum::middleware::from_fn_with_state(
        http_metrics,
        access_log::record,
    ));
    // Serve /healthz (and /readyz, not ready yet) while the CRDs are awaited, so a
    // slow CRD installation does not look like a dead process.
    let listener = tokio::net::TcpListener::bind(api.listen)
        .await
        .with_context(|| format!("cannot listen on {}", api.listen))?;
    if role.serves_api() {
        tracing::info!(address = %api.listen, "serving /v1, /healthz, /readyz, /metrics");
    } else {
        tracing::info!(address = %api.listen, "serving /healthz, /readyz, /metrics (no /v1: --no-api)");
    }
    let server = tokio::spawn(
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown.clone().cancelled_owned())
        .into_future(),
    );
    if let Err(err) =
        flowline_kube::wait_for_crds(&client, Duration::from_secs(api.crd_wait_seconds)).await
    {
        shutdown.cancel();
        let _ = server.await;
        return Err(err.into());
    }
    crds_gate.open();
    tracing::info!(role = role.name(), "CRDs established");

    let mut leadership = None;
    if let Some((args, timing, gauge)) = candidate {
        let controller = &args.controller;
        let telemetry = EngineTelemetry::new(&metrics, Some(client.clone()));
        let http = flowline_egress::GuardedClient::new(flowline_egress::ClientSettings {
            policy: controller.destination_policy(),
            ..Default::default()
        })
        .context("building the HTTP client of the engine")?;
        // A bad CA bundle is a start-up error, not a stream of failed deliveries.
        let sender = flowline_delivery::sender::Sender::new(&args.sender_config())
            .context("configuring webhook deliveries")?;
        let delivery_metrics = flowline_telemetry::delivery_metrics::DeliveryMetrics::new(&metrics);
        let public_url = controller
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", api.listen));
        let ctx = flowline_controller::run::Context::new(
            client.clone(),
            http,
            api.default_executor.into(),
            None,
            telemetry.clone(),
            public_url,
            flowline_engine::job::JobSettings {
                step_image: controller.step_image.clone(),
                job_ttl: Some(std::time::Duration::from_secs(controller.step_job_ttl)),
                pod_annotations: controller.job_pod_annotations.iter().cloned().collect(),
                resources: flowline_engine::job::StepResources {
                    cpu_request: controller.step_cpu_request.clone(),
                    memory_request: controller.step_memory_request.clone(),
                    cpu_limit: controller.step_cpu_limit.clone(),
                    memory_limit: controller.step_memory_limit.clone(),
                },
                destinations: controller.destination_policy(),
            },
        );
        ctx.account_bound()
            .set_limit(controller.max_runs_per_account);
        ctx.account_bound().set_total(controller.max_running_runs);
        ctx.attempt_bound().set_limit(controller.max_step_attempts);
        let candidacy = Leadership::new(
            leader::LeaseConfig {
                namespace: controller.leader_election_namespace.clone(),
                name: controller.leader_election_lease.clone(),
                identity: format!("{}-{}", hostname(), flowline_core::ids::new_id("op")),
                timing,
                election: controller.leader_election_lease.clone(),
                shards: controller.shards,
            },
            controller.shards,
            controller.member_slots,
            gauge,
            kube_config.clone(),
        );
        let shards = Arc::new(Shards::new(controller.shards));
        leadership = Some(candidacy.clone());
        let delivery_settings: Vec<_> = scope
            .each()
            .into_iter()
            .map(|ns| controller.delivery_settings(ns))
            .collect();
        let workers = client.clone();
        let event_retention = controller.event_retention;
        // One watch of the Runs per listed namespace (or one for the cluster), shared by
        // the three components that read them; started with the first shard held.
        let run_caches: std::sync::OnceLock<Vec<RunCache>> = std::sync::OnceLock::new();
        let start = move |shard: u32, controllers: CancellationToken| {
            let first = shards.held() == 0;
            shards.gain(shard);
            let caches = run_caches.get_or_init(|| {
                delivery_settings
                    .iter()
                    .map(|s| RunCache::start(&workers, s.namespace.as_deref(), controllers.clone()))
                    .collect()
            });
            for (settings, runs) in delivery_settings.iter().zip(caches) {
                let namespace = settings.namespace.clone();
                // The run controllers start with the first shard held and execute the
                // runs of every shard held since.
                if first {
                    tokio::spawn(flowline_controller::run::run(
                        ctx.in_shards(namespace.clone(), shards.clone()),
                        runs.clone(),
                        controllers.clone(),
                    ));
                }
                // Schedules, event fan-out and deliveries: one process at a time, shard
                // 0's holder.
                if shard == 0 {
                    tokio::spawn(flowline_controller::workflow::run(
                        workers.clone(),
                        namespace,
                        runs.clone(),
                        telemetry.clone(),
                        seal.clone(),
                        controllers.clone(),
                    ));
                    tokio::spawn(flowline_controller::event::run(
                        workers.clone(),
                        settings.namespace.clone(),
                        event_retention,
                        telemetry.clone(),
                        controllers.clone(),
                    ));
                    tokio::spawn(flowline_delivery::worker::run(
                        workers.clone(),
                        sender.clone(),
                        settings.clone(),
                        delivery_metrics.clone(),
                        runs.watch.clone(),
                        seal.clone(),
                        controllers.clone(),
                    ));
                }
                // Subscribed above: a watch begins with one list for all of them (a
                // component started later makes it list again, for itself).
                runs.watch.begin();
            }
        };
        // The lease gets a client (and so connections) of its own: a renewal must not
        // queue behind the burst of reads and writes a new leader's catch-up makes, or
        // the leader misses its renew deadline under load and exits.
        let lease_client = kube::Client::try_from(kube_config.clone())
            .context("connecting the leader election's client")?;
        tokio::spawn(candidacy.lead(lease_client, shutdown.clone(), start));
    }
    server
        .await
        .context("HTTP server task failed")?
        .context("HTTP server failed")?;
    shutdown.cancel();
    tracing::info!("shut down cleanly");
    Ok(Stopped(leadership))
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "flowline".into())
}

/// Cancels `token` on SIGTERM (what Kubernetes sends) or Ctrl-C.
pub fn spawn_signal_handler(token: CancellationToken) {
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("installing a SIGTERM handler cannot fail on unix");
            tokio::select! {
                _ = ctrl_c => {},
                _ = term.recv() => {},
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutdown signal received");
        token.cancel();
    });
}
