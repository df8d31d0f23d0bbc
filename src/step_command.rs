//! `flowline step`: runs one built-in step inside a Job's pod. Reads the rendered
//! inputs from FLOWLINE_STEP, puts back the secret values their placeholders stand for
//! (each from its FLOWLINE_SECRET_<n> variable, a `secretKeyRef`), takes the destination
//! guard's allow-list from FLOWLINE_ALLOW_CIDRS, writes the output JSON (or the failure
//! message) to the termination log with those values redacted, and exits non-zero on
//! failure.

use std::collections::BTreeMap;

use serde_json::json;

use flowline_core::engine::redact::Redactor;
use flowline_egress::{ALLOW_CIDRS_ENV, ClientSettings, DestinationPolicy, GuardedClient};
use flowline_engine::job::{STEP_ENV, StepEnvelope};
use flowline_engine::{actions, secrets};

/// Kubernetes keeps at most 4096 bytes of a termination message.
const MAX_MESSAGE: usize = 4096;

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

/// The step to run, its secret values in place, and a redactor for those values.
fn read_step() -> Result<(StepEnvelope, Redactor), String> {
    let raw = std::env::var(STEP_ENV).map_err(|_| format!("{STEP_ENV} is not set"))?;
    let mut step: StepEnvelope =
        serde_json::from_str(&raw).map_err(|e| format!("{STEP_ENV} is not a valid step: {e}"))?;
    let mut values = BTreeMap::new();
    for (placeholder, var) in &step.secrets {
        let value = std::env::var(var).map_err(|_| format!("{var} is not set"))?;
        values.insert(placeholder.clone(), value);
    }
    secrets::substitute(&mut step.with, &values);
    Ok((step, Redactor::new(values.values())))
}

/// The operator's destination guard, from the allow-list the Job passes in the pod's
/// environment (unset or empty: public addresses only).
fn guarded_client() -> Result<GuardedClient, String> {
    let list = std::env::var(ALLOW_CIDRS_ENV).unwrap_or_default();
    let policy =
        DestinationPolicy::from_list(&list).map_err(|e| format!("{ALLOW_CIDRS_ENV}: {e}"))?;
    GuardedClient::new(ClientSettings {
        policy,
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

/// Returns the process exit code.
pub async fn run() -> i32 {
    let (message, code) = match read_step() {
        Err(e) => (e, 2),
        Ok((step, redactor)) => match guarded_client() {
            Err(e) => (e, 2),
            // The pod's activeDeadlineSeconds bounds the step's own timeout.
            Ok(http) => match actions::execute(step.action, &step.with, &http, None).await {
                Ok(output) => (fit(redactor.value(output).to_string()), 0),
                Err(e) => (flowline_core::limits::cap_error(redactor.text(&e.0)), 1),
            },
        },
    };
    if let Err(e) = std::fs::write(termination_log(), &message) {
        eprintln!("cannot write the termination log: {e}");
    }
    if code != 0 {
        eprintln!("{message}");
    }
    code
}
