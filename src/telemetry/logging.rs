use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, filter, fmt};

/// How log lines are written (`--log-format`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

fn env_filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

/// Structured logs on stderr, written off the logging thread (`log_writer`);
/// `RUST_LOG` overrides the default `info` level.
pub fn init(format: LogFormat) {
    let builder = fmt()
        .with_env_filter(env_filter())
        .with_writer(super::log_writer::process());
    // A second init (tests starting several servers in one process) is harmless.
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// [`init`], plus Flowline's own spans (info and above, whatever `RUST_LOG` says)
/// exported through `tracer` (`telemetry::traces`).
pub fn init_with_traces(format: LogFormat, tracer: opentelemetry_sdk::trace::Tracer) {
    let logs = fmt::layer().with_writer(super::log_writer::process());
    let logs = match format {
        LogFormat::Json => logs.json().with_filter(env_filter()).boxed(),
        LogFormat::Text => logs.with_filter(env_filter()).boxed(),
    };
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter::Targets::new().with_target("flowline", tracing::Level::INFO));
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init();
}
