//! Body of `POST /v1/webhooks`.

use serde::Deserialize;
use utoipa::ToSchema;

use crate::plumbing::validation::{Problems, Validate};
use crate::state::ApiConfig;
use flowline_core::crd::EventKind;

pub const MAX_WEBHOOK_URL: usize = 2048;

/// Body of `POST /v1/webhooks`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"url": "https://hooks.example/flowline", "events": ["run.failed", "run.succeeded"]})))]
pub struct WebhookCreate {
    /// `https://` address that receives the events.
    #[schema(format = "uri", max_length = 2048)]
    pub url: String,
    /// Event kinds to deliver, each at most once.
    #[schema(min_items = 1, max_items = 6)]
    pub events: Vec<EventKind>,
    /// Only this workflow's events; omit for all workflows.
    #[schema(min_length = 1, max_length = 253)]
    pub workflow_id: Option<String>,
}

impl Validate for WebhookCreate {
    /// `http://` only with the development flag (`allow_http_webhooks`).
    fn validate(&self, config: &ApiConfig) -> Result<(), Problems> {
        let mut p = Problems::default();
        let url = match url::Url::parse(&self.url) {
            Ok(u)
                if u.host().is_some()
                    && (u.scheme() == "https"
                        || (config.allow_http_webhooks && u.scheme() == "http")) =>
            {
                Some(u)
            }
            Ok(_) => {
                p.add("url", "must be an https:// URL");
                None
            }
            Err(_) => {
                p.add("url", "must be an absolute https:// URL");
                None
            }
        };
        // Measured as it will be stored.
        let stored = url.map_or(self.url.len(), |u| u.as_str().len());
        if stored > MAX_WEBHOOK_URL {
            p.add(
                "url",
                format!("must be at most {MAX_WEBHOOK_URL} characters"),
            );
        }
        if self.events.is_empty() {
            p.add("events", "must be a non-empty array of event kinds");
        }
        for (i, kind) in self.events.iter().enumerate() {
            if self.events[..i].contains(kind) {
                p.add(format!("events[{i}]"), "is listed twice");
            }
        }
        if let Some(wf) = &self.workflow_id
            && (wf.is_empty() || wf.len() > 253)
        {
            p.add("workflow_id", "must be a workflow id");
        }
        p.finish()
    }
}

impl WebhookCreate {
    /// The URL as stored: normalized (`https://H.test` → `https://h.test/`).
    pub fn normalized_url(&self) -> String {
        url::Url::parse(&self.url).map_or_else(|_| self.url.clone(), |u| u.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plumbing::error::ApiError;
    use crate::plumbing::validation::accept;
    use serde_json::{Value, json};

    fn fields(err: ApiError) -> Vec<String> {
        match err {
            ApiError::Validation { details, .. } => details.into_iter().map(|d| d.field).collect(),
            other => panic!("expected a validation error, got {other:?}"),
        }
    }

    fn create_webhook(body: Value, allow_http: bool) -> Result<WebhookCreate, ApiError> {
        let config = ApiConfig {
            allow_http_webhooks: allow_http,
            ..ApiConfig::default()
        };
        accept(&body, &config)
    }

    #[test]
    fn webhooks_need_https_and_known_events() {
        let ok = create_webhook(
            json!({"url": "https://h.test/x", "events": ["run.failed"]}),
            false,
        )
        .unwrap();
        assert_eq!(ok.events, [EventKind::RunFailed]);
        let http = json!({"url": "http://h.test/x", "events": ["run.failed"]});
        assert_eq!(
            fields(create_webhook(http.clone(), false).err().unwrap()),
            ["url"]
        );
        assert!(
            create_webhook(http, true).is_ok(),
            "the development flag allows http"
        );
        let err = create_webhook(
            json!({"url": "https://h.test", "events": ["run.boom", "run.failed"]}),
            false,
        );
        assert_eq!(fields(err.err().unwrap()), ["events[0]"]);
        let err = create_webhook(
            json!({"url": "https://h.test", "events": ["run.failed", "run.started", "run.failed"]}),
            false,
        );
        assert_eq!(fields(err.err().unwrap()), ["events[2]"]);
        for body in [
            json!({"url": "ftp://h.test", "events": ["run.failed"]}),
            json!({"url": "not a url", "events": ["run.failed"]}),
            json!({"url": "https://h.test", "events": ["run.failed"], "secret": "mine"}),
        ] {
            let field = if body.get("secret").is_some() {
                "secret"
            } else {
                "url"
            };
            assert_eq!(fields(create_webhook(body, false).err().unwrap()), [field]);
        }
        assert_eq!(
            fields(
                create_webhook(json!({"url": "https://h.test", "events": []}), false)
                    .err()
                    .unwrap()
            ),
            ["events"]
        );
    }

    #[test]
    fn the_url_is_stored_normalized() {
        let ok = create_webhook(
            json!({"url": "https://H.test", "events": ["run.failed"]}),
            false,
        )
        .unwrap();
        assert_eq!(ok.normalized_url(), "https://h.test/");
    }
}
