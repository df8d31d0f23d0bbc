//! Command-line interface: one subcommand per process role.

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "flowline",
    version,
    about = "Kubernetes-native workflow automation"
)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "FLOWLINE_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the CustomResourceDefinitions as YAML (what `crds/` holds).
    Crdgen,
    /// Run the controllers (and the /v1 API) against the cluster of the current
    /// kubeconfig or the in-cluster service account.
    Operator(OperatorArgs),
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Args, Debug, Clone)]
pub struct OperatorArgs {
    /// Address of the HTTP listener (/healthz, /readyz, /metrics).
    #[arg(long, default_value = "127.0.0.1:8080", env = "FLOWLINE_LISTEN")]
    pub listen: SocketAddr,
    /// How long to wait for the CRDs to become Established before giving up.
    #[arg(long, default_value = "30", value_name = "SECONDS")]
    pub crd_wait_seconds: u64,
}
