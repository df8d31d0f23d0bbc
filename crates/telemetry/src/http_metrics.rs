//! What the HTTP server reports: requests by matched route, method and status, their
//! duration, and the requests the rate limiter refused. The route is the router's
//! pattern (`/v1/workflows/{id}`), never the raw path, and unknown methods count as
//! `other`, so no client can grow the label sets.
//!
//! Each request's samples go to handles kept per (route, method, status): one map
//! lookup by the route's text instead of two families' lookups by label sets built
//! (and a route copied twice) per request.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::metrics::Metrics;

/// The route of requests no route matched.
pub const UNMATCHED_ROUTE: &str = "unmatched";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: String,
    pub method: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
    pub method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BudgetLabel {
    /// `account` (requests with a valid key) or `address` (the rest, and inbound hooks).
    pub budget: &'static str,
}

fn duration_histogram() -> Histogram {
    // 1 ms to about 16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

#[derive(Clone)]
pub struct HttpMetrics {
    requests: Family<RequestLabels, Counter>,
    duration: Family<RouteLabels, Histogram, fn() -> Histogram>,
    rate_limited: Family<BudgetLabel, Counter>,
    /// Handles into `requests` and `duration` (clones share the samples), by route.
    /// Bounded as the label sets are: routes are patterns, methods and statuses few.
    handles: Arc<RwLock<HashMap<String, Vec<Handles>>>>,
}

/// The series one kind of request is counted in.
struct Handles {
    method: &'static str,
    status: u16,
    requests: Counter,
    duration: Histogram,
}

impl Default for HttpMetrics {
    /// Metrics registered nowhere (tests and tools that serve no /metrics).
    fn default() -> Self {
        HttpMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            rate_limited: Family::default(),
            handles: Arc::default(),
        }
    }
}

impl HttpMetrics {
    /// Registers the families in `metrics`.
    pub fn new(metrics: &Metrics) -> Self {
        let m = HttpMetrics::default();
        metrics.with_registry(|r| {
            r.register(
                "http_requests",
                "HTTP requests, by matched route, method and status",
                m.requests.clone(),
            );
            r.register(
                "http_request_duration_seconds",
                "Duration of HTTP requests until the response head, by matched route and method",
                m.duration.clone(),
            );
            r.register(
                "rate_limited_requests",
                "Requests refused with 429, by the budget they exhausted",
                m.rate_limited.clone(),
            );
        });
        m
    }

    /// Records one answered request; `route` is the matched pattern, if any.
    pub fn record(&self, route: Option<&str>, method: &str, status: u16, took: Duration) {
        let route = route.unwrap_or(UNMATCHED_ROUTE);
        let method = known_method(method);
        let seconds = took.as_secs_f64();
        let found = |by_route: &HashMap<String, Vec<Handles>>| {
            let h = by_route
                .get(route)?
                .iter()
                .find(|h| h.method == method && h.status == status)?;
            h.requests.inc();
            h.duration.observe(seconds);
            Some(())
        };
        if found(&self.handles.read().unwrap_or_else(PoisonError::into_inner)).is_some() {
            return;
        }
        // The first request of its kind: create the series and keep their handles.
        let handles = Handles {
            method,
            status,
            requests: self
                .requests
                .get_or_create(&RequestLabels {
                    route: route.to_string(),
                    method,
                    status,
                })
                .clone(),
            duration: self
                .duration
                .get_or_create(&RouteLabels {
                    route: route.to_string(),
                    method,
                })
                .clone(),
        };
        let mut by_route = self.handles.write().unwrap_or_else(PoisonError::into_inner);
        // Another request may have added them meanwhile.
        if found(&by_route).is_none() {
            handles.requests.inc();
            handles.duration.observe(seconds);
            by_route.entry(route.to_string()).or_default().push(handles);
        }
    }

    /// Counts a request refused by the rate limiter.
    pub fn rate_limited(&self, budget: &'static str) {
        self.rate_limited
            .get_or_create(&BudgetLabel { budget })
            .inc();
    }
}

/// The method as a label: one of the standard ones, else `other`.
fn known_method(method: &str) -> &'static str {
    const KNOWN: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
    KNOWN.into_iter().find(|m| *m == method).unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_route_pattern_and_known_methods_only() {
        let metrics = Metrics::default();
        let http = HttpMetrics::new(&metrics);
        let ms = Duration::from_millis(3);
        http.record(Some("/v1/workflows/{id}"), "GET", 200, ms);
        http.record(Some("/v1/workflows/{id}"), "GET", 200, ms);
        http.record(None, "BREW", 404, ms);
        http.rate_limited("address");
        let text = metrics.render();
        for line in [
            "flowline_http_requests_total{route=\"/v1/workflows/{id}\",method=\"GET\",status=\"200\"} 2",
            "flowline_http_requests_total{route=\"unmatched\",method=\"other\",status=\"404\"} 1",
            "flowline_http_request_duration_seconds_count{route=\"/v1/workflows/{id}\",method=\"GET\"} 2",
            "flowline_rate_limited_requests_total{budget=\"address\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
