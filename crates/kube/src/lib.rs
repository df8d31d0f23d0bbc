//! Small helpers around the Kubernetes client shared by every component.

pub mod lenient;
/// A mocked API server for unit tests (here, and in the crates above with `mock`).
#[cfg(any(test, feature = "mock"))]
pub mod mock_api;
pub mod name_index;
pub mod seal_key;
pub mod shared_watch;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};

/// Why the cluster is not usable for Flowline.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "no usable Kubernetes configuration (set KUBECONFIG, or run in a pod with a service account): {0}"
    )]
    Config(#[source] kube::Error),
    #[error("cannot use the kubeconfig (--kubeconfig, --context): {0}")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    #[error(
        "CustomResourceDefinition {0} is not installed; install the CRDs with `kubectl apply --server-side -f crds/`"
    )]
    CrdMissing(String),
    #[error("CustomResourceDefinition {name} did not become Established within {seconds}s")]
    CrdNotEstablished { name: String, seconds: u64 },
    #[error("the Kubernetes API server could not be reached: {0}")]
    Api(#[source] kube::Error),
}

/// Which cluster to talk to: `--kubeconfig` and `--context` when given, else the usual
/// rules (`KUBECONFIG` / `~/.kube/config` and its current context, else in-cluster).
#[derive(Clone, Debug, Default)]
pub struct Connection {
    pub kubeconfig: Option<std::path::PathBuf>,
    pub context: Option<String>,
}

impl Connection {
    /// The client configuration; its `default_namespace` is the context's namespace.
    pub async fn config(&self) -> Result<kube::Config, ClusterError> {
        use kube::config::{KubeConfigOptions, Kubeconfig};
        if self.kubeconfig.is_none() && self.context.is_none() {
            return kube::Config::infer()
                .await
                .map_err(|e| ClusterError::Config(kube::Error::InferConfig(e)));
        }
        let kubeconfig = match &self.kubeconfig {
            Some(path) => Kubeconfig::read_from(path),
            None => Kubeconfig::read(),
        }
        .map_err(ClusterError::Kubeconfig)?;
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(ClusterError::Kubeconfig)
    }

    pub async fn client(&self) -> Result<Client, ClusterError> {
        Client::try_from(self.config().await?).map_err(ClusterError::Config)
    }
}

/// A client from the usual rules: `KUBECONFIG` / `~/.kube/config`, else in-cluster.
pub async fn client() -> Result<Client, ClusterError> {
    Connection::default().client().await
}

/// Waits until every Flowline CRD exists and is Established.
pub async fn wait_for_crds(client: &Client, timeout: Duration) -> Result<(), ClusterError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in flowline_core::crd::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.get_opt(&name).await.map_err(ClusterError::Api)? {
            None => return Err(ClusterError::CrdMissing(name)),
            Some(_) => {
                let established =
                    await_condition(api.clone(), &name, conditions::is_crd_established());
                match tokio::time::timeout(timeout, established).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(err)) => {
                        return Err(ClusterError::Api(kube::Error::Service(Box::new(err))));
                    }
                    Err(_) => {
                        return Err(ClusterError::CrdNotEstablished {
                            name,
                            seconds: timeout.as_secs(),
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

/// The namespaces a process watches: the whole cluster, or a listed set (namespaced
/// installs, whose RBAC grants only those). Listed namespaces get one watch each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchScope {
    Cluster,
    Namespaces(std::sync::Arc<[String]>),
}

impl WatchScope {
    /// An empty list means the whole cluster.
    pub fn from_list(namespaces: &[String]) -> Self {
        let mut list: Vec<String> = namespaces
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        list.sort();
        list.dedup();
        if list.is_empty() {
            WatchScope::Cluster
        } else {
            WatchScope::Namespaces(list.into())
        }
    }

    /// One entry per watch: `None` for the whole cluster, else each namespace.
    pub fn each(&self) -> Vec<Option<String>> {
        match self {
            WatchScope::Cluster => vec![None],
            WatchScope::Namespaces(list) => list.iter().cloned().map(Some).collect(),
        }
    }

    /// Whether objects of `namespace` are in scope.
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            WatchScope::Cluster => true,
            WatchScope::Namespaces(list) => list.iter().any(|n| n == namespace),
        }
    }
}

/// The API of a namespaced kind over one namespace, or all of them.
pub fn scoped_api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_list_is_the_cluster_and_a_list_is_deduplicated() {
        assert_eq!(WatchScope::from_list(&[]), WatchScope::Cluster);
        assert_eq!(WatchScope::from_list(&[" ".into()]), WatchScope::Cluster);
        let scope = WatchScope::from_list(&["b".into(), "a".into(), "b".into()]);
        assert_eq!(scope.each(), vec![Some("a".into()), Some("b".into())]);
        assert!(scope.contains("a") && !scope.contains("c"));
        assert!(WatchScope::Cluster.contains("anything"));
    }
}
