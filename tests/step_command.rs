//! `flowline step` as a real process, with exactly the environment a step Job's pod
//! gives it: FLOWLINE_STEP with the rendered inputs, and a termination log to write.

use std::process::Command;

fn run_step(step: &str) -> (i32, String) {
    let dir = std::env::temp_dir().join(format!(
        "flowline-step-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("termination-log");
    let status = Command::new(env!("CARGO_BIN_EXE_flowline"))
        .arg("step")
        .env_clear()
        .env("FLOWLINE_STEP", step)
        .env("FLOWLINE_TERMINATION_LOG", &log)
        .status()
        .unwrap();
    let message = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (status.code().unwrap_or(-1), message)
}

#[test]
fn a_successful_step_writes_its_output_as_json() {
    let (code, message) =
        run_step(r#"{"action": "transform", "with": {"value": {"order": 7, "ok": true}}}"#);
    assert_eq!(code, 0);
    let output: serde_json::Value = serde_json::from_str(&message).unwrap();
    assert_eq!(output, serde_json::json!({"order": 7, "ok": true}));
}

#[test]
fn a_failing_step_exits_non_zero_with_its_message() {
    let (code, message) = run_step(r#"{"action": "fail", "with": {"message": "card declined"}}"#);
    assert_eq!((code, message.as_str()), (1, "card declined"));
}

#[test]
fn a_huge_failure_message_is_capped_to_what_kubernetes_keeps() {
    // 4096 characters of "é" are 8 KiB: the cap counts bytes.
    let step = serde_json::json!({"action": "fail", "with": {"message": "é".repeat(10_000)}});
    let (code, message) = run_step(&step.to_string());
    assert_eq!(code, 1);
    assert!(
        message.len() <= flowline::limits::MAX_ERROR_BYTES,
        "{}",
        message.len()
    );
    assert!(message.starts_with("éé"));
    assert!(message.ends_with(flowline::limits::TRUNCATED_MARKER));
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
