//! Rate limits and debounce as an attacker would use them: a flood of runs held back by
//! one account's rate limit and debounce, with keys that render huge texts, never slows
//! another account's runs on the same operator, and the held-back runs are neither
//! dropped nor started early.

use std::time::Duration;

use flowline_core::crd::{Run, RunPhase};
use serde_json::json;

use crate::builders::{WorkflowBuilder, step};
use crate::support::{Process, TestApi, eventually, finished_run, ready};

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_flood_of_held_back_runs_does_not_slow_another_account() {
    let attacker = TestApi::start("hostile-time-a").await;
    let victim = TestApi::start("hostile-time-b").await;
    let (_operator, port) = Process::operator(
        &attacker.ns,
        &["--no-api", "--watch-namespace", &victim.ns.name],
    );
    ready(port).await;
    let key = attacker.admin_key.clone();
    // Keys render the whole 8 KiB payload: kept as digests, not as text.
    let limited = attacker
        .workflow(&WorkflowBuilder::new("Daily").step(step::transform("ok", json!(1))))
        .await;
    attacker
        .patch_workflow(
            &key,
            &limited,
            json!({"rate_limit": {"key": "{{ trigger.payload.blob }}", "limit": 1, "period_ms": 86_400_000}}),
        )
        .await;
    let debounced = attacker
        .workflow(&WorkflowBuilder::new("Bursty").step(step::transform("ok", json!(1))))
        .await;
    attacker
        .patch_workflow(
            &key,
            &debounced,
            json!({"debounce": {"key": "{{ trigger.payload.blob }}", "period_ms": 86_400_000}}),
        )
        .await;
    // Every finished run is kept, so the superseded ones can be counted.
    for workflow in [&limited, &debounced] {
        attacker.keep_every_run(workflow).await;
    }
    let blob = "x".repeat(8 * 1024);
    let runs = attacker.ns.api::<Run>();
    for workflow in [&limited, &debounced] {
        let payload = Some(json!({"blob": blob}));
        attacker
            .ns
            .create_pinned_runs(workflow, workflow, 300, payload)
            .await;
    }
    // The victim's runs, started while the flood is decided and waits.
    let quick = victim
        .workflow(&WorkflowBuilder::new("Quick").step(step::transform("ok", json!(1))))
        .await;
    let vkey = victim.admin_key.clone();
    let mut mine = Vec::new();
    for _ in 0..5 {
        mine.push(victim.start_run(&vkey, &quick, None).await);
    }
    for id in &mine {
        let run = finished_run(&victim.ns, id, Duration::from_secs(30)).await;
        assert_eq!(run.phase(), RunPhase::Succeeded);
        let status = run.status.as_ref().unwrap();
        let waited = status
            .started_at
            .unwrap()
            .duration_since(flowline_core::crd::timestamps::created_at(&run.metadata));
        assert!(
            waited < jiff::SignedDuration::from_secs(10),
            "the victim's run waited {waited} to start"
        );
    }
    // The flood is held back, not dropped: one rate-limited run started, the other 299
    // wait; the debounce's runs are superseded or wait, none started.
    let expected = [(1, 299, 0), (0, 1, 299)];
    let tally = || async {
        let all = runs.list(&Default::default()).await.unwrap().items;
        let of = |wf: &str, phase: RunPhase| {
            all.iter()
                .filter(|r| r.spec.workflow_ref == wf && r.phase() == phase)
                .count()
        };
        [&limited, &debounced].map(|wf| {
            (
                of(wf, RunPhase::Succeeded),
                of(wf, RunPhase::Queued),
                of(wf, RunPhase::Cancelled),
            )
        })
    };
    let settled = eventually("the flood to settle", Duration::from_secs(120), || async {
        (tally().await == expected).then_some(())
    });
    if tokio::time::timeout(Duration::from_secs(110), settled)
        .await
        .is_err()
    {
        // (succeeded, queued, cancelled) of the rate-limited and debounced workflows.
        let all = runs.list(&Default::default()).await.unwrap().items;
        let odd: Vec<String> = all
            .iter()
            .filter(|r| r.spec.workflow_ref == debounced)
            .filter(|r| !matches!(r.phase(), RunPhase::Queued | RunPhase::Cancelled))
            .take(3)
            .map(|r| format!("{:?} {:?}", r.metadata.name, r.status))
            .collect();
        assert_eq!(tally().await, expected, "{odd:?}");
    }
}
