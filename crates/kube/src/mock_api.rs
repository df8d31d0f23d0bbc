//! A mocked Kubernetes API server for unit tests of apply paths (as kube-rs's
//! controller-rs does): a `Client` whose every request is recorded and answered by a
//! function of the request. Cluster tests use the real API server.

use std::sync::{Arc, Mutex};

use http_body_util::BodyExt;
use kube::Client;
use serde_json::{Value, json};

/// One request the mocked server got.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// The query string (empty when none).
    pub query: String,
    pub body: Value,
}

/// The requests a mocked server got, in order.
pub type Log = Arc<Mutex<Vec<Seen>>>;

/// A `Status` body with `code`, as the API server sends with an error.
pub fn status(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "message": format!("mocked {code}"), "code": code})
}

/// A client of a server that answers each request with `answer(request)`: a status
/// code and a JSON body.
pub fn client(answer: impl Fn(&Seen) -> (u16, Value) + Send + Sync + 'static) -> (Client, Log) {
    let log: Log = Arc::default();
    let answer = Arc::new(answer);
    let recorded = log.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (recorded, answer) = (recorded.clone(), answer.clone());
        async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await?.to_bytes();
            let seen = Seen {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().unwrap_or_default().to_string(),
                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            };
            let (code, reply) = answer(&seen);
            recorded.lock().unwrap().push(seen);
            Ok::<_, tower::BoxError>(
                http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(bytes::Bytes::from(
                        serde_json::to_vec(&reply)?,
                    )))?,
            )
        }
    });
    (Client::new(service, "n"), log)
}

/// The requests `log` holds so far.
pub fn seen(log: &Log) -> Vec<Seen> {
    log.lock().unwrap().clone()
}
