#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use flowline::cli::{Cli, Command};
use flowline::operator::{Role, Stopped};

/// What is left to do once the runtime has stopped.
enum Ended {
    Exit(ExitCode),
    Operator(Stopped),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // One TLS crypto provider for every client (kube, webhook delivery, http.request).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let traces = match start_traces(&cli) {
        Ok(traces) => traces,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    // What #[tokio::main] builds, kept by hand so that it can be dropped before a
    // leader's lease is handed over.
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let connection = cli.connection();
    let result = runtime.block_on(dispatch(cli.command, connection));
    // Shutting the runtime down drops every task still running — a leader's run
    // executions, delivery attempts, status writers — so that none of them is alive
    // when the lease is released below and another replica takes over. Bounded: a
    // blocking task (a DNS lookup) that does not end in time is left behind, and the
    // process exits right after the release anyway.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    // Log lines are written by a thread of their own: out before the error below.
    flowline_telemetry::log_writer::flush_process();
    let code = match result {
        Ok(Ended::Exit(code)) => code,
        Ok(Ended::Operator(stopped)) => {
            stopped.finish();
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    };
    // After the lease hand-over: flushing the last spans delays no other replica.
    if let Some(traces) = traces {
        traces.shutdown();
    }
    flowline_telemetry::log_writer::flush_process();
    code
}

/// Logging, and traces for `operator` and `api` when `--otlp-endpoint` is set.
fn start_traces(
    cli: &Cli,
) -> Result<Option<flowline_telemetry::traces::Traces>, flowline_telemetry::traces::TraceSetupError>
{
    let (args, role) = match &cli.command {
        Command::Operator(args) => (&args.api.traces, "operator"),
        Command::Api(args) => (&args.traces, "api"),
        _ => {
            flowline_telemetry::logging::init(cli.log_format);
            return Ok(None);
        }
    };
    match flowline_telemetry::traces::start(args, role) {
        Ok(Some((traces, tracer))) => {
            flowline_telemetry::logging::init_with_traces(cli.log_format, tracer);
            tracing::info!(url = %traces.url(), "exporting traces");
            Ok(Some(traces))
        }
        Ok(None) => {
            flowline_telemetry::logging::init(cli.log_format);
            Ok(None)
        }
        Err(err) => {
            flowline_telemetry::logging::init(cli.log_format);
            Err(err)
        }
    }
}

async fn dispatch(
    command: Command,
    connection: flowline_kube::Connection,
) -> anyhow::Result<Ended> {
    Ok(match command {
        Command::Crdgen => {
            print!("{}", flowline_core::crd::render_yaml());
            Ended::Exit(ExitCode::SUCCESS)
        }
        Command::Operator(args) => {
            Ended::Operator(flowline::operator::run(Role::Operator(args), &connection).await?)
        }
        Command::Api(args) => {
            Ended::Operator(flowline::operator::run(Role::Api(Box::new(args)), &connection).await?)
        }
        Command::ApiKey { command } => {
            flowline::api_key_command::run(command, &connection).await?;
            Ended::Exit(ExitCode::SUCCESS)
        }
        Command::Completion { shell } => {
            let mut command = <flowline::cli::Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "flowline", &mut std::io::stdout());
            Ended::Exit(ExitCode::SUCCESS)
        }
        Command::Step { part } => {
            let code = match part {
                None => flowline::step_command::run().await,
                Some(flowline::cli::StepPart::EmitOutput) => flowline::step_command::emit_output(),
            };
            Ended::Exit(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
    })
}
