//! What the API server itself counts, shared by the benchmarks.

use kube::Client;

/// Writes (create, patch, update, delete, apply) the API server has served so far to
/// the given resources (plural names), all namespaces, from `apiserver_request_total`.
pub async fn writes(client: &Client, resources: &[&str]) -> f64 {
    let text = client
        .request_text(http::Request::get("/metrics").body(vec![]).unwrap())
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| {
            resources
                .iter()
                .any(|r| l.contains(&format!("resource=\"{r}\"")))
        })
        .filter(|l| {
            ["POST", "PATCH", "PUT", "DELETE", "APPLY"]
                .iter()
                .any(|v| l.contains(&format!("verb=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
