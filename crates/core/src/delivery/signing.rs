//! Webhook signatures: the seed `X-Service-Signature` header and the Standard Webhooks
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature`) headers.
//!
//! Key material differs between the two on purpose:
//!
//! - `X-Service-Signature` is keyed with the secret string's UTF-8 bytes exactly as shown to
//!   the user, `whsec_` prefix included, so a receiver can verify it with any HMAC helper
//!   without knowing about base64.
//! - `webhook-signature` follows the Standard Webhooks spec: the key is the base64-decoded
//!   part after `whsec_`, so the official verification libraries work unchanged.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use rand::RngCore as _;
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

type HmacSha256 = Hmac<Sha256>;

/// Header names are lowercase because `http::HeaderName::from_static` rejects uppercase;
/// HTTP/1.1 header names are case-insensitive, so receivers see the same header.
pub const SEED_SIGNATURE_HEADER: &str = "x-service-signature";
pub const WEBHOOK_ID_HEADER: &str = "webhook-id";
pub const WEBHOOK_TIMESTAMP_HEADER: &str = "webhook-timestamp";
pub const WEBHOOK_SIGNATURE_HEADER: &str = "webhook-signature";

pub const SECRET_PREFIX: &str = "whsec_";
const SECRET_BYTES: usize = 32;
const SEED_PREFIX: &str = "sha256=";

/// Errors never include the secret itself, because they end up in logs and events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningError {
    #[error("signing secret #{index} is invalid: {reason}")]
    InvalidSecret { index: usize, reason: &'static str },
    #[error("no signing secret configured")]
    NoSecrets,
}

/// A new signing secret: `whsec_` + standard padded base64 of 32 bytes from the thread-local
/// CSPRNG (ChaCha, reseeded from the OS).
pub fn generate_secret() -> String {
    let mut key = [0u8; SECRET_BYTES];
    rand::rng().fill_bytes(&mut key);
    format!("{SECRET_PREFIX}{}", BASE64.encode(key))
}

/// `sha256=<lowercase hex>` of HMAC-SHA256 over `body`, keyed with the UTF-8 bytes of the
/// full secret string (including `whsec_`). During rotation pass only the new secret.
pub fn seed_signature(secret: &str, body: &[u8]) -> String {
    format!("{SEED_PREFIX}{}", hex::encode(seed_tag(secret, body)))
}

/// The `webhook-signature` value: one `v1,<base64 tag>` per secret, space-separated, in the
/// order given. Pass `[new, old]` during rotation so receivers that only check the first
/// entry still succeed once they have the new secret.
///
/// Each secret is `whsec_<base64>` (the prefix is optional, as in the reference libraries);
/// the HMAC key is the decoded bytes and the signed content is `{msg_id}.{timestamp}.{body}`.
pub fn standard_signature(
    secrets: &[&str],
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<String, SigningError> {
    if secrets.is_empty() {
        return Err(SigningError::NoSecrets);
    }
    let entries = secrets
        .iter()
        .enumerate()
        .map(|(index, secret)| {
            let tag = standard_tag(secret, msg_id, timestamp, body)
                .map_err(|reason| SigningError::InvalidSecret { index, reason })?;
            Ok(format!("v1,{}", BASE64.encode(tag)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(entries.join(" "))
}

/// The raw Standard Webhooks tag: HMAC-SHA256 keyed with the decoded secret over
/// `{msg_id}.{timestamp}.{body}`. Signing and inbound verification share it, so both
/// sides agree on the signed content by construction.
pub fn standard_tag(
    secret: &str,
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<[u8; 32], &'static str> {
    let key = decode_secret(secret)?;
    let mut mac = new_mac(&key);
    mac.update(format!("{msg_id}.{timestamp}.").as_bytes());
    mac.update(body);
    Ok(mac.finalize().into_bytes().into())
}

/// Checks an `X-Service-Signature` value. The tag comparison is constant-time so response
/// timing cannot be used to forge a signature byte by byte. Hex digits may be any case.
pub fn verify_seed_signature(secret: &str, body: &[u8], header: &str) -> bool {
    let Some(hex_tag) = header.strip_prefix(SEED_PREFIX) else {
        return false;
    };
    let Ok(claimed) = hex::decode(hex_tag) else {
        return false;
    };
    let expected = seed_tag(secret, body);
    // Length is public (always 32), so the early return leaks nothing.
    claimed.len() == expected.len() && bool::from(claimed.as_slice().ct_eq(expected.as_slice()))
}

fn seed_tag(secret: &str, body: &[u8]) -> [u8; 32] {
    let mut mac = new_mac(secret.as_bytes());
    mac.update(body);
    mac.finalize().into_bytes().into()
}

fn new_mac(key: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length (long keys are hashed), so this cannot fail;
    // the fallback only exists to keep the no-panic guarantee without `expect`.
    HmacSha256::new_from_slice(key).unwrap_or_else(|_| HmacSha256::new(&Default::default()))
}

fn decode_secret(secret: &str) -> Result<Vec<u8>, &'static str> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
    // The base64 error is dropped: it quotes the offending byte of the secret.
    let key = BASE64
        .decode(encoded)
        .map_err(|_| "not valid padded standard base64 after the whsec_ prefix")?;
    if key.is_empty() {
        return Err("empty key");
    }
    Ok(key)
}

/// The published example of the Standard Webhooks specification (also the reference
/// libraries' test vector), shared by the signing and the inbound verification tests.
/// The Standard Webhooks specification's example, for tests here and above (`fixtures`).
#[cfg(any(test, feature = "fixtures"))]
pub mod spec_example {
    pub const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    pub const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    pub const SPEC_TS: i64 = 1614265330;
    pub const SPEC_BODY: &[u8] = br#"{"test": 2432232314}"#;
    pub const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    /// base64 of bytes 0x00..=0x1f; the shape `generate_secret` produces.
    pub const NEW_SECRET: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::spec_example::*;
    const BODY: &[u8] = br#"{"type":"run.succeeded"}"#;

    // Expected values below were computed independently with Python's hmac module.
    #[test]
    fn standard_signature_matches_spec_example() {
        let sig = standard_signature(&[SPEC_SECRET], SPEC_ID, SPEC_TS, SPEC_BODY).unwrap();
        assert_eq!(sig, SPEC_SIGNATURE);
    }

    #[test]
    fn standard_signature_known_answer_padded_secret() {
        let sig = standard_signature(&[NEW_SECRET], "evt_01", 1700000000, BODY).unwrap();
        assert_eq!(sig, "v1,PEw1vRxUoxCqhjzYeLk+lq7/UKHflYw4DGpnNf4n5qM=");
    }

    #[test]
    fn rotation_lists_new_then_old() {
        let sig =
            standard_signature(&[NEW_SECRET, SPEC_SECRET], "evt_01", 1700000000, BODY).unwrap();
        assert_eq!(
            sig,
            "v1,PEw1vRxUoxCqhjzYeLk+lq7/UKHflYw4DGpnNf4n5qM= \
             v1,CzTSgijYcZJJiclf/sRXVlNb+07XajwUuRhOOwXJpuE="
        );
    }

    #[test]
    fn secret_prefix_is_optional_for_standard_signature() {
        let bare = SPEC_SECRET.strip_prefix(SECRET_PREFIX).unwrap();
        assert_eq!(
            standard_signature(&[bare], SPEC_ID, SPEC_TS, SPEC_BODY),
            standard_signature(&[SPEC_SECRET], SPEC_ID, SPEC_TS, SPEC_BODY)
        );
    }

    #[test]
    fn signed_content_includes_id_and_timestamp() {
        let base = standard_signature(&[SPEC_SECRET], SPEC_ID, SPEC_TS, SPEC_BODY).unwrap();
        let other_id = standard_signature(&[SPEC_SECRET], "msg_x", SPEC_TS, SPEC_BODY).unwrap();
        let other_ts = standard_signature(&[SPEC_SECRET], SPEC_ID, SPEC_TS + 1, SPEC_BODY).unwrap();
        assert_ne!(base, other_id);
        assert_ne!(base, other_ts);
    }

    #[test]
    fn invalid_base64_secret_is_rejected_without_leaking_it() {
        let err = standard_signature(&[NEW_SECRET, "whsec_not*base64!"], "id", 1, b"").unwrap_err();
        assert!(matches!(err, SigningError::InvalidSecret { index: 1, .. }));
        assert!(!err.to_string().contains("not*base64"));
    }

    #[test]
    fn unpadded_or_empty_secret_is_rejected() {
        // 44-char padded form with the `=` removed.
        let unpadded = NEW_SECRET.trim_end_matches('=');
        for secret in [unpadded, "whsec_", ""] {
            let err = standard_signature(&[secret], "id", 1, b"").unwrap_err();
            assert!(
                matches!(err, SigningError::InvalidSecret { index: 0, .. }),
                "{secret:?}"
            );
        }
    }

    #[test]
    fn no_secrets_is_an_error() {
        assert_eq!(
            standard_signature(&[], "id", 1, b""),
            Err(SigningError::NoSecrets)
        );
    }

    #[test]
    fn seed_signature_known_answers() {
        assert_eq!(
            seed_signature(SPEC_SECRET, SPEC_BODY),
            "sha256=80ec8a89ce3cd22133a1066caecb4d04fea7467657c8514d717ec42c38a5c94c"
        );
        assert_eq!(
            seed_signature(SPEC_SECRET, b""),
            "sha256=da5f5865984e699a69cfec62ce49a76daf8ae4601b54a781fa13f3b2d3b2088a"
        );
        assert_eq!(
            seed_signature(NEW_SECRET, BODY),
            "sha256=037ef08a54246138962f8192f706de63120d904d674b4371f797bc92fcf452dc"
        );
    }

    #[test]
    fn seed_signature_keys_with_full_secret_string() {
        let bare = SPEC_SECRET.strip_prefix(SECRET_PREFIX).unwrap();
        assert_ne!(
            seed_signature(bare, BODY),
            seed_signature(SPEC_SECRET, BODY)
        );
    }

    #[test]
    fn verify_accepts_own_signature_in_either_hex_case() {
        let header = seed_signature(NEW_SECRET, BODY);
        assert!(verify_seed_signature(NEW_SECRET, BODY, &header));
        let upper = format!("sha256={}", header[SEED_PREFIX.len()..].to_uppercase());
        assert!(verify_seed_signature(NEW_SECRET, BODY, &upper));
    }

    #[test]
    fn verify_rejects_mismatches_and_malformed_headers() {
        let header = seed_signature(NEW_SECRET, BODY);
        assert!(!verify_seed_signature(SPEC_SECRET, BODY, &header));
        assert!(!verify_seed_signature(NEW_SECRET, b"tampered", &header));
        let truncated = &header[..header.len() - 2];
        let mut flipped = header.clone();
        flipped.replace_range(header.len() - 1.., "0");
        if flipped == header {
            flipped.replace_range(header.len() - 1.., "1");
        }
        let unprefixed = &header[SEED_PREFIX.len()..];
        let cases = [
            "",
            "sha256=",
            "sha256=zz",
            "sha1=00",
            truncated,
            unprefixed,
            &flipped,
        ];
        for bad in cases {
            assert!(!verify_seed_signature(NEW_SECRET, BODY, bad), "{bad:?}");
        }
        let extended = format!("{header}00");
        assert!(!verify_seed_signature(NEW_SECRET, BODY, &extended));
    }

    #[test]
    fn generated_secrets_are_well_formed_and_distinct() {
        let a = generate_secret();
        let b = generate_secret();
        assert_ne!(a, b);
        for secret in [&a, &b] {
            assert_eq!(secret.len(), SECRET_PREFIX.len() + 44);
            assert_eq!(decode_secret(secret).unwrap().len(), SECRET_BYTES);
            standard_signature(&[secret], "id", 0, b"x").unwrap();
        }
    }
}
