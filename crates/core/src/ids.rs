//! Random identifiers for objects and for the records that name no object.
//!
//! The API names the objects it creates with them, the engine and delivery
//! stamp events and attempts, the operator its leader identity; so they live at
//! the bottom, depending on nothing in the crate.

/// A random id: `prefix-` and 10 lowercase alphanumerics (a valid object name).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", random_tail())
}

/// A Run name derived from `parts` (joined by `/` and hashed), so that the same parts
/// always name the same Run and a second creation of it fails instead of doubling it.
/// The workflow's name (its first 40 characters) leads, for people reading `kubectl
/// get runs`.
pub fn derived_run_name(workflow: &str, parts: &[&[u8]]) -> String {
    use sha2::{Digest, Sha256};
    let mut digest = Sha256::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            digest.update(b"/");
        }
        digest.update(part);
    }
    let prefix: String = workflow.chars().take(40).collect();
    format!(
        "{}-{}",
        prefix.trim_end_matches(['-', '.']),
        hex::encode(&digest.finalize()[..8])
    )
}

/// A random id that names no object (events, delivery attempts, requests):
/// `prefix_` and 10 lowercase alphanumerics, e.g. `evt_3k9x2m7q1d`.
pub fn new_token_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_tail())
}

fn random_tail() -> String {
    let mut tail = [0; TAIL_LEN];
    fill_tail(&mut tail);
    tail.into_iter().map(char::from).collect()
}

/// Length of the random part of an id.
pub const TAIL_LEN: usize = 10;

/// Fills `tail` with the random part of an id, lowercase alphanumerics (for callers
/// that build an id without a string of its own, like the access log's request ids).
pub fn fill_tail(tail: &mut [u8; TAIL_LEN]) {
    use rand::Rng;
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    for b in tail {
        *b = ALPHABET[rng.random_range(0..ALPHABET.len())];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of runs already created stay the names their parts give: a
    /// scheduled tick or an event fanned out again after an upgrade finds its run.
    #[test]
    fn derived_names_are_stable_known_answers() {
        let tick = jiff::Timestamp::from_second(1_767_225_600).unwrap();
        assert_eq!(
            crate::crd::scheduled_run_name("nightly", "uid-1", tick),
            "nightly-eda5aabe11b18468"
        );
        assert_eq!(
            crate::fanout::run_name("on-order", "wf-uid", "event-uid"),
            "on-order-cc2777aaa5b3fe89"
        );
    }

    #[test]
    fn ids_are_prefix_separator_and_ten_lowercase_alphanumerics() {
        for (id, prefix) in [(new_id("wf"), "wf-"), (new_token_id("evt"), "evt_")] {
            let tail = id.strip_prefix(prefix).unwrap();
            assert_eq!(tail.len(), 10, "{id}");
            assert!(
                tail.bytes()
                    .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()),
                "{id}"
            );
        }
    }
}
