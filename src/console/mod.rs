//! The web console: a single-page app served at `/` from files embedded at build
//! time (`build.rs`, `console/`). It is a client of the public `/v1` API like any
//! other, authenticating with the key the user pastes; this module serves files only
//! and never imports `api` (`tests/layers.rs`), so the console has no back door.
//!
//! - `index.html` for `/` and the console's own routes (`/workflows/…`, `/runs/…`, …):
//!   a reload or a shared link lands on the app, which draws the page. `no-cache`, so
//!   a new binary's bundle is picked up at once.
//! - `/assets/<hash>/<file>`: the bundle named by its content hash, cached for a
//!   year as `immutable`; gzipped when the browser accepts it.
//! - Every response carries a strict Content-Security-Policy: scripts, styles and
//!   connections from this origin only, nothing inline, no framing.

mod assets;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use self::assets::Asset;

/// No inline script or style, nothing from another origin, no plugins, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Paths the console draws itself: a reload there serves the app, not a 404. Kept
/// apart from `/v1`, `/healthz`, `/readyz` and `/metrics`.
const CLIENT_ROUTES: &[&str] = &[
    "/",
    "/workflows",
    "/workflows/{*rest}",
    "/runs",
    "/runs/{*rest}",
    "/webhooks",
    "/webhooks/{*rest}",
    "/api-keys",
    "/events",
    "/events/{*rest}",
];

/// The console's routes (no state, no authentication: the files are public, the
/// data behind `/v1` is not).
pub fn router() -> Router {
    let mut router = Router::new().route("/assets/{hash}/{*path}", get(asset));
    for route in CLIENT_ROUTES {
        router = router.route(route, get(index));
    }
    router
}

async fn index(headers: HeaderMap) -> Response {
    serve(&assets::INDEX, &headers, "no-cache")
}

async fn asset(Path((hash, path)): Path<(String, String)>, headers: HeaderMap) -> Response {
    match assets::find(&hash, &path) {
        Some(asset) => serve(asset, &headers, "public, max-age=31536000, immutable"),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CACHE_CONTROL, "no-store")],
            "no such console asset (reload the page)\n",
        )
            .into_response(),
    }
}

fn serve(asset: &'static Asset, request: &HeaderMap, cache_control: &'static str) -> Response {
    let gzip = request
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(flowline_api::plumbing::encoding::accepts_gzip);
    let body = if gzip { asset.gzip } else { asset.body };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    let fixed = [
        (header::CONTENT_TYPE, asset.content_type),
        (header::CACHE_CONTROL, cache_control),
        (header::VARY, "Accept-Encoding"),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if gzip {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(uri: &str, accept_encoding: Option<&str>) -> Response {
        let mut req = Request::get(uri);
        if let Some(v) = accept_encoding {
            req = req.header(header::ACCEPT_ENCODING, v);
        }
        router()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    async fn body(res: Response) -> Vec<u8> {
        axum::body::to_bytes(res.into_body(), 1 << 22)
            .await
            .unwrap()
            .to_vec()
    }

    #[tokio::test]
    async fn client_routes_serve_the_app_uncached_with_the_policy() {
        for uri in [
            "/",
            "/workflows",
            "/workflows/wf-1/runs",
            "/runs",
            "/runs/r-1",
            "/api-keys",
            "/events",
            "/events/evt_1",
        ] {
            let res = get(uri, None).await;
            assert_eq!(res.status(), 200, "{uri}");
            let h = res.headers();
            assert_eq!(h[header::CACHE_CONTROL], "no-cache");
            assert_eq!(h[header::CONTENT_TYPE], "text/html; charset=utf-8");
            assert_eq!(h[header::CONTENT_SECURITY_POLICY], CONTENT_SECURITY_POLICY);
            assert!(h.get(header::CONTENT_ENCODING).is_none());
            assert_eq!(body(res).await, assets::INDEX.body);
        }
    }

    #[tokio::test]
    async fn assets_are_immutable_and_gzipped_when_accepted() {
        let uri = format!("/assets/{}/app.js", assets::BUNDLE_HASH);
        let res = get(&uri, Some("gzip, br")).await;
        assert_eq!(res.status(), 200);
        let h = res.headers();
        assert_eq!(
            h[header::CACHE_CONTROL],
            "public, max-age=31536000, immutable"
        );
        assert_eq!(h[header::CONTENT_ENCODING], "gzip");
        assert_eq!(h[header::VARY], "Accept-Encoding");
        assert_eq!(h[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
        let zipped = body(res).await;
        let plain = get(&uri, None).await;
        assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
        let plain = body(plain).await;
        assert!(zipped.len() < plain.len());
        assert!(zipped.starts_with(&[0x1f, 0x8b]), "a gzip stream");
    }

    #[tokio::test]
    async fn unknown_assets_and_stale_bundles_are_404() {
        for uri in [
            format!("/assets/{}/nope.js", assets::BUNDLE_HASH),
            "/assets/000000000000/app.js".to_string(),
        ] {
            let res = get(&uri, None).await;
            assert_eq!(res.status(), 404, "{uri}");
            assert_eq!(res.headers()[header::CACHE_CONTROL], "no-store");
        }
        // Not a console route: left to whatever else the server routes (here nothing).
        assert_eq!(get("/v1/workflows", None).await.status(), 404);
    }
}
