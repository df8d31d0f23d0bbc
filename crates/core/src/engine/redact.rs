//! Replaces secret values with `[redacted]` in what a run records or sends: step outputs,
//! step and run errors (and so Kubernetes Events and webhook payloads, which are built from
//! them), and the termination message of a step Job. Pure.
//!
//! What counts as an occurrence:
//! - A value of [`MIN_SUBSTRING_LEN`] characters or more is replaced wherever it occurs, as
//!   is its JSON-escaped form (how it appears inside serialized JSON, e.g. in an error quoting
//!   a response body) and its form-urlencoded form (how it appears in a query string).
//! - A shorter value (1–3 characters) is replaced only where a whole string (or a whole
//!   number) equals it: replacing every `a` or `42` in an output would destroy it, and a value
//!   that short is guessable anyway.
//! - Empty values are never redacted.
//!
//! Other encodings (base64, hashes, a value split across strings) are not recognised: the
//! redactor keeps accidental echoes out of status, it cannot stop a workflow author who sets
//! out to encode a value they were allowed to read.

use std::collections::BTreeSet;

use aho_corasick::{AhoCorasick, MatchKind};
use serde_json::{Map, Value};

/// What a secret value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Values shorter than this (in characters) are redacted only as whole strings.
pub const MIN_SUBSTRING_LEN: usize = 4;

/// The secret values of one run, and a matcher over them.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Forms replaced wherever they occur.
    needles: BTreeSet<String>,
    /// Short values, replaced only as a whole string.
    whole: BTreeSet<String>,
    /// Built from `needles`; `None` when there are none, or when the automaton could not be
    /// built (then any string containing a needle is replaced as a whole: fail closed).
    matcher: Option<AhoCorasick>,
}

impl Redactor {
    pub fn new<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> Self {
        let mut redactor = Redactor::default();
        redactor.extend(values);
        redactor
    }

    /// Adds values (a later step read more Secrets).
    pub fn extend<S: AsRef<str>>(&mut self, values: impl IntoIterator<Item = S>) {
        let before = self.needles.len();
        for value in values {
            let value = value.as_ref();
            if value.is_empty() {
                continue;
            }
            if value.chars().count() < MIN_SUBSTRING_LEN {
                self.whole.insert(value.to_owned());
                continue;
            }
            self.needles.insert(value.to_owned());
            self.needles.extend(encoded_forms(value));
        }
        if self.needles.len() != before {
            self.matcher = AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&self.needles)
                .ok();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.needles.is_empty() && self.whole.is_empty()
    }

    /// `text` with every secret value replaced.
    pub fn text(&self, text: &str) -> String {
        if self.whole.contains(text) {
            return REDACTED.to_owned();
        }
        if self.needles.is_empty() {
            return text.to_owned();
        }
        match &self.matcher {
            Some(matcher) => {
                let mut out = String::with_capacity(text.len());
                matcher.replace_all_with(text, &mut out, |_, _, dst| {
                    dst.push_str(REDACTED);
                    true
                });
                out
            }
            None if self.needles.iter().any(|n| text.contains(n.as_str())) => REDACTED.to_owned(),
            None => text.to_owned(),
        }
    }

    /// `value` with every secret value replaced in its strings, object keys and numbers (a
    /// number that contains a secret becomes the string `[redacted]`).
    ///
    /// Recursive: every value the engine holds was built by a parser or renderer that bounds
    /// nesting (and dropping a `Value` recurses just as deep).
    pub fn value(&self, value: Value) -> Value {
        if self.is_empty() {
            return value;
        }
        match value {
            Value::String(s) => Value::String(self.text(&s)),
            Value::Number(n) => {
                let text = n.to_string();
                if self.text(&text) == text {
                    Value::Number(n)
                } else {
                    Value::String(REDACTED.to_owned())
                }
            }
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.value(v)).collect()),
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (self.text(&k), self.value(v)))
                    .collect::<Map<String, Value>>(),
            ),
            other => other,
        }
    }
}

/// How `value` looks inside serialized JSON and inside a query string, when that differs.
fn encoded_forms(value: &str) -> impl Iterator<Item = String> {
    let json = serde_json::to_string(value).unwrap_or_default();
    let json = json
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or_default()
        .to_owned();
    let form: String = url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
    [json, form]
        .into_iter()
        .filter(move |form| form != value && !form.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_replaced_wherever_they_occur() {
        let r = Redactor::new(["s3cr3t-token", "hunter22"]);
        assert_eq!(
            r.text("Bearer s3cr3t-token was refused (hunter22)"),
            "Bearer [redacted] was refused ([redacted])"
        );
        assert_eq!(r.text("nothing here"), "nothing here");
    }

    #[test]
    fn the_longest_value_wins_where_values_overlap() {
        let r = Redactor::new(["abcd", "abcdefgh"]);
        assert_eq!(r.text("xabcdefghx abcd"), "x[redacted]x [redacted]");
    }

    #[test]
    fn short_values_are_redacted_only_as_whole_strings() {
        let r = Redactor::new(["42", "abc", ""]);
        assert_eq!(r.text("abc"), REDACTED);
        assert_eq!(r.text("abcdef 42"), "abcdef 42");
        assert_eq!(
            r.value(json!({"pin": 42, "code": "abc", "n": 420, "text": "abc!"})),
            json!({"pin": REDACTED, "code": REDACTED, "n": 420, "text": "abc!"})
        );
        // An empty value redacts nothing.
        assert_eq!(r.text(""), "");
    }

    #[test]
    fn escaped_and_urlencoded_forms_are_redacted() {
        let r = Redactor::new(["p\"a ss&1"]);
        let quoted = serde_json::to_string(&json!({"echo": "p\"a ss&1"})).unwrap();
        assert_eq!(r.text(&quoted), r#"{"echo":"[redacted]"}"#);
        assert_eq!(
            r.text("https://x/?k=p%22a+ss%261"),
            "https://x/?k=[redacted]"
        );
    }

    #[test]
    fn values_are_redacted_in_nested_strings_keys_and_numbers() {
        let r = Redactor::new(["tok-123456", "987654"]);
        let out = r.value(json!({
            "headers": {"x-echo": "tok-123456"},
            "tok-123456": [1, ["deep tok-123456"], {"id": 987654, "n": 5}],
            "ok": true, "none": null
        }));
        assert_eq!(
            out,
            json!({
                "headers": {"x-echo": REDACTED},
                REDACTED: [1, ["deep [redacted]"], {"id": REDACTED, "n": 5}],
                "ok": true, "none": null
            })
        );
        assert_eq!(r.value(json!("tok-123456")), json!(REDACTED));
        assert_eq!(r.value(json!([])), json!([]));
    }

    #[test]
    fn a_redactor_grows_and_an_empty_one_changes_nothing() {
        let mut r = Redactor::default();
        assert!(r.is_empty());
        assert_eq!(r.text("first-secret"), "first-secret");
        r.extend(["first-secret"]);
        r.extend(["second-secret"]);
        assert_eq!(
            r.text("first-secret second-secret"),
            "[redacted] [redacted]"
        );
    }
}
