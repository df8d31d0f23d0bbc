//! The OpenAPI 3.1 description served at `/v1/openapi.json`. Enumerations (error
//! codes, event kinds, scopes, states, limits) come from the code itself, so the
//! document cannot drift from them; schemathesis checks the rest against the
//! running server in `make test`.

use serde_json::{Value, json};

use super::auth::Scope;
use super::pagination::{DEFAULT_LIMIT, MAX_LIMIT};
use crate::crd::EventKind;

const ERROR_CODES: &[&str] = &[
    "invalid_json",
    "unsupported_media_type",
    "validation_error",
    "invalid_cursor",
    "unauthenticated",
    "insufficient_scope",
    "workflow_not_found",
    "run_not_found",
    "webhook_not_found",
    "api_key_not_found",
    "not_found",
    "method_not_allowed",
    "workflow_active",
    "workflow_paused",
    "run_not_running",
    "payload_too_large",
    "rate_limited",
    "unavailable",
    "internal_error",
];

fn r(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn nullable(kind: &str) -> Value {
    json!({"type": [kind, "null"]})
}

fn timestamp() -> Value {
    json!({"type": "string", "format": "date-time"})
}

fn nullable_timestamp() -> Value {
    json!({"type": ["string", "null"], "format": "date-time"})
}

fn error_response(description: &str) -> Value {
    json!({"description": description, "headers": rate_headers(),
           "content": {"application/json": {"schema": r("Error")}}})
}

fn rate_headers() -> Value {
    let h = |d: &str| json!({"description": d, "schema": {"type": "integer"}});
    json!({
        "X-RateLimit-Limit": h("Requests allowed in the current window"),
        "X-RateLimit-Remaining": h("Requests left in the current window"),
        "X-RateLimit-Reset": h("Unix seconds at which the window ends"),
    })
}

fn ok(status: &str, description: &str, schema: Option<Value>) -> (String, Value) {
    let mut resp = json!({"description": description, "headers": rate_headers()});
    if let Some(schema) = schema {
        resp["content"] = json!({"application/json": {"schema": schema}});
    }
    (status.to_string(), resp)
}

/// One operation; `errors` lists the error statuses it can answer besides the
/// ones every request can get (401, 429, 503, 500).
fn op(
    summary: &str,
    scope: Scope,
    success: (String, Value),
    errors: &[(&str, &str)],
    body: Option<Value>,
) -> Value {
    let mut responses = serde_json::Map::new();
    responses.insert(success.0, success.1);
    for (status, what) in errors.iter().chain(&[
        ("401", "Missing or unknown API key"),
        ("429", "Rate limit exceeded"),
        ("503", "Kubernetes API unreachable or caches not yet synced"),
        ("500", "Internal error"),
    ]) {
        responses.insert(status.to_string(), error_response(what));
    }
    if errors.iter().all(|(s, _)| *s != "403") {
        responses.insert(
            "403".into(),
            error_response(&format!("The key lacks the {} scope", scope.as_str())),
        );
    }
    let mut o = json!({"summary": summary, "description": format!("Scope: `{}`.", scope.as_str()), "responses": responses});
    if let Some(schema) = body {
        o["requestBody"] =
            json!({"required": true, "content": {"application/json": {"schema": schema}}});
        let responses = o["responses"].as_object_mut().expect("an object");
        responses.insert(
            "400".into(),
            error_response("Malformed JSON or invalid fields"),
        );
        responses.insert("413".into(), error_response("Body over 1 MiB"));
        responses.insert("415".into(), error_response("Body is not JSON"));
    }
    o
}

fn page_of(item: &str) -> Value {
    json!({"type": "object", "required": ["data", "next_cursor"], "properties": {
        "data": {"type": "array", "items": r(item)},
        "next_cursor": nullable("string"),
    }})
}

fn list_params(filter: Option<(&str, &[&str])>) -> Value {
    let mut params = vec![
        json!({"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}}),
        json!({"name": "cursor", "in": "query", "schema": {"type": "string"}}),
    ];
    if let Some((name, values)) = filter {
        params.push(
            json!({"name": name, "in": "query", "schema": {"type": "string", "enum": values}}),
        );
    }
    Value::Array(params)
}

fn id_param(description: &str) -> Value {
    json!([{"name": "id", "in": "path", "required": true, "description": description, "schema": {"type": "string"}}])
}

fn schemas() -> Value {
    let events: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
    let scopes: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
    let step = json!({"type": "object", "required": ["id", "action"], "properties": {
        "id": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
        "name": {"type": ["string", "null"]},
        "action": {"type": "string", "enum": ["http.request", "transform", "delay", "fail", "container"]},
        "with": {"type": ["object", "null"]},
        "retry": {"type": ["object", "null"], "properties": {
            "max_attempts": {"type": "integer", "minimum": 1, "maximum": 20},
            "backoff_ms": {"type": "integer", "minimum": 0, "maximum": 3_600_000},
            "backoff_factor": {"type": "number", "minimum": 1, "maximum": 10}}},
        "timeout_ms": {"type": ["integer", "null"], "minimum": 1, "maximum": 86_400_000},
        "when": {"type": ["string", "null"], "maxLength": 1000},
    }});
    let trigger = json!({"type": "object", "required": ["type"], "properties": {
        "type": {"type": "string", "enum": ["manual", "schedule"]},
        "cron": {"type": "string", "pattern": "^[0-9A-Za-z*,/?-]+( [0-9A-Za-z*,/?-]+){4}$"},
        "timezone": {"type": "string", "description": "IANA time zone, e.g. Europe/Paris"}}});
    let step_record = json!({"type": "object", "properties": {
        "step_id": {"type": "string"}, "name": {"type": "string"}, "action": nullable("string"),
        "status": {"type": "string", "enum": ["pending", "running", "succeeded", "failed", "skipped", "cancelled"]},
        "attempts": {"type": "integer"}, "started_at": nullable_timestamp(), "finished_at": nullable_timestamp(),
        "duration_ms": nullable("integer"), "output": {}, "output_truncated": {"type": "boolean"}, "error": nullable("string")}});
    let run_status =
        json!({"type": "string", "enum": ["running", "succeeded", "failed", "cancelled"]});
    let run_item_props = json!({"id": {"type": "string"}, "workflow_id": {"type": "string"}, "status": run_status,
        "started_at": timestamp(), "finished_at": nullable_timestamp(), "duration_ms": nullable("integer")});
    let mut run_props = run_item_props.clone();
    for (k, v) in [
        (
            "trigger",
            json!({"type": "string", "enum": ["manual", "schedule"]}),
        ),
        ("payload", json!({"type": "object"})),
        ("cancel_requested", json!({"type": "boolean"})),
        ("error", nullable("string")),
        ("steps", json!({"type": "array", "items": r("StepRecord")})),
    ] {
        run_props[k] = v;
    }
    let webhook_props = json!({"id": {"type": "string"}, "url": {"type": "string"},
        "events": {"type": "array", "items": {"type": "string", "enum": events}},
        "workflow_id": nullable("string"), "enabled": {"type": "boolean"}, "created_at": timestamp()});
    let mut webhook_created = webhook_props.clone();
    webhook_created["secret"] = json!({"type": "string", "pattern": "^whsec_"});
    let key_props = json!({"id": {"type": "string"}, "name": {"type": "string"},
        "scopes": {"type": "array", "items": {"type": "string", "enum": scopes}}, "created_at": nullable_timestamp()});
    let mut key_created = key_props.clone();
    key_created["key"] = json!({"type": "string", "pattern": "^flk_[0-9A-Za-z]{32,}$"});
    let state = json!({"type": "string", "enum": ["draft", "active", "paused"]});
    json!({
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["code", "message"], "properties": {
                "code": {"type": "string", "enum": ERROR_CODES},
                "message": {"type": "string"},
                "details": {"type": "array", "items": {"type": "object", "required": ["field", "message"],
                    "properties": {"field": {"type": "string"}, "message": {"type": "string"}}}}}}}},
        "WorkflowListItem": {"type": "object", "required": ["id", "name", "state", "created_at", "updated_at"],
            "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "state": state,
                "created_at": timestamp(), "updated_at": timestamp()}},
        "Workflow": {"type": "object",
            "required": ["id", "name", "description", "state", "trigger", "executor", "steps", "created_at", "updated_at"],
            "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "description": nullable("string"),
                "state": state, "trigger": trigger, "executor": {"type": ["string", "null"], "enum": ["inline", "job", null]},
                "steps": {"type": "array", "items": step}, "created_at": timestamp(), "updated_at": timestamp()}},
        "WorkflowCreate": {"type": "object", "required": ["name"], "additionalProperties": false, "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "description": {"type": ["string", "null"], "maxLength": 2000}}},
        "WorkflowPatch": {"type": "object", "minProperties": 1, "additionalProperties": false, "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "description": {"type": ["string", "null"], "maxLength": 2000},
            "state": state, "trigger": trigger,
            "executor": {"type": ["string", "null"], "enum": ["inline", "job", null]},
            "steps": {"type": "array", "maxItems": crate::crd::MAX_STEPS, "items": step}}},
        "RunListItem": {"type": "object", "required": ["id", "workflow_id", "status", "started_at", "finished_at", "duration_ms"],
            "properties": run_item_props},
        "Run": {"type": "object", "required": ["id", "workflow_id", "status", "steps"], "properties": run_props},
        "StepRecord": step_record,
        "RunCreate": {"type": "object", "additionalProperties": false, "properties": {"payload": {"type": ["object", "null"]}}},
        "Webhook": {"type": "object", "required": ["id", "url", "events", "workflow_id", "enabled", "created_at"], "properties": webhook_props},
        "WebhookCreated": {"type": "object", "required": ["id", "url", "events", "secret"], "properties": webhook_created},
        "WebhookCreate": {"type": "object", "required": ["url", "events"], "additionalProperties": false, "properties": {
            "url": {"type": "string", "format": "uri"},
            "events": {"type": "array", "minItems": 1, "uniqueItems": true, "items": {"type": "string", "enum": events}},
            "workflow_id": {"type": ["string", "null"]}}},
        "ApiKey": {"type": "object", "required": ["id", "name", "scopes"], "properties": key_props},
        "ApiKeyCreated": {"type": "object", "required": ["id", "name", "scopes", "key"], "properties": key_created},
        "ApiKeyCreate": {"type": "object", "required": ["name", "scopes"], "additionalProperties": false, "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "scopes": {"type": "array", "minItems": 1, "items": {"type": "string", "enum": scopes}}}},
    })
}

/// The whole document.
pub fn document() -> Value {
    use Scope::*;
    let wf_404 = ("404", "No such workflow");
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {"title": "Flowline API", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Workflow automation over Kubernetes custom resources. Every request carries `Authorization: Bearer <API key>`."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}, "schemas": schemas()},
        "paths": {
            "/v1/workflows": {
                "get": op("List workflows", Read, ok("200", "A page of workflows", Some(page_of("WorkflowListItem"))),
                          &[("400", "Bad limit, cursor or state filter")], None),
                "post": op("Create a draft workflow", Write, ok("201", "Created", Some(r("Workflow"))), &[], Some(r("WorkflowCreate"))),
            },
            "/v1/workflows/{id}": {
                "get": op("Get a workflow", Read, ok("200", "The full workflow", Some(r("Workflow"))), &[wf_404], None),
                "patch": op("Update a workflow", Write, ok("200", "The updated workflow", Some(r("Workflow"))), &[wf_404], Some(r("WorkflowPatch"))),
                "delete": op("Delete a workflow and its runs", Write, ok("204", "Deleted", None),
                             &[wf_404, ("409", "The workflow is active")], None),
            },
            "/v1/workflows/{id}/runs": {
                "get": op("List runs of a workflow", Read, ok("200", "A page of runs", Some(page_of("RunListItem"))),
                          &[wf_404, ("400", "Bad limit, cursor or status filter")], None),
                "post": op("Start a run", Execute, ok("201", "The run, running", Some(r("Run"))),
                           &[wf_404, ("409", "The workflow is paused"), ("400", "Invalid body"), ("413", "Body over 1 MiB"), ("415", "Body is not JSON")], None),
            },
            "/v1/runs/{id}": {"get": op("Get a run with its steps", Read, ok("200", "The run", Some(r("Run"))), &[("404", "No such run")], None)},
            "/v1/runs/{id}/cancel": {"post": op("Cancel a running run", Execute, ok("202", "Cancellation accepted", Some(r("Run"))),
                                                &[("404", "No such run"), ("409", "The run is not running")], None)},
            "/v1/webhooks": {
                "get": op("List webhooks", Read, ok("200", "A page of webhooks", Some(page_of("Webhook"))), &[("400", "Bad limit or cursor")], None),
                "post": op("Register a webhook", Write, ok("201", "Created; the secret is shown only here", Some(r("WebhookCreated"))),
                           &[wf_404], Some(r("WebhookCreate"))),
            },
            "/v1/webhooks/{id}": {
                "get": op("Get a webhook", Read, ok("200", "The webhook", Some(r("Webhook"))), &[("404", "No such webhook")], None),
                "delete": op("Delete a webhook", Write, ok("204", "Deleted", None), &[("404", "No such webhook")], None),
            },
            "/v1/api-keys": {
                "get": op("List API keys (never their values)", Admin, ok("200", "A page of keys", Some(page_of("ApiKey"))), &[("400", "Bad limit or cursor")], None),
                "post": op("Create an API key", Admin, ok("201", "Created; the value is shown only here", Some(r("ApiKeyCreated"))), &[], Some(r("ApiKeyCreate"))),
            },
            "/v1/api-keys/{id}": {"delete": op("Revoke an API key", Admin, ok("204", "Deleted", None), &[("404", "No such key")], None)},
        }
    });
    // Path parameters and optional bodies.
    let paths = doc["paths"].as_object_mut().expect("an object");
    for (path, item) in paths.iter_mut() {
        if path.contains("{id}") {
            item["parameters"] = id_param("Object id");
        }
    }
    doc["paths"]["/v1/workflows"]["get"]["parameters"] =
        list_params(Some(("state", &["draft", "active", "paused"])));
    doc["paths"]["/v1/workflows/{id}/runs"]["get"]["parameters"] = list_params(Some((
        "status",
        &["running", "succeeded", "failed", "cancelled"],
    )));
    doc["paths"]["/v1/webhooks"]["get"]["parameters"] = list_params(None);
    doc["paths"]["/v1/api-keys"]["get"]["parameters"] = list_params(None);
    doc["paths"]["/v1/workflows/{id}/runs"]["post"]["requestBody"] =
        json!({"required": false, "content": {"application/json": {"schema": r("RunCreate")}}});
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_the_code_can_produce_is_documented() {
        use super::super::error::{ApiError, Missing};
        let all = [
            ApiError::InvalidJson(String::new()),
            ApiError::UnsupportedMediaType,
            ApiError::field("a", "b"),
            ApiError::InvalidCursor,
            ApiError::Unauthenticated,
            ApiError::InsufficientScope("read"),
            ApiError::NotFound(Missing::Workflow),
            ApiError::NotFound(Missing::Run),
            ApiError::NotFound(Missing::Webhook),
            ApiError::NotFound(Missing::ApiKey),
            ApiError::RouteNotFound,
            ApiError::MethodNotAllowed,
            ApiError::WorkflowActive,
            ApiError::WorkflowPaused,
            ApiError::RunNotRunning("failed"),
            ApiError::PayloadTooLarge,
            ApiError::RateLimited {
                retry_after_secs: 1,
            },
            ApiError::Unavailable,
            ApiError::Internal(anyhow::anyhow!("x")),
        ];
        for e in all {
            assert!(ERROR_CODES.contains(&e.code()), "{} undocumented", e.code());
        }
    }

    #[test]
    fn the_document_is_openapi_3_1_with_every_route() {
        let doc = document();
        assert_eq!(doc["openapi"], "3.1.0");
        let paths = doc["paths"].as_object().unwrap();
        assert_eq!(paths.len(), 9);
        // Every $ref resolves.
        let text = doc.to_string();
        for piece in text.split("#/components/schemas/").skip(1) {
            let name: String = piece.chars().take_while(|c| c.is_alphanumeric()).collect();
            assert!(
                doc["components"]["schemas"].get(&name).is_some(),
                "dangling $ref {name}"
            );
        }
    }
}
