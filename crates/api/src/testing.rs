//! An in-process `/v1` for tests: the real router ([`crate::router`]) over caches that
//! have listed fixtures ([`Caches::listed`]) and a mocked API server
//! ([`flowline_kube::mock_api`]) that records every request it gets. Each resource's
//! `error_paths.rs` drives it with `tower::ServiceExt::oneshot`, one request at a time,
//! and checks the contract's error body on every refusal ([`Answer::error`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, header};
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::cache::Caches;
use crate::plumbing::auth::hash_key;
use crate::plumbing::ratelimit::{PLAN_ANNOTATION, Plan, PlanDefaults, RPM_ANNOTATION};
use crate::state::{ApiConfig, ApiState};
use flowline_core::crd::{ApiKey, FlowlineEvent, Run, Webhook, Workflow};
use flowline_kube::mock_api::{self, Log, Seen};

/// The account the keys below belong to.
pub const NS: &str = "team";
/// Another account: its objects are invisible to [`NS`]'s keys.
pub const OTHER_NS: &str = "other";

/// Keys of [`NS`], by scope.
pub const READ: &str = "flk_test_read";
pub const WRITE: &str = "flk_test_write";
pub const EXECUTE: &str = "flk_test_execute";
pub const ADMIN: &str = "flk_test_admin";
/// A key that holds no scope (its kind's schema refuses one, but a cache may hold it).
pub const NO_SCOPE: &str = "flk_test_none";
/// An admin key of [`OTHER_NS`].
pub const OTHER_ADMIN: &str = "flk_test_other";

/// Every key, with its namespace, id and scopes.
const KEYS: [(&str, &str, &str, &str); 6] = [
    (NS, "key-read", READ, "read"),
    (NS, "key-write", WRITE, "write"),
    (NS, "key-execute", EXECUTE, "execute"),
    (NS, "key-admin", ADMIN, "admin"),
    (NS, "key-none", NO_SCOPE, ""),
    (OTHER_NS, "key-other", OTHER_ADMIN, "admin"),
];

/// What an answer of the mocked API server is: a status and a JSON body.
type Answerer = dyn Fn(&Seen) -> Option<(u16, Value)> + Send + Sync;

/// The state an in-process API starts from: what its caches have listed, its
/// configuration, and how the mocked API server answers. Built up, then [`World::start`].
pub struct World {
    workflows: Vec<Workflow>,
    runs: Vec<Run>,
    webhooks: Vec<Webhook>,
    events: Vec<FlowlineEvent>,
    keys: Vec<ApiKey>,
    /// Inbound hook secrets to seal into workflows: (namespace, workflow, secret).
    hook_secrets: Vec<(String, String, String)>,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    config: ApiConfig,
    answer: Arc<Answerer>,
}

impl Default for World {
    /// The keys above, both namespaces, budgets too large to matter, and an API server
    /// that answers every request 500 (a request a test does not expect shows as an
    /// `internal_error`, and in [`Api::seen`]).
    fn default() -> Self {
        World {
            workflows: Vec::new(),
            runs: Vec::new(),
            webhooks: Vec::new(),
            events: Vec::new(),
            keys: KEYS
                .iter()
                .map(|(ns, id, token, scopes)| api_key(ns, id, token, scopes))
                .collect(),
            hook_secrets: Vec::new(),
            namespaces: [NS, OTHER_NS]
                .into_iter()
                .map(|ns| (ns.to_string(), BTreeMap::new()))
                .collect(),
            config: ApiConfig {
                plans: PlanDefaults {
                    plan: Plan::Enterprise,
                    enterprise_requests: 100_000,
                },
                unauthenticated_requests: 100_000,
                ..ApiConfig::default()
            },
            answer: Arc::new(|_| None),
        }
    }
}

impl World {
    pub fn workflow(mut self, wf: Workflow) -> Self {
        self.workflows.push(wf);
        self
    }

    pub fn run(mut self, run: Run) -> Self {
        self.runs.push(run);
        self
    }

    pub fn webhook(mut self, hook: Webhook) -> Self {
        self.webhooks.push(hook);
        self
    }

    pub fn event(mut self, event: FlowlineEvent) -> Self {
        self.events.push(event);
        self
    }

    /// [`NS`]'s workflow `workflow` holds `secret` as its inbound hook secret, sealed
    /// into its annotation as the API seals it (with [`seal_key`]).
    pub fn hook_secret(mut self, workflow: &str, secret: &str) -> Self {
        self.hook_secrets
            .push((NS.into(), workflow.into(), secret.into()));
        self
    }

    /// [`NS`]'s budget: `requests` per window.
    pub fn account_budget(mut self, requests: u32) -> Self {
        let annotations = self.namespaces.entry(NS.to_string()).or_default();
        annotations.insert(PLAN_ANNOTATION.into(), "enterprise".into());
        annotations.insert(RPM_ANNOTATION.into(), requests.to_string());
        self
    }

    pub fn config(mut self, tune: impl FnOnce(&mut ApiConfig)) -> Self {
        tune(&mut self.config);
        self
    }

    /// How the mocked API server answers; `None` is a 500.
    pub fn answer(
        mut self,
        answer: impl Fn(&Seen) -> Option<(u16, Value)> + Send + Sync + 'static,
    ) -> Self {
        self.answer = Arc::new(answer);
        self
    }

    pub fn start(self) -> Api {
        let answer = self.answer;
        let (client, log) = mock_api::client(move |seen| {
            answer(seen).unwrap_or_else(|| (500, mock_api::status(500)))
        });
        let namespaces = self
            .namespaces
            .into_iter()
            .map(|(name, annotations)| {
                serde_json::from_value::<PartialObjectMeta<Namespace>>(json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "annotations": annotations},
                }))
                .expect("a namespace")
            })
            .collect();
        let seal = Arc::new(seal_key());
        let mut workflows = self.workflows;
        for (namespace, name, secret) in &self.hook_secrets {
            let wf = workflows
                .iter_mut()
                .find(|wf| {
                    wf.metadata.namespace.as_deref() == Some(namespace.as_str())
                        && wf.metadata.name.as_deref() == Some(name.as_str())
                })
                .expect("a hook secret of a workflow of the world");
            kube::ResourceExt::annotations_mut(wf).insert(
                flowline_core::sealed::ANNOTATION.into(),
                seal.seal(flowline_core::sealed::ANNOTATION, namespace, name, secret),
            );
        }
        let caches = Caches::listed(
            workflows,
            self.runs,
            self.webhooks,
            self.events,
            self.keys,
            namespaces,
        );
        Api {
            app: crate::router(ApiState::new(client, caches, self.config, seal)),
            log,
        }
    }
}

/// The router and what the mocked API server was asked.
pub struct Api {
    app: Router,
    log: Log,
}

impl Api {
    pub async fn send(&self, req: Request<Body>) -> Answer {
        let res = self.app.clone().oneshot(req).await.expect("infallible");
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let raw = axum::body::to_bytes(res.into_body(), 1 << 22)
            .await
            .expect("a body");
        let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        Answer {
            status,
            headers,
            body,
            raw,
        }
    }

    /// The requests the mocked API server got.
    pub fn seen(&self) -> Vec<Seen> {
        mock_api::seen(&self.log)
    }

    /// Asserts that nothing reached the API server: what was refused was refused from
    /// the caches and the request alone.
    pub fn assert_untouched(&self) {
        let seen = self.seen();
        assert!(seen.is_empty(), "the API server was asked: {seen:?}");
    }

    /// Asserts that the API server was only read (no write happened).
    pub fn assert_only_read(&self) {
        for seen in self.seen() {
            assert_eq!(
                seen.method, "GET",
                "a write reached the API server: {seen:?}"
            );
        }
    }
}

/// A request to the API, built up.
pub struct Call(axum::http::request::Builder, Body);

/// `method path`, without a key or a body.
pub fn call(method: &str, path: &str) -> Call {
    Call(Request::builder().method(method).uri(path), Body::empty())
}

impl Call {
    /// With `Authorization: Bearer <key>`.
    pub fn key(self, key: &str) -> Self {
        self.header("authorization", &format!("Bearer {key}"))
    }

    pub fn header(self, name: &str, value: &str) -> Self {
        Call(self.0.header(name, value), self.1)
    }

    /// With `body` as `application/json`.
    pub fn json(self, body: impl Into<Body>) -> Self {
        self.header("content-type", "application/json").body(body)
    }

    /// With `body` as JSON text.
    pub fn value(self, body: Value) -> Self {
        self.json(body.to_string())
    }

    /// With `body` and no content type.
    pub fn body(self, body: impl Into<Body>) -> Self {
        Call(self.0, body.into())
    }

    pub fn build(self) -> Request<Body> {
        self.0.body(self.1).expect("a request")
    }
}

/// What the API answered.
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    /// The body as JSON; `null` when it is not JSON.
    pub body: Value,
    pub raw: Bytes,
}

impl Answer {
    /// Asserts a refusal with `status` and `code`, in the contract's shape:
    /// `{"error": {"code", "message"}}` as JSON, `details` (each `{field, message}`)
    /// for a `validation_error` only, the rate-limit headers, and the headers some
    /// codes carry. Returns the answer for more checks.
    #[track_caller]
    pub fn error(&self, status: u16, code: &str) -> &Self {
        let said = String::from_utf8_lossy(&self.raw);
        assert_eq!((self.status, self.code()), (status, code), "{said}");
        let content_type = self.headers.get(header::CONTENT_TYPE);
        assert_eq!(
            content_type.and_then(|v| v.to_str().ok()),
            Some("application/json"),
            "{said}"
        );
        let body = self.body.as_object().expect("an object");
        assert_eq!(body.keys().collect::<Vec<_>>(), ["error"], "{said}");
        let error = body["error"].as_object().expect("an error object");
        let mut keys: Vec<&str> = error.keys().map(String::as_str).collect();
        keys.sort_unstable();
        let message = error["message"].as_str().expect("a message");
        assert!(!message.is_empty(), "{said}");
        if code == "validation_error" {
            assert_eq!(keys, ["code", "details", "message"], "{said}");
            let details = error["details"].as_array().expect("details");
            assert!(!details.is_empty(), "{said}");
            for detail in details {
                let detail = detail.as_object().expect("a detail");
                assert_eq!(detail.keys().collect::<Vec<_>>(), ["field", "message"]);
                assert!(detail.values().all(Value::is_string), "{said}");
            }
        } else {
            assert_eq!(keys, ["code", "message"], "{said}");
        }
        for name in [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
        ] {
            assert!(self.headers.contains_key(name), "{name}: {said}");
        }
        match code {
            "unauthenticated" => assert_eq!(self.headers[header::WWW_AUTHENTICATE], "Bearer"),
            "rate_limited" | "unavailable" => {
                assert!(self.headers.contains_key(header::RETRY_AFTER), "{said}")
            }
            _ => {}
        }
        self
    }

    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }

    pub fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or_default()
    }

    /// The fields of a `validation_error`'s details, in order.
    pub fn fields(&self) -> Vec<&str> {
        self.body["error"]["details"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["field"].as_str())
            .collect()
    }
}

/// An object of kind `K` (`apiVersion`, `kind` given) named `name` in `namespace`, from
/// `rest` (its `spec`, `status`, more `metadata`).
pub fn object<K: DeserializeOwned>(
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    rest: Value,
) -> K {
    let mut object = json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                     "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z"},
    });
    for (key, value) in rest.as_object().expect("an object") {
        match (object.get_mut(key), value) {
            (Some(Value::Object(mine)), Value::Object(more)) => {
                mine.extend(more.clone());
            }
            _ => {
                object[key] = value.clone();
            }
        }
    }
    serde_json::from_value(object).expect("a well-formed object")
}

/// A workflow of [`NS`] with this `spec` (`name` filled in).
pub fn workflow(id: &str, spec: Value) -> Workflow {
    workflow_in(NS, id, spec)
}

pub fn workflow_in(namespace: &str, id: &str, mut spec: Value) -> Workflow {
    if spec.get("name").is_none() {
        spec["name"] = json!(format!("Workflow {id}"));
    }
    object(
        "flowline.io/v1",
        "Workflow",
        namespace,
        id,
        json!({ "spec": spec }),
    )
}

/// A run of [`NS`]'s workflow `workflow`, `phase` (`null`: never recorded), with more
/// of its `spec`.
pub fn run(id: &str, workflow: &str, phase: &str, spec: Value) -> Run {
    let mut full = json!({"workflowRef": workflow});
    full.as_object_mut()
        .expect("an object")
        .extend(spec.as_object().cloned().unwrap_or_default());
    let mut run: Run = object(
        "flowline.io/v1",
        "Run",
        NS,
        id,
        json!({"spec": full, "metadata": {"labels": {"flowline.io/workflow": workflow}}}),
    );
    if phase != "null" {
        run.status = Some(
            serde_json::from_value(json!({"phase": phase, "startedAt": "2026-01-01T00:00:00Z"}))
                .expect("a status"),
        );
    }
    run
}

/// A webhook of [`NS`] subscribed to `run.failed`, with this `status`.
pub fn webhook(id: &str, status: Value) -> Webhook {
    object(
        "flowline.io/v1",
        "Webhook",
        NS,
        id,
        json!({"spec": {"url": "https://h.test/x", "events": ["run.failed"]}, "status": status}),
    )
}

/// An API key, as the API server stores it; `scopes` comma-separated.
pub fn api_key(namespace: &str, id: &str, token: &str, scopes: &str) -> ApiKey {
    let scopes: Vec<&str> = scopes.split(',').filter(|s| !s.is_empty()).collect();
    object(
        "flowline.io/v1",
        "ApiKey",
        namespace,
        id,
        json!({"spec": {"name": id, "scopes": scopes, "sha256": hash_key(token)}}),
    )
}

/// The seal key of every in-process API.
pub fn seal_key() -> flowline_core::sealed::SealKey {
    flowline_core::sealed::SealKey::new(&[7; flowline_core::sealed::KEY_LEN]).expect("32 bytes")
}

/// The path of [`NS`]'s object `name` of `plural` on the API server.
pub fn server_path(plural: &str, name: &str) -> String {
    format!("/apis/flowline.io/v1/namespaces/{NS}/{plural}/{name}")
}
