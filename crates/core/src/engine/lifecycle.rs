//! A step's lifecycle within one execution of its run: how a step ends ([`Outcome`]),
//! how each event moves it ([`transition`]), and what the end of a run's steps makes of
//! the run ([`run_end`]). Pure; the runner (`flowline_engine::runner`) applies it.
//!
//! Why more than one type describes a step:
//! - [`State`] is where a step stands for the scheduler ([`graph::decide`]): it has
//!   the states a step passes through (waiting, running), which no ending has, and the
//!   scheduler needs nothing else to choose what starts next.
//! - [`graph::Outcome`] is the scheduler's verdict on the run once nothing runs any
//!   more: it knows no reasons (which step failed and why is the runner's to say), and
//!   has `Stuck`, which only a graph can be. [`of_run`] turns it into an [`Outcome`].
//! - [`Outcome`] is how something that ran ended: a step, an iteration of a `forEach`
//!   step, or a run's steps as a whole, with the reason of a failure.
//!
//! Not outcomes, and so kept apart by the runner: the messages a step's task sends the
//! run's task (progress, secret values to redact, then its [`Outcome`]), and what one
//! attempt runs (rendered inputs, or a Job).

use crate::crd::{RunPhase, StepPhase};
use crate::engine::graph::{self, State};

/// How a step (an iteration, a run's steps) ended in this execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Succeeded or skipped: what needs it may start.
    Done,
    /// A `wait` or `approval` step waiting for its time or a decision, holding no task.
    Parked,
    /// Failed for good (retries spent, or a deterministic error): the reason, redacted.
    Failed(String),
    /// Stopped by a cancel, the run timeout, or a failure elsewhere.
    Cancelled,
}

/// What happens to a step while its run executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// The scheduler started it in a task.
    Started,
    /// Its task ended, telling how.
    Ended(&'a Outcome),
    /// Its task ended without telling how: it panicked.
    TaskLost,
    /// What it is parked for came: a decision, or its time.
    Due,
}

/// The state `event` moves a step in `state` to. An event that does not apply to the
/// state (a parked step's time coming while it runs, say) leaves it as it is.
pub fn transition(state: State, event: &Event) -> State {
    match (state, event) {
        (State::Waiting, Event::Started) => State::Running,
        // Only a running step has a task to end; its end is taken whatever the
        // scheduler thought, so a step is never started twice.
        (_, Event::Ended(outcome)) => match outcome {
            Outcome::Done => State::Done,
            Outcome::Parked => State::Parked,
            Outcome::Failed(_) => State::Failed,
            Outcome::Cancelled => State::Cancelled,
        },
        (State::Running, Event::TaskLost) => State::Failed,
        // Started again in this execution: it settles at once (it holds no task).
        (State::Parked, Event::Due) => State::Waiting,
        (state, Event::Started | Event::TaskLost | Event::Due) => state,
    }
}

/// How a run's steps ended, from the scheduler's `verdict`: `first_failure` is the
/// reason the first failed step gave, `step_id` names a step by its position.
pub fn of_run<'a>(
    verdict: graph::Outcome,
    first_failure: Option<String>,
    step_id: impl Fn(usize) -> &'a str,
) -> Outcome {
    match verdict {
        graph::Outcome::Succeeded => Outcome::Done,
        graph::Outcome::Stopped => Outcome::Cancelled,
        graph::Outcome::Parked => Outcome::Parked,
        graph::Outcome::Failed => {
            Outcome::Failed(first_failure.unwrap_or_else(|| "a step failed".into()))
        }
        graph::Outcome::Stuck(waiting) => {
            let ids: Vec<&str> = waiting.into_iter().map(step_id).collect();
            Outcome::Failed(format!(
                "steps {} can never start: what they need did not succeed",
                ids.join(", ")
            ))
        }
    }
}

/// How a run ends: its phase and error, and what its unfinished steps become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    pub phase: RunPhase,
    pub error: Option<String>,
    /// Pending (never started) after a success or a failure; cancelled after a stop.
    pub unfinished_steps: StepPhase,
}

/// How a run whose steps ended with `outcome` ends; None when it parks (it keeps
/// running, without a task). `timed_out_after`: the run timeout (ms) stopped it.
pub fn run_end(outcome: &Outcome, timed_out_after: Option<u64>) -> Option<RunEnd> {
    let end = |phase, error, unfinished_steps| {
        Some(RunEnd {
            phase,
            error,
            unfinished_steps,
        })
    };
    match outcome {
        Outcome::Parked => None,
        Outcome::Done => end(RunPhase::Succeeded, None, StepPhase::Pending),
        Outcome::Failed(error) => end(RunPhase::Failed, Some(error.clone()), StepPhase::Pending),
        // Stopped by its timeout, not by a user: the run failed.
        Outcome::Cancelled => match timed_out_after {
            Some(ms) => end(
                RunPhase::Failed,
                Some(super::deadline::timed_out_error(ms)),
                StepPhase::Cancelled,
            ),
            None => end(RunPhase::Cancelled, None, StepPhase::Cancelled),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use State::{Cancelled, Done, Failed, Parked, Running, Waiting};

    #[test]
    fn each_event_moves_a_step_as_the_table_says() {
        let failed = Outcome::Failed("boom".into());
        let rows = [
            (
                "the scheduler starts a waiting step",
                Waiting,
                Event::Started,
                Running,
            ),
            (
                "a step ends done",
                Running,
                Event::Ended(&Outcome::Done),
                Done,
            ),
            (
                "a step ends parked",
                Running,
                Event::Ended(&Outcome::Parked),
                Parked,
            ),
            ("a step ends failed", Running, Event::Ended(&failed), Failed),
            (
                "a step ends cancelled",
                Running,
                Event::Ended(&Outcome::Cancelled),
                Cancelled,
            ),
            (
                "an end is taken whatever the scheduler thought",
                Waiting,
                Event::Ended(&Outcome::Done),
                Done,
            ),
            (
                "a running step whose task panicked failed",
                Running,
                Event::TaskLost,
                Failed,
            ),
            (
                "a parked step that is due waits to start again",
                Parked,
                Event::Due,
                Waiting,
            ),
            (
                "a running step is not started twice",
                Running,
                Event::Started,
                Running,
            ),
            (
                "a finished step is not started again",
                Done,
                Event::Started,
                Done,
            ),
            (
                "a lost task of a step that ended changes nothing",
                Done,
                Event::TaskLost,
                Done,
            ),
            (
                "a lost task of a waiting step changes nothing",
                Waiting,
                Event::TaskLost,
                Waiting,
            ),
            (
                "only a parked step can be due: running",
                Running,
                Event::Due,
                Running,
            ),
            (
                "only a parked step can be due: failed",
                Failed,
                Event::Due,
                Failed,
            ),
            (
                "only a parked step can be due: waiting",
                Waiting,
                Event::Due,
                Waiting,
            ),
            (
                "a cancelled step stays cancelled",
                Cancelled,
                Event::Started,
                Cancelled,
            ),
        ];
        for (name, state, event, expected) in rows {
            assert_eq!(transition(state, &event), expected, "{name}");
        }
    }

    #[test]
    fn the_schedulers_verdict_becomes_the_runs_outcome() {
        let ids = ["a", "b", "c"];
        let id = |i: usize| ids[i];
        let rows = [
            (
                "every step done",
                graph::Outcome::Succeeded,
                None,
                Outcome::Done,
            ),
            ("stopped", graph::Outcome::Stopped, None, Outcome::Cancelled),
            ("parked", graph::Outcome::Parked, None, Outcome::Parked),
            (
                "failed, with the first failure's reason",
                graph::Outcome::Failed,
                Some("step a (fail) failed: no".to_string()),
                Outcome::Failed("step a (fail) failed: no".into()),
            ),
            (
                "failed without a reason (a lost task reports one; defensive)",
                graph::Outcome::Failed,
                None,
                Outcome::Failed("a step failed".into()),
            ),
            (
                "stuck steps are named",
                graph::Outcome::Stuck(vec![1, 2]),
                None,
                Outcome::Failed(
                    "steps b, c can never start: what they need did not succeed".into(),
                ),
            ),
        ];
        for (name, verdict, failure, expected) in rows {
            assert_eq!(of_run(verdict, failure, id), expected, "{name}");
        }
    }

    #[test]
    fn how_a_run_ends_after_its_steps() {
        let end = |phase, error: Option<&str>, unfinished_steps| {
            Some(RunEnd {
                phase,
                error: error.map(str::to_string),
                unfinished_steps,
            })
        };
        let timed_out = super::super::deadline::timed_out_error(5000);
        let rows = [
            ("parked: it does not end", Outcome::Parked, None, None),
            (
                "done: succeeded, the steps not reached stay pending",
                Outcome::Done,
                None,
                end(RunPhase::Succeeded, None, StepPhase::Pending),
            ),
            (
                "failed: the reason, the steps not reached stay pending",
                Outcome::Failed("boom".into()),
                None,
                end(RunPhase::Failed, Some("boom"), StepPhase::Pending),
            ),
            (
                "a failure is a failure even past the timeout",
                Outcome::Failed("boom".into()),
                Some(5000),
                end(RunPhase::Failed, Some("boom"), StepPhase::Pending),
            ),
            (
                "cancelled by a user",
                Outcome::Cancelled,
                None,
                end(RunPhase::Cancelled, None, StepPhase::Cancelled),
            ),
            (
                "stopped by the run timeout: failed",
                Outcome::Cancelled,
                Some(5000),
                end(RunPhase::Failed, Some(&timed_out), StepPhase::Cancelled),
            ),
        ];
        for (name, outcome, timed_out_after, expected) in rows {
            assert_eq!(run_end(&outcome, timed_out_after), expected, "{name}");
        }
    }
}
