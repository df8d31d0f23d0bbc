//! `flowline step` as a real process, with exactly the environment a step Job's pod gives
//! it (`vars`, e.g. FLOWLINE_STEP and the FLOWLINE_SECRET_<n> the kubelet fills from
//! `secretKeyRef`s) and a termination log to write. Shared by tests/step_command.rs and the
//! cluster tests.
#![allow(dead_code)]

use std::process::Command;

/// Runs the step; returns its exit code and what it wrote to the termination log.
pub fn run_step<K: AsRef<str>, V: AsRef<str>>(vars: &[(K, V)]) -> (i32, String) {
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
        .envs(vars.iter().map(|(k, v)| (k.as_ref(), v.as_ref())))
        .env("FLOWLINE_TERMINATION_LOG", &log)
        .status()
        .unwrap();
    let message = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (status.code().unwrap_or(-1), message)
}
