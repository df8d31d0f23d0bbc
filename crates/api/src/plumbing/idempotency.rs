//! Idempotent run creation (`Idempotency-Key` on `POST /v1/workflows/{id}/runs`): the
//! pure parts. The key is turned into a deterministic Run name so the API server, not
//! this process, decides which of two racing requests creates the run; the loser gets
//! AlreadyExists and answers with the winner's run.
//!
//! A key holds a run for [`KEY_LIFETIME`]. After that the same key may start a new run,
//! under the next name of the key's chain: derived from the expired holder's uid, so
//! requests racing after expiry again agree on one name.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::error::ApiError;
use flowline_core::crd::Run;

/// The request header.
pub const HEADER: &str = "Idempotency-Key";
/// Longest key accepted, in bytes (the header is ASCII).
pub const MAX_KEY_LEN: usize = 255;
/// How long a key returns the run it started.
pub const KEY_LIFETIME: SignedDuration = SignedDuration::from_hours(24);
/// Annotation holding [`request_digest`] of the request that created the run.
pub const DIGEST_ANNOTATION: &str = "flowline.io/idempotency-request-sha256";
/// Hex digits of SHA-256 in a derived name (80 bits: collisions are not a concern, and a
/// holder with another key is skipped anyway).
const NAME_HEX: usize = 20;

/// The key of a request, if it sent one: 1 to 255 visible ASCII characters, once.
pub fn key_from(headers: &axum::http::HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = |message: &str| Err(ApiError::field(HEADER, message));
    if values.next().is_some() {
        return bad("send the header once");
    }
    let Ok(text) = value.to_str() else {
        return bad("must be visible ASCII characters");
    };
    match text.len() {
        0 => bad("must not be empty"),
        n if n > MAX_KEY_LEN => bad("must be at most 255 characters"),
        _ => Ok(Some(text.to_string())),
    }
}

/// The `Idempotency-Key` of a request, if it sent one (checked by [`key_from`]): an
/// extractor, so the header is checked before the body is read.
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, ApiError> {
        key_from(&parts.headers).map(IdempotencyKey)
    }
}

fn hex_name(parts: &[&str]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        // NUL cannot occur in a workflow id, a header value or a uid: the parts cannot
        // run into each other.
        hash.update(part.as_bytes());
        hash.update([0u8]);
    }
    format!("run-{}", &hex::encode(hash.finalize())[..NAME_HEX])
}

/// The first Run name of `key` for `workflow`.
pub fn head_name(workflow: &str, key: &str) -> String {
    hex_name(&[workflow, key])
}

/// The name after a holder (uid `holder_uid`) that no longer answers for the key.
pub fn next_name(workflow: &str, key: &str, holder_uid: &str) -> String {
    hex_name(&[workflow, key, holder_uid])
}

/// SHA-256 (hex) of the request as it is understood: the payload, an absent one being
/// `{}` (which is how runs see it), written with sorted keys and no spaces. Two bodies
/// that start the same run have the same digest, whatever their key order or spacing.
pub fn request_digest(
    payload: Option<&Value>,
    tags: &BTreeMap<String, String>,
    priority: Option<u8>,
) -> String {
    let mut text = String::new();
    canonical(
        payload.unwrap_or(&Value::Object(Default::default())),
        &mut text,
    );
    // Without tags the digest is the payload's alone, as it was before runs had tags
    // (keys stored then keep answering the same requests).
    if !tags.is_empty() {
        text.push_str("\ntags:");
        canonical(&serde_json::json!(tags), &mut text);
    }
    if let Some(priority) = priority {
        text.push_str(&format!("\npriority:{priority}"));
    }
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// A request carrying a key.
pub struct Request<'a> {
    pub workflow: &'a str,
    pub key: &'a str,
    pub digest: &'a str,
    pub now: Timestamp,
}

/// What the Run holding a name says about the request.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The name is free: create the run under it.
    Create,
    /// The key's run, started by the same request: answer it (200).
    Replay,
    /// The key's run, started by a different request: 409 `idempotency_key_reused`.
    Reused,
    /// The holder does not answer for the key (expired, or another key's or workflow's
    /// run): go on with this name.
    Next(String),
}

/// Whether `holder` (of the key's current name, if any) answers `req`. Pure.
pub fn decide(holder: Option<&Run>, req: &Request) -> Outcome {
    let Some(run) = holder else {
        return Outcome::Create;
    };
    let next = || {
        let uid = run.metadata.uid.as_deref().unwrap_or_default();
        Outcome::Next(next_name(req.workflow, req.key, uid))
    };
    if !holds(run, req) {
        return next();
    }
    if digest_of(run) == req.digest {
        Outcome::Replay
    } else {
        Outcome::Reused
    }
}

/// Whether `run` is `req`'s key's live run: same workflow, same key, younger than
/// [`KEY_LIFETIME`].
pub fn holds(run: &Run, req: &Request) -> bool {
    let created = flowline_core::crd::timestamps::created_at(&run.metadata);
    run.spec.workflow_ref == req.workflow
        && run.spec.idempotency_key.as_deref() == Some(req.key)
        && created
            .checked_add(KEY_LIFETIME)
            .is_ok_and(|end| req.now < end)
}

/// The digest of the request that created `run`: recorded by the API, or (a Run
/// applied with kubectl) that of its payload.
pub fn digest_of(run: &Run) -> String {
    run.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DIGEST_ANNOTATION))
        .cloned()
        .unwrap_or_else(|| {
            request_digest(
                run.spec.payload.as_ref(),
                &flowline_core::crd::tags::of(run),
                None,
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_TAGS: BTreeMap<String, String> = BTreeMap::new();
    use axum::http::{HeaderMap, HeaderValue};
    use serde_json::json;

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HEADER, HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    #[test]
    fn keys_are_one_to_255_visible_characters_sent_once() {
        assert_eq!(key_from(&HeaderMap::new()).unwrap(), None);
        assert_eq!(
            key_from(&headers(&[b"k-1"])).unwrap().as_deref(),
            Some("k-1")
        );
        let long = "k".repeat(255);
        assert_eq!(key_from(&headers(&[long.as_bytes()])).unwrap(), Some(long));
        for bad in [
            headers(&[b""]),
            headers(&["k".repeat(256).as_bytes()]),
            headers(&[b"a", b"b"]),
            headers(&["caf\u{e9}".as_bytes()]),
        ] {
            match key_from(&bad) {
                Err(ApiError::Validation { details, .. }) => {
                    assert_eq!(details[0].field, HEADER)
                }
                other => panic!("expected a validation error, got {other:?}"),
            }
        }
    }

    #[test]
    fn names_are_valid_object_names_that_depend_on_workflow_key_and_holder() {
        let a = head_name("wf-1", "k");
        assert_eq!(a, head_name("wf-1", "k"), "deterministic");
        assert_eq!(a.len(), 4 + NAME_HEX);
        assert!(a.starts_with("run-"));
        assert!(
            a[4..]
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a, head_name("wf-2", "k"));
        assert_ne!(a, head_name("wf-1", "k2"));
        // Parts cannot run into each other.
        assert_ne!(head_name("wf-1", "k"), head_name("wf-1k", ""));
        let next = next_name("wf-1", "k", "uid-1");
        assert_ne!(next, a);
        assert_ne!(next, next_name("wf-1", "k", "uid-2"));
    }

    #[test]
    fn the_digest_ignores_key_order_and_treats_no_payload_as_empty() {
        let a = request_digest(
            Some(&json!({"a": 1, "b": {"y": [1, {"q": 2, "p": 3}], "x": null}})),
            &NO_TAGS,
            None,
        );
        let b: Value =
            serde_json::from_str(r#"{ "b": {"x": null, "y": [1, {"p": 3, "q": 2}]}, "a": 1 }"#)
                .unwrap();
        assert_eq!(a, request_digest(Some(&b), &NO_TAGS, None));
        assert_eq!(
            request_digest(None, &NO_TAGS, None),
            request_digest(Some(&json!({})), &NO_TAGS, None)
        );
        assert_ne!(
            request_digest(None, &NO_TAGS, None),
            request_digest(Some(&json!({"a": 1})), &NO_TAGS, None)
        );
        let tagged = BTreeMap::from([("k".to_string(), "v".to_string())]);
        assert_ne!(
            request_digest(None, &NO_TAGS, None),
            request_digest(None, &tagged, None),
            "tags are part of the request"
        );
        assert_ne!(
            request_digest(None, &NO_TAGS, None),
            request_digest(None, &NO_TAGS, Some(1)),
            "so is a priority"
        );
        assert_ne!(
            request_digest(Some(&json!({"a": [1, 2]})), &NO_TAGS, None),
            request_digest(Some(&json!({"a": [2, 1]})), &NO_TAGS, None),
            "array order matters"
        );
        assert_ne!(
            request_digest(Some(&json!({"a": "1"})), &NO_TAGS, None),
            request_digest(Some(&json!({"a": 1})), &NO_TAGS, None)
        );
    }

    fn holder(workflow: &str, key: Option<&str>, created: &str, payload: Value) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "uid": "u-1",
                "annotations": {"flowline.io/created-at": created}},
            "spec": {"workflowRef": workflow, "idempotencyKey": key, "payload": payload},
        }))
        .unwrap()
    }

    #[test]
    fn a_live_holder_replays_the_same_request_and_refuses_another() {
        let now: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let digest = request_digest(Some(&json!({"a": 1})), &NO_TAGS, None);
        let req = Request {
            workflow: "wf",
            key: "k",
            digest: &digest,
            now,
        };
        assert_eq!(decide(None, &req), Outcome::Create);
        let live = holder("wf", Some("k"), "2026-01-01T00:00:00.001Z", json!({"a": 1}));
        assert_eq!(decide(Some(&live), &req), Outcome::Replay);
        let other_body = holder("wf", Some("k"), "2026-01-01T12:00:00Z", json!({"a": 2}));
        assert_eq!(decide(Some(&other_body), &req), Outcome::Reused);
        // The recorded digest is what counts when there is one.
        let mut recorded = other_body.clone();
        recorded
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(DIGEST_ANNOTATION.into(), digest.clone());
        assert_eq!(decide(Some(&recorded), &req), Outcome::Replay);
    }

    #[test]
    fn expired_and_foreign_holders_pass_on_to_the_next_name() {
        let now: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let digest = request_digest(None, &NO_TAGS, None);
        let req = Request {
            workflow: "wf",
            key: "k",
            digest: &digest,
            now,
        };
        let next = Outcome::Next(next_name("wf", "k", "u-1"));
        // Exactly 24 h old: expired.
        let expired = holder("wf", Some("k"), "2026-01-01T00:00:00Z", json!({}));
        assert_eq!(decide(Some(&expired), &req), next);
        let other_key = holder("wf", Some("k2"), "2026-01-01T23:00:00Z", json!({}));
        assert_eq!(decide(Some(&other_key), &req), next);
        let no_key = holder("wf", None, "2026-01-01T23:00:00Z", json!({}));
        assert_eq!(decide(Some(&no_key), &req), next);
        let other_workflow = holder("wf2", Some("k"), "2026-01-01T23:00:00Z", json!({}));
        assert_eq!(decide(Some(&other_workflow), &req), next);
    }
}
