//! The web console as the operator serves it: beside `/v1` on the same port, with its
//! caching and security headers, and gone with `--no-console` (where `/` is the API's
//! again). What the console does in a browser is `make console-test`.

use crate::support::{Process, TestNamespace, http_client, ready};

#[tokio::test]
#[ignore = "needs cluster"]
async fn the_console_is_served_beside_v1_unless_disabled() {
    let ns = TestNamespace::new("console").await;
    let (_on, with) = Process::operator(&ns, &["--leader-election-lease", "console-on"]);
    let (_off, without) = Process::operator(
        &ns,
        &["--leader-election-lease", "console-off", "--no-console"],
    );
    ready(with).await;
    ready(without).await;
    let http = http_client();
    let get = |port: u16, path: &str| http.get(format!("http://127.0.0.1:{port}{path}")).send();

    let page = get(with, "/workflows/wf-x/runs").await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(page.headers()["cache-control"], "no-cache");
    let html = page.text().await.unwrap();
    let script = html
        .split("src=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .filter(|src| src.starts_with("/assets/") && src.ends_with("/app.js"))
        .unwrap_or_else(|| panic!("no module script in {html}"))
        .to_string();
    let asset = get(with, &script).await.unwrap();
    assert_eq!(asset.status(), 200);
    assert_eq!(
        asset.headers()["cache-control"],
        "public, max-age=31536000, immutable"
    );
    // /v1 is the API's, console or not: no key, no data.
    assert_eq!(get(with, "/v1/workflows").await.unwrap().status(), 401);

    for path in ["/", "/workflows", script.as_str()] {
        let res = get(without, path).await.unwrap();
        assert_eq!(res.status(), 401, "{path} with --no-console");
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(
            body["error"]["code"], "unauthenticated",
            "{path}: the API's answer"
        );
    }
}
