//! Verification of inbound webhook requests (`POST /v1/hooks/{id}`) with the Standard
//! Webhooks scheme: a pure decision over the three headers, the body, one secret and
//! the current time, so every edge is unit-tested without a server.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use subtle::ConstantTimeEq as _;

use flowline_core::delivery::signing::{
    WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER, standard_tag,
};

/// How far `webhook-timestamp` may be from our clock, in either direction. A captured
/// request cannot be replayed once it is older than this, whatever the idempotency
/// record says.
pub const TOLERANCE_SECS: i64 = 5 * 60;
/// Longest accepted `webhook-id`: it is an idempotency key, not a payload.
pub const MAX_ID_LEN: usize = 256;
/// Signature entries looked at; more are ignored, so a huge header costs no more
/// than this many comparisons (the HMAC itself is computed once).
const MAX_SIGNATURES: usize = 16;

/// The three Standard Webhooks headers as they arrived (`None` when absent or not
/// text).
#[derive(Debug, Clone, Copy, Default)]
pub struct SignedHeaders<'a> {
    pub id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
}

impl<'a> SignedHeaders<'a> {
    pub fn from_map(headers: &'a axum::http::HeaderMap) -> Self {
        let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        SignedHeaders {
            id: get(WEBHOOK_ID_HEADER),
            timestamp: get(WEBHOOK_TIMESTAMP_HEADER),
            signature: get(WEBHOOK_SIGNATURE_HEADER),
        }
    }
}

/// A request whose signature checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified<'a> {
    /// `webhook-id`: the idempotency key.
    pub id: &'a str,
    pub timestamp: i64,
}

/// Why a request is refused. The messages tell a sender what to fix and never quote
/// the expected signature or anything of the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the {0} header is missing")]
    MissingHeader(&'static str),
    #[error("webhook-id must be 1 to {MAX_ID_LEN} visible ASCII characters")]
    BadId,
    #[error("webhook-timestamp must be an integer number of Unix seconds")]
    BadTimestamp,
    #[error("webhook-timestamp is more than 5 minutes in the past")]
    TooOld,
    #[error("webhook-timestamp is more than 5 minutes in the future")]
    TooNew,
    #[error(
        "no v1 signature in webhook-signature matches the body, webhook-id and \
         webhook-timestamp under the workflow's current secret"
    )]
    NoMatch,
}

/// Checks a request against `secret` (`whsec_<base64>`) at `now` (Unix seconds).
///
/// Order: headers present, id and timestamp well-formed, timestamp within
/// [`TOLERANCE_SECS`], then the HMAC, so a stale or malformed request costs no hashing.
/// Every `v1,` entry of `webhook-signature` is compared in constant time; one match
/// suffices (a sender rotating its secret may sign with several). Entries of other
/// versions are skipped. A secret that cannot be decoded matches nothing.
pub fn verify<'a>(
    headers: SignedHeaders<'a>,
    secret: &str,
    body: &[u8],
    now: i64,
) -> Result<Verified<'a>, VerifyError> {
    let id = headers
        .id
        .ok_or(VerifyError::MissingHeader(WEBHOOK_ID_HEADER))?;
    let timestamp = headers
        .timestamp
        .ok_or(VerifyError::MissingHeader(WEBHOOK_TIMESTAMP_HEADER))?;
    let signature = headers
        .signature
        .ok_or(VerifyError::MissingHeader(WEBHOOK_SIGNATURE_HEADER))?;
    if id.is_empty() || id.len() > MAX_ID_LEN || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(VerifyError::BadId);
    }
    let timestamp: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::BadTimestamp)?;
    check_tolerance(timestamp, now)?;
    let Ok(expected) = standard_tag(secret, id, timestamp, body) else {
        return Err(VerifyError::NoMatch);
    };
    let matched = signature
        .split(' ')
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .take(MAX_SIGNATURES)
        .filter_map(|tag| BASE64.decode(tag).ok())
        // Length is public (always 32), so filtering on it leaks nothing.
        .filter(|tag| tag.len() == expected.len())
        .fold(false, |any, tag| {
            any | bool::from(tag.as_slice().ct_eq(&expected))
        });
    if matched {
        Ok(Verified { id, timestamp })
    } else {
        Err(VerifyError::NoMatch)
    }
}

/// Within the tolerance, both edges included (as the reference libraries do).
fn check_tolerance(timestamp: i64, now: i64) -> Result<(), VerifyError> {
    if timestamp < now.saturating_sub(TOLERANCE_SECS) {
        Err(VerifyError::TooOld)
    } else if timestamp > now.saturating_add(TOLERANCE_SECS) {
        Err(VerifyError::TooNew)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use flowline_core::delivery::signing::spec_example::{
        NEW_SECRET as OTHER_SECRET, SPEC_BODY, SPEC_ID, SPEC_SECRET, SPEC_SIGNATURE, SPEC_TS,
    };

    fn headers<'a>(signature: &'a str, ts: &'a str) -> SignedHeaders<'a> {
        SignedHeaders {
            id: Some(SPEC_ID),
            timestamp: Some(ts),
            signature: Some(signature),
        }
    }

    fn check(signature: &str, now: i64) -> Result<i64, VerifyError> {
        let ts = SPEC_TS.to_string();
        verify(headers(signature, &ts), SPEC_SECRET, SPEC_BODY, now).map(|v| v.timestamp)
    }

    #[test]
    fn the_specification_example_verifies() {
        let ts = SPEC_TS.to_string();
        let verified = verify(
            headers(SPEC_SIGNATURE, &ts),
            SPEC_SECRET,
            SPEC_BODY,
            SPEC_TS,
        )
        .unwrap();
        assert_eq!(verified.id, SPEC_ID);
        assert_eq!(verified.timestamp, SPEC_TS);
    }

    #[test]
    fn the_tolerance_is_five_minutes_both_ways_edges_included() {
        assert_eq!(check(SPEC_SIGNATURE, SPEC_TS + 300), Ok(SPEC_TS));
        assert_eq!(check(SPEC_SIGNATURE, SPEC_TS - 300), Ok(SPEC_TS));
        assert_eq!(
            check(SPEC_SIGNATURE, SPEC_TS + 301),
            Err(VerifyError::TooOld)
        );
        assert_eq!(
            check(SPEC_SIGNATURE, SPEC_TS - 301),
            Err(VerifyError::TooNew)
        );
        assert_eq!(
            check(SPEC_SIGNATURE, i64::MAX),
            Err(VerifyError::TooOld),
            "no overflow at the clock's limits"
        );
    }

    #[test]
    fn any_one_of_several_signatures_may_match() {
        let wrong = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        for header in [
            format!("{wrong} {SPEC_SIGNATURE}"),
            format!("{SPEC_SIGNATURE} {wrong}"),
            format!("v1a,xyz {SPEC_SIGNATURE}"),
            format!("v2,{} {SPEC_SIGNATURE}", &SPEC_SIGNATURE[3..]),
        ] {
            assert_eq!(check(&header, SPEC_TS), Ok(SPEC_TS), "{header}");
        }
        assert_eq!(check(wrong, SPEC_TS), Err(VerifyError::NoMatch));
        // Only the first 16 `v1` entries count: a huge header costs no more.
        let after = |n: usize| format!("{} {SPEC_SIGNATURE}", vec![wrong; n].join(" "));
        assert_eq!(check(&after(15), SPEC_TS), Ok(SPEC_TS));
        assert_eq!(check(&after(16), SPEC_TS), Err(VerifyError::NoMatch));
    }

    #[test]
    fn anything_changed_fails() {
        let ts = SPEC_TS.to_string();
        let h = headers(SPEC_SIGNATURE, &ts);
        let no = Err(VerifyError::NoMatch);
        assert_eq!(verify(h, OTHER_SECRET, SPEC_BODY, SPEC_TS), no, "secret");
        assert_eq!(
            verify(h, SPEC_SECRET, br#"{"test": 2432232315}"#, SPEC_TS),
            no,
            "body"
        );
        let other_id = SignedHeaders {
            id: Some("msg_other"),
            ..h
        };
        assert_eq!(verify(other_id, SPEC_SECRET, SPEC_BODY, SPEC_TS), no, "id");
        let ts2 = (SPEC_TS + 1).to_string();
        assert_eq!(
            verify(
                headers(SPEC_SIGNATURE, &ts2),
                SPEC_SECRET,
                SPEC_BODY,
                SPEC_TS
            ),
            no,
            "timestamp"
        );
        // The tag without its version, an unpadded tag, an undecodable secret.
        for sig in [
            &SPEC_SIGNATURE[3..],
            SPEC_SIGNATURE.trim_end_matches('='),
            "",
        ] {
            assert_eq!(check(sig, SPEC_TS), Err(VerifyError::NoMatch), "{sig:?}");
        }
        assert_eq!(verify(h, "whsec_!!", SPEC_BODY, SPEC_TS), no);
    }

    #[test]
    fn missing_or_malformed_headers_are_named() {
        let ts = SPEC_TS.to_string();
        let full = headers(SPEC_SIGNATURE, &ts);
        let run = |h: SignedHeaders| verify(h, SPEC_SECRET, SPEC_BODY, SPEC_TS).unwrap_err();
        assert_eq!(
            run(SignedHeaders { id: None, ..full }),
            VerifyError::MissingHeader("webhook-id")
        );
        assert_eq!(
            run(SignedHeaders {
                timestamp: None,
                ..full
            }),
            VerifyError::MissingHeader("webhook-timestamp")
        );
        assert_eq!(
            run(SignedHeaders {
                signature: None,
                ..full
            }),
            VerifyError::MissingHeader("webhook-signature")
        );
        let long = "x".repeat(MAX_ID_LEN + 1);
        for id in ["", "a b", long.as_str()] {
            assert_eq!(
                run(SignedHeaders {
                    id: Some(id),
                    ..full
                }),
                VerifyError::BadId
            );
        }
        for ts in ["", "soon", "1614265330.5", "99999999999999999999"] {
            assert_eq!(
                run(SignedHeaders {
                    timestamp: Some(ts),
                    ..full
                }),
                VerifyError::BadTimestamp
            );
        }
    }

    #[test]
    fn messages_never_quote_the_expected_signature() {
        let err = check("v1,AAAA", SPEC_TS).unwrap_err().to_string();
        assert!(!err.contains(&SPEC_SIGNATURE[3..]), "{err}");
        assert!(err.contains("webhook-signature"));
    }
}
