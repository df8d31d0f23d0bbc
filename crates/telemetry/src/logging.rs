use std::io::IsTerminal;
use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, filter, fmt};

use super::access_line::Style;

/// How log lines are written (`--log-format`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Set by [`init`]: the process logs through Flowline's own subscriber, without
/// traces, in this style, so the access log may write its line itself
/// (`access_line`) instead of logging an event for the fmt layer to format.
static DIRECT: OnceLock<Style> = OnceLock::new();

/// The style the access log writes its own lines in, if it may (see [`DIRECT`]).
pub fn direct_style() -> Option<Style> {
    DIRECT.get().copied()
}

fn env_filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

/// ANSI styles only for a terminal (a file or a log collector would get escape
/// codes), and never with `NO_COLOR` set.
fn ansi() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Structured logs on stderr, written off the logging thread (`log_writer`);
/// `RUST_LOG` overrides the default `info` level.
pub fn init(format: LogFormat) {
    let ansi = ansi();
    let builder = fmt()
        .with_env_filter(env_filter())
        .with_ansi(ansi)
        .with_writer(super::log_writer::process());
    // A second init (tests starting several servers in one process) is harmless.
    let (installed, style) = match format {
        LogFormat::Json => (builder.json().try_init(), Style::Json),
        LogFormat::Text => (builder.try_init(), Style::Text { ansi }),
    };
    if installed.is_ok() {
        let _ = DIRECT.set(style);
    }
}

/// [`init`], plus Flowline's own spans (info and above, whatever `RUST_LOG` says)
/// exported through `tracer` (`telemetry::traces`). The access log logs its line as
/// an event here: whether `RUST_LOG` lets it through is the log layer's filter alone,
/// which the access log cannot ask apart from the span layer's.
pub fn init_with_traces(format: LogFormat, tracer: opentelemetry_sdk::trace::Tracer) {
    let logs = fmt::layer()
        .with_ansi(ansi())
        .with_writer(super::log_writer::process());
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
