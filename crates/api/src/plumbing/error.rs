//! The one error type of the HTTP layer, mapped in one place to the contract's
//! status and error codes.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use flowline_telemetry::access_log::in_request;

/// A field-level validation problem (`details[]` of a `validation_error`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Which kind of object was not found; each has its own code.
/// Every error code of the API (`error.code`), in snake_case on the wire. The
/// OpenAPI document's list of codes is derived from it, and a test checks that each is
/// documented in docs/api.md and produced by some [`ApiError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum ErrorCode {
    InvalidJson,
    UnsupportedMediaType,
    ValidationError,
    InvalidCursor,
    Unauthenticated,
    InsufficientScope,
    WorkflowNotFound,
    RunNotFound,
    StepNotFound,
    WebhookNotFound,
    ApiKeyNotFound,
    DeliveryNotFound,
    LogsNotFound,
    EventNotFound,
    EventExpired,
    NotFound,
    MethodNotAllowed,
    WorkflowActive,
    WorkflowPaused,
    RunNotRunning,
    StepNotWaiting,
    InvalidSignature,
    HookNotFound,
    CallbackNotFound,
    CallbackUsed,
    NotWebhookTriggered,
    IdempotencyKeyReused,
    RunNotFinished,
    PayloadTooLarge,
    RateLimited,
    Unavailable,
    InternalError,
}

impl ErrorCode {
    /// Every code, as sent.
    pub fn all() -> impl Iterator<Item = &'static str> {
        <ErrorCode as strum::IntoEnumIterator>::iter().map(Into::into)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    Workflow,
    Run,
    /// A step of a run's workflow version.
    Step,
    Webhook,
    ApiKey,
    Delivery,
    /// A step attempt's log: it never ran in a pod, or its pod is gone.
    Logs,
    /// An inbound event (`/v1/events/{id}`).
    Event,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("request body must be JSON (Content-Type: application/json)")]
    UnsupportedMediaType,
    #[error("{message}")]
    Validation {
        message: String,
        details: Vec<FieldError>,
    },
    #[error("cursor is invalid or expired; start again without a cursor")]
    InvalidCursor,
    #[error("a valid API key is required: send `Authorization: Bearer <key>`")]
    Unauthenticated,
    #[error("this API key lacks the `{0}` scope")]
    InsufficientScope(&'static str),
    #[error("{}", missing_message(*.0))]
    NotFound(Missing),
    #[error("no such route")]
    RouteNotFound,
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    #[error("the workflow is active; pause it before deleting it")]
    WorkflowActive,
    #[error("the workflow is paused; activate it (or set it to draft) to start runs")]
    WorkflowPaused,
    #[error("the run is not running (status: {0})")]
    RunNotRunning(&'static str),
    /// A decision on a step that is not an approval waiting for one: the reason.
    #[error("the step is not waiting for a decision: {0}")]
    StepNotWaiting(String),
    #[error(
        "this Idempotency-Key already started a run of this workflow with a different request \
         body (keys are kept 24 h); send the same body to get that run, or use a new key"
    )]
    IdempotencyKeyReused,
    #[error("only a finished run can be retried (status: {0})")]
    RunNotFinished(&'static str),
    #[error(
        "the event of this delivery is no longer stored (its run or workflow was deleted); it cannot be sent again"
    )]
    EventExpired,
    #[error("webhook signature rejected: {0}")]
    InvalidSignature(#[from] crate::hooks::verify::VerifyError),
    /// The same answer whether the workflow is unknown, not webhook-triggered or not
    /// active, so an unauthenticated caller learns nothing about which.
    #[error("no active webhook-triggered workflow exists with this id")]
    HookNotFound,
    /// The same answer whether the token is made up, of a run that is gone, or of a
    /// step that no longer waits (finished, timed out, cancelled).
    #[error("no callback is waiting for this URL (unknown, or expired with its step)")]
    CallbackNotFound,
    #[error("this callback URL was already called; it accepts one call")]
    CallbackUsed,
    #[error("the workflow's trigger is not `webhook`; it has no hook secret")]
    NotWebhookTriggered,
    #[error("request body is larger than 1 MiB")]
    PayloadTooLarge,
    #[error("rate limit exceeded; retry after {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    #[error("the service is temporarily unavailable; retry shortly")]
    Unavailable,
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

fn missing_message(m: Missing) -> &'static str {
    match m {
        Missing::Workflow => "no workflow exists with this id",
        Missing::Run => "no run exists with this id",
        Missing::Step => "the run's workflow version has no step with this id",
        Missing::Webhook => "no webhook exists with this id",
        Missing::ApiKey => "no API key exists with this id",
        Missing::Delivery => "no delivery exists with this id",
        Missing::Event => "no event exists with this id",
        Missing::Logs => {
            "no log is kept for this step attempt: it did not run in a pod, or its pod is gone"
        }
    }
}

impl ApiError {
    /// A validation error about one field.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        let detail = FieldError::new(field, message);
        ApiError::Validation {
            // Capped: a field path or message may quote what the client sent.
            message: flowline_core::limits::cap_error(format!(
                "{}: {}",
                detail.field, detail.message
            )),
            details: vec![detail],
        }
    }

    /// A validation error from several field problems (at least one).
    pub fn fields(details: Vec<FieldError>) -> Self {
        let message = match details.as_slice() {
            [one] => format!("{}: {}", one.field, one.message),
            many => format!("{} fields are invalid", many.len()),
        };
        ApiError::Validation { message, details }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidJson(_) | ApiError::Validation { .. } | ApiError::InvalidCursor => {
                StatusCode::BAD_REQUEST
            }
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unauthenticated | ApiError::InvalidSignature(_) => StatusCode::UNAUTHORIZED,
            ApiError::HookNotFound | ApiError::CallbackNotFound => StatusCode::NOT_FOUND,
            ApiError::InsufficientScope(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) | ApiError::RouteNotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::WorkflowActive
            | ApiError::WorkflowPaused
            | ApiError::RunNotRunning(_)
            | ApiError::StepNotWaiting(_)
            | ApiError::IdempotencyKeyReused
            | ApiError::RunNotFinished(_)
            | ApiError::EventExpired
            | ApiError::CallbackUsed
            | ApiError::NotWebhookTriggered => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The contract's error code, as sent in the body's `error.code`.
    pub fn code(&self) -> &'static str {
        self.error_code().into()
    }

    /// The error code of this error: every code the API answers with is one of
    /// [`ErrorCode`], so the OpenAPI document and the docs can list them all.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            ApiError::InvalidJson(_) => ErrorCode::InvalidJson,
            ApiError::UnsupportedMediaType => ErrorCode::UnsupportedMediaType,
            ApiError::Validation { .. } => ErrorCode::ValidationError,
            ApiError::InvalidCursor => ErrorCode::InvalidCursor,
            ApiError::Unauthenticated => ErrorCode::Unauthenticated,
            ApiError::InsufficientScope(_) => ErrorCode::InsufficientScope,
            ApiError::NotFound(Missing::Workflow) => ErrorCode::WorkflowNotFound,
            ApiError::NotFound(Missing::Run) => ErrorCode::RunNotFound,
            ApiError::NotFound(Missing::Step) => ErrorCode::StepNotFound,
            ApiError::NotFound(Missing::Webhook) => ErrorCode::WebhookNotFound,
            ApiError::NotFound(Missing::ApiKey) => ErrorCode::ApiKeyNotFound,
            ApiError::NotFound(Missing::Delivery) => ErrorCode::DeliveryNotFound,
            ApiError::NotFound(Missing::Logs) => ErrorCode::LogsNotFound,
            ApiError::NotFound(Missing::Event) => ErrorCode::EventNotFound,
            ApiError::RouteNotFound => ErrorCode::NotFound,
            ApiError::MethodNotAllowed => ErrorCode::MethodNotAllowed,
            ApiError::WorkflowActive => ErrorCode::WorkflowActive,
            ApiError::WorkflowPaused => ErrorCode::WorkflowPaused,
            ApiError::RunNotRunning(_) => ErrorCode::RunNotRunning,
            ApiError::StepNotWaiting(_) => ErrorCode::StepNotWaiting,
            ApiError::IdempotencyKeyReused => ErrorCode::IdempotencyKeyReused,
            ApiError::RunNotFinished(_) => ErrorCode::RunNotFinished,
            ApiError::EventExpired => ErrorCode::EventExpired,
            ApiError::InvalidSignature(_) => ErrorCode::InvalidSignature,
            ApiError::HookNotFound => ErrorCode::HookNotFound,
            ApiError::CallbackNotFound => ErrorCode::CallbackNotFound,
            ApiError::CallbackUsed => ErrorCode::CallbackUsed,
            ApiError::NotWebhookTriggered => ErrorCode::NotWebhookTriggered,
            ApiError::PayloadTooLarge => ErrorCode::PayloadTooLarge,
            ApiError::RateLimited { .. } => ErrorCode::RateLimited,
            ApiError::Unavailable => ErrorCode::Unavailable,
            ApiError::Internal(_) => ErrorCode::InternalError,
        }
    }
}

impl From<kube::Error> for ApiError {
    fn from(err: kube::Error) -> Self {
        match &err {
            // The API server or its connection is down: a retryable condition, not a bug.
            kube::Error::HyperError(_) | kube::Error::Service(_) => {
                in_request(|| tracing::warn!(error = %err, "Kubernetes API unreachable"));
                ApiError::Unavailable
            }
            kube::Error::Api(status) if status.code == 503 || status.code == 504 => {
                ApiError::Unavailable
            }
            _ => ApiError::Internal(err.into()),
        }
    }
}

/// The body of every error response; also its schema (`Error`) in the OpenAPI document.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody<'a> {
    error: ErrorObject<'a>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct ErrorObject<'a> {
    #[schema(schema_with = error_code_schema)]
    code: &'a str,
    /// Human text; never internals.
    message: String,
    /// For `validation_error`: each problem with the path of its field (`steps[1].action`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<FieldError>>, nullable = false)]
    details: Option<&'a [FieldError]>,
}

/// `code` is one of the documented codes.
fn error_code_schema() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(ErrorCode::all()))
        .build()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(source) = &self {
            // The chain goes to the log; the client only learns that something broke.
            in_request(|| tracing::error!(error = ?source, "internal error"));
        }
        let status = self.status();
        let body = ErrorBody {
            error: ErrorObject {
                code: self.code(),
                message: self.to_string(),
                details: match &self {
                    ApiError::Validation { details, .. } => Some(details),
                    _ => None,
                },
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        match self {
            ApiError::Unauthenticated => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::RateLimited { retry_after_secs } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            }
            ApiError::Unavailable => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// Maps a 404 from the API server (object deleted meanwhile) to `missing`.
pub fn not_found_as(err: kube::Error, missing: Missing) -> ApiError {
    match err {
        kube::Error::Api(s) if s.code == 404 => ApiError::NotFound(missing),
        other => write_error(other),
    }
}

/// Errors of a write: the API server's own validation (CEL rules) becomes a 400.
pub fn write_error(err: kube::Error) -> ApiError {
    match err {
        kube::Error::Api(s) if s.code == 422 || s.code == 400 => ApiError::Validation {
            message: s.message.clone(),
            details: vec![],
        },
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(err: ApiError) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
        let res = err.into_response();
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = axum::body::to_bytes(res.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, headers, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn internal_errors_never_leak_their_source() {
        let (status, _, body) = body_of(ApiError::Internal(anyhow::anyhow!(
            "etcd password is hunter2"
        )))
        .await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["error"]["code"], "internal_error");
        assert!(!body.to_string().contains("hunter2"));
    }

    #[tokio::test]
    async fn validation_errors_carry_field_details() {
        let (status, _, body) = body_of(ApiError::field("steps[1].action", "unknown action")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"]["code"], "validation_error");
        assert_eq!(body["error"]["details"][0]["field"], "steps[1].action");
        assert_eq!(body["error"]["message"], "steps[1].action: unknown action");
    }

    #[tokio::test]
    async fn auth_rate_limit_and_unavailable_carry_their_headers() {
        let (status, headers, _) = body_of(ApiError::Unauthenticated).await;
        assert_eq!(
            (status, &headers[header::WWW_AUTHENTICATE]),
            (
                StatusCode::UNAUTHORIZED,
                &HeaderValue::from_static("Bearer")
            )
        );
        let (status, headers, _) = body_of(ApiError::RateLimited {
            retry_after_secs: 17,
        })
        .await;
        assert_eq!(
            (status, &headers[header::RETRY_AFTER]),
            (StatusCode::TOO_MANY_REQUESTS, &HeaderValue::from(17))
        );
        let (status, headers, _) = body_of(ApiError::Unavailable).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(headers.contains_key(header::RETRY_AFTER));
    }

    #[test]
    fn each_missing_kind_has_its_own_code() {
        assert_eq!(
            ApiError::NotFound(Missing::Workflow).code(),
            "workflow_not_found"
        );
        assert_eq!(ApiError::NotFound(Missing::Run).code(), "run_not_found");
        assert_eq!(
            ApiError::NotFound(Missing::Webhook).code(),
            "webhook_not_found"
        );
        assert_eq!(
            ApiError::NotFound(Missing::ApiKey).code(),
            "api_key_not_found"
        );
    }
}
