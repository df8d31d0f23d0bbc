//! Shared harness for cluster tests: a client for the test cluster and a fresh
//! namespace per test, deleted when the test ends.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::PostParams;
use kube::{Api, Client};

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
