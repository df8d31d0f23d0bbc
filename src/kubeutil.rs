//! Small helpers around the Kubernetes client shared by every component.

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
    #[error(
        "CustomResourceDefinition {0} is not installed; install the CRDs with `kubectl apply --server-side -f crds/`"
    )]
    CrdMissing(String),
    #[error("CustomResourceDefinition {name} did not become Established within {seconds}s")]
    CrdNotEstablished { name: String, seconds: u64 },
    #[error("the Kubernetes API server could not be reached: {0}")]
    Api(#[source] kube::Error),
}

/// A client from the usual rules: `KUBECONFIG` / `~/.kube/config`, else in-cluster.
pub async fn client() -> Result<Client, ClusterError> {
    Client::try_default().await.map_err(ClusterError::Config)
}

/// Waits until every Flowline CRD exists and is Established.
pub async fn wait_for_crds(client: &Client, timeout: Duration) -> Result<(), ClusterError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crate::crd::all() {
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
