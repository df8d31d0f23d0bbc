//! The knobs of the chaos scenario, read from the environment. Without
//! `FLOWLINE_CHAOS_RUNS` the scenario has the size of the normal cluster suite; with
//! it (what `make chaos` sets) the big-run defaults apply. Every knob can be set alone.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Settings {
    /// Runs created through the API.
    pub runs: usize,
    /// Times the operator is SIGKILLed (and restarted).
    pub kills: usize,
    /// Seeds every random choice the harness makes (kill moments, step delays, which
    /// deliveries fail); printed so a failure can be rerun with the same choices.
    pub seed: u64,
    /// Largest accepted share of duplicate deliveries (duplicates / unique events).
    pub max_dup: f64,
    /// Share of delivery attempts the receiver answers 503.
    pub fail_rate: f64,
    /// The operators' leader lease: a killed leader's successor waits it out, so it
    /// bounds each recovery from below.
    pub lease_seconds: u64,
    /// Runs created per second.
    pub rate: f64,
    /// How long after the load and the disturbances ended every run must have finished.
    pub settle: Duration,
}

/// The in-suite size: every kind of kill moment once, about a minute of work.
const SUITE_RUNS: usize = 32;
const SUITE_KILLS: usize = 4;
/// In the suite few events are delivered (two per run, about two a second), so what a
/// kill unavoidably re-sends (the deliveries of the last second or so before it, whose
/// acknowledgements had not been written yet) is already a noticeable share: 10–40 % in
/// practice. What the suite can tell apart is that from a restart that re-sends what
/// was delivered long before (every recent event once more per restart: 150 % and more
/// with 4 kills).
const SUITE_MAX_DUP: f64 = 0.5;
const BIG_KILLS: usize = 10;
/// The lease of the other cluster tests' operators. Shorter leases make kills cheaper
/// but, on this two-core machine, a new leader catching up on dozens of runs missed the
/// renew deadline of a 4 s or 6 s lease (2.7 s, 4 s) and exited, again and again.
const LEASE_SECONDS: u64 = 8;
const BIG_MAX_DUP: f64 = 0.05;

fn var<T: std::str::FromStr>(name: &str) -> Option<T> {
    let text = std::env::var(name).ok()?;
    Some(
        text.parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a valid value")),
    )
}

impl Settings {
    pub fn from_env() -> Settings {
        let big = var::<usize>("FLOWLINE_CHAOS_RUNS");
        let runs = big.unwrap_or(SUITE_RUNS);
        let kills = var("FLOWLINE_CHAOS_KILLS").unwrap_or(if big.is_some() {
            BIG_KILLS
        } else {
            SUITE_KILLS
        });
        let lease_seconds = var("FLOWLINE_CHAOS_LEASE_SECONDS").unwrap_or(LEASE_SECONDS);
        // Spread the runs over about as long as the kills take (each waits out the lease,
        // spares the new leader's first 2 s, then waits for its moment), so every kill
        // finds runs in flight.
        let kill_cycle = (lease_seconds + 5) as f64;
        let spread = (kills.max(1) as f64 * kill_cycle).max(1.0);
        Settings {
            runs,
            kills,
            seed: var("FLOWLINE_CHAOS_SEED").unwrap_or_else(rand::random),
            max_dup: var("FLOWLINE_CHAOS_MAX_DUP").unwrap_or(if big.is_some() {
                BIG_MAX_DUP
            } else {
                SUITE_MAX_DUP
            }),
            fail_rate: var("FLOWLINE_CHAOS_FAIL_RATE").unwrap_or(0.10),
            lease_seconds,
            rate: var("FLOWLINE_CHAOS_RATE").unwrap_or((runs as f64 / spread).clamp(0.2, 20.0)),
            settle: Duration::from_secs(var("FLOWLINE_CHAOS_SETTLE_SECONDS").unwrap_or(90)),
        }
    }
}
