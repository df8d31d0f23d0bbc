//! Command-line interface: one subcommand per process role.

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand, ValueEnum};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use flowline_engine::job;
use flowline_telemetry::logging::LogFormat;

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
    pub fn connection(&self) -> flowline_kube::Connection {
        flowline_kube::Connection {
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
    Operator(Box<OperatorArgs>),
    /// Run only the /v1 API (stateless; scale it apart from the controllers).
    Api(ApiArgs),
    /// Run one built-in step (what a step Job's pod executes).
    Step {
        #[command(subcommand)]
        part: Option<StepPart>,
    },
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

/// The parts of a step pod that run `flowline step`.
#[derive(Debug, Subcommand)]
pub enum StepPart {
    /// The step pod's `output` container: wait for the step to end, then print its
    /// output file for the engine.
    EmitOutput,
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
    /// Move the keys earlier versions kept as Secrets (type `flowline.io/api-key`) to
    /// ApiKey objects, keeping their ids, and delete the Secrets. Safe to run again.
    /// The Helm chart runs it after every install and upgrade.
    Migrate {
        /// Only these namespaces (repeatable; default: every namespace).
        #[arg(long = "namespace", short = 'n')]
        namespaces: Vec<String>,
    },
}

/// Flags of `flowline api`: what the API process reads. `flowline operator` takes
/// them too (it serves the API unless `--no-api`, and its controllers read the
/// listener, the namespaces, `--allow-http` and `--default-executor` from here).
#[derive(Args, Debug, Clone)]
pub struct ApiArgs {
    /// Address of the HTTP listener (/v1 and the console when served, /healthz, /readyz,
    /// /metrics).
    #[arg(long, default_value = "127.0.0.1:8080", env = "FLOWLINE_LISTEN")]
    pub listen: SocketAddr,
    /// How long to wait for the CRDs to become Established before giving up.
    #[arg(long, default_value = "30", value_name = "SECONDS")]
    pub crd_wait_seconds: u64,
    /// The Secret holding the installation's seal key, with which inbound hook secrets
    /// are sealed into their Workflow (so the API reads no Secret of an account). Made
    /// with a random key when missing; the chart makes it and grants `get` on it alone.
    #[arg(long, default_value = "flowline-seal-key", value_name = "NAME")]
    pub seal_key_secret: String,
    /// Namespace of the seal key's Secret (in a pod: its own namespace).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = "default",
        value_name = "NAMESPACE"
    )]
    pub seal_key_namespace: String,
    /// Rate-limit plan of accounts whose namespace has no `flowline.io/plan` annotation.
    #[arg(
        long,
        value_enum,
        default_value = "free",
        env = "FLOWLINE_DEFAULT_PLAN"
    )]
    pub default_plan: flowline_api::plumbing::ratelimit::Plan,
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
        value_parser = flowline_egress::parse_cidr
    )]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Development only: accept and deliver to `http://` webhook URLs.
    #[arg(long)]
    pub allow_http: bool,
    /// Executor of workflows that do not choose one.
    #[arg(long, value_enum, default_value = "inline")]
    pub default_executor: ExecutorArg,
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
    /// Do not serve the web console at `/` (it is served with `/v1`, and needs it).
    #[arg(long, env = "FLOWLINE_NO_CONSOLE")]
    pub no_console: bool,
    #[command(flatten)]
    pub traces: flowline_telemetry::traces::TraceArgs,
}

/// Flags only the controllers, the engine, the delivery worker and leader election
/// read: `flowline operator` takes them, `flowline api` refuses them.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Controller options")]
pub struct ControllerArgs {
    /// Namespace of the leader-election Lease (in a pod: its own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_election_namespace: String,
    /// Name of the leader-election Lease (distinct per installation in one namespace).
    #[arg(long, default_value = "flowline-controller")]
    pub leader_election_lease: String,
    /// Seconds a leader's Lease stays valid without renewal: a follower takes over
    /// once it has seen the Lease unchanged for this long, on its own clock. 10 s
    /// (client-go uses 15) so that a lost replica's runs move on within 15 s.
    #[arg(long, value_name = "SECONDS", default_value = "10")]
    pub leader_lease_seconds: u64,
    /// Seconds the leader may go without a successful renewal before it exits (and
    /// another replica may take over once the lease expires); default 2/3 of the
    /// lease. Must end at least 0.5 s before the lease does.
    #[arg(long, value_name = "SECONDS", value_parser = flowline_controller::leader::parse_seconds)]
    pub leader_renew_deadline_seconds: Option<std::time::Duration>,
    /// Seconds between two attempts to renew or take the lease; default 2/15 of the
    /// lease. Fractions allowed.
    #[arg(long, value_name = "SECONDS", value_parser = flowline_controller::leader::parse_seconds)]
    pub leader_retry_period_seconds: Option<std::time::Duration>,
    /// Split the runs into this many shards, each executed by the replica holding
    /// its Lease (`<lease>-shard-<i>`; shard 0 uses the leader-election Lease and
    /// also runs schedules and deliveries). Replicas share the shards evenly; a
    /// stopped replica's shards move on within a lease duration. 1 = one leader
    /// executes everything. Every replica of an installation needs the same value.
    #[arg(long, default_value = "1", value_parser = clap::value_parser!(u32).range(1..=i64::from(flowline_controller::shard::MAX_SHARDS)))]
    pub shards: u32,
    /// With `--shards` above 1: how many member Leases (`<lease>-member-<i>`) the
    /// replicas count each other with, one held by each live replica. At least the
    /// most replicas that run at once (a rollout's extra pod included); a replica that
    /// finds none free still executes its share, but the others do not count it.
    #[arg(long, default_value = "16", value_name = "SLOTS", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub member_slots: u32,
    /// How many runs one account (namespace) may execute at once on this replica;
    /// its further runs wait `queued`, oldest first, and start as places free. Keeps
    /// one account from holding the tasks and connections every account's runs share.
    /// 0 = no bound.
    #[arg(long, default_value = "500", value_name = "RUNS")]
    pub max_runs_per_account: u32,
    /// How many runs every account together may execute at once on this replica. The
    /// places are shared fairly: when one frees, it goes to the account with waiting
    /// runs that holds the fewest, so an account with a long backlog never makes
    /// another wait more than a turn. 0 = no bound.
    #[arg(long, default_value = "2000", value_name = "RUNS")]
    pub max_running_runs: u32,
    /// How many step attempts execute at once on this replica, every run's together;
    /// further attempts wait for a place, in order, before they start. Bounds what
    /// one run's parallelism and forEachConcurrency could hold (up to 5,000 attempts).
    /// 0 = no bound.
    #[arg(long, default_value = "1000", value_name = "ATTEMPTS")]
    pub max_step_attempts: usize,
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
    /// How long a finished step Job, its pod and its log are kept, in seconds (the logs
    /// endpoint answers `logs_not_found` after that).
    #[arg(long, value_name = "SECONDS", default_value_t = job::DEFAULT_JOB_TTL.as_secs(), value_parser = clap::value_parser!(u64).range(0..=i32::MAX as u64))]
    pub step_job_ttl: u64,
    /// The URL the API is reached at from outside (e.g. https://flowline.example.com):
    /// the base of `{{ callbacks.<id>.url }}`. Default: http:// and the listen address.
    #[arg(long, value_name = "URL", env = "FLOWLINE_PUBLIC_URL", value_parser = parse_public_url)]
    pub public_url: Option<String>,
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
        value_parser = flowline_egress::parse_cidr,
        env = flowline_egress::ALLOW_CIDRS_ENV
    )]
    pub allow_cidrs: Vec<ipnet::IpNet>,
    /// Webhook delivery attempts in flight per webhook.
    #[arg(long, default_value = "16", value_parser = clap::value_parser!(u16).range(1..))]
    pub delivery_concurrency: u16,
    /// How long posted events (`FlowlineEvent` objects) are kept after they were
    /// received, e.g. `7d`, `36h`, `90m` (from 1 minute to 365 days). An event still
    /// waiting for its fan-out is never deleted.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = flowline_controller::event::parse_retention)]
    pub event_retention: flowline_controller::event::Retention,
    /// Multiplies every webhook retry delay (1 in production; tests compress time).
    #[arg(long, default_value = "1", hide = true)]
    pub delivery_time_scale: f64,
}

/// Flags of `flowline operator`: the API's and the controllers'.
#[derive(Args, Debug, Clone)]
pub struct OperatorArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Run the controllers without serving `/v1` (and without the API's watch caches):
    /// for a controller Deployment next to separate API replicas.
    #[arg(long)]
    pub no_api: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutorArg {
    Inline,
    Job,
}

impl From<ExecutorArg> for flowline_core::crd::Executor {
    fn from(e: ExecutorArg) -> Self {
        match e {
            ExecutorArg::Inline => flowline_core::crd::Executor::Inline,
            ExecutorArg::Job => flowline_core::crd::Executor::Job,
        }
    }
}

impl ApiArgs {
    pub fn api_config(&self) -> flowline_api::state::ApiConfig {
        flowline_api::state::ApiConfig {
            allow_http_webhooks: self.allow_http,
            plans: flowline_api::plumbing::ratelimit::PlanDefaults {
                plan: self.default_plan,
                enterprise_requests: self.enterprise_requests_per_minute,
            },
            rate_limit_window_secs: self.rate_limit_window_seconds,
            unauthenticated_requests: self.unauthenticated_requests_per_minute,
            trusted_proxies: flowline_api::plumbing::client_ip::TrustedProxies::new(
                self.trusted_proxies.clone(),
            ),
            ..Default::default()
        }
    }

    pub fn scope(&self) -> flowline_kube::WatchScope {
        flowline_kube::WatchScope::from_list(&self.watch_namespaces)
    }
}

impl OperatorArgs {
    pub fn sender_config(&self) -> flowline_delivery::sender::SenderConfig {
        flowline_delivery::sender::SenderConfig {
            ca_bundle: self.controller.ca_bundle.clone(),
            policy: self.controller.destination_policy(),
            allow_http: self.api.allow_http,
        }
    }
}

impl ControllerArgs {
    /// The destination guard of deliveries and steps alike.
    pub fn destination_policy(&self) -> flowline_egress::DestinationPolicy {
        flowline_egress::DestinationPolicy::allowing(self.allow_cidrs.clone())
    }

    /// The leader-election durations, checked against each other.
    pub fn leader_timing(
        &self,
    ) -> Result<flowline_controller::leader::Timing, flowline_controller::leader::TimingError> {
        flowline_controller::leader::Timing::new(
            std::time::Duration::from_secs(self.leader_lease_seconds),
            self.leader_renew_deadline_seconds,
            self.leader_retry_period_seconds,
        )
    }

    /// Settings of the delivery worker of one namespace (or of the cluster).
    pub fn delivery_settings(
        &self,
        namespace: Option<String>,
    ) -> flowline_delivery::worker::Settings {
        flowline_delivery::worker::Settings {
            namespace,
            schedule: flowline_core::delivery::schedule::RetrySchedule::scaled(
                self.delivery_time_scale,
            ),
            concurrency: self.delivery_concurrency.into(),
        }
    }
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

/// An http(s) URL without a query or fragment, as the base of callback URLs.
fn parse_public_url(text: &str) -> Result<String, String> {
    let url = url::Url::parse(text).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https")
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err("must be an http(s) URL without a query or fragment".into());
    }
    Ok(text.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_public_url_is_an_http_base_without_query_or_fragment() {
        assert_eq!(
            parse_public_url("https://flowline.example.com/").as_deref(),
            Ok("https://flowline.example.com")
        );
        assert!(parse_public_url("http://127.0.0.1:8080").is_ok());
        for bad in [
            "ftp://x",
            "flowline.example.com",
            "https://x/?a=1",
            "https://x/#f",
        ] {
            assert!(parse_public_url(bad).is_err(), "{bad}");
        }
    }
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
    fn shards_default_to_one_and_stay_within_the_bitset() {
        let shards = |extra: &[&str]| {
            let args = ["flowline", "operator"].iter().chain(extra).copied();
            match Cli::try_parse_from(args).map(|cli| cli.command) {
                Ok(Command::Operator(args)) => Ok(args.controller.shards),
                Ok(_) => unreachable!("operator parses as the operator"),
                Err(err) => Err(err.to_string()),
            }
        };
        assert_eq!(shards(&[]), Ok(1));
        assert_eq!(shards(&["--shards", "64"]), Ok(64));
        for bad in ["0", "65", "-1", "many"] {
            let err = shards(&[&format!("--shards={bad}")]).unwrap_err();
            assert!(err.contains("--shards"), "{bad}: {err}");
        }
    }

    /// `--help` of a subcommand, as the user sees it.
    fn help_of(subcommand: &str) -> String {
        let err = Cli::try_parse_from(["flowline", subcommand, "--help"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp);
        err.to_string()
    }

    /// The long flags (`--name`) of a `--help` text.
    fn flags_in(help: &str) -> std::collections::BTreeSet<String> {
        help.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[')
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(|w| w.trim_end_matches(['.', ')', ':', '`']).to_string())
            .collect()
    }

    /// Every visible long flag of an argument group, from its clap definition.
    fn visible_flags<A: Args>() -> Vec<String> {
        A::augment_args(clap::Command::new("x"))
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect()
    }

    const CONTROLLER_ONLY: &[&str] = &[
        "--leader-election-namespace",
        "--leader-election-lease",
        "--leader-lease-seconds",
        "--leader-renew-deadline-seconds",
        "--leader-retry-period-seconds",
        "--step-image",
        "--job-pod-annotation",
        "--step-cpu-request",
        "--step-memory-request",
        "--step-cpu-limit",
        "--step-memory-limit",
        "--ca-bundle",
        "--allow-cidr",
        "--delivery-concurrency",
        "--delivery-time-scale",
        "--no-api",
    ];

    #[test]
    fn api_help_lists_only_what_the_api_reads() {
        let help = help_of("api");
        let shown = flags_in(&help);
        for flag in CONTROLLER_ONLY {
            assert!(!shown.contains(*flag), "`api --help` lists {flag}:\n{help}");
        }
        for flag in visible_flags::<ControllerArgs>() {
            assert!(!shown.contains(&flag), "`api --help` lists {flag}:\n{help}");
        }
        for flag in visible_flags::<ApiArgs>() {
            assert!(shown.contains(&flag), "`api --help` lacks {flag}:\n{help}");
        }
        // What the API validates with at write time stays in its set.
        for flag in ["--allow-http", "--default-executor", "--watch-namespace"] {
            assert!(shown.contains(flag), "`api --help` lacks {flag}:\n{help}");
        }
        assert!(!help.contains("Controller options"), "{help}");
    }

    #[test]
    fn operator_help_lists_both_sets() {
        let help = help_of("operator");
        let shown = flags_in(&help);
        let mut want = visible_flags::<ApiArgs>();
        want.extend(visible_flags::<ControllerArgs>());
        want.push("--no-api".into());
        for flag in want {
            assert!(
                shown.contains(&flag),
                "`operator --help` lacks {flag}:\n{help}"
            );
        }
        assert!(help.contains("Controller options"), "{help}");
    }

    #[test]
    fn api_refuses_controller_flags() {
        for args in [
            &["--step-cpu-request", "100m"][..],
            &["--leader-lease-seconds", "20"],
            &["--allow-cidr", "10.0.0.0/8"],
            &["--ca-bundle", "/etc/ca.pem"],
            &["--delivery-concurrency", "4"],
            &["--delivery-time-scale", "0.1"],
            &["--job-pod-annotation", "a=b"],
            &["--no-api"],
        ] {
            let Err(err) = Cli::try_parse_from(["flowline", "api"].iter().chain(args)) else {
                panic!("`flowline api {args:?}` parsed");
            };
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "api {args:?}: {err}"
            );
        }
    }

    #[test]
    fn api_takes_its_own_flags() {
        let cli = Cli::try_parse_from([
            "flowline",
            "api",
            "--listen=0.0.0.0:9000",
            "--crd-wait-seconds=5",
            "--default-plan=pro",
            "--enterprise-requests-per-minute=9000",
            "--rate-limit-window-seconds=2",
            "--unauthenticated-requests-per-minute=7",
            "--trusted-proxy=10.0.0.0/8,192.168.1.1",
            "--allow-http",
            "--default-executor=job",
            "--watch-namespace=a,b",
            "--no-console",
        ])
        .unwrap();
        let Command::Api(api) = cli.command else {
            panic!("not api");
        };
        assert_eq!(api.listen, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(api.crd_wait_seconds, 5);
        assert_eq!(api.default_executor, ExecutorArg::Job);
        assert_eq!(api.watch_namespaces, ["a", "b"]);
        assert!(api.allow_http && api.no_console);
        let config = api.api_config();
        assert!(config.allow_http_webhooks);
        assert_eq!(
            config.plans.plan,
            flowline_api::plumbing::ratelimit::Plan::Pro
        );
        assert_eq!(config.plans.enterprise_requests, 9000);
        assert_eq!(config.rate_limit_window_secs, 2);
        assert_eq!(config.unauthenticated_requests, 7);
    }

    #[test]
    fn operator_takes_both_sets() {
        let cli = Cli::try_parse_from([
            "flowline",
            "operator",
            "--listen=0.0.0.0:9000",
            "--watch-namespace=a",
            "--default-plan=enterprise",
            "--unauthenticated-requests-per-minute=7",
            "--trusted-proxy=10.0.0.0/8",
            "--allow-http",
            "--default-executor=job",
            "--no-console",
            "--no-api",
            "--leader-election-namespace=ns",
            "--leader-election-lease=lease",
            "--leader-lease-seconds=20",
            "--step-image=img:1",
            "--job-pod-annotation=a=b",
            "--step-cpu-request=100m",
            "--step-memory-request=32Mi",
            "--step-cpu-limit=2",
            "--step-memory-limit=1Gi",
            "--ca-bundle=/etc/ca.pem",
            "--allow-cidr=10.0.0.0/8",
            "--delivery-concurrency=4",
            "--delivery-time-scale=0.5",
        ])
        .unwrap();
        let Command::Operator(args) = cli.command else {
            panic!("not operator");
        };
        assert!(args.no_api);
        assert_eq!(args.api.watch_namespaces, ["a"]);
        assert_eq!(args.api.default_executor, ExecutorArg::Job);
        let controller = &args.controller;
        assert_eq!(controller.leader_election_namespace, "ns");
        assert_eq!(controller.leader_election_lease, "lease");
        assert_eq!(controller.leader_lease_seconds, 20);
        assert_eq!(controller.step_image, "img:1");
        assert_eq!(controller.job_pod_annotations, [("a".into(), "b".into())]);
        assert_eq!(controller.step_cpu_request, Quantity("100m".into()));
        assert_eq!(controller.step_memory_limit, Quantity("1Gi".into()));
        assert_eq!(controller.delivery_concurrency, 4);
        let sender = args.sender_config();
        assert!(sender.allow_http, "--allow-http reaches the deliveries");
        assert_eq!(
            sender.ca_bundle.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        // Without flags, the defaults of both sets.
        let cli = Cli::try_parse_from(["flowline", "operator"]).unwrap();
        let Command::Operator(args) = cli.command else {
            panic!("not operator");
        };
        assert!(!args.no_api && !args.api.allow_http);
        assert_eq!(args.controller.delivery_concurrency, 16);
        assert_eq!(args.controller.leader_election_lease, "flowline-controller");
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
