//! Random identifiers for objects and for the records that name no object.
//!
//! The API names the objects it creates with them, the engine and delivery
//! stamp events and attempts, the operator its leader identity; so they live at
//! the bottom, depending on nothing in the crate.

/// A random id: `prefix-` and 10 lowercase alphanumerics (a valid object name).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", random_tail())
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
