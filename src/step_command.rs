//! `flowline step`: runs one built-in step inside a Job's pod. Reads the rendered
//! inputs from FLOWLINE_STEP, writes the output JSON (or the failure message) to the
//! termination log, and exits non-zero on failure.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::crd::Action;
use crate::engine::actions;
use crate::engine::job::STEP_ENV;

/// Kubernetes keeps at most 4096 bytes of a termination message.
const MAX_MESSAGE: usize = 4096;

#[derive(Deserialize)]
struct StepInput {
    action: Action,
    #[serde(default)]
    with: Value,
}

fn termination_log() -> std::path::PathBuf {
    std::env::var_os("FLOWLINE_TERMINATION_LOG")
        .map(Into::into)
        .unwrap_or_else(|| "/dev/termination-log".into())
}

fn fit(text: String) -> String {
    if text.len() <= MAX_MESSAGE {
        return text;
    }
    json!({"output_truncated": true}).to_string()
}

/// Returns the process exit code.
pub async fn run() -> i32 {
    let (message, code) = match std::env::var(STEP_ENV)
        .map_err(|_| format!("{STEP_ENV} is not set"))
        .and_then(|raw| {
            serde_json::from_str::<StepInput>(&raw)
                .map_err(|e| format!("{STEP_ENV} is not a valid step: {e}"))
        }) {
        Err(e) => (e, 2),
        Ok(input) => {
            let http = reqwest::Client::builder()
                .user_agent(concat!("flowline/", env!("CARGO_PKG_VERSION")))
                .build()
                .unwrap_or_default();
            match actions::execute(input.action, &input.with, &http).await {
                Ok(output) => (fit(output.to_string()), 0),
                Err(e) => (crate::limits::cap_error(e.0), 1),
            }
        }
    };
    if let Err(e) = std::fs::write(termination_log(), &message) {
        eprintln!("cannot write the termination log: {e}");
    }
    if code != 0 {
        eprintln!("{message}");
    }
    code
}
