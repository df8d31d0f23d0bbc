//! Bodies of `POST /v1/workflows/{id}/runs`, `POST /v1/runs/{id}/retry` and the
//! decisions on approval steps. Each is optional: no body, or a JSON `null`, is none.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::plumbing::validation::{Problems, Validate};
use crate::state::ApiConfig;

/// Optional body of `POST /v1/workflows/{id}/runs`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"payload": {"order_id": 42}, "tags": {"customer": "acme"}})))]
pub struct RunCreate {
    /// Readable by the steps as `trigger.payload`.
    #[schema(value_type = Option<HashMap<String, Value>>)]
    pub payload: Option<Map<String, Value>>,
    /// At most 10 `key: value` pairs, set at creation only, by which run lists filter
    /// (`tag=key:value`). Keys: 1 to 63 of `a-z 0-9 _ . -`, starting and ending with a
    /// letter or digit; values: at most 63 letters, digits, `_ . -`, starting and
    /// ending with a letter or digit. Kubernetes labels `tags.flowline.io/<key>`.
    pub tags: Option<BTreeMap<String, String>>,
    /// 1 (first) to 5; default: the workflow's `priority`, else 3. Among runs waiting
    /// for a slot, a lower number starts first, then the older run.
    #[schema(minimum = 1, maximum = 5)]
    pub priority: Option<u8>,
}

impl Validate for RunCreate {
    fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
        let mut p = Problems::default();
        if let Some(tags) = &self.tags {
            tag_problems(tags, &mut p);
        }
        if let Some(n) = self.priority {
            crate::workflows::input::priority_problem(n, "priority", &mut p);
        }
        p.finish()
    }
}

/// `tags`' problems, each under `tags` or `tags.<key>`.
fn tag_problems(tags: &BTreeMap<String, String>, p: &mut Problems) {
    for (key, problem) in flowline_core::crd::tags::problems(tags) {
        match key {
            Some(key) => p.add(format!("tags.{key}"), problem),
            None => p.add("tags", problem),
        }
    }
}

/// The payload a run starts with, from its optional body.
pub fn payload(body: &Option<RunCreate>) -> Option<Value> {
    body.as_ref()
        .and_then(|b| b.payload.clone())
        .map(Value::Object)
}

/// The priority a run starts with, from its optional body (`None`: the workflow's).
pub fn priority(body: &Option<RunCreate>) -> Option<u8> {
    body.as_ref().and_then(|b| b.priority)
}

/// The tags a run starts with, from its optional body.
pub fn tags(body: &Option<RunCreate>) -> BTreeMap<String, String> {
    body.as_ref()
        .and_then(|b| b.tags.clone())
        .unwrap_or_default()
}

/// Optional body of `POST /v1/runs/{id}/retry`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"from": "failed"})))]
pub struct RetryCreate {
    /// Default `failed`.
    pub from: Option<RetryFrom>,
    /// Default `pinned`.
    pub version: Option<RetryVersion>,
}

/// Which workflow version a retry executes (`POST /v1/runs/{id}/retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RetryVersion {
    /// The version the retried run executed.
    #[default]
    Pinned,
    /// The workflow as it is now: the run's fixed steps. Kept results (`from:
    /// failed`) are those of the leading steps whose definition has not changed.
    Current,
}

impl Validate for RetryCreate {
    fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
        Ok(())
    }
}

/// Where a retry starts (`POST /v1/runs/{id}/retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = RetryStart)]
pub enum RetryFrom {
    /// At the first step that did not succeed; the steps before it keep their results.
    Failed,
    /// At the first step: everything runs again.
    Start,
}

impl RetryFrom {
    /// Where a retry with this optional body starts (default: `failed`).
    pub fn of(body: &Option<RetryCreate>) -> RetryFrom {
        body.as_ref()
            .and_then(|b| b.from)
            .unwrap_or(RetryFrom::Failed)
    }
}

impl RetryVersion {
    /// Which version a retry with this optional body executes (default: `pinned`).
    pub fn of(body: &Option<RetryCreate>) -> RetryVersion {
        body.as_ref().and_then(|b| b.version).unwrap_or_default()
    }
}

/// Optional body of `POST /v1/runs/{id}/steps/{step_id}/approve` and `/reject`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"comment": "checked the diff; ship it"})))]
pub struct DecisionCreate {
    /// Why; at most 1000 characters. Recorded with the decision.
    #[schema(max_length = 1000)]
    pub comment: Option<String>,
}

/// The most characters a decision's comment may have.
pub const MAX_DECISION_COMMENT: usize = 1000;

impl Validate for DecisionCreate {
    fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
        let mut p = Problems::default();
        if let Some(c) = &self.comment
            && c.chars().count() > MAX_DECISION_COMMENT
        {
            p.add(
                "comment",
                format!("must be at most {MAX_DECISION_COMMENT} characters"),
            );
        }
        p.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plumbing::error::ApiError;
    use crate::plumbing::validation::accept;
    use serde_json::json;

    fn fields(err: ApiError) -> Vec<String> {
        match err {
            ApiError::Validation { details, .. } => details.into_iter().map(|d| d.field).collect(),
            other => panic!("expected a validation error, got {other:?}"),
        }
    }

    fn run_request(body: Option<Value>) -> Result<Option<Value>, ApiError> {
        let body = body.unwrap_or(Value::Null);
        accept::<Option<RunCreate>>(&body, &ApiConfig::default()).map(|b| payload(&b))
    }

    fn retry_request(body: Option<Value>) -> Result<RetryFrom, ApiError> {
        let body = body.unwrap_or(Value::Null);
        accept::<Option<RetryCreate>>(&body, &ApiConfig::default()).map(|b| RetryFrom::of(&b))
    }

    fn decision_request(body: Option<Value>) -> Result<Option<String>, ApiError> {
        let body = body.unwrap_or(Value::Null);
        accept::<Option<DecisionCreate>>(&body, &ApiConfig::default())
            .map(|b| b.and_then(|b| b.comment))
    }

    #[test]
    fn run_payload_must_be_an_object() {
        assert_eq!(run_request(None).unwrap(), None);
        assert_eq!(run_request(Some(Value::Null)).unwrap(), None);
        assert_eq!(
            run_request(Some(json!({"payload": {"a": 1}}))).unwrap(),
            Some(json!({"a": 1}))
        );
        assert_eq!(
            fields(run_request(Some(json!({"payload": [1]}))).err().unwrap()),
            ["payload"]
        );
    }

    #[test]
    fn a_retry_starts_at_the_failed_step_unless_told_to_start_over() {
        assert_eq!(retry_request(None).unwrap(), RetryFrom::Failed);
        assert_eq!(retry_request(Some(Value::Null)).unwrap(), RetryFrom::Failed);
        assert_eq!(retry_request(Some(json!({}))).unwrap(), RetryFrom::Failed);
        assert_eq!(
            retry_request(Some(json!({"from": "failed"}))).unwrap(),
            RetryFrom::Failed
        );
        assert_eq!(
            retry_request(Some(json!({"from": "start"}))).unwrap(),
            RetryFrom::Start
        );
        for bad in [
            json!({"from": "middle"}),
            json!({"from": 1}),
            json!({"to": "start"}),
        ] {
            let field = if bad.get("to").is_some() {
                "to"
            } else {
                "from"
            };
            assert_eq!(fields(retry_request(Some(bad)).err().unwrap()), [field]);
        }
        assert!(retry_request(Some(json!([]))).is_err());
    }

    #[test]
    fn a_comment_is_optional_and_bounded() {
        assert_eq!(decision_request(None).unwrap(), None);
        assert_eq!(decision_request(Some(Value::Null)).unwrap(), None);
        assert_eq!(
            decision_request(Some(json!({"comment": "ok"}))).unwrap(),
            Some("ok".into())
        );
        let long = "é".repeat(MAX_DECISION_COMMENT);
        assert!(decision_request(Some(json!({ "comment": long }))).is_ok());
        let longer = "x".repeat(MAX_DECISION_COMMENT + 1);
        for bad in [
            json!({ "comment": longer }),
            json!({"comment": 3}),
            json!({"reason": "x"}),
            json!([]),
            json!(["x"]),
        ] {
            assert_eq!(
                decision_request(Some(bad.clone())).err().map(|e| e.code()),
                Some("validation_error"),
                "{bad}"
            );
        }
    }
}
