//! `callback` steps' tokens: the last part of `/v1/callbacks/{token}`, the only
//! credential of the call. Pure, but for the random part of a new token.
//!
//! A token is `<namespace>~<run>~<secret>`: the run it belongs to, so the API finds it
//! in its cache with one look-up and never asks the API server about a made-up token,
//! and 26 random base32 characters (130 bits), which nobody can guess. The API keeps
//! only [`digest`]s of tokens in its cache and compares digests in constant time.

use sha2::{Digest, Sha256};

/// Characters of a token's secret part.
const SECRET_LEN: usize = 26;
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567";

/// A new token for a callback step of run `run` in `namespace`.
pub fn new_token(namespace: &str, run: &str) -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    let secret: String = (0..SECRET_LEN)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect();
    format!("{namespace}~{run}~{secret}")
}

/// The namespace and run a token names, if it is shaped like one (its secret is not
/// checked here: see [`matches`]).
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let mut parts = token.split('~');
    let (namespace, run, secret) = (parts.next()?, parts.next()?, parts.next()?);
    let shaped = parts.next().is_none()
        && !namespace.is_empty()
        && !run.is_empty()
        && secret.len() == SECRET_LEN
        && secret.bytes().all(|b| ALPHABET.contains(&b));
    shaped.then_some((namespace, run))
}

/// What the API keeps of a token: its SHA-256, hex.
pub fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Whether `token` is the one whose digest is `kept`, in time that does not depend on
/// where they differ.
pub fn matches(token: &str, kept: &str) -> bool {
    let given = digest(token);
    given.len() == kept.len()
        && given
            .bytes()
            .zip(kept.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// The URL of `token` under the public base URL `base` (no trailing slash needed).
pub fn url(base: &str, token: &str) -> String {
    format!("{}/v1/callbacks/{token}", base.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_their_run_and_carry_130_random_bits() {
        let a = new_token("team-a", "run-1");
        let b = new_token("team-a", "run-1");
        assert_ne!(a, b);
        assert_eq!(parse(&a), Some(("team-a", "run-1")));
        let secret = a.rsplit('~').next().unwrap();
        assert_eq!(secret.len(), 26, "26 base32 characters: 130 bits");
    }

    #[test]
    fn only_well_shaped_tokens_parse() {
        let good = format!("ns~run-1~{}", "a".repeat(26));
        assert!(parse(&good).is_some());
        for bad in [
            "".to_string(),
            "ns~run-1".to_string(),
            format!("ns~run-1~{}", "a".repeat(25)),
            format!("ns~run-1~{}", "A".repeat(26)),
            format!("ns~run-1~{}~x", "a".repeat(26)),
            format!("~run-1~{}", "a".repeat(26)),
            format!("ns~~{}", "a".repeat(26)),
        ] {
            assert_eq!(parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn a_token_matches_only_its_digest() {
        let token = new_token("ns", "run-1");
        let kept = digest(&token);
        assert!(matches(&token, &kept));
        assert!(!matches(&new_token("ns", "run-1"), &kept));
        assert!(!matches(&token, "short"));
        assert_eq!(
            url("https://flowline.example.com/", "t"),
            "https://flowline.example.com/v1/callbacks/t"
        );
    }
}
