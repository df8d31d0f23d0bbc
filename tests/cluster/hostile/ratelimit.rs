//! Hostile-tenant tests: requests without a valid key, from one address or posing as
//! many. Each address has its own budget, apart from every account's; a forged
//! `X-Forwarded-For` buys nothing unless a trusted proxy wrote it.

use std::time::Duration;

use crate::support::{ApiOptions, TestApi, assert_error};

/// The unauthenticated budget of these tests.
const BUDGET: u32 = 5;
/// Long windows, so that a test does not straddle two of them (see `fresh_window`).
const WINDOW_SECS: u64 = 3_600;

async fn api(prefix: &str, trusted_proxies: &[&str]) -> TestApi {
    let proxies = trusted_proxies
        .iter()
        .map(|c| flowline_egress::parse_cidr(c).unwrap())
        .collect();
    let api = TestApi::start_tuned(
        prefix,
        ApiOptions {
            window_secs: WINDOW_SECS,
            ..ApiOptions::default()
        },
        |config| {
            config.unauthenticated_requests = BUDGET;
            config.trusted_proxies =
                flowline_api::plumbing::client_ip::TrustedProxies::new(proxies);
        },
    )
    .await;
    fresh_window(&api).await;
    api
}

/// Waits out the current window when it ends within a minute, so the counts below
/// all fall into one window.
async fn fresh_window(api: &TestApi) {
    let res = api.get(&api.admin_key, "/v1/workflows").await;
    let reset: i64 = res.headers()["x-ratelimit-reset"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let left = reset - jiff::Timestamp::now().as_second();
    if left < 60 {
        // Pacing, not a check: windows follow the wall clock, so the event waited for
        // is the clock passing `reset`; polling for it would spend the budget under test.
        tokio::time::sleep(Duration::from_secs(left.max(0) as u64 + 1)).await;
    }
}

/// A request to a /v1 route with an optional bearer token and X-Forwarded-For.
async fn send(api: &TestApi, key: Option<&str>, forwarded_for: Option<&str>) -> reqwest::Response {
    let mut req = api.http.get(api.url("/v1/workflows"));
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    if let Some(xff) = forwarded_for {
        req = req.header("x-forwarded-for", xff);
    }
    req.send().await.unwrap()
}

/// Spends what is left of one client's budget: 401s with the address's own headers,
/// counting down to 0. A forwarded client is new, so it starts at BUDGET - 1; the test's
/// own address may have spent some already (starting the server polls with a key the
/// cache has not seen yet, which counts as no key).
async fn spend_budget(api: &TestApi, forwarded_for: Option<&str>) {
    let mut expected = forwarded_for.map(|_| BUDGET - 1);
    loop {
        let res = send(api, None, forwarded_for).await;
        assert_eq!(
            res.headers()["x-ratelimit-limit"],
            BUDGET.to_string().as_str()
        );
        let remaining: u32 = res.headers()["x-ratelimit-remaining"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        if let Some(expected) = expected {
            assert_eq!(remaining, expected, "{forwarded_for:?}");
        }
        assert_error(res, 401, "unauthenticated").await;
        if remaining == 0 {
            return;
        }
        expected = Some(remaining - 1);
    }
}

async fn assert_limited(res: reqwest::Response, what: &str) {
    assert_eq!(res.status(), 429, "{what}");
    assert!(res.headers().contains_key("retry-after"), "{what}");
    assert_eq!(res.headers()["x-ratelimit-remaining"], "0", "{what}");
    assert_error(res, 429, "rate_limited").await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn an_address_without_a_key_is_limited_and_a_forged_forwarded_for_buys_nothing() {
    let api = api("hostile-rate", &[]).await;
    spend_budget(&api, None).await;
    assert_limited(send(&api, None, None).await, "no key, over budget").await;
    assert_limited(
        send(
            &api,
            Some("flk_guessedGuessedGuessedGuessedGuessed1234"),
            None,
        )
        .await,
        "an unknown key counts as no key",
    )
    .await;
    assert_limited(
        send(&api, Some("not-a-bearer"), None).await,
        "a malformed key",
    )
    .await;
    // The peer (127.0.0.1) is no trusted proxy: whatever it claims, it is itself.
    for (i, forged) in ["198.51.100.1", "203.0.113.7, 198.51.100.2", "2001:db8::1"]
        .iter()
        .enumerate()
    {
        assert_limited(
            send(&api, None, Some(forged)).await,
            &format!("forged #{i}: {forged}"),
        )
        .await;
    }

    // A valid key from the same address is counted against its account.
    let res = send(&api, Some(&api.admin_key), None).await;
    assert_eq!(res.status(), 200, "a valid key still works");
    assert_eq!(
        res.headers()["x-ratelimit-limit"],
        "1000000",
        "the account's budget"
    );
    let res = send(&api, Some(&api.admin_key), Some("198.51.100.1")).await;
    assert_eq!(res.status(), 200);
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget() {
    // The test process plays the proxy: connections come from 127.0.0.1.
    let api = api("hostile-proxy", &["127.0.0.1"]).await;
    spend_budget(&api, Some("198.51.100.1")).await;
    assert_limited(
        send(&api, None, Some("198.51.100.1")).await,
        "client 1 over budget",
    )
    .await;
    // A client that prepends a made-up address is still the address the proxy saw.
    assert_limited(
        send(&api, None, Some("192.0.2.99, 198.51.100.1")).await,
        "a prepended address is not believed",
    )
    .await;
    assert_limited(
        send(&api, None, Some("198.51.100.1, 127.0.0.1")).await,
        "a chain of trusted proxies is walked past",
    )
    .await;
    // Another client behind the proxy, and the proxy's own requests, are unaffected.
    let res = send(&api, None, Some("198.51.100.2")).await;
    assert_eq!(
        res.headers()["x-ratelimit-remaining"],
        (BUDGET - 1).to_string().as_str()
    );
    assert_error(res, 401, "unauthenticated").await;
    // The proxy's own address may have spent part of its budget already (starting the
    // server polls with a key the cache has not seen yet), but not the client's.
    let res = send(&api, None, None).await;
    assert_error(res, 401, "unauthenticated").await;
    // IPv6 clients are counted by their /64: another address of it shares the budget.
    spend_budget(&api, Some("2001:db8:0:1::1")).await;
    assert_limited(
        send(&api, None, Some("2001:db8:0:1::ffff")).await,
        "same /64",
    )
    .await;
    let res = send(&api, None, Some("2001:db8:0:2::1")).await;
    assert_error(res, 401, "unauthenticated").await;
    // A limited client with a valid key is served from its account's budget.
    let res = send(&api, Some(&api.admin_key), Some("198.51.100.1")).await;
    assert_eq!(res.status(), 200);
}
