//! Hostile-tenant tests: the destination guard. A tenant with nothing but an API key
//! points `http.request` steps at the control plane's own ports, loopback names, the
//! cloud metadata address, an IPv4-mapped loopback and a redirect into loopback. Each
//! run fails with `destination refused:` and shows nothing of the target's answer,
//! while another tenant's run through the same operator still succeeds. In a step Job,
//! `flowline step` refuses the same way.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::builders::WorkflowBuilder;
use crate::support::{Process, TestApi, eventually, ready};

/// Answered by the loopback endpoint the tenant must not reach.
const INTERNAL_ANSWER: &str = "internal-answer-7f3a";

/// Serves `app` on `addr`; returns its base URL and port.
async fn serve(addr: &str, app: axum::Router) -> (String, u16) {
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let local = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{local}"), local.port())
}

/// An internal endpoint on 127.0.0.1 (refused) that counts every request.
async fn internal() -> (String, u16, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let app = axum::Router::new().fallback(move || {
        seen.fetch_add(1, Ordering::SeqCst);
        async { INTERNAL_ANSWER }
    });
    let (base, port) = serve("127.0.0.1:0", app).await;
    (base, port, hits)
}

/// A service the operator allows (`--allow-cidr 127.0.0.2/32`): `/hello` answers,
/// `/to-internal` redirects to the internal endpoint.
async fn allowed_service(internal: &str) -> String {
    let to = internal.to_string();
    let app = axum::Router::new()
        .route(
            "/hello",
            axum::routing::get(|| async {
                axum::Json(json!({"hello": "from the allowed service"}))
            }),
        )
        .route(
            "/to-internal",
            axum::routing::get(move || async move {
                (
                    axum::http::StatusCode::FOUND,
                    [(axum::http::header::LOCATION, to)],
                )
            }),
        );
    serve("127.0.0.2:0", app).await.0
}

/// Port of the kube-apiserver of the test cluster (from KUBECONFIG).
async fn apiserver_port() -> u16 {
    let config = kube::Config::infer().await.unwrap();
    config.cluster_url.port_u16().unwrap_or(443)
}

/// An active workflow whose single step calls the URL of the run's payload.
async fn fetching_workflow(api: &TestApi, name: &str, follow_redirects: bool) -> String {
    let wf = WorkflowBuilder::new(name)
        .active()
        .step(json!({"id": "call", "action": "http.request",
        "with": {"url": "{{ trigger.payload.url }}", "follow_redirects": follow_redirects}}));
    api.workflow(&wf).await
}

async fn start_run(api: &TestApi, workflow: &str, url: &str) -> String {
    api.start_run(
        &api.admin_key,
        workflow,
        Some(json!({"payload": {"url": url}})),
    )
    .await
}

/// The run as its tenant sees it (`GET /v1/runs/{id}`), once finished.
async fn finished(api: &TestApi, run: &str) -> Value {
    api.finished_view(&api.admin_key, run, Duration::from_secs(60))
        .await
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn http_steps_cannot_reach_internal_addresses_and_others_are_still_served() {
    let tenant = TestApi::start("hx-egress").await;
    let other = TestApi::start("hx-egress-other").await;
    let (internal, internal_port, internal_hits) = internal().await;
    let allowed = allowed_service(&internal).await;
    let (_operator, port) = Process::operator(
        &tenant.ns,
        &[
            "--watch-namespace",
            &other.ns.name,
            "--allow-cidr",
            "127.0.0.2/32",
        ],
    );
    ready(port).await;

    let etcd_port = std::env::var("FLOWLINE_ETCD_PORT").unwrap_or_else(|_| "12379".into());
    let apiserver = apiserver_port().await;
    let attacks = [
        format!("http://127.0.0.1:{etcd_port}/version"),
        format!("https://127.0.0.1:{apiserver}/version"),
        format!("{internal}/"),
        format!("http://localhost:{internal_port}/"),
        format!("http://localhost.:{etcd_port}/version"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        format!("http://[::ffff:127.0.0.1]:{internal_port}/"),
        format!("{allowed}/to-internal"),
    ];
    let workflow = fetching_workflow(&tenant, "Probe", true).await;
    let mut runs = Vec::new();
    for url in &attacks {
        runs.push((url, start_run(&tenant, &workflow, url).await));
    }
    for (url, run) in runs {
        let view = finished(&tenant, &run).await;
        assert_eq!(view["status"], "failed", "{url}: {view}");
        let step_error = view["steps"][0]["error"].as_str().unwrap_or_default();
        assert!(
            step_error.starts_with("destination refused: ") && step_error.contains("--allow-cidr"),
            "{url}: {step_error}"
        );
        assert_eq!(
            view["error"].as_str(),
            Some(format!("step call (http.request) failed: {step_error}").as_str())
        );
        assert!(view["steps"][0]["output"].is_null(), "{url}: {view}");
        let text = view.to_string();
        for answer in [INTERNAL_ANSWER, "etcdserver", "etcdcluster", "gitVersion"] {
            assert!(
                !text.contains(answer),
                "{url}: the run shows {answer}: {text}"
            );
        }
        if url.contains("localhost") {
            assert!(step_error.contains("is a loopback name"), "{step_error}");
            assert!(
                !step_error.contains("127.0.0.1"),
                "resolved address named: {step_error}"
            );
        }
    }
    assert_eq!(
        internal_hits.load(Ordering::SeqCst),
        0,
        "no request reached the internal endpoint"
    );

    // The allowed service answers the same tenant, and another tenant, through the same
    // operator: the refusals stopped nothing else.
    for api in [&tenant, &other] {
        let workflow = fetching_workflow(api, "Allowed", false).await;
        let run = start_run(api, &workflow, &format!("{allowed}/hello")).await;
        let view = finished(api, &run).await;
        assert_eq!(view["status"], "succeeded", "{view}");
        assert_eq!(
            view["steps"][0]["output"]["body"],
            json!({"hello": "from the allowed service"})
        );
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn flowline_step_in_a_job_refuses_loopback_too() {
    let tenant = TestApi::start("hx-egress-job").await;
    let (internal, _, internal_hits) = internal().await;
    // kwok holds the step's pod running; the Job's own container is then executed here
    // by the real binary, with exactly the environment the Job gives it.
    let (_operator, port) = Process::operator(
        &tenant.ns,
        &[
            "--default-executor",
            "job",
            "--step-image",
            "flowline:test",
            "--job-pod-annotation",
            "flowline.io/fake-hang=true",
            "--allow-cidr",
            "127.0.0.2/32",
        ],
    );
    ready(port).await;
    let workflow = fetching_workflow(&tenant, "In a job", false).await;
    start_run(&tenant, &workflow, &format!("{internal}/")).await;
    let jobs = tenant.ns.api::<k8s_openapi::api::batch::v1::Job>();
    let container = eventually("the step's Job", Duration::from_secs(30), || async {
        let job = jobs.list(&Default::default()).await.ok()?.items.pop()?;
        job.spec?.template.spec?.containers.into_iter().next()
    })
    .await;
    assert_eq!(container.args.as_deref(), Some(&["step".to_string()][..]));
    let env: Vec<(String, String)> = container
        .env
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect();
    assert!(
        env.contains(&("FLOWLINE_ALLOW_CIDRS".into(), "127.0.0.2/32".into())),
        "the operator's allow-list reaches the pod: {env:?}"
    );
    let (code, message) = tokio::task::spawn_blocking(move || super::step_process::run_step(&env))
        .await
        .unwrap();
    assert_eq!(code, 1, "{message}");
    assert_eq!(
        message,
        "destination refused: 127.0.0.1 is loopback; allow it with --allow-cidr"
    );
    assert_eq!(internal_hits.load(Ordering::SeqCst), 0);
}
