//! `flowline step`: runs one built-in step inside a Job's pod. Reads the rendered
//! inputs from FLOWLINE_STEP, puts back the secret values their placeholders stand for
//! (each from its FLOWLINE_SECRET_<n> variable, a `secretKeyRef`), takes the destination
//! guard's allow-list from FLOWLINE_ALLOW_CIDRS, writes the output JSON to
//! `$FLOWLINE_OUTPUT` (or the failure message to the termination log) with those values
//! redacted, and exits non-zero on failure.
//!
//! `flowline step emit-output` is the pod's other container: it waits until the step's
//! processes are gone, then prints the output file for the engine (flowline-core's
//! `engine::step_pod` says why and what a hostile step can do with it).

use std::collections::BTreeMap;

use serde_json::json;

use flowline_core::engine::output::MAX_STEP_OUTPUT;
use flowline_core::engine::redact::Redactor;
use flowline_core::engine::step_pod::{Emitted, MAX_TERMINATION_MESSAGE, OUTPUT_ENV, OUTPUT_FILE};
use flowline_egress::{ALLOW_CIDRS_ENV, ClientSettings, DestinationPolicy, GuardedClient};
use flowline_engine::job::{STEP_ENV, StepEnvelope};
use flowline_engine::{actions, secrets};

fn termination_log() -> std::path::PathBuf {
    std::env::var_os("FLOWLINE_TERMINATION_LOG")
        .map(Into::into)
        .unwrap_or_else(|| "/dev/termination-log".into())
}

fn fit(text: String) -> String {
    if text.len() <= MAX_TERMINATION_MESSAGE {
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

/// Where the output goes: `$FLOWLINE_OUTPUT` in a step pod.
fn output_file() -> Option<std::path::PathBuf> {
    std::env::var_os(OUTPUT_ENV).map(Into::into)
}

/// Returns the process exit code.
pub async fn run() -> i32 {
    let (message, code) = match read_step() {
        Err(e) => (e, 2),
        Ok((step, redactor)) => match guarded_client() {
            Err(e) => (e, 2),
            // The pod's activeDeadlineSeconds bounds the step's own timeout.
            Ok(http) => match actions::execute(step.action, &step.with, &http, None).await {
                Ok(output) => (redactor.value(output).to_string(), 0),
                Err(e) => (flowline_core::limits::cap_error(redactor.text(&e.0)), 1),
            },
        },
    };
    let written = match output_file() {
        Some(path) if code == 0 => std::fs::write(&path, &message)
            .map_err(|e| eprintln!("cannot write {}: {e}", path.display()))
            .is_ok(),
        _ => false,
    };
    // The termination log keeps the failure message, or the output where no output file
    // is (a pod of an older layout): at most 4 KiB.
    let termination = if written {
        String::new()
    } else {
        fit(message.clone())
    };
    if let Err(e) = std::fs::write(termination_log(), &termination) {
        eprintln!("cannot write the termination log: {e}");
    }
    if code != 0 {
        eprintln!("{message}");
    }
    code
}

/// `flowline step emit-output`: prints the step's output file as one line once the
/// step's processes have ended, and writes it to the termination log when it fits.
pub fn emit_output() -> i32 {
    let emitted = if wait_for_the_step() {
        read_output(std::path::Path::new(OUTPUT_FILE))
    } else {
        Emitted::Unobserved
    };
    println!("{}", emitted.line());
    if let Err(e) = std::fs::write(termination_log(), emitted.termination_message()) {
        eprintln!("cannot write the termination log: {e}");
    }
    0
}

fn read_output(path: &std::path::Path) -> Emitted {
    use std::io::Read;
    let Ok(file) = std::fs::File::open(path) else {
        return Emitted::Nothing;
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut content = Vec::new();
    match file
        .take(MAX_STEP_OUTPUT as u64 + 1)
        .read_to_end(&mut content)
    {
        Ok(_) => Emitted::from_file(Some(&content), size.max(content.len() as u64)),
        Err(_) => Emitted::NotJson,
    }
}

/// Waits until no process but this one and the pod's first (the sandbox's pause, which
/// reaps the others) is alive. False when the pod does not share its process namespace
/// (this process is the first): the step cannot be watched from here.
fn wait_for_the_step() -> bool {
    let me = std::process::id();
    if me == 1 {
        return false;
    }
    loop {
        let others = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid != 1 && pid != me)
            .any(alive);
        if !others {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A process that has not exited (a zombie waiting to be reaped has).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The state follows the command name, which is in parentheses and may hold
            // spaces or parentheses itself.
            let after = &stat[stat.rfind(')')? + 1..];
            after.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_output_file_is_read_bounded() {
        let dir = std::env::temp_dir().join(format!("flowline-emit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("output.json");
        assert_eq!(read_output(&file), Emitted::Nothing);
        std::fs::write(&file, r#"{"ok": true}"#).unwrap();
        assert_eq!(read_output(&file), Emitted::Output(json!({"ok": true})));
        std::fs::write(&file, vec![b'1'; MAX_STEP_OUTPUT + 10]).unwrap();
        assert_eq!(
            read_output(&file),
            Emitted::TooLarge {
                bytes: MAX_STEP_OUTPUT as u64 + 10
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_running_process_is_alive_and_a_missing_one_is_not() {
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX));
    }
}
