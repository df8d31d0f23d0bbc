//! The operator's one watch of a namespace's Runs, shared by the run controller, the
//! workflow controller and the delivery worker (`kubeutil::shared_watch`): one copy of
//! each Run in memory, compacted to what the three read
//! ([`admission::compact_for_cache`]), one LIST at start-up instead of three, and the
//! index of runs by workflow the workflow controller reads.

use kube::Client;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use flowline_core::admission;
use flowline_core::crd::Run;
use flowline_kube::name_index::SharedNameIndex;
use flowline_kube::shared_watch::SharedWatch;

/// The Runs of one watched namespace (or of the cluster), as the operator keeps them.
#[derive(Clone)]
pub struct RunCache {
    pub watch: SharedWatch<Run>,
    /// The runs of each workflow, by name: never behind the store.
    pub by_workflow: SharedNameIndex<Run>,
}

impl RunCache {
    /// Starts the watch of `namespace`'s Runs (every namespace when `None`) until
    /// `shutdown`.
    pub fn start(client: &Client, namespace: Option<&str>, shutdown: CancellationToken) -> Self {
        let by_workflow = SharedNameIndex::new(flowline_kube::name_index::by_workflow);
        let index = by_workflow.clone();
        let watch = SharedWatch::start(
            flowline_kube::scoped_api(client, namespace),
            watcher::Config::default(),
            admission::compact_for_cache,
            move |event| index.apply(event),
            shutdown,
        );
        RunCache { watch, by_workflow }
    }
}
