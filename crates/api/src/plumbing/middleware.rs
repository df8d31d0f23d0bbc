//! Authentication and rate limiting, applied to every `/v1` request (unknown
//! routes included), so every response carries the rate-limit headers.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::{Principal, bearer_token, hash_key_hex};
use super::client_ip::budget_key;
use super::error::ApiError;
use super::ratelimit::Decision;
use crate::state::ApiState;

pub async fn authenticate(State(state): State<ApiState>, mut req: Request, next: Next) -> Response {
    let now = jiff::Timestamp::now().as_second().max(0) as u64;
    let principal = if state.caches.is_synced() {
        principal(&state, req.headers())
    } else {
        None
    };
    // Two budgets: an account's for requests with a valid key, a client address's
    // for the rest (no key, an unknown or malformed one, or caches not yet synced).
    let budget = if principal.is_some() {
        "account"
    } else {
        "address"
    };
    let decision = match &principal {
        Some(p) => {
            let ns = state.caches.namespaces.get(None, &p.namespace);
            let limit = state
                .config
                .plans
                .limit_for(ns.as_ref().and_then(|n| n.metadata.annotations.as_ref()));
            state
                .limiter
                .check_borrowed(p.namespace.as_str(), limit, now)
        }
        None => address_decision(&state, &req, now),
    };
    let mut response = if let Some(refused) = refusal(&state, &decision, now, budget) {
        refused
    } else if let Some(p) = principal {
        // For the access log.
        let account = p.account();
        req.extensions_mut().insert(p);
        let mut response = next.run(req).await;
        response.extensions_mut().insert(account);
        response
    } else {
        ApiError::Unauthenticated.into_response()
    };
    add_headers(response.headers_mut(), &decision);
    response
}

/// Counts a request against its client address's budget of unauthenticated requests.
fn address_decision(state: &ApiState, req: &Request, now: u64) -> Decision {
    state.client_limiter.check(
        budget_key(client_ip(state, req)),
        state.config.unauthenticated_requests,
        now,
    )
}

/// For routes that authenticate themselves (inbound hooks, verified by signature):
/// every request spends its address's unauthenticated budget, the one that
/// requests without a valid key spend, so a flood of forged hooks from one address is
/// cut off there and never touches an account's budget.
pub async fn limit_by_address(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    let now = jiff::Timestamp::now().as_second().max(0) as u64;
    let decision = address_decision(&state, &req, now);
    let mut response = match refusal(&state, &decision, now, "address") {
        Some(refused) => refused,
        None => next.run(req).await,
    };
    add_headers(response.headers_mut(), &decision);
    response
}

/// The answer to a request refused before its handler: its budget is spent (429), or
/// the caches have not listed everything yet (503). A 429 is counted by `budget`.
fn refusal(
    state: &ApiState,
    decision: &Decision,
    now: u64,
    budget: &'static str,
) -> Option<Response> {
    if !decision.allowed {
        state.metrics.rate_limited(budget);
        Some(
            ApiError::RateLimited {
                retry_after_secs: decision.retry_after(now),
            }
            .into_response(),
        )
    } else if !state.caches.is_synced() {
        Some(ApiError::Unavailable.into_response())
    } else {
        None
    }
}

fn principal(state: &ApiState, headers: &HeaderMap) -> Option<Principal> {
    let token = bearer_token(headers.get(header::AUTHORIZATION)?.to_str().ok()?)?;
    state
        .key_index
        .resolve(&state.caches.api_keys, hash_key_hex(token).as_str())
}

/// The client address of a request (connections without one, which only in-process
/// callers make, share the unspecified address).
fn client_ip(state: &ApiState, req: &Request) -> IpAddr {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    state.config.trusted_proxies.client(peer, req.headers())
}

fn add_headers(headers: &mut HeaderMap, d: &Decision) {
    headers.insert("x-ratelimit-limit", HeaderValue::from(d.limit));
    headers.insert("x-ratelimit-remaining", HeaderValue::from(d.remaining));
    headers.insert("x-ratelimit-reset", HeaderValue::from(d.reset));
}
