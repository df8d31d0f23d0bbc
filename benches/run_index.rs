//! The run cache's index by workflow, in process: one workflow's runs looked up the
//! way `GET /v1/workflows/{id}/runs` did before the index (every cached run scanned)
//! and the way it does now (the index's names, each resolved in the store), over a
//! store of summarized runs the size of `make bench-scale`'s (10,000 workflows,
//! 100,000 runs, one namespace). Both then sort and cut the same page of 20. Also the
//! index's memory: the process's RSS before and after it is built, against the
//! store's own growth. No API server, no HTTP: the lookup alone.
//!
//! `cargo bench --bench run_index` (release). Sizes: FLOWLINE_INDEX_WORKFLOWS,
//! FLOWLINE_INDEX_RUNS. Not a test.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowline_api::plumbing::pagination::{self, ListQuery, SortKey};
use flowline_api::runs::views::RunListItem;
use flowline_core::crd::Run;
use flowline_core::crd::timestamps::created_at;
use flowline_kube::lenient::Lenient;
use flowline_kube::name_index::{NameIndex, by_workflow};
use kube::Resource;
use kube::ResourceExt;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use serde_json::json;

const NAMESPACE: &str = "bench";

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A finished run as the API's cache keeps it (a summary).
fn run(i: usize, workflows: usize) -> Lenient<Run> {
    run_in(NAMESPACE, i, workflows)
}

/// [`run`], in namespace `ns`.
fn run_in(ns: &str, i: usize, workflows: usize) -> Lenient<Run> {
    let run: Run = serde_json::from_value(json!({
        "apiVersion": "flowline.io/v1", "kind": "Run",
        "metadata": {"name": format!("run-{i:07}"), "namespace": ns,
            "uid": format!("00000000-0000-0000-0000-{i:012}"), "resourceVersion": format!("{}", 1000 + i),
            "creationTimestamp": format!("2026-11-25T{:02}:{:02}:{:02}Z", (i / 3600) % 24, (i / 60) % 60, i % 60),
            "labels": {"flowline.io/workflow": format!("wf-{:05}", i % workflows)}},
        "spec": {"workflowRef": format!("wf-{:05}", i % workflows), "trigger": "manual"},
        "status": {"phase": "succeeded", "startedAt": "2026-11-25T08:00:00Z",
            "finishedAt": "2026-11-25T08:00:01Z", "durationMs": 1000},
    }))
    .expect("a run");
    Lenient::Decoded(Arc::new(run))
}

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn page(runs: Vec<Arc<Run>>) -> usize {
    let query = ListQuery {
        limit: 20,
        ..ListQuery::default()
    };
    let keyed = runs
        .into_iter()
        .map(|r| (SortKey::new(created_at(&r.metadata), &r.name_any()), r))
        .collect();
    let page = pagination::paginate(keyed, &query);
    let items: Vec<RunListItem> = page.data.iter().map(|r| RunListItem::from(&**r)).collect();
    items.len()
}

/// p50 and p99 of `samples` calls, in milliseconds.
fn latencies(samples: usize, mut call: impl FnMut(usize) -> usize) -> (f64, f64, usize) {
    let mut took: Vec<Duration> = Vec::with_capacity(samples);
    let mut listed = 0;
    for i in 0..samples {
        let start = Instant::now();
        listed = call(i);
        took.push(start.elapsed());
    }
    took.sort();
    let ms = |q: f64| took[((samples as f64 * q) as usize).min(samples - 1)].as_secs_f64() * 1000.0;
    (ms(0.50), ms(0.99), listed)
}

fn main() {
    let workflows = setting("FLOWLINE_INDEX_WORKFLOWS", 10_000);
    let runs_n = setting("FLOWLINE_INDEX_RUNS", 100_000);
    // Each run is made where it is applied, so the store's growth counts the runs
    // and the index's counts only what the index keeps.
    let (store, mut writer) = reflector::store::<Lenient<Run>>();
    let before_store = rss_bytes();
    writer.apply_watcher_event(&watcher::Event::Init);
    for i in 0..runs_n {
        writer.apply_watcher_event(&watcher::Event::InitApply(run(i, workflows)));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let store_bytes = rss_bytes().saturating_sub(before_store);

    let before_index = rss_bytes();
    let mut index = NameIndex::new(by_workflow);
    index.apply(&watcher::Event::Init);
    for i in 0..runs_n {
        index.apply(&watcher::Event::InitApply(run(i, workflows)));
    }
    index.apply(&watcher::Event::InitDone);
    let index_bytes = rss_bytes().saturating_sub(before_index);

    let wf = |i: usize| format!("wf-{:05}", (i * 7919) % workflows);
    // Before: every cached run of the namespace, then the workflow's.
    let scan = latencies(200, |i| {
        let wf = wf(i);
        let runs = store
            .state()
            .into_iter()
            .filter_map(|o| o.decoded().cloned())
            .filter(|r| r.metadata.namespace.as_deref() == Some(NAMESPACE))
            .filter(|r| r.spec.workflow_ref == wf)
            .collect();
        page(runs)
    });
    // Now: the index's names, each resolved in the store and checked.
    let indexed = latencies(20_000, |i| {
        let wf = wf(i);
        let runs = index
            .names(NAMESPACE, &wf)
            .iter()
            .filter_map(|name| store.get(&ObjectRef::new(name).within(NAMESPACE)))
            .filter_map(|o| o.decoded().cloned())
            .filter(|r| r.spec.workflow_ref == wf)
            .collect();
        page(runs)
    });
    assert_eq!(scan.2, indexed.2, "both list the same runs");

    println!(
        "{runs_n} summarized runs over {workflows} workflows, one namespace; a page of {} runs",
        indexed.2
    );
    println!();
    println!("| measure | indexed | scan (before) | ratio |");
    println!("|---|---|---|---|");
    latency_row("list one workflow's runs", indexed, scan);
    println!(
        "| memory: RSS growth, index vs the run store it indexes | {:.1} MB ({:.0} B per run) | {:.1} MB ({:.0} B per run) | {:.3}x |",
        index_bytes as f64 / 1e6,
        index_bytes as f64 / runs_n as f64,
        store_bytes as f64 / 1e6,
        store_bytes as f64 / runs_n as f64,
        index_bytes as f64 / store_bytes.max(1) as f64
    );
    accounts(runs_n, workflows);
}

/// One account's objects among many accounts' (`GET /v1/workflows`, `/v1/webhooks`,
/// `/v1/keys`, a redelivery's event look-up): the same runs spread over
/// FLOWLINE_INDEX_ACCOUNTS namespaces (default 1,000), read by namespace the way the
/// API did before its index by namespace (every cached object, then the account's)
/// and does now (the account's names, each resolved in the store).
fn accounts(runs_n: usize, workflows: usize) {
    let accounts = setting("FLOWLINE_INDEX_ACCOUNTS", 1_000);
    let ns = |i: usize| format!("acct-{:04}", i % accounts);
    let (store, mut writer) = reflector::store::<Lenient<Run>>();
    let mut index = NameIndex::new(by_workflow);
    let mut apply = |event: watcher::Event<Lenient<Run>>| {
        index.apply(&event);
        writer.apply_watcher_event(&event);
    };
    apply(watcher::Event::Init);
    for i in 0..runs_n {
        apply(watcher::Event::InitApply(run_in(&ns(i), i, workflows)));
    }
    apply(watcher::Event::InitDone);
    let account = |i: usize| ns(i * 7919);
    let scan = latencies(200, |i| {
        let ns = account(i);
        store
            .state()
            .into_iter()
            .filter(|o| o.meta().namespace.as_deref() == Some(ns.as_str()))
            .count()
    });
    let indexed = latencies(20_000, |i| {
        let ns = account(i);
        index
            .names_in(&ns)
            .iter()
            .filter_map(|name| store.get(&ObjectRef::new(name).within(&ns)))
            .count()
    });
    assert_eq!(scan.2, indexed.2, "both read the same objects");
    println!();
    println!(
        "the same runs over {accounts} accounts (namespaces); one account's {} objects",
        indexed.2
    );
    println!();
    println!("| measure | indexed | scan (before) | ratio |");
    println!("|---|---|---|---|");
    latency_row("read one account's objects", indexed, scan);
}

/// A table row: p50 and p99 of the indexed read against the scan.
fn latency_row(measure: &str, indexed: (f64, f64, usize), scan: (f64, f64, usize)) {
    println!(
        "| {measure}, p50 / p99 ms | {:.4} / {:.4} | {:.2} / {:.2} | {:.0}x / {:.0}x faster |",
        indexed.0,
        indexed.1,
        scan.0,
        scan.1,
        scan.0 / indexed.0,
        scan.1 / indexed.1
    );
}
