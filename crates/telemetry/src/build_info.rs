//! `flowline_build_info`: always 1, its labels say what is running, so dashboards
//! can join on the version and tell the process roles apart.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::metrics::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    /// `operator` (controllers and API), `controller` (--no-api) or `api`.
    role: &'static str,
}

/// Registers the build info of this process in `metrics`.
pub fn register(metrics: &Metrics, role: &'static str) {
    let info = Family::<BuildLabels, Gauge>::default();
    info.get_or_create(&BuildLabels {
        version: env!("CARGO_PKG_VERSION"),
        role,
    })
    .set(1);
    metrics.with_registry(|r| {
        r.register(
            "build_info",
            "Version and role of this process (always 1)",
            info,
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_carries_the_version_and_role() {
        let metrics = Metrics::default();
        register(&metrics, "api");
        let want = format!(
            "flowline_build_info{{version=\"{}\",role=\"api\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(metrics.render().contains(&want), "{}", metrics.render());
    }
}
