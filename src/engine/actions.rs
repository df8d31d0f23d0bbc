//! Built-in actions, executed inline (CONTRACT §6). Inputs arrive rendered.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::crd::Action;

/// Why one attempt of an action failed; the message ends up in the step's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ActionError(pub String);

fn err(msg: impl Into<String>) -> ActionError {
    ActionError(msg.into())
}

pub async fn execute(
    action: Action,
    with: &Value,
    http: &reqwest::Client,
) -> Result<Value, ActionError> {
    match action {
        Action::Transform => with
            .get("value")
            .cloned()
            .ok_or_else(|| err("transform needs `value`")),
        Action::Delay => {
            let ms = with
                .get("ms")
                .and_then(Value::as_u64)
                .ok_or_else(|| err("delay needs `ms` (integer)"))?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(json!({"slept_ms": ms}))
        }
        Action::Fail => Err(err(with
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("the step failed on purpose"))),
        Action::HttpRequest => http_request(with, http).await,
        Action::Container => Err(err("container steps run only with the job executor")),
    }
}

fn expected(with: &Value, status: u16) -> bool {
    match with.get("expect_status") {
        Some(Value::Number(n)) => n.as_u64() == Some(u64::from(status)),
        Some(Value::Array(list)) => list.iter().any(|n| n.as_u64() == Some(u64::from(status))),
        _ => (200..300).contains(&status),
    }
}

async fn http_request(with: &Value, http: &reqwest::Client) -> Result<Value, ActionError> {
    let url = with
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| err("http.request needs `url`"))?;
    let method = with
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("GET")
        .to_ascii_uppercase();
    let method = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|_| err(format!("invalid method {method}")))?;
    let mut req = http.request(method, url);
    if let Some(Value::Object(headers)) = with.get("headers") {
        for (k, v) in headers {
            let value = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            req = req.header(k.as_str(), value);
        }
    }
    if let Some(Value::Object(query)) = with.get("query") {
        let pairs: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string()),
                )
            })
            .collect();
        req = req.query(&pairs);
    }
    match with.get("body") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => req = req.body(s.clone()),
        Some(v) => req = req.json(v),
    }
    let res = req
        .send()
        .await
        .map_err(|e| err(format!("request to {url} failed: {}", without_url(&e))))?;
    let status = res.status().as_u16();
    let mut headers = Map::new();
    for (k, v) in res.headers() {
        headers.insert(
            k.as_str().to_string(),
            json!(v.to_str().unwrap_or_default()),
        );
    }
    let is_json = res
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.contains("json"));
    let bytes = res.bytes().await.map_err(|e| {
        err(format!(
            "reading the response of {url} failed: {}",
            without_url(&e)
        ))
    })?;
    let body = if is_json {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)))
    } else {
        json!(String::from_utf8_lossy(&bytes))
    };
    if !expected(with, status) {
        return Err(err(format!("{url} answered HTTP {status}")));
    }
    Ok(json!({"status": status, "headers": headers, "body": body}))
}

fn without_url(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    if let Some(url) = e.url() {
        msg = msg.replace(&format!(" ({url})"), "");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg = format!("{msg}: {s}");
        source = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> reqwest::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::new()
    }

    #[tokio::test]
    async fn transform_delay_and_fail() {
        let http = client();
        assert_eq!(
            execute(Action::Transform, &json!({"value": {"a": [1]}}), &http).await,
            Ok(json!({"a": [1]}))
        );
        assert_eq!(
            execute(Action::Delay, &json!({"ms": 1}), &http).await,
            Ok(json!({"slept_ms": 1}))
        );
        assert_eq!(
            execute(Action::Fail, &json!({"message": "nope"}), &http).await,
            Err(err("nope"))
        );
        assert!(
            execute(Action::Delay, &json!({"ms": "soon"}), &http)
                .await
                .is_err()
        );
        assert!(
            execute(Action::Container, &json!({"image": "x"}), &http)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn http_request_parses_json_and_checks_status() {
        let app = axum::Router::new()
            .route(
                "/ok",
                axum::routing::post(
                    |body: String| async move { axum::Json(json!({"echo": body})) },
                ),
            )
            .route(
                "/boom",
                axum::routing::get(|| async {
                    (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom")
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let http = client();
        let out = execute(
            Action::HttpRequest,
            &json!({"method": "post", "url": format!("{base}/ok"), "body": "hi"}),
            &http,
        )
        .await
        .unwrap();
        assert_eq!(
            (out["status"].as_u64(), &out["body"]["echo"]),
            (Some(200), &json!("hi"))
        );
        let failed = execute(
            Action::HttpRequest,
            &json!({"url": format!("{base}/boom")}),
            &http,
        )
        .await
        .unwrap_err();
        assert!(failed.0.ends_with("answered HTTP 500"), "{failed}");
        let accepted = execute(
            Action::HttpRequest,
            &json!({"url": format!("{base}/boom"), "expect_status": [500]}),
            &http,
        )
        .await;
        assert_eq!(accepted.unwrap()["body"], "boom");
    }
}
