//! Command-line interface: one subcommand per process role.

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand, ValueEnum};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::engine::job;
use crate::telemetry::logging::LogFormat;

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
    /// Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the pod's
    /// service account).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The cluster the command talks to.
    pub fn connection(&self) -> crate::kubeutil::Connection {
        crate::kubeutil::Connection {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the CustomResourceDefinitions as YAML (what `crds/` holds).
    Crdgen,
    /// Run the controllers and the /v1 API against the cluster of the current
    /// kubeconfig or the in-cluster service account.
    Operator(OperatorArgs),
    /// Run only the /v1 API (stateless; scale it apart from the controllers).
    Api(OperatorArgs),
    /// Run one built-in step (what a step Job's pod executes).
    Step,
    /// Manage API keys directly in the cluster (no running API needed).
    ApiKey {
        #[command(subcommand)]
        command: ApiKeyCommand,
    },
    /// Print a shell completion script, e.g. `flowline completion bash >
    /// /etc/bash_completion.d/flowline` or `source <(flowline completion zsh)`.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// How a list is printed.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// Aligned columns with a header.
    #[default]
    Table,
    /// A JSON array, the items as `GET /v1/api-keys` shows them.
    Json,
    /// The same as YAML.
    Yaml,
}

#[derive(Subcommand, Debug)]
pub enum ApiKeyCommand {
    /// Create a key and print its value (shown only this once).
    Create {
        /// Namespace (account) the key belongs to (default: the context's namespace).
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// Display name of the key.
        #[arg(long)]
        name: String,
        /// Comma-separated scopes: read, write, execute, admin.
        #[arg(long, value_delimiter = ',', default_value = "read")]
        scopes: Vec<String>,
        /// Also write the value to this file (mode 0600). With --reuse, an existing
        /// file holding a key that is still valid is kept and nothing is created.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Keep the key in --out if it is still valid (idempotent bootstrap).
        #[arg(long, requires = "out")]
        reuse: bool,
    },
    /// List the keys of a namespace (never their values).
    List {
        /// Namespace (account) (default: the context's namespace).
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
    },
    /// Delete (revoke) a key by id.
    Delete {
        /// Namespace (account) (default: the context's namespace).
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        id: String,
    },
}

#[derive(Args, Debug, Clone)]
pub struct OperatorArgs {
    /// Address of the HTTP listener (/healthz, /readyz, /metrics).
    #[arg(long, default_value = "127.0.0.1:8080", env = "FLOWLINE_LISTEN")]
    pub listen: SocketAddr,
    /// How long to wait for the CRDs to become Established before giving up.
    #[arg(long, default_value = "30", value_name = "SECONDS")]
    pub crd_wait_seconds: u64,
    /// Rate-limit plan of accounts whose namespace has no `flowline.io/plan` annotation.
    #[arg(
        long,
        value_enum,
        default_value = "free",
        env = "FLOWLINE_DEFAULT_PLAN"
    )]
    pub default_plan: crate::api::ratelimit::Plan,
    /// Requests per minute of the enterprise plan when the namespace does not say.
    #[arg(long, default_value = "6000")]
    pub enterprise_requests_per_minute: u32,
    /// Length of a rate-limit window in seconds (60 in production; tests shorten it).
    #[arg(long, default_value = "60", hide = true)]
    pub rate_limit_window_seconds: u64,
    /// Requests per minute of one client address that sends no valid API key (no key,
    /// an unknown or a malformed one); counted apart from every account's budget. IPv6
    /// clients are counted by their /64.
    #[arg(long, default_value = "60", value_parser = clap::value_parser!(u32).range(1..))]
    pub unauthenticated_requests_per_minute: u32,
    /// A reverse proxy or load balancer in front of the API (CIDR or address;
    /// repeatable or comma-separated). Only when the connection comes from one is
    /// `X-Forwarded-For` read: the client is its right-most address that is not itself
    /// a trusted proxy. Without this flag the header is ignored.
    #[arg(
        long = "trusted-proxy",
        value_name = "CIDR",
        value_delimiter = ',',
        value_parser = crate::egress::parse_cidr
    )]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Development only: accept and deliver to `http://` webhook URLs.
    #[arg(long)]
    pub allow_http: bool,
    /// Executor of workflows that do not choose one.
    #[arg(long, value_enum, default_value = "inline")]
    pub default_executor: ExecutorArg,
    /// Namespace of the leader-election Lease (in a pod: its own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_election_namespace: String,
    /// Serve and reconcile only these namespaces (repeatable or comma-separated;
    /// default: the whole cluster). Namespaced installs need it: their RBAC covers only
    /// the listed namespaces.
    #[arg(
        long = "watch-namespace",
        value_name = "NAMESPACE",
        value_delimiter = ',',
        env = "FLOWLINE_WATCH_NAMESPACES"
    )]
    pub watch_namespaces: Vec<String>,
    /// Image of step Jobs running built-in actions (the operator's own image).
    #[arg(
        long,
        env = "FLOWLINE_STEP_IMAGE",
        default_value = "ghcr.io/flowline/flowline:latest"
    )]
    pub step_image: String,
    /// Annotation added to every step pod, `key=value`; repeatable.
    #[arg(long = "job-pod-annotation", value_parser = parse_key_value)]
    pub job_pod_annotations: Vec<(String, String)>,
    /// CPU request of every step container.
    #[arg(long, default_value = job::DEFAULT_CPU_REQUEST, value_parser = job::parse_quantity)]
    pub step_cpu_request: Quantity,
    /// Memory request of every step container.
    #[arg(long, default_value = job::DEFAULT_MEMORY_REQUEST, value_parser = job::parse_quantity)]
    pub step_memory_request: Quantity,
    /// CPU limit of every step container.
    #[arg(long, default_value = job::DEFAULT_CPU_LIMIT, value_parser = job::parse_quantity)]
    pub step_cpu_limit: Quantity,
    /// Memory limit of every step container.
    #[arg(long, default_value = job::DEFAULT_MEMORY_LIMIT, value_parser = job::parse_quantity)]
    pub step_memory_limit: Quantity,
    /// Name of the leader-election Lease (distinct per installation in one namespace).
    #[arg(long, default_value = "flowline-controller")]
    pub leader_election_lease: String,
    /// Seconds a leader's Lease stays valid without renewal: a follower takes over
    /// once it has seen the Lease unchanged for this long, on its own clock.
    #[arg(long, value_name = "SECONDS", default_value = "15")]
    pub leader_lease_seconds: u64,
    /// Seconds the leader may go without a successful renewal before it exits (and
    /// another replica may take over once the lease expires); default 2/3 of the
    /// lease. Must end at least 0.5 s before the lease does.
    #[arg(long, value_name = "SECONDS", value_parser = crate::controller::leader::parse_seconds)]
    pub leader_renew_deadline_seconds: Option<std::time::Duration>,
    /// Seconds between two attempts to renew or take the lease; default 2/15 of the
    /// lease. Fractions allowed.
    #[arg(long, value_name = "SECONDS", value_parser = crate::controller::leader::parse_seconds)]
    pub leader_retry_period_seconds: Option<std::time::Duration>,
    /// Run the controllers without serving `/v1` (and without the API's watch caches):
    /// for a controller Deployment next to separate API replicas.
    #[arg(long)]
    pub no_api: bool,
    /// Do not serve the web console at `/` (it is served with `/v1`, and needs it).
    #[arg(long, env = "FLOWLINE_NO_CONSOLE")]
    pub no_console: bool,
    /// PEM file of extra CA certificates trusted for webhook deliveries (besides the
    /// system roots).
    #[arg(long, value_name = "PATH", env = "FLOWLINE_CA_BUNDLE")]
    pub ca_bundle: Option<std::path::PathBuf>,
    /// Let webhook deliveries and `http.request` steps (inline and in step Jobs) reach
    /// this network although the destination guard refuses it (loopback, private,
    /// link-local…), e.g. `10.0.0.0/8`, or one address; repeatable or comma-separated.
    #[arg(
        long = "allow-cidr",
        value_name = "CIDR",
        value_delimiter = ',',
        value_parser = crate::egress::parse_cidr,
        env = crate::egress::ALLOW_CIDRS_ENV
    )]
    pub allow_cidrs: Vec<ipnet::IpNet>,
    /// Webhook delivery attempts in flight per webhook.
    #[arg(long, default_value = "16", value_parser = clap::value_parser!(u16).range(1..))]
    pub delivery_concurrency: u16,
    /// Multiplies every webhook retry delay (1 in production; tests compress time).
    #[arg(long, default_value = "1", hide = true)]
    pub delivery_time_scale: f64,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutorArg {
    Inline,
    Job,
}

impl From<ExecutorArg> for crate::crd::Executor {
    fn from(e: ExecutorArg) -> Self {
        match e {
            ExecutorArg::Inline => crate::crd::Executor::Inline,
            ExecutorArg::Job => crate::crd::Executor::Job,
        }
    }
}

impl OperatorArgs {
    pub fn api_config(&self) -> crate::api::state::ApiConfig {
        crate::api::state::ApiConfig {
            allow_http_webhooks: self.allow_http,
            plans: crate::api::ratelimit::PlanDefaults {
                plan: self.default_plan,
                enterprise_requests: self.enterprise_requests_per_minute,
            },
            rate_limit_window_secs: self.rate_limit_window_seconds,
            unauthenticated_requests: self.unauthenticated_requests_per_minute,
            trusted_proxies: crate::api::client_ip::TrustedProxies::new(
                self.trusted_proxies.clone(),
            ),
            ..Default::default()
        }
    }
}

impl OperatorArgs {
    pub fn sender_config(&self) -> crate::delivery::sender::SenderConfig {
        crate::delivery::sender::SenderConfig {
            ca_bundle: self.ca_bundle.clone(),
            policy: self.destination_policy(),
            allow_http: self.allow_http,
        }
    }

    /// The destination guard of deliveries and steps alike.
    pub fn destination_policy(&self) -> crate::egress::DestinationPolicy {
        crate::egress::DestinationPolicy::allowing(self.allow_cidrs.clone())
    }

    /// The leader-election durations, checked against each other.
    pub fn leader_timing(
        &self,
    ) -> Result<crate::controller::leader::Timing, crate::controller::leader::TimingError> {
        crate::controller::leader::Timing::new(
            std::time::Duration::from_secs(self.leader_lease_seconds),
            self.leader_renew_deadline_seconds,
            self.leader_retry_period_seconds,
        )
    }

    pub fn scope(&self) -> crate::kubeutil::WatchScope {
        crate::kubeutil::WatchScope::from_list(&self.watch_namespaces)
    }

    /// Settings of the delivery worker of one namespace (or of the cluster).
    pub fn delivery_settings(
        &self,
        namespace: Option<String>,
    ) -> crate::delivery::worker::Settings {
        crate::delivery::worker::Settings {
            namespace,
            schedule: crate::delivery::schedule::RetrySchedule::scaled(self.delivery_time_scale),
            concurrency: self.delivery_concurrency.into(),
        }
    }
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn cluster_flags_are_global_and_output_defaults_to_a_table() {
        for args in [
            &[
                "flowline",
                "--kubeconfig",
                "k",
                "--context",
                "c",
                "api-key",
                "list",
            ][..],
            &[
                "flowline",
                "api-key",
                "list",
                "--context",
                "c",
                "--kubeconfig",
                "k",
            ][..],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            let connection = cli.connection();
            assert_eq!(
                connection.kubeconfig.as_deref(),
                Some(std::path::Path::new("k"))
            );
            assert_eq!(connection.context.as_deref(), Some("c"));
            let Command::ApiKey {
                command: ApiKeyCommand::List { namespace, output },
            } = cli.command
            else {
                panic!("not api-key list");
            };
            assert_eq!((namespace, output), (None, OutputFormat::Table));
        }
        let cli =
            Cli::try_parse_from(["flowline", "api-key", "list", "-o", "yaml", "-n", "x"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::ApiKey {
                command: ApiKeyCommand::List {
                    output: OutputFormat::Yaml,
                    ..
                }
            }
        ));
        assert!(Cli::try_parse_from(["flowline", "api-key", "list", "-o", "xml"]).is_err());
    }

    #[test]
    fn completions_cover_the_subcommands_and_flags() {
        let mut out = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut Cli::command(),
            "flowline",
            &mut out,
        );
        let script = String::from_utf8(out).unwrap();
        for word in [
            "api-key",
            "operator",
            "--kubeconfig",
            "--context",
            "--output",
            "completion",
        ] {
            assert!(script.contains(word), "{word} missing");
        }
    }
}
