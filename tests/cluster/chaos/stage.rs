//! What every chaos scenario starts from, before any operator runs: a `flowline api`
//! process over a fresh namespace, the webhook receiver (failing a seeded share of
//! attempts) subscribed to every run event, the endpoint of the `http.request` steps,
//! the workflows, and the watch on the Runs.

use std::sync::Mutex;
use std::time::Instant;

use rand::{Rng, SeedableRng};

use super::inbound::{self, Posted, Subscribers};
use super::observer::Observer;
use super::settings::Settings;
use super::workload::{self, StepSink};
use crate::delivery::receiver::Receiver;
use crate::support::{Process, TestApi};

/// The run events the webhook subscribes to (every `run.*` kind).
const RUN_EVENTS: [&str; 4] = [
    "run.started",
    "run.succeeded",
    "run.failed",
    "run.cancelled",
];

pub struct Stage {
    pub settings: Settings,
    pub began: Instant,
    /// Seeded from the settings' seed: the scenario's own random choices.
    pub rng: rand::rngs::StdRng,
    load_seed: u64,
    pub api: TestApi,
    _api_process: Process,
    pub receiver: Receiver,
    pub sink: StepSink,
    pub workflows: Vec<String>,
    /// The workflows subscribed to the order events.
    pub subscribers: Subscribers,
    /// The order events accepted so far.
    pub posted: Mutex<Vec<Posted>>,
    pub observer: Observer,
}

impl Stage {
    pub async fn new(prefix: &str) -> Stage {
        let settings = Settings::from_env();
        let began = Instant::now();
        let mut rng = rand::rngs::StdRng::seed_from_u64(settings.seed);
        let (api, api_process) = TestApi::start_process(prefix).await;
        let receiver = Receiver::start().await;
        receiver.fail_randomly(settings.fail_rate, rng.random());
        let sink = StepSink::start().await;
        crate::delivery::webhook(&api, &receiver.url("/chaos"), &RUN_EVENTS, None).await;
        let workflows = workload::workflows(&api, &sink).await;
        let subscribers = inbound::subscribers(&api).await;
        for id in [&subscribers.every, &subscribers.big] {
            api.keep_every_run(id).await;
        }
        let observer = Observer::start(&api.ns).await;
        Stage {
            settings,
            began,
            load_seed: rng.random(),
            rng,
            api,
            _api_process: api_process,
            receiver,
            sink,
            workflows,
            subscribers,
            posted: Mutex::new(Vec::new()),
            observer,
        }
    }

    pub fn client(&self) -> kube::Client {
        self.api.ns.client.clone()
    }

    /// Flags of every operator: trust and reach the receiver, run step Jobs on the real
    /// node, and make callback URLs that reach the API process.
    pub fn operator_flags(&self) -> Vec<String> {
        [
            crate::delivery::flags(&self.receiver.pki),
            workload::job_flags(),
            vec!["--public-url".into(), self.api.url("")],
        ]
        .concat()
    }

    /// Starts the runs at the settings' rate; their names are appended to `created`.
    pub async fn start_runs(&self, created: &Mutex<Vec<String>>) {
        let rng = rand::rngs::StdRng::seed_from_u64(self.load_seed);
        workload::start_runs(
            &self.api,
            &self.workflows,
            &self.settings,
            rng,
            created,
            &self.posted,
        )
        .await;
    }
}
