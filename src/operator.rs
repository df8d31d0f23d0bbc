//! Wiring of `flowline operator`: connect, wait for the CRDs, serve the
//! operational endpoints, run until SIGTERM.

use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::cli::OperatorArgs;
use crate::telemetry::{health, metrics::Metrics};

pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone());

    let readiness = health::Readiness::default();
    let crds_gate = readiness.gate("crds");
    let metrics = Metrics::default();

    let client = crate::kubeutil::client().await?;
    crate::kubeutil::wait_for_crds(&client, Duration::from_secs(args.crd_wait_seconds)).await?;
    crds_gate.open();
    tracing::info!("CRDs established");

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(address = %args.listen, "serving /healthz, /readyz, /metrics");
    let app = health::router(readiness, metrics);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.clone().cancelled_owned())
        .await
        .context("HTTP server failed")?;
    tracing::info!("shut down cleanly");
    Ok(())
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
