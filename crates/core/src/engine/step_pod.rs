//! The pod of a step attempt: its container names, the output channel from the step to
//! the engine, and the message a failed step's record gets.
//!
//! A step container writes its output (JSON, up to [`MAX_STEP_OUTPUT`]) to
//! [`OUTPUT_FILE`] on an emptyDir it shares with the `output` container. That container
//! (`flowline step emit-output`, started beside the step in a pod that shares its process
//! namespace) waits until the step's processes are gone, then prints the file as one
//! [`Emitted`] line; the engine reads that line from its log. A step that writes nothing
//! there keeps the older channel: the JSON in `/dev/termination-log` (at most 4 KiB, the
//! kubelet's cap).
//!
//! What a hostile step can do with this: write any output of its own (it can anyway), or
//! spoil the `output` container's line (it shares the pod's process namespace and user)
//! and so fail or fake its own step. It cannot reach the engine beyond one bounded log
//! read: the engine reads at most [`OUTPUT_LOG_LIMIT`] bytes and parses one JSON value.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest;

use crate::engine::output::MAX_STEP_OUTPUT;

/// The container that runs the step (the user's image, or `flowline step`).
pub const STEP_CONTAINER: &str = "step";
/// The container that hands the step's output file to the engine.
pub const OUTPUT_CONTAINER: &str = "output";
/// Where both containers mount the output volume.
pub const OUTPUT_DIR: &str = "/flowline";
/// The file a step writes its output to, also given to it as `$FLOWLINE_OUTPUT`.
pub const OUTPUT_FILE: &str = "/flowline/output.json";
/// The environment variable naming [`OUTPUT_FILE`] in the step container.
pub const OUTPUT_ENV: &str = "FLOWLINE_OUTPUT";
/// The most of the `output` container's log the engine reads: the largest output plus
/// its envelope and escaping.
pub const OUTPUT_LOG_LIMIT: usize = 2 * MAX_STEP_OUTPUT + 1024;
/// The kubelet keeps at most this much of a termination message.
pub const MAX_TERMINATION_MESSAGE: usize = 4096;
/// The most of a failed step's log its error carries.
pub const ERROR_LOG_TAIL: usize = 2 * 1024;

/// What the `output` container prints: one JSON line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Emitted {
    /// The step's output.
    Output(Value),
    /// The step wrote no output file.
    Nothing,
    /// The file is larger than a step output may be.
    TooLarge { bytes: u64 },
    /// The file is not JSON.
    NotJson,
    /// The step's processes could not be watched (the pod does not share its process
    /// namespace), so the file may not be complete: the engine uses the termination log.
    Unobserved,
    /// Written to the `output` container's termination message when the line is longer
    /// than a termination message may be: the line is in its log.
    InLog,
}

impl Emitted {
    /// What a step's output file says. `content` is at most `MAX_STEP_OUTPUT + 1` bytes
    /// of it, `size` its full size.
    pub fn from_file(content: Option<&[u8]>, size: u64) -> Self {
        match content {
            None => Emitted::Nothing,
            Some(_) if size > MAX_STEP_OUTPUT as u64 => Emitted::TooLarge { bytes: size },
            Some(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Emitted::Nothing,
            Some(bytes) => serde_json::from_slice(bytes)
                .map(Emitted::Output)
                .unwrap_or(Emitted::NotJson),
        }
    }

    /// The line the `output` container prints.
    pub fn line(&self) -> String {
        // A tree of JSON values and strings always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the `output` container's log: its last non-empty line, or `None` when
    /// there is none to read (a fake pod has no log) or it is not ours.
    pub fn from_log(log: &str) -> Option<Self> {
        let line = log.lines().rev().find(|l| !l.trim().is_empty())?;
        serde_json::from_str(line).ok()
    }

    /// What the `output` container writes to its termination message: the line itself
    /// when it fits (the engine then needs no log read), else [`Emitted::InLog`].
    pub fn termination_message(&self) -> String {
        let line = self.line();
        if line.len() <= MAX_TERMINATION_MESSAGE {
            line
        } else {
            Emitted::InLog.line()
        }
    }

    /// The step's result, or `None` to fall back to the step's termination message.
    /// [`Emitted::InLog`] is resolved by reading the log before this is asked.
    pub fn result(self) -> Option<Result<Value, String>> {
        match self {
            Emitted::Output(value) => Some(Ok(value)),
            Emitted::Nothing | Emitted::Unobserved | Emitted::InLog => None,
            Emitted::TooLarge { bytes } => Some(Err(format!(
                "the step wrote {bytes} bytes to {OUTPUT_FILE}; an output may be at most {MAX_STEP_OUTPUT}"
            ))),
            Emitted::NotJson => Some(Err(format!(
                "the step wrote output that is not JSON to {OUTPUT_FILE}"
            ))),
        }
    }
}

/// Name of the Job of one attempt: readable, unique per run/step/attempt, ≤ 63 chars.
/// `step` may be `<id>.<index>` (an iteration); the dot becomes `-` in the readable part.
pub fn job_name(run: &str, step: &str, attempt: u32) -> String {
    let digest =
        hex::encode(&sha2::Sha256::digest(format!("{run}/{step}/{attempt}").as_bytes())[..4]);
    let readable: String = format!("{run}-{}", step.replace('.', "-"))
        .chars()
        .take(45)
        .collect();
    format!("{}-{attempt}-{digest}", readable.trim_end_matches('-'))
}

/// The key of one attempt's Job (its `flowline.io/step` label): the step id, or
/// `<step id>.<index>` for an iteration of a `forEach` step, the id cut to 58
/// characters so the key stays a label value (at most 63).
pub fn attempt_key(step: &str, iteration: Option<usize>) -> String {
    match iteration {
        Some(index) => format!("{}.{index}", step.chars().take(58).collect::<String>()),
        None => step.to_owned(),
    }
}

/// The state of one of a pod's containers, by name.
pub fn container_state<'a>(
    pod: &'a k8s_openapi::api::core::v1::Pod,
    container: &str,
) -> Option<&'a k8s_openapi::api::core::v1::ContainerState> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?
        .state
        .as_ref()
}

/// How a step's container ended, as the pod and Job report it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ending {
    pub exit_code: i32,
    /// The container's `reason` (e.g. `OOMKilled`, `Error`).
    pub reason: Option<String>,
    /// Its termination message.
    pub message: Option<String>,
    /// The Job hit its `activeDeadlineSeconds`.
    pub deadline_exceeded: bool,
}

/// The error of a failed step: why in words, what the step said, and the end of its log.
pub fn failure_message(ending: &Ending, log: &str) -> String {
    let mut text = if ending.deadline_exceeded {
        "the step did not finish within its timeout and was stopped".to_owned()
    } else if ending.reason.as_deref() == Some("OOMKilled") {
        "the container ran out of memory (OOMKilled)".to_owned()
    } else {
        format!("the container exited with code {}", ending.exit_code)
    };
    if let Some(message) = ending.message.as_deref().map(str::trim)
        && !message.is_empty()
    {
        text = format!("{text}: {message}");
    }
    let tail = log_tail(log, ERROR_LOG_TAIL);
    if !tail.trim().is_empty() {
        text = format!("{text}\n--- last lines of the log ---\n{tail}");
    }
    text
}

/// The last `max` bytes of `log`, cut at a character and, when it can be, at a line.
pub fn log_tail(log: &str, max: usize) -> &str {
    if log.len() <= max {
        return log;
    }
    let mut start = log.len() - max;
    while !log.is_char_boundary(start) {
        start += 1;
    }
    let tail = &log[start..];
    match tail.find('\n') {
        Some(i) if i + 1 < tail.len() => &tail[i + 1..],
        _ => tail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn job_names_are_short_unique_and_stable() {
        let a = job_name(&"r".repeat(80), "s", 1);
        assert!(a.len() <= 63, "{a}");
        assert_ne!(job_name("r", "s", 1), job_name("r", "s", 2));
        assert_eq!(job_name("r", "s", 1), job_name("r", "s", 1));
    }

    #[test]
    fn an_iteration_has_a_key_of_its_own() {
        assert_eq!(attempt_key("s", None), "s");
        assert_eq!(attempt_key("s", Some(3)), "s.3");
        assert_eq!(attempt_key(&"x".repeat(63), Some(999)).len(), 62);
        assert_ne!(
            job_name("r", "s", 1),
            job_name("r", &attempt_key("s", Some(0)), 1)
        );
    }

    #[test]
    fn a_file_becomes_what_the_engine_reads() {
        let big = vec![b' '; MAX_STEP_OUTPUT + 1];
        let cases: [(&str, Option<&[u8]>, u64, Emitted); 6] = [
            ("no file", None, 0, Emitted::Nothing),
            ("blank file", Some(b"  \n"), 3, Emitted::Nothing),
            (
                "json",
                Some(br#"{"a":1}"#),
                7,
                Emitted::Output(json!({"a": 1})),
            ),
            ("not json", Some(b"hello"), 5, Emitted::NotJson),
            (
                "too large",
                Some(&big),
                10_000_000,
                Emitted::TooLarge { bytes: 10_000_000 },
            ),
            ("a scalar", Some(b"42"), 2, Emitted::Output(json!(42))),
        ];
        for (name, content, size, want) in cases {
            let got = Emitted::from_file(content, size);
            assert_eq!(got, want, "{name}");
            assert_eq!(
                Emitted::from_log(&got.line()),
                Some(want),
                "{name} round trip"
            );
        }
    }

    #[test]
    fn a_short_line_goes_in_the_termination_message_and_a_long_one_says_it_is_in_the_log() {
        let short = Emitted::Output(json!({"a": 1}));
        assert_eq!(short.termination_message(), short.line());
        let long = Emitted::Output(json!("x".repeat(MAX_TERMINATION_MESSAGE)));
        assert_eq!(
            Emitted::from_log(&long.termination_message()),
            Some(Emitted::InLog)
        );
    }

    #[test]
    fn the_log_is_read_by_its_last_line_and_anything_else_falls_back() {
        let line = Emitted::Output(json!({"x": [1, 2]})).line();
        assert_eq!(
            Emitted::from_log(&format!("noise\n{line}\n\n")),
            Some(Emitted::Output(json!({"x": [1, 2]})))
        );
        assert_eq!(Emitted::from_log(""), None);
        assert_eq!(Emitted::from_log("not ours"), None);
        assert_eq!(Emitted::Unobserved.result(), None);
        assert_eq!(Emitted::Nothing.result(), None);
        assert!(matches!(Emitted::NotJson.result(), Some(Err(e)) if e.contains("not JSON")));
        assert!(
            matches!(Emitted::TooLarge { bytes: 70_000 }.result(), Some(Err(e)) if e.contains("70000 bytes"))
        );
    }

    #[test]
    fn a_failure_says_why_in_words_and_ends_with_the_log() {
        let cases = [
            (
                "exit code",
                Ending {
                    exit_code: 3,
                    ..Default::default()
                },
                "",
                "the container exited with code 3",
            ),
            (
                "oom",
                Ending {
                    exit_code: 137,
                    reason: Some("OOMKilled".into()),
                    ..Default::default()
                },
                "",
                "the container ran out of memory (OOMKilled)",
            ),
            (
                "deadline",
                Ending {
                    exit_code: 137,
                    deadline_exceeded: true,
                    ..Default::default()
                },
                "",
                "the step did not finish within its timeout and was stopped",
            ),
            (
                "message and log",
                Ending {
                    exit_code: 1,
                    message: Some("bad input\n".into()),
                    ..Default::default()
                },
                "starting\nfailed: x\n",
                "the container exited with code 1: bad input\n--- last lines of the log ---\nstarting\nfailed: x\n",
            ),
        ];
        for (name, ending, log, want) in cases {
            assert_eq!(failure_message(&ending, log), want, "{name}");
        }
    }

    #[test]
    fn the_tail_is_bounded_and_cut_at_a_line_and_a_character() {
        let log = format!("{}\nlast line é\n", "x".repeat(5000));
        let tail = log_tail(&log, ERROR_LOG_TAIL);
        assert_eq!(tail, "last line é\n");
        let one_line = "é".repeat(3000);
        let tail = log_tail(&one_line, 11);
        assert!(tail.len() <= 11 && tail.chars().all(|c| c == 'é'));
        assert_eq!(log_tail("short", 10), "short");
    }
}
