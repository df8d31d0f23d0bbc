//! Shared harness for cluster tests: a client for the test cluster and a fresh
//! namespace per test, deleted when the test ends.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::PostParams;
use kube::{Api, Client};

use crate::builders::{RunBuilder, WorkflowBuilder};

/// Repository root (where `crds/` and `.flowline/` live).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The kubectl to use: ours from `.flowline/bin` when built, else the one on PATH.
pub fn kubectl_path() -> PathBuf {
    let ours = repo_root().join(".flowline/bin/kubectl");
    if ours.exists() {
        ours
    } else {
        PathBuf::from("kubectl")
    }
}

/// A client for the test cluster. Cluster tests never skip: without a reachable
/// cluster they fail and say why.
pub async fn client() -> Client {
    if std::env::var_os("KUBECONFIG").is_none() {
        panic!(
            "cluster tests need a cluster: run them with `make test` (which starts the local \
             control plane), or set KUBECONFIG"
        );
    }
    let client = Client::try_default()
        .await
        .unwrap_or_else(|e| panic!("cannot build a client from KUBECONFIG: {e}"));
    if let Err(e) = client.apiserver_version().await {
        panic!("the cluster in KUBECONFIG is not reachable: {e}");
    }
    client
}

/// A namespace that exists for one test.
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
}

impl TestNamespace {
    pub async fn new(prefix: &str) -> Self {
        let client = client().await;
        let suffix: String = (0..6)
            .map(|_| (b'a' + rand::random_range(0..26u8)) as char)
            .collect();
        let name = format!("{prefix}-{suffix}");
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"flowline.io/test": "true"}}
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create test namespace");
        TestNamespace { name, client }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Creates the Workflow object `wf` in this namespace; returns it as stored.
    pub async fn create_workflow(&self, wf: &WorkflowBuilder) -> flowline_core::crd::Workflow {
        self.api::<flowline_core::crd::Workflow>()
            .create(&PostParams::default(), &wf.object())
            .await
            .unwrap_or_else(|e| panic!("create workflow {}: {e}", wf.name()))
    }

    /// Creates the Run object `run` in this namespace; returns its name.
    pub async fn create_run(&self, run: &RunBuilder) -> String {
        let created = self
            .api::<flowline_core::crd::Run>()
            .create(&PostParams::default(), &run.object())
            .await
            .unwrap_or_else(|e| panic!("create run {:?}: {e}", run.run_name()));
        kube::ResourceExt::name_any(&created)
    }

    /// Creates `n` Runs of the workflow `workflow` named `<prefix>-<i>`, pinned to its
    /// version as the API pins them, 16 at a time (a backlog or a flood no API key's
    /// budget would take); returns their names.
    pub async fn create_pinned_runs(
        &self,
        workflow: &str,
        prefix: &str,
        n: usize,
        payload: Option<serde_json::Value>,
    ) -> Vec<String> {
        use futures::StreamExt;
        let wf: flowline_core::crd::Workflow = self.api().get(workflow).await.unwrap();
        let runs = self.api::<flowline_core::crd::Run>();
        futures::stream::iter(0..n)
            .map(|i| {
                let name = format!("{prefix}-{i}");
                let run = flowline_core::crd::Run::of_workflow(
                    &wf,
                    &name,
                    Default::default(),
                    payload.clone(),
                    jiff::Timestamp::now(),
                );
                let runs = runs.clone();
                async move {
                    runs.create(&PostParams::default(), &run).await.unwrap();
                    name
                }
            })
            .buffer_unordered(16)
            .collect()
            .await
    }

    /// Runs kubectl against this namespace.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        kubectl(&[&["-n", &self.name], args].concat(), None)
    }

    /// `kubectl apply -f -` of `manifest` in this namespace.
    pub fn kubectl_apply(&self, manifest: &str) -> Output {
        kubectl(&["-n", &self.name, "apply", "-f", "-"], Some(manifest))
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Drop cannot await, and the client's connection worker lives on the test's
        // runtime, so the namespace is deleted by a kubectl process instead.
        let _ = kubectl(&["delete", "namespace", &self.name, "--wait=false"], None);
    }
}

/// Runs kubectl with optional stdin.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut cmd = Command::new(kubectl_path());
    cmd.args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        std::process::Stdio::piped()
    } else {
        std::process::Stdio::null()
    });
    let mut child = cmd.spawn().expect("run kubectl");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().expect("wait for kubectl")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Polls `check` until it returns Some, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An in-process API server over the test cluster, with an admin key for a fresh
/// namespace.
pub struct TestApi {
    pub base: String,
    pub ns: TestNamespace,
    pub admin_key: String,
    pub http: reqwest::Client,
    shutdown: tokio_util::sync::CancellationToken,
}

impl Drop for TestApi {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Settings of a test API server.
pub struct ApiOptions {
    pub plan_annotations: Vec<(&'static str, &'static str)>,
    pub window_secs: u64,
    pub allow_http: bool,
}

impl Default for ApiOptions {
    fn default() -> Self {
        // Tests are not about rate limits unless they say so.
        ApiOptions {
            plan_annotations: vec![
                ("flowline.io/plan", "enterprise"),
                ("flowline.io/requests-per-minute", "1000000"),
            ],
            window_secs: 60,
            allow_http: false,
        }
    }
}

pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().unwrap()
}

impl TestApi {
    pub async fn start(prefix: &str) -> TestApi {
        Self::start_with(prefix, ApiOptions::default()).await
    }

    pub async fn start_with(prefix: &str, options: ApiOptions) -> TestApi {
        Self::start_full(prefix, options, &[], |_| {}).await
    }

    /// Like `start_with`, and `tune` changes the server's settings last (e.g. the
    /// unauthenticated budget or the trusted proxies).
    pub async fn start_tuned(
        prefix: &str,
        options: ApiOptions,
        tune: impl FnOnce(&mut flowline_api::state::ApiConfig),
    ) -> TestApi {
        Self::start_full(prefix, options, &[], tune).await
    }

    /// Like [`TestApi::start_with`], the caches also watching namespaces `also` (one
    /// watch each).
    pub async fn start_watching(prefix: &str, options: ApiOptions, also: &[String]) -> TestApi {
        Self::start_full(prefix, options, also, |_| {}).await
    }

    async fn start_full(
        prefix: &str,
        options: ApiOptions,
        also: &[String],
        tune: impl FnOnce(&mut flowline_api::state::ApiConfig),
    ) -> TestApi {
        use flowline_api::plumbing::ratelimit::{Plan, PlanDefaults};
        use flowline_api::state::{ApiConfig, ApiState};
        let ns = TestNamespace::new(prefix).await;
        annotate_namespace(&ns, &options.plan_annotations).await;
        let shutdown = tokio_util::sync::CancellationToken::new();
        let watched = [std::slice::from_ref(&ns.name), also].concat();
        let scope = flowline_kube::WatchScope::from_list(&watched);
        let caches =
            flowline_api::cache::Caches::start(ns.client.clone(), &scope, shutdown.clone());
        let mut config = ApiConfig {
            allow_http_webhooks: options.allow_http,
            plans: PlanDefaults {
                plan: Plan::Free,
                enterprise_requests: 6000,
            },
            rate_limit_window_secs: options.window_secs,
            ..ApiConfig::default()
        };
        tune(&mut config);
        // The key the operator processes of the tests load too (their defaults).
        let seal = flowline_kube::seal_key::load(&ns.client, "default", "flowline-seal-key")
            .await
            .unwrap();
        let app = flowline_api::router(ApiState::new(
            ns.client.clone(),
            caches.clone(),
            config,
            std::sync::Arc::new(seal),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
            )
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
            .unwrap();
        });
        eventually("watch caches to sync", Duration::from_secs(30), || async {
            caches.is_synced().then_some(())
        })
        .await;
        let created = flowline_api::keys::create_key(
            ns.client.clone(),
            &ns.name,
            "test",
            &[flowline_api::plumbing::auth::Scope::Admin],
        )
        .await
        .unwrap();
        // Waited for in the cache, not over HTTP: a request sent before the key is
        // indexed answers 401 and spends the per-address budget of unauthenticated
        // requests, which a test may have tuned down to a few (hooks' flood test).
        let key_id = kube::ResourceExt::name_any(&created.key);
        eventually(
            "the API's cache to hold the admin key",
            Duration::from_secs(10),
            || async { flowline_api::cache::get(&caches.api_keys, &ns.name, &key_id).map(|_| ()) },
        )
        .await;
        let api = TestApi {
            base,
            ns,
            admin_key: created.value,
            http: http_client(),
            shutdown,
        };
        // The key is in the cache, so the first request authenticates.
        let res = api.get(&api.admin_key, "/v1/workflows").await;
        assert_eq!(res.status(), 200, "a cached key authenticates at once");
        api
    }

    /// A `flowline api` process (no controllers) over a fresh namespace, as users reach
    /// it, with an admin key it accepts. Rate limits as in [`ApiOptions::default`], and an
    /// unauthenticated budget `await_key` cannot exhaust.
    pub async fn start_process(prefix: &str) -> (TestApi, Process) {
        let ns = TestNamespace::new(prefix).await;
        let port = crate::foundation::free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flowline"));
        cmd.args(["api", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--watch-namespace", &ns.name])
            .args(["--unauthenticated-requests-per-minute", "1000000"])
            .stderr(Stdio::null());
        let process = Process::spawn(cmd);
        (Self::attach(ns, port).await, process)
    }

    /// A client of the server already serving `ns` on `port` (e.g. an operator
    /// process), with a new admin key it accepts; the namespace gets the plan of
    /// [`ApiOptions::default`].
    pub async fn attach(ns: TestNamespace, port: u16) -> TestApi {
        annotate_namespace(&ns, &ApiOptions::default().plan_annotations).await;
        ready(port).await;
        let admin_key = new_key(&ns, &[flowline_api::plumbing::auth::Scope::Admin]).await;
        let api = TestApi {
            base: format!("http://127.0.0.1:{port}"),
            ns,
            admin_key,
            http: http_client(),
            shutdown: tokio_util::sync::CancellationToken::new(),
        };
        api.await_key(&api.admin_key.clone()).await;
        api
    }

    /// Waits until the server accepts `key` (the cache has seen its Secret).
    pub async fn await_key(&self, key: &str) {
        eventually(
            "the API to accept a new key",
            Duration::from_secs(10),
            || async {
                let res = self.get(key, "/v1/workflows").await;
                (res.status() != 401).then_some(())
            },
        )
        .await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn get(&self, key: &str, path: &str) -> reqwest::Response {
        self.http
            .get(self.url(path))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
    }

    pub async fn send(
        &self,
        method: &str,
        key: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> reqwest::Response {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.http.request(method, self.url(path)).bearer_auth(key);
        if let Some(body) = body {
            req = req.json(&body);
        }
        req.send().await.unwrap()
    }

    /// Creates a workflow through the API and returns its id.
    pub async fn create_workflow(&self, name: &str) -> String {
        self.create_workflow_as(&self.admin_key, name).await
    }

    /// Creates a workflow through the API as `key` and returns its id.
    pub async fn create_workflow_as(&self, key: &str, name: &str) -> String {
        let res = self
            .send(
                "POST",
                key,
                "/v1/workflows",
                Some(serde_json::json!({"name": name})),
            )
            .await;
        created_id(res).await
    }

    /// Creates `wf` through the API as the admin (`POST`, then `PATCH` with the fields
    /// `POST` does not take); returns its id.
    pub async fn workflow(&self, wf: &WorkflowBuilder) -> String {
        self.workflow_as(&self.admin_key, wf).await
    }

    /// [`TestApi::workflow`] as `key`.
    pub async fn workflow_as(&self, key: &str, wf: &WorkflowBuilder) -> String {
        let res = self
            .send("POST", key, "/v1/workflows", Some(wf.create_json()))
            .await;
        let id = created_id(res).await;
        if let Some(rest) = wf.patch_json() {
            self.patch_workflow(key, &id, rest).await;
        }
        id
    }

    /// Patches a workflow through the API as `key`; asserts it was accepted.
    /// Retention would delete the oldest finished runs of a test that counts many
    /// before they are checked; the API does not expose it, so it is raised on the
    /// Workflow itself.
    pub async fn keep_every_run(&self, id: &str) {
        let history =
            serde_json::json!({"spec": {"history": {"succeeded": 10000, "failed": 10000}}});
        self.ns
            .api::<flowline_core::crd::Workflow>()
            .patch(
                id,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&history),
            )
            .await
            .unwrap();
    }

    pub async fn patch_workflow(&self, key: &str, id: &str, body: serde_json::Value) {
        let res = self
            .send("PATCH", key, &format!("/v1/workflows/{id}"), Some(body))
            .await;
        assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    }

    /// Starts a run of `workflow` through the API as `key`; returns its id.
    pub async fn start_run(
        &self,
        key: &str,
        workflow: &str,
        body: Option<serde_json::Value>,
    ) -> String {
        let res = self
            .send("POST", key, &format!("/v1/workflows/{workflow}/runs"), body)
            .await;
        created_id(res).await
    }

    /// Ids of the runs of `workflow` (first page of 100) as the admin sees them, with
    /// `filter` (e.g. `status=queued`, or empty) as extra query parameters.
    pub async fn run_ids(&self, workflow: &str, filter: &str) -> Vec<String> {
        let res = self
            .get(
                &self.admin_key,
                &format!("/v1/workflows/{workflow}/runs?limit=100&{filter}"),
            )
            .await;
        assert_eq!(res.status(), 200);
        let page: serde_json::Value = res.json().await.unwrap();
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    }

    /// The run as `key` sees it (`GET /v1/runs/{run}`), once it has finished.
    pub async fn finished_view(&self, key: &str, run: &str, within: Duration) -> serde_json::Value {
        eventually(&format!("run {run} to finish"), within, || async {
            let res = self.get(key, &format!("/v1/runs/{run}")).await;
            let view: serde_json::Value = res.json().await.ok()?;
            (view["finished_at"] != serde_json::Value::Null).then_some(view)
        })
        .await
    }
}

/// The `id` of a 201 answer; fails the test on any other status.
pub async fn created_id(res: reqwest::Response) -> String {
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    res.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A new key for the namespace (not yet necessarily visible to a server).
pub async fn new_key(ns: &TestNamespace, scopes: &[flowline_api::plumbing::auth::Scope]) -> String {
    flowline_api::keys::create_key(ns.client.clone(), &ns.name, "test", scopes)
        .await
        .unwrap()
        .value
}

async fn annotate_namespace(ns: &TestNamespace, annotations: &[(&str, &str)]) {
    if annotations.is_empty() {
        return;
    }
    let map: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
        .collect();
    let patch = serde_json::json!({"metadata": {"annotations": map}});
    Api::<Namespace>::all(ns.client.clone())
        .patch(
            &ns.name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

/// Asserts an error response: status, code, a message, and the rate-limit headers.
pub async fn assert_error(res: reqwest::Response, status: u16, code: &str) -> serde_json::Value {
    assert_eq!(res.status().as_u16(), status, "expected {status} {code}");
    for h in [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ] {
        assert!(res.headers().contains_key(h), "{h} missing on a {status}");
    }
    let body: serde_json::Value = res.json().await.expect("error bodies are JSON");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    body
}

/// Waits until the Run has a final status, and returns it.
pub async fn finished_run(
    ns: &TestNamespace,
    name: &str,
    within: Duration,
) -> flowline_core::crd::Run {
    let runs = ns.api::<flowline_core::crd::Run>();
    eventually(&format!("run {name} to finish"), within, || async {
        let run = runs.get(name).await.ok()?;
        run.status
            .as_ref()
            .is_some_and(|s| s.phase.is_finished())
            .then_some(run)
    })
    .await
}

/// Asserts that the Run `name` has exactly one owner reference: its workflow's
/// controller reference, as the API writes it (so the workflow counts it and deleting
/// the workflow deletes it), whichever path created it.
pub async fn assert_owned_by_its_workflow(ns: &TestNamespace, name: &str) {
    let run = ns.api::<flowline_core::crd::Run>().get(name).await.unwrap();
    let wf = ns
        .api::<flowline_core::crd::Workflow>()
        .get(&run.spec.workflow_ref)
        .await
        .unwrap();
    let owner = kube::Resource::controller_owner_ref(&wf, &()).expect("a stored workflow");
    assert_eq!(
        run.metadata.owner_references,
        Some(vec![owner]),
        "run {name} of {}",
        run.spec.workflow_ref
    );
}

/// Waits until every named Run has finished, and asserts each succeeded.
pub async fn all_succeeded(ns: &TestNamespace, names: &[String], within: Duration) {
    for name in names {
        let status = finished_run(ns, name, within).await.status.unwrap();
        assert_eq!(
            status.phase,
            flowline_core::crd::RunPhase::Succeeded,
            "{name}: {:?}",
            status.error
        );
    }
}

/// The text of `/metrics` of the process serving on `port`; None when it does not
/// answer.
pub async fn metrics_text(port: u16) -> Option<String> {
    http_client()
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()
}

/// The value of the unlabelled metric `name` on the process serving `port`; None
/// when it does not answer or has no such metric.
pub async fn gauge(port: u16, name: &str) -> Option<u64> {
    let text = metrics_text(port).await?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

/// Asks the Run `name` to stop, as `POST /v1/runs/{id}/cancel` and kubectl users do
/// (`spec.cancel`).
pub async fn request_cancel(ns: &TestNamespace, name: &str) {
    ns.api::<flowline_core::crd::Run>()
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"cancel": true}})),
        )
        .await
        .unwrap();
}

/// Waits until the namespace holds no Job (a cancelled run's step Jobs are deleted).
pub async fn no_jobs_left(ns: &TestNamespace) {
    let jobs = ns.api::<k8s_openapi::api::batch::v1::Job>();
    eventually(
        "every step Job to be deleted",
        Duration::from_secs(30),
        || async {
            jobs.list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await
}

/// Waits until step `step` of the Run is running.
pub async fn step_running(ns: &TestNamespace, name: &str, step: &str) {
    let runs = ns.api::<flowline_core::crd::Run>();
    eventually(
        &format!("step {step} of {name} to be running"),
        Duration::from_secs(30),
        || async {
            let run = runs.get(name).await.ok()?;
            let record = run
                .status
                .as_ref()?
                .steps
                .iter()
                .find(|s| s.step_id == step)?;
            (record.status == flowline_core::crd::StepPhase::Running).then_some(())
        },
    )
    .await
}

/// Waits until step `step` of the Run `name` waits and the run is parked (the status
/// that says so has landed); returns the Run.
pub async fn parked_on(ns: &TestNamespace, name: &str, step: &str) -> flowline_core::crd::Run {
    let runs = ns.api::<flowline_core::crd::Run>();
    eventually(
        &format!("step {step} of {name} to wait, the run parked"),
        Duration::from_secs(30),
        || async {
            let run = runs.get(name).await.ok()?;
            let status = run.status.as_ref()?;
            let record = status.steps.iter().find(|s| s.step_id == step)?;
            (record.status == flowline_core::crd::StepPhase::Waiting && status.parked)
                .then_some(run)
        },
    )
    .await
}

/// A child process killed when the test ends, even when it fails.
pub struct Process(Child);

impl Process {
    /// Spawns `cmd`; the process is killed when the returned value is dropped.
    pub fn spawn(mut cmd: Command) -> Process {
        Process(cmd.spawn().unwrap())
    }

    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// Sends SIGTERM (what Kubernetes sends to stop a pod).
    pub fn terminate(&self) {
        let kill = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success(), "kill -TERM failed");
    }

    /// The exit status, once the process has ended.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.0.try_wait().ok().flatten()
    }

    /// An operator process reconciling only `ns`, with a short lease (long enough that
    /// a loaded test machine does not make a leader miss its renewals and step down),
    /// plus `extra` flags. Returns it and the port of its HTTP listener.
    pub fn operator(ns: &TestNamespace, extra: &[&str]) -> (Process, u16) {
        Self::operator_with_env(ns, extra, &[])
    }

    /// [`Process::operator`] with extra environment variables (e.g. its own KUBECONFIG).
    pub fn operator_with_env(
        ns: &TestNamespace,
        extra: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> (Process, u16) {
        let (mut cmd, port) = Self::operator_command(ns, extra);
        cmd.envs(env.iter().copied()).stderr(Stdio::null());
        (Process::spawn(cmd), port)
    }

    /// [`Process::operator`] writing its log to `log`.
    pub fn operator_logging_to(
        ns: &TestNamespace,
        extra: &[&str],
        log: &std::path::Path,
    ) -> (Process, u16) {
        let (mut cmd, port) = Self::operator_command(ns, extra);
        cmd.stderr(std::fs::File::create(log).unwrap());
        (Process::spawn(cmd), port)
    }

    fn operator_command(ns: &TestNamespace, extra: &[&str]) -> (Command, u16) {
        let port = crate::foundation::free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flowline"));
        cmd.args(["operator", "--listen", &format!("127.0.0.1:{port}")])
            .args([
                "--watch-namespace",
                &ns.name,
                "--leader-election-namespace",
                &ns.name,
            ])
            .args(["--leader-lease-seconds", "8"])
            .args(extra);
        (cmd, port)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The most of `starts` (milliseconds, any order) inside one window of `window_ms` (a
/// start at the window's end no longer counts the one at its beginning).
pub fn most_within(mut starts: Vec<i64>, window_ms: i64) -> usize {
    starts.sort();
    (0..starts.len())
        .map(|i| {
            starts[i..]
                .iter()
                .take_while(|t| **t - starts[i] < window_ms)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn a_window_counts_starts_less_than_a_period_apart() {
    assert_eq!(most_within(vec![], 1000), 0);
    assert_eq!(most_within(vec![0, 1000, 2000], 1000), 1);
    assert_eq!(most_within(vec![2000, 0, 999], 1000), 2);
}

/// Waits until the process serving on `port` is ready.
pub async fn ready(port: u16) {
    eventually(
        "the operator to be ready",
        Duration::from_secs(30),
        || async { (crate::foundation::http_status(port, "/readyz") == Some(200)).then_some(()) },
    )
    .await;
}

/// The run controller of namespace `ns`, in this process, until the token is cancelled;
/// `http` is the steps' client (the destination guard's), `jobs` how step Jobs are built.
pub fn spawn_run_controller(
    ns: &TestNamespace,
    http: flowline_egress::GuardedClient,
    jobs: flowline_engine::job::JobSettings,
) -> (
    tokio_util::sync::CancellationToken,
    flowline_telemetry::engine_metrics::EngineTelemetry,
) {
    spawn_run_controller_tuned(ns, http, jobs, |_| {})
}

/// [`spawn_run_controller`], `tune` setting the controller up before it starts (the
/// account bound, for instance).
pub fn spawn_run_controller_tuned(
    ns: &TestNamespace,
    http: flowline_egress::GuardedClient,
    jobs: flowline_engine::job::JobSettings,
    tune: impl FnOnce(&flowline_controller::run::Context),
) -> (
    tokio_util::sync::CancellationToken,
    flowline_telemetry::engine_metrics::EngineTelemetry,
) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let telemetry = flowline_telemetry::engine_metrics::EngineTelemetry::new(
        &flowline_telemetry::metrics::Metrics::default(),
        Some(ns.client.clone()),
    );
    let ctx = flowline_controller::run::Context::new(
        ns.client.clone(),
        http,
        flowline_core::crd::Executor::Inline,
        Some(ns.name.clone()),
        telemetry.clone(),
        "http://127.0.0.1:8080".into(),
        jobs,
    );
    tune(&ctx);
    let stop = tokio_util::sync::CancellationToken::new();
    let runs =
        flowline_controller::run_cache::RunCache::start(&ns.client, Some(&ns.name), stop.clone());
    tokio::spawn(flowline_controller::run::run(
        ctx,
        runs.clone(),
        stop.clone(),
    ));
    runs.watch.begin();
    (stop, telemetry)
}

/// The steps' client with the destination guard's defaults (public addresses only).
pub fn guarded_client() -> flowline_egress::GuardedClient {
    flowline_egress::GuardedClient::new(Default::default()).unwrap()
}

/// Runs a Python script of the repository with the test venv (which holds the
/// off-the-shelf `standardwebhooks` package), `input` as JSON on its stdin; returns
/// its stdout lines. Fails the test when the script fails.
pub fn python_lines(script: &str, input: &serde_json::Value) -> Vec<String> {
    use std::io::Write;
    use std::process::Stdio;
    let python = repo_root().join(".flowline/venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run `make python-deps` (make test does)",
        python.display()
    );
    let mut child = std::process::Command::new(python)
        .arg(repo_root().join(script))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The steps' client, allowed to reach the test servers on 127.0.0.1 (the guard
/// refuses loopback by default).
pub fn loopback_client() -> flowline_egress::GuardedClient {
    flowline_egress::GuardedClient::new(flowline_egress::ClientSettings {
        policy: flowline_egress::DestinationPolicy::from_list("127.0.0.1/32").unwrap(),
        ..Default::default()
    })
    .unwrap()
}

/// [`assert_error`], and its message says `fragment`.
pub async fn assert_error_saying(
    res: reqwest::Response,
    status: u16,
    code: &str,
    fragment: &str,
) -> serde_json::Value {
    let body = assert_error(res, status, code).await;
    assert!(message_of(&body).contains(fragment), "{body}");
    body
}

/// The message of an error body (empty when there is none).
pub fn message_of(body: &serde_json::Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

/// The test image on the real node: busybox with its applets.
pub const TOOLBOX: &str = "flowline.local/toolbox:1";

/// The step image `make images` imported into the real node.
pub fn step_image() -> String {
    let path = repo_root().join(".flowline/cluster/step-image");
    std::fs::read_to_string(&path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: these tests need the real node and its images (make cluster images)",
                path.display()
            )
        })
}
