//! The filters of the run lists (`GET /v1/runs` and `GET /v1/workflows/{id}/runs`):
//! `workflow_id` (the account-wide list only), `status`, `tag=key:value` (repeatable,
//! all must match), `created_after` and `created_before` (RFC 3339, inclusive), and
//! `awaiting_decision` (`true`: runs with an approval waiting for a decision).
//! Parsed once, matched against the watch cache's runs. Bulk actions take the same
//! filter as a JSON object ([`RunFilterInput`]).

use jiff::Timestamp;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::plumbing::error::{ApiError, FieldError};
use crate::plumbing::validation::{Problems, Validate};
use crate::state::ApiConfig;
use flowline_core::crd::timestamps::created_at;
use flowline_core::crd::{Run, RunPhase, tags};

/// The most `tag` filters of one request (a run has at most that many tags).
const MAX_TAG_FILTERS: usize = tags::MAX_TAGS;

/// Which runs a list or a bulk action concerns.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RunFilter {
    pub workflow_id: Option<String>,
    pub status: Option<RunPhase>,
    pub tags: Vec<(String, String)>,
    pub created_after: Option<Timestamp>,
    pub created_before: Option<Timestamp>,
    /// Whether it has an approval waiting for a decision.
    pub awaiting_decision: Option<bool>,
}

impl RunFilter {
    /// Whether `run` passes every filter.
    pub fn matches(&self, run: &Run) -> bool {
        let created = created_at(&run.metadata);
        self.workflow_id
            .as_ref()
            .is_none_or(|w| &run.spec.workflow_ref == w)
            && self.status.is_none_or(|s| run.phase() == s)
            && tags::has_all(run, &self.tags)
            && self.created_after.is_none_or(|t| created >= t)
            && self.created_before.is_none_or(|t| created <= t)
            && self
                .awaiting_decision
                .is_none_or(|want| crate::cache::awaiting_decision(run).is_empty() != want)
    }

    /// The filters of a list's query string (other parameters are the pager's, or
    /// ignored). `workflow_id` is read only where `account_wide`.
    pub fn from_query(raw: Option<&str>, account_wide: bool) -> Result<RunFilter, ApiError> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
            .map_err(|_| ApiError::field("query", "the query string is malformed"))?;
        let mut filter = RunFilter::default();
        let mut problems = Vec::new();
        for (key, value) in pairs {
            let problem = match key.as_str() {
                "workflow_id" if account_wide => {
                    filter.workflow_id = Some(value);
                    None
                }
                "status" => phase(&value).map(|s| filter.status = Some(s)).err(),
                "tag" => tag(&value).map(|t| filter.tags.push(t)).err(),
                "created_after" => time(&value).map(|t| filter.created_after = Some(t)).err(),
                "created_before" => time(&value).map(|t| filter.created_before = Some(t)).err(),
                "awaiting_decision" => match value.as_str() {
                    "true" => {
                        filter.awaiting_decision = Some(true);
                        None
                    }
                    "false" => {
                        filter.awaiting_decision = Some(false);
                        None
                    }
                    _ => Some("must be true or false".to_string()),
                },
                _ => None,
            };
            if let Some(problem) = problem {
                problems.push(FieldError::new(key, problem));
            }
        }
        if filter.tags.len() > MAX_TAG_FILTERS {
            problems.push(FieldError::new(
                "tag",
                format!("at most {MAX_TAG_FILTERS} tag filters"),
            ));
        }
        if problems.is_empty() {
            Ok(filter)
        } else {
            Err(ApiError::fields(problems))
        }
    }
}

fn phase(value: &str) -> Result<RunPhase, String> {
    RunPhase::ALL
        .into_iter()
        .find(|p| p.as_str() == value)
        .ok_or_else(|| {
            let names: Vec<_> = RunPhase::ALL.iter().map(|p| p.as_str()).collect();
            format!("must be one of: {}", names.join(", "))
        })
}

fn tag(value: &str) -> Result<(String, String), String> {
    let (key, value) = value
        .split_once(':')
        .ok_or("must be key:value, e.g. customer:acme")?;
    if let Some(problem) = tags::key_problem(key).or_else(|| tags::value_problem(value)) {
        return Err(problem);
    }
    Ok((key.to_string(), value.to_string()))
}

fn time(value: &str) -> Result<Timestamp, String> {
    value
        .parse()
        .map_err(|_| "must be an RFC 3339 time, e.g. 2026-11-27T09:00:00Z".to_string())
}

/// The filters of both run lists, for the OpenAPI document (the handlers read them
/// with [`RunFilter::from_query`]), with the pager's parameters.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct RunsQuery {
    /// Items per page, 1 to 100 (default 20).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Only runs with this status.
    status: Option<RunPhase>,
    /// Only runs with this tag, as `key:value`; repeat for several (all must match).
    tag: Option<Vec<String>>,
    /// Only runs created at or after this time (RFC 3339).
    #[param(format = DateTime)]
    created_after: Option<String>,
    /// Only runs created at or before this time (RFC 3339).
    #[param(format = DateTime)]
    created_before: Option<String>,
    /// `true`: only runs with an `approval` step waiting for a decision; `false`: only
    /// runs without one.
    awaiting_decision: Option<bool>,
}

/// The account-wide list's own filter.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct WorkflowIdQuery {
    /// Only runs of this workflow.
    workflow_id: Option<String>,
}

/// The filter of a bulk action, as a JSON object: the list's parameters.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunFilterInput {
    /// Only runs of this workflow.
    pub workflow_id: Option<String>,
    /// Only runs with this status.
    pub status: Option<RunPhase>,
    /// Only runs with every one of these tags, each `key:value`.
    #[schema(max_items = 10)]
    pub tag: Option<Vec<String>>,
    /// Only runs created at or after this time (RFC 3339).
    #[schema(value_type = Option<String>, format = DateTime)]
    pub created_after: Option<String>,
    /// Only runs created at or before this time (RFC 3339).
    #[schema(value_type = Option<String>, format = DateTime)]
    pub created_before: Option<String>,
}

impl RunFilterInput {
    /// The filter, or the problems under `at` (`filter`).
    pub fn parse(&self, at: &str, p: &mut Problems) -> RunFilter {
        let mut filter = RunFilter {
            workflow_id: self.workflow_id.clone(),
            status: self.status,
            ..Default::default()
        };
        let tags = self.tag.as_deref().unwrap_or_default();
        if tags.len() > MAX_TAG_FILTERS {
            p.add(
                format!("{at}.tag"),
                format!("at most {MAX_TAG_FILTERS} tag filters"),
            );
        }
        for (i, t) in tags.iter().enumerate() {
            match tag(t) {
                Ok(pair) => filter.tags.push(pair),
                Err(problem) => p.add(format!("{at}.tag[{i}]"), problem),
            }
        }
        for (field, raw, slot) in [
            (
                "created_after",
                &self.created_after,
                &mut filter.created_after,
            ),
            (
                "created_before",
                &self.created_before,
                &mut filter.created_before,
            ),
        ] {
            if let Some(raw) = raw {
                match time(raw) {
                    Ok(t) => *slot = Some(t),
                    Err(problem) => p.add(format!("{at}.{field}"), problem),
                }
            }
        }
        filter
    }
}

impl Validate for RunFilterInput {
    fn validate(&self, _: &ApiConfig) -> Result<(), Problems> {
        let mut p = Problems::default();
        self.parse("filter", &mut p);
        p.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(workflow: &str, phase: &str, created: &str, tags: serde_json::Value) -> Run {
        let mut labels = serde_json::Map::new();
        for (k, v) in tags.as_object().unwrap() {
            labels.insert(format!("tags.flowline.io/{k}"), v.clone());
        }
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "creationTimestamp": created, "labels": labels},
            "spec": {"workflowRef": workflow},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn a_query_becomes_a_filter_and_each_bad_parameter_is_named() {
        let f = RunFilter::from_query(
            Some("workflow_id=wf&status=failed&tag=customer:acme&tag=tier:gold&created_after=2026-01-01T00:00:00Z&limit=5"),
            true,
        )
        .unwrap();
        assert_eq!(f.workflow_id.as_deref(), Some("wf"));
        assert_eq!(f.status, Some(RunPhase::Failed));
        assert_eq!(f.tags.len(), 2);
        assert!(f.created_after.is_some() && f.created_before.is_none());
        // A workflow's own list takes its workflow from the path.
        let own = RunFilter::from_query(Some("workflow_id=other"), false).unwrap();
        assert_eq!(own.workflow_id, None);
        let bad = RunFilter::from_query(
            Some("status=done&tag=nocolon&tag=Bad:x&created_before=yesterday"),
            true,
        );
        match bad {
            Err(ApiError::Validation { details, .. }) => {
                let fields: Vec<_> = details.iter().map(|d| d.field.as_str()).collect();
                assert_eq!(fields, ["status", "tag", "tag", "created_before"]);
            }
            other => panic!("{other:?}"),
        }
        let many = (0..11)
            .map(|i| format!("tag=k{i}:v"))
            .collect::<Vec<_>>()
            .join("&");
        assert!(RunFilter::from_query(Some(&many), true).is_err());
    }

    #[test]
    fn a_run_matches_only_when_every_filter_holds() {
        let r = run(
            "wf",
            "failed",
            "2026-03-01T00:00:00Z",
            json!({"customer": "acme", "tier": "gold"}),
        );
        let at = |s: &str| Some(s.parse::<Timestamp>().unwrap());
        let table = [
            (RunFilter::default(), true),
            (
                RunFilter {
                    workflow_id: Some("wf".into()),
                    ..Default::default()
                },
                true,
            ),
            (
                RunFilter {
                    workflow_id: Some("other".into()),
                    ..Default::default()
                },
                false,
            ),
            (
                RunFilter {
                    status: Some(RunPhase::Failed),
                    ..Default::default()
                },
                true,
            ),
            (
                RunFilter {
                    status: Some(RunPhase::Running),
                    ..Default::default()
                },
                false,
            ),
            (
                RunFilter {
                    tags: vec![("customer".into(), "acme".into())],
                    ..Default::default()
                },
                true,
            ),
            (
                RunFilter {
                    tags: vec![
                        ("customer".into(), "acme".into()),
                        ("tier".into(), "silver".into()),
                    ],
                    ..Default::default()
                },
                false,
            ),
            (
                RunFilter {
                    created_after: at("2026-03-01T00:00:00Z"),
                    ..Default::default()
                },
                true,
            ),
            (
                RunFilter {
                    created_after: at("2026-03-01T00:00:01Z"),
                    ..Default::default()
                },
                false,
            ),
            (
                RunFilter {
                    created_before: at("2026-03-01T00:00:00Z"),
                    ..Default::default()
                },
                true,
            ),
            (
                RunFilter {
                    created_before: at("2026-02-28T23:59:59Z"),
                    ..Default::default()
                },
                false,
            ),
        ];
        for (filter, expected) in table {
            assert_eq!(filter.matches(&r), expected, "{filter:?}");
        }
    }

    #[test]
    fn runs_awaiting_a_decision_are_found_in_full_runs_and_in_cached_summaries() {
        let mut waiting: Run = serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "creationTimestamp": "2026-03-01T00:00:00Z"},
            "spec": {"workflowRef": "wf"},
            "status": {"phase": "running", "parked": true, "steps": [
                {"stepId": "build", "name": "build", "action": "transform", "status": "succeeded", "attempts": 1},
                {"stepId": "ok", "name": "ok", "action": "approval", "status": "waiting", "attempts": 1},
                {"stepId": "nap", "name": "nap", "action": "delay", "status": "waiting", "attempts": 1}]}
        }))
        .unwrap();
        let only = |want| RunFilter {
            awaiting_decision: Some(want),
            ..Default::default()
        };
        assert_eq!(crate::cache::awaiting_decision(&waiting), ["ok"]);
        assert!(only(true).matches(&waiting) && !only(false).matches(&waiting));
        // The watch cache keeps a summary without step records: it still says so.
        crate::cache::summarize_for_tests(&mut waiting);
        assert!(waiting.status.as_ref().unwrap().steps.is_empty());
        assert_eq!(crate::cache::awaiting_decision(&waiting), ["ok"]);
        assert!(only(true).matches(&waiting));
        let done = run("wf", "succeeded", "2026-03-01T00:00:00Z", json!({}));
        assert!(only(false).matches(&done) && !only(true).matches(&done));
        let f = RunFilter::from_query(Some("awaiting_decision=true"), true).unwrap();
        assert_eq!(f.awaiting_decision, Some(true));
        assert!(RunFilter::from_query(Some("awaiting_decision=yes"), true).is_err());
    }

    #[test]
    fn a_bulk_filter_names_its_bad_fields_under_filter() {
        let input = RunFilterInput {
            tag: Some(vec!["customer:acme".into(), "oops".into()]),
            created_after: Some("soon".into()),
            ..Default::default()
        };
        let mut p = Problems::default();
        let f = input.parse("filter", &mut p);
        assert!(p.has("filter.tag[1]") && p.has("filter.created_after"));
        assert_eq!(f.tags, vec![("customer".to_string(), "acme".to_string())]);
    }
}
