//! The second reference of `make bench-api` (hack/bench-api.sh): a bare axum server
//! that answers every GET with the same bytes from memory, with the same one worker
//! thread as the `flowline api` it is compared with. What `/v1` costs on top of it is
//! authentication, rate limiting, the cache lookup and JSON shaping.
//!
//! `BARE_BODY` names a file holding the body (a `/v1` answer captured by the script),
//! `BARE_LISTEN` the address. Not a test: the script runs it in the background.

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use bytes::Bytes;

fn main() {
    let body = Bytes::from(
        std::fs::read(std::env::var("BARE_BODY").expect("BARE_BODY")).expect("body file"),
    );
    let listen = std::env::var("BARE_LISTEN").expect("BARE_LISTEN");
    let threads = std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async move {
            let answer = move || {
                let body = body.clone();
                async move { ([(CONTENT_TYPE, "application/json")], body).into_response() }
            };
            let app = Router::new().fallback(get(answer));
            let listener = tokio::net::TcpListener::bind(&listen).await.expect("bind");
            axum::serve(listener, app).await.expect("serve");
        });
}
