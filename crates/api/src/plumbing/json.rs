//! Our JSON extractor: malformed bodies get the contract's error body instead of
//! axum's plain-text rejections.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// A JSON request body. Wrong content type → 415, over 1 MiB → 413, nested deeper than
/// [`flowline_core::limits::MAX_JSON_DEPTH`] → 400 `validation_error` (checked on the text, before
/// parsing), syntax errors → 400 `invalid_json`, well-formed JSON of the wrong shape →
/// 400 `validation_error`.
pub struct ApiJson<T>(pub T);

/// Like [`ApiJson`], but an empty body (no content at all) is `None`.
pub struct OptionalJson<T>(pub Option<T>);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req).await?;
        parse(&bytes).map(ApiJson)
    }
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let has_content_type = req.headers().contains_key(header::CONTENT_TYPE);
        let bytes = read_body_any_type(req).await?;
        if bytes.is_empty() {
            return Ok(OptionalJson(None));
        }
        if !has_content_type {
            return Err(ApiError::UnsupportedMediaType);
        }
        parse(&bytes).map(|v| OptionalJson(Some(v)))
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
    use axum::body::Body;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Named {
        name: String,
    }

    async fn extract(content_type: Option<&str>, body: &'static [u8]) -> Result<Named, ApiError> {
        let mut req = Request::post("/").body(Body::from(body)).unwrap();
        if let Some(ct) = content_type {
            req.headers_mut()
                .insert(header::CONTENT_TYPE, ct.parse().unwrap());
        }
        ApiJson::<Named>::from_request(req, &()).await.map(|j| j.0)
    }

    #[tokio::test]
    async fn rejections_use_the_contract_codes() {
        assert!(
            extract(Some("application/json"), br#"{"name":"a"}"#)
                .await
                .is_ok()
        );
        assert!(
            extract(Some("application/json; charset=utf-8"), br#"{"name":"a"}"#)
                .await
                .is_ok()
        );
        let code = |r: Result<Named, ApiError>| r.unwrap_err().code();
        assert_eq!(
            code(extract(Some("application/json"), b"{\"name\":").await),
            "invalid_json"
        );
        assert_eq!(
            code(extract(Some("text/plain"), br#"{"name":"a"}"#).await),
            "unsupported_media_type"
        );
        assert_eq!(
            code(extract(None, br#"{"name":"a"}"#).await),
            "unsupported_media_type"
        );
        assert_eq!(
            code(extract(Some("application/json"), br#"{"name":1}"#).await),
            "validation_error"
        );
        assert_eq!(
            code(extract(Some("application/json"), br#"{"name":"a","x":1}"#).await),
            "validation_error"
        );
    }

    async fn extract_value(body: String) -> Result<serde_json::Value, ApiError> {
        let req = Request::post("/")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .unwrap();
        ApiJson::<serde_json::Value>::from_request(req, &())
            .await
            .map(|j| j.0)
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
        assert!(extract_value(nested(32)).await.is_ok());
        for levels in [33, 120, 124, 10_000, 400_000] {
            let err = extract_value(nested(levels)).await.unwrap_err();
            assert_eq!(err.code(), "validation_error", "{levels} levels");
            assert_eq!(err.to_string(), "body: nesting deeper than 32");
        }
        // Unbalanced and never closed: still refused by depth, not by the parser.
        let open = "[".repeat(50_000);
        assert_eq!(
            extract_value(open).await.unwrap_err().code(),
            "validation_error"
        );
        // Brackets inside strings are text.
        let quoted = format!(r#"{{"name":"{}"}}"#, "[{".repeat(1000));
        assert!(extract_value(quoted).await.is_ok());
    }

    #[tokio::test]
    async fn bodies_over_one_mebibyte_are_refused() {
        let big = vec![b' '; MAX_BODY_BYTES + 1];
        let req = Request::post("/")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(big))
            .unwrap();
        let err = ApiJson::<Named>::from_request(req, &())
            .await
            .err()
            .unwrap();
        assert_eq!(err.code(), "payload_too_large");
    }

    #[tokio::test]
    async fn optional_body_may_be_empty() {
        let req = Request::post("/").body(Body::empty()).unwrap();
        let OptionalJson(v) = OptionalJson::<Named>::from_request(req, &()).await.unwrap();
        assert!(v.is_none());
    }
}
