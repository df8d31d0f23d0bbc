//! What the HTTP server reports: requests by matched route, method and status, their
//! duration, and the requests the rate limiter refused. The route is the router's
//! pattern (`/v1/workflows/{id}`), never the raw path, and unknown methods count as
//! `other`, so no client can grow the label sets.

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
}

impl Default for HttpMetrics {
    /// Metrics registered nowhere (tests and tools that serve no /metrics).
    fn default() -> Self {
        HttpMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            rate_limited: Family::default(),
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
        let route = route.unwrap_or(UNMATCHED_ROUTE).to_string();
        let method = known_method(method);
        self.requests
            .get_or_create(&RequestLabels {
                route: route.clone(),
                method,
                status,
            })
            .inc();
        self.duration
            .get_or_create(&RouteLabels { route, method })
            .observe(took.as_secs_f64());
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
