#![forbid(unsafe_code)]

use clap::Parser;
use flowline::cli::{Cli, Command};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // One TLS crypto provider for every client (kube, webhook delivery, http.request).
    let _ = rustls::crypto::ring::default_provider().install_default();
    flowline::telemetry::logging::init(cli.log_format);
    let result = match cli.command {
        Command::Crdgen => {
            print!("{}", flowline::crd::render_yaml());
            Ok(())
        }
        Command::Operator(args) => {
            flowline::operator::run(args, flowline::operator::Role::Operator).await
        }
        Command::Api(args) => flowline::operator::run(args, flowline::operator::Role::Api).await,
        Command::ApiKey { command } => flowline::api_key_command::run(command).await,
        Command::Step => {
            let code = flowline::step_command::run().await;
            return std::process::ExitCode::from(u8::try_from(code).unwrap_or(1));
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
