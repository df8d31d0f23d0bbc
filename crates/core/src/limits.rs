//! Limits every layer shares (bottom layer: depends on nothing in the crate).
//!
//! Untrusted input reaches Flowline through the API, through objects written with kubectl
//! or GitOps, through the servers a step calls and through webhook receivers. Two limits
//! keep any of it from hurting other tenants:
//! - JSON nesting: serde_json (and so kube-client) refuses documents nested deeper than 128,
//!   so one deeply nested object in a list would stop a watcher for everybody. Flowline
//!   accepts at most [`MAX_JSON_DEPTH`] levels anywhere a user chooses JSON.
//! - Error strings: a step's error can be as large as a server's answer or a user's
//!   message; every error that is stored or sent is capped to [`MAX_ERROR_BYTES`].

use serde_json::Value;

/// Deepest accepted nesting of arrays and objects in any user-chosen JSON value
/// (request bodies, run payloads, step inputs, step results). `{}` has depth 1.
pub const MAX_JSON_DEPTH: usize = 32;

/// Longest error string stored in a status, an Event, a delivery record or a message.
pub const MAX_ERROR_BYTES: usize = 4 * 1024;

/// Appended to a string cut by [`cap_error`].
pub const TRUNCATED_MARKER: &str = "…[truncated]";

/// A JSON value nested deeper than [`MAX_JSON_DEPTH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("nesting deeper than {limit}")]
pub struct TooDeep {
    pub limit: usize,
}

/// How deeply arrays and objects nest in `value` (a scalar is 0). Iterative, so any
/// value that exists in memory can be measured without exhausting the stack.
pub fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        let depth = depth + 1;
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|child| (child, depth))),
            Value::Object(map) => stack.extend(map.values().map(|child| (child, depth))),
            _ => continue,
        }
        deepest = deepest.max(depth);
    }
    deepest
}

/// `Err` when `value` nests deeper than [`MAX_JSON_DEPTH`].
pub fn check_depth(value: &Value) -> Result<(), TooDeep> {
    if json_depth(value) > MAX_JSON_DEPTH {
        Err(TooDeep {
            limit: MAX_JSON_DEPTH,
        })
    } else {
        Ok(())
    }
}

/// Checks the nesting of JSON text before it is parsed, so a document nested too deep
/// for serde_json gets the same clear refusal as one that is merely deeper than the limit.
/// Brackets inside strings do not count; the text need not be valid JSON.
pub fn check_text_depth(text: &[u8]) -> Result<(), TooDeep> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in text {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return Err(TooDeep {
                        limit: MAX_JSON_DEPTH,
                    });
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Caps an error string at [`MAX_ERROR_BYTES`] (marker included), cutting on a character
/// boundary and ending with [`TRUNCATED_MARKER`].
pub fn cap_error(message: impl Into<String>) -> String {
    cap_to(message, MAX_ERROR_BYTES)
}

/// Longest note Kubernetes accepts on an Event (events.k8s.io/v1 refuses longer ones).
pub const MAX_EVENT_NOTE_BYTES: usize = 1024;

/// Most bytes a Run's spec may take: its payload plus its copy of the workflow version
/// it executes. Beyond it the object could not be stored (the API server's store
/// refuses objects over 1.5 MiB) and its status would have no room.
pub const MAX_RUN_SPEC_BYTES: usize = 1024 * 1024;

/// Like [`cap_error`], for a smaller limit such as [`MAX_EVENT_NOTE_BYTES`].
pub fn cap_to(message: impl Into<String>, max_bytes: usize) -> String {
    let mut message = message.into();
    if message.len() <= max_bytes {
        return message;
    }
    let mut end = max_bytes.saturating_sub(TRUNCATED_MARKER.len());
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push_str(TRUNCATED_MARKER);
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn depth_counts_arrays_and_objects() {
        assert_eq!(json_depth(&json!(1)), 0);
        assert_eq!(json_depth(&json!({})), 1);
        // object, array, object, and the innermost (empty) array: `{}` and `[]` count.
        assert_eq!(json_depth(&json!({"a": [1, {"b": []}]})), 4);
        assert_eq!(json_depth(&json!([[1], [[[2]]]])), 4);
    }

    #[test]
    fn values_at_the_limit_pass_and_one_deeper_fails() {
        let at: Value = serde_json::from_str(&nested(MAX_JSON_DEPTH)).unwrap();
        let over: Value = serde_json::from_str(&nested(MAX_JSON_DEPTH + 1)).unwrap();
        assert_eq!(check_depth(&at), Ok(()));
        assert_eq!(check_depth(&over), Err(TooDeep { limit: 32 }));
        assert_eq!(
            check_depth(&over).unwrap_err().to_string(),
            "nesting deeper than 32"
        );
    }

    #[test]
    fn text_depth_matches_value_depth_and_ignores_brackets_in_strings() {
        assert_eq!(check_text_depth(nested(MAX_JSON_DEPTH).as_bytes()), Ok(()));
        assert!(check_text_depth(nested(MAX_JSON_DEPTH + 1).as_bytes()).is_err());
        // Far deeper than serde_json could parse: refused by the scan, no stack used.
        assert!(check_text_depth(nested(100_000).as_bytes()).is_err());
        let quoted = format!(r#"{{"a": "{}", "b": "\"[[["}}"#, "[".repeat(500));
        assert_eq!(check_text_depth(quoted.as_bytes()), Ok(()));
    }

    #[test]
    fn errors_are_capped_on_a_character_boundary_with_a_marker() {
        assert_eq!(cap_error("short"), "short");
        let exact = "x".repeat(MAX_ERROR_BYTES);
        assert_eq!(cap_error(exact.clone()), exact);
        let long = "é".repeat(MAX_ERROR_BYTES);
        let capped = cap_error(long);
        assert!(capped.len() <= MAX_ERROR_BYTES, "{}", capped.len());
        assert!(capped.ends_with(TRUNCATED_MARKER));
        assert!(
            capped
                .trim_end_matches(TRUNCATED_MARKER)
                .chars()
                .all(|c| c == 'é')
        );
        let note = cap_to("é".repeat(MAX_EVENT_NOTE_BYTES), MAX_EVENT_NOTE_BYTES);
        assert!(note.len() <= MAX_EVENT_NOTE_BYTES && note.ends_with(TRUNCATED_MARKER));
        assert_eq!(cap_to("x".repeat(50), 3), TRUNCATED_MARKER);
    }
}
