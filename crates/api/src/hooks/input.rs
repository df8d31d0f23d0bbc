//! The body of an inbound hook: any JSON object, read only once its signature checked
//! out (the signature is over the bytes), with the limits of every body.

use serde_json::{Map, Value};

use crate::plumbing::error::ApiError;
use crate::plumbing::json::parse;

/// The payload of a verified hook request: nested at most 32 deep (else 400
/// `validation_error`), well-formed (else 400 `invalid_json`), and an object.
pub fn payload(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match parse(body)? {
        Value::Object(payload) => Ok(payload),
        _ => Err(ApiError::field("body", "must be a JSON object")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_a_json_object() {
        assert!(payload(br#"{"a": [1]}"#).is_ok());
        for (body, code) in [
            (&b"[1]"[..], "validation_error"),
            (b"\"text\"", "validation_error"),
            (b"null", "validation_error"),
            (b"{\"a\":", "invalid_json"),
            (b"", "invalid_json"),
        ] {
            assert_eq!(payload(body).unwrap_err().code(), code);
        }
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(40), "]".repeat(40));
        assert_eq!(
            payload(deep.as_bytes()).unwrap_err().to_string(),
            "body: nesting deeper than 32"
        );
    }
}
