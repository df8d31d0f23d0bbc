//! `flowline step` as a real process, with exactly the environment a step Job's pod
//! gives it: FLOWLINE_STEP with the rendered inputs, FLOWLINE_SECRET_<n> for the secret
//! values they use, and a termination log to write.

#[path = "support/step_process.rs"]
mod step_process;

use serde_json::json;

fn run_step(step: &str) -> (i32, String) {
    step_process::run_step(&[("FLOWLINE_STEP", step)])
}

#[test]
fn a_successful_step_writes_its_output_as_json() {
    let (code, message) =
        run_step(r#"{"action": "transform", "with": {"value": {"order": 7, "ok": true}}}"#);
    assert_eq!(code, 0);
    let output: serde_json::Value = serde_json::from_str(&message).unwrap();
    assert_eq!(output, json!({"order": 7, "ok": true}));
}

#[test]
fn a_failing_step_exits_non_zero_with_its_message() {
    let (code, message) = run_step(r#"{"action": "fail", "with": {"message": "card declined"}}"#);
    assert_eq!((code, message.as_str()), (1, "card declined"));
}

#[test]
fn a_bad_environment_is_reported_not_panicked_on() {
    let (code, message) = run_step("not json");
    assert_eq!(code, 2);
    assert!(
        message.contains("FLOWLINE_STEP is not a valid step"),
        "{message}"
    );
}

const PLACEHOLDER: &str = "flowline-secret-0123456789abcdef0123456789abcdef";

fn step_with_secret(action: &str, with: serde_json::Value) -> String {
    json!({"action": action, "with": with, "secrets": {PLACEHOLDER: "FLOWLINE_SECRET_0"}})
        .to_string()
}

#[test]
fn secret_placeholders_are_filled_from_the_environment_and_redacted_in_the_log() {
    // The value was used (a transform can only show it if it was substituted), and what
    // reaches the termination log is redacted.
    let step = step_with_secret(
        "transform",
        json!({"value": {"auth": format!("Bearer {PLACEHOLDER}"), "n": 1}}),
    );
    let (code, message) = step_process::run_step(&[
        ("FLOWLINE_STEP", step.as_str()),
        ("FLOWLINE_SECRET_0", "s3cr3t-value"),
    ]);
    assert_eq!(code, 0, "{message}");
    let output: serde_json::Value = serde_json::from_str(&message).unwrap();
    assert_eq!(output, json!({"auth": "Bearer [redacted]", "n": 1}));

    let step = step_with_secret("fail", json!({"message": format!("bad key {PLACEHOLDER}")}));
    let (code, message) = step_process::run_step(&[
        ("FLOWLINE_STEP", step.as_str()),
        ("FLOWLINE_SECRET_0", "s3cr3t-value"),
    ]);
    assert_eq!((code, message.as_str()), (1, "bad key [redacted]"));
}

#[test]
fn a_missing_secret_variable_fails_before_running() {
    let step = step_with_secret("transform", json!({"value": PLACEHOLDER}));
    let (code, message) = run_step(&step);
    assert_eq!(
        (code, message.as_str()),
        (2, "FLOWLINE_SECRET_0 is not set")
    );
}
