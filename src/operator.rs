//! Wiring of `flowline operator` and `flowline api`: connect, wait for the CRDs,
//! start the watch caches, serve the API and the operational endpoints, run until
//! SIGTERM.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::api::cache::Caches;
use crate::api::state::ApiState;
use crate::cli::OperatorArgs;
use crate::controller::leader;
use crate::telemetry::engine_metrics::EngineTelemetry;
use crate::telemetry::{health, metrics::Metrics};

/// Which parts of Flowline this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Controllers and the API.
    Operator,
    /// The API alone.
    Api,
}

pub async fn run(args: OperatorArgs, role: Role) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone());

    if role == Role::Api && args.no_api {
        anyhow::bail!("`flowline api --no-api` would serve nothing; drop --no-api");
    }
    let readiness = health::Readiness::default();
    let crds_gate = readiness.gate("crds");
    let metrics = Metrics::default();

    let client = crate::kubeutil::client().await?;
    let scope = args.scope();

    let mut app = health::router(readiness.clone(), metrics.clone());
    // The API's watch caches are its own: a controller-only process (--no-api) does
    // not hold a second copy of every object.
    if !args.no_api {
        let caches_gate = readiness.gate("caches");
        let caches = Caches::start(client.clone(), &scope, shutdown.clone());
        let watching = caches.clone();
        tokio::spawn(async move {
            while !watching.is_synced() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            caches_gate.open();
        });
        let state = ApiState::new(client.clone(), caches, args.api_config());
        app = app.merge(crate::api::router(state));
    }
    // Serve /healthz (and /readyz, not ready yet) while the CRDs are awaited, so a
    // slow CRD installation does not look like a dead process.
    let client_for_release = client.clone();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    if args.no_api {
        tracing::info!(address = %args.listen, "serving /healthz, /readyz, /metrics (no /v1: --no-api)");
    } else {
        tracing::info!(address = %args.listen, "serving /v1, /healthz, /readyz, /metrics");
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
        crate::kubeutil::wait_for_crds(&client, Duration::from_secs(args.crd_wait_seconds)).await
    {
        shutdown.cancel();
        let _ = server.await;
        return Err(err.into());
    }
    crds_gate.open();
    tracing::info!(?role, "CRDs established");

    let lost_leadership = Arc::new(AtomicBool::new(false));
    let mut lease = None;
    if role == Role::Operator {
        let telemetry = EngineTelemetry::new(&metrics, Some(client.clone()));
        let http = crate::egress::GuardedClient::new(crate::egress::ClientSettings {
            policy: args.destination_policy(),
            ..Default::default()
        })
        .context("building the HTTP client of the engine")?;
        // A bad CA bundle is a start-up error, not a stream of failed deliveries.
        let sender = crate::delivery::sender::Sender::new(&args.sender_config())
            .context("configuring webhook deliveries")?;
        let delivery_metrics = crate::telemetry::delivery_metrics::DeliveryMetrics::new(&metrics);
        let ctx = crate::controller::run::Context::new(
            client.clone(),
            http,
            args.default_executor.into(),
            None,
            telemetry.clone(),
            crate::engine::job::JobSettings {
                step_image: args.step_image.clone(),
                pod_annotations: args.job_pod_annotations.iter().cloned().collect(),
                resources: crate::engine::job::StepResources {
                    cpu_request: args.step_cpu_request.clone(),
                    memory_request: args.step_memory_request.clone(),
                    cpu_limit: args.step_cpu_limit.clone(),
                    memory_limit: args.step_memory_limit.clone(),
                },
                destinations: args.destination_policy(),
            },
        );
        let cfg = leader::LeaseConfig {
            namespace: args.leader_election_namespace.clone(),
            name: args.leader_election_lease.clone(),
            identity: format!("{}-{}", hostname(), crate::ids::new_id("op")),
            duration: Duration::from_secs(args.leader_lease_seconds.max(3)),
        };
        lease = Some(cfg.clone());
        let (client, shutdown, lost) = (client.clone(), shutdown.clone(), lost_leadership.clone());
        let delivery_settings: Vec<_> = scope
            .each()
            .into_iter()
            .map(|ns| args.delivery_settings(ns))
            .collect();
        let workflow_telemetry = telemetry.clone();
        tokio::spawn(async move {
            if !leader::acquire(client.clone(), &cfg, &shutdown).await {
                return;
            }
            let controllers = shutdown.child_token();
            // One set of watches per listed namespace (or one for the cluster).
            for settings in delivery_settings {
                let namespace = settings.namespace.clone();
                tokio::spawn(crate::controller::run::run(
                    ctx.in_namespace(namespace.clone()),
                    controllers.clone(),
                ));
                tokio::spawn(crate::controller::workflow::run(
                    client.clone(),
                    namespace,
                    workflow_telemetry.clone(),
                    controllers.clone(),
                ));
                tokio::spawn(crate::delivery::worker::run(
                    client.clone(),
                    sender.clone(),
                    settings,
                    delivery_metrics.clone(),
                    controllers.clone(),
                ));
            }
            if !leader::keep(client, cfg, shutdown.clone()).await {
                // Another replica may lead now: stop everything and let Kubernetes
                // restart this one as a follower.
                lost.store(true, Ordering::Release);
                shutdown.cancel();
            }
        });
    }
    server
        .await
        .context("HTTP server task failed")?
        .context("HTTP server failed")?;
    shutdown.cancel();
    if lost_leadership.load(Ordering::Acquire) {
        anyhow::bail!("lost the leader-election lease");
    }
    if let Some(cfg) = lease {
        leader::release(client_for_release, &cfg).await;
    }
    tracing::info!("shut down cleanly");
    Ok(())
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
