//! Request bodies: [`Valid`], the extractor that reads, shapes and checks a typed body
//! with the contract's error codes instead of axum's plain-text rejections; and the
//! body reading and parsing the inbound hooks share.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, Request};
use axum::http::header;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApiError;
use super::validation::{Validate, accept};
use crate::state::ApiConfig;

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// A request body of type `T`, read and checked before the handler runs, in this order:
///
/// 1. a body with a content type that is not JSON → 415 `unsupported_media_type` (and
///    a required body without one); over 1 MiB → 413 `payload_too_large`;
/// 2. nested deeper than [`flowline_core::limits::MAX_JSON_DEPTH`] → 400
///    `validation_error` on `body` (checked on the text, before parsing);
/// 3. not well-formed JSON → 400 `invalid_json`;
/// 4. JSON of the wrong shape for `T` (an unknown field, a wrong type, an unknown enum
///    value, an array or a scalar where an object belongs) → 400 `validation_error`,
///    on the first such field's path;
/// 5. `T`'s rules ([`Validate`]) → 400 `validation_error`, every problem on its path.
///
/// For an optional body (`Valid<Option<B>>`), no body at all or a JSON `null` is `None`.
/// Put it last among a handler's extractors: authentication and the scope (see
/// [`super::auth::Authorized`]) are checked before the body is read.
pub struct Valid<T>(pub T);

impl<S, T> FromRequest<S> for Valid<T>
where
    S: Send + Sync,
    T: Validate,
    Arc<ApiConfig>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let config = Arc::<ApiConfig>::from_ref(state);
        let bytes = if T::absent().is_none() {
            read_body(req).await?
        } else {
            let has_content_type = req.headers().contains_key(header::CONTENT_TYPE);
            let bytes = read_body_any_type(req).await?;
            if bytes.is_empty()
                && let Some(absent) = T::absent()
            {
                return Ok(Valid(absent));
            }
            if !has_content_type {
                return Err(ApiError::UnsupportedMediaType);
            }
            bytes
        };
        let body: Value = parse(&bytes)?;
        accept(&body, &config).map(Valid)
    }
}

fn is_json(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|mime| {
            let mime = mime.trim().to_ascii_lowercase();
            mime == "application/json"
                || (mime.starts_with("application/") && mime.ends_with("+json"))
        })
        .unwrap_or(false)
}

async fn read_body(req: Request) -> Result<Bytes, ApiError> {
    if !is_json(&req) {
        return Err(ApiError::UnsupportedMediaType);
    }
    read_body_any_type(req).await
}

pub(crate) async fn read_body_any_type(req: Request) -> Result<Bytes, ApiError> {
    if req.headers().contains_key(header::CONTENT_TYPE) && !is_json(&req) {
        return Err(ApiError::UnsupportedMediaType);
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES) {
        return Err(ApiError::PayloadTooLarge);
    }
    // The explicit limit applies whatever the router's DefaultBodyLimit says.
    axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError::PayloadTooLarge)
}

pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Before parsing: serde_json's own limit (128) would make a deep body a syntax
    // error, and what it accepts would still be too deep to store and watch safely.
    flowline_core::limits::check_text_depth(bytes)
        .map_err(|e| ApiError::field("body", e.to_string()))?;
    serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ApiError::Validation {
            message: e.to_string(),
            details: vec![],
        },
        _ => ApiError::InvalidJson(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plumbing::validation::Problems;
    use axum::body::Body;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Named {
        name: String,
    }

    impl Validate for Named {
        fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
            let mut p = Problems::default();
            if self.name == "bad" {
                p.add("name", "must not be bad");
            }
            p.finish()
        }
    }

    /// Any object with these fields, for the reading passes.
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Loose {
        steps: Option<Value>,
        name: Option<String>,
    }

    impl Validate for Loose {
        fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
            Ok(())
        }
    }

    fn config() -> Arc<ApiConfig> {
        Arc::new(ApiConfig::default())
    }

    async fn extract<T: Validate>(
        content_type: Option<&str>,
        body: impl Into<Body>,
    ) -> Result<T, ApiError> {
        let mut req = Request::post("/").body(body.into()).unwrap();
        if let Some(ct) = content_type {
            req.headers_mut()
                .insert(header::CONTENT_TYPE, ct.parse().unwrap());
        }
        Valid::<T>::from_request(req, &config()).await.map(|j| j.0)
    }

    const JSON: Option<&str> = Some("application/json");

    #[tokio::test]
    async fn rejections_use_the_contract_codes() {
        assert!(extract::<Named>(JSON, r#"{"name":"a"}"#).await.is_ok());
        assert!(
            extract::<Named>(Some("application/json; charset=utf-8"), r#"{"name":"a"}"#)
                .await
                .is_ok()
        );
        assert!(
            extract::<Named>(Some("application/merge-patch+json"), r#"{"name":"a"}"#)
                .await
                .is_ok()
        );
        let code = |r: Result<Named, ApiError>| r.unwrap_err().code();
        for (content_type, body, expected) in [
            (JSON, "{\"name\":", "invalid_json"),
            (JSON, "", "invalid_json"),
            (
                Some("text/plain"),
                r#"{"name":"a"}"#,
                "unsupported_media_type",
            ),
            (None, r#"{"name":"a"}"#, "unsupported_media_type"),
            (JSON, r#"{"name":1}"#, "validation_error"),
            (JSON, r#"{"name":"a","x":1}"#, "validation_error"),
            (JSON, r#"["a"]"#, "validation_error"),
            (JSON, r#""a""#, "validation_error"),
            (JSON, "null", "validation_error"),
            (JSON, r#"{"name":"bad"}"#, "validation_error"),
        ] {
            assert_eq!(
                code(extract::<Named>(content_type, body).await),
                expected,
                "{content_type:?} {body}"
            );
        }
    }

    #[tokio::test]
    async fn well_formed_json_is_checked_before_the_shape_and_the_shape_before_the_rules() {
        // A syntax error anywhere wins over a shape problem before it.
        let err = extract::<Named>(JSON, r#"{"nmae": 1, "#).await.unwrap_err();
        assert_eq!(err.code(), "invalid_json");
        // A shape problem wins over the rules.
        let err = extract::<Named>(JSON, r#"{"name": "bad", "x": 1}"#)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "x: unknown field `x`, expected `name`");
        let err = extract::<Named>(JSON, r#"{"name": "bad"}"#)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "name: must not be bad");
    }

    #[tokio::test]
    async fn bodies_nested_deeper_than_the_limit_are_validation_errors() {
        let nested = |levels: usize| {
            format!(
                r#"{{"steps":{}1{}}}"#,
                "[".repeat(levels - 1),
                "]".repeat(levels - 1)
            )
        };
        assert!(extract::<Loose>(JSON, nested(32)).await.is_ok());
        for levels in [33, 120, 124, 10_000, 400_000] {
            let err = extract::<Loose>(JSON, nested(levels)).await.unwrap_err();
            assert_eq!(err.code(), "validation_error", "{levels} levels");
            assert_eq!(err.to_string(), "body: nesting deeper than 32");
        }
        // Unbalanced and never closed: still refused by depth, not by the parser.
        let open = "[".repeat(50_000);
        assert_eq!(
            extract::<Loose>(JSON, open).await.unwrap_err().code(),
            "validation_error"
        );
        // Brackets inside strings are text.
        let quoted = format!(r#"{{"name":"{}"}}"#, "[{".repeat(1000));
        assert!(extract::<Loose>(JSON, quoted).await.is_ok());
    }

    #[tokio::test]
    async fn bodies_over_one_mebibyte_are_refused() {
        let big = vec![b' '; MAX_BODY_BYTES + 1];
        let err = extract::<Named>(JSON, big).await.err().unwrap();
        assert_eq!(err.code(), "payload_too_large");
    }

    #[tokio::test]
    async fn an_optional_body_may_be_empty_or_null() {
        assert!(extract::<Option<Named>>(None, "").await.unwrap().is_none());
        assert!(extract::<Option<Named>>(JSON, "").await.unwrap().is_none());
        assert!(
            extract::<Option<Named>>(JSON, "null")
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(
            extract::<Option<Named>>(JSON, r#"{"name":"a"}"#)
                .await
                .unwrap()
                .map(|n| n.name),
            Some("a".into())
        );
        let code = |r: Result<Option<Named>, ApiError>| r.unwrap_err().code();
        assert_eq!(
            code(extract(None, r#"{"name":"a"}"#).await),
            "unsupported_media_type"
        );
        assert_eq!(
            code(extract(Some("text/plain"), "").await),
            "unsupported_media_type"
        );
        assert_eq!(code(extract(JSON, "[]").await), "validation_error");
        assert_eq!(
            code(extract(JSON, r#"{"name":"bad"}"#).await),
            "validation_error"
        );
    }
}
