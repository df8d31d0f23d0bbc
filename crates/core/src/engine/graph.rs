//! Steps as a graph (`needs`), and which steps to start next. Pure.
//!
//! A workflow whose steps have no `needs` is sequential: it is executed as the chain
//! `steps[0] → steps[1] → …`, one step at a time, exactly as before graphs existed.
//! As soon as one step has `needs`, the steps form a graph: a step may start once every
//! step it needs is finished `succeeded` or `skipped`, steps without `needs` are roots,
//! and ready steps run in parallel up to the workflow's `parallelism`.
//!
//! [`decide`] is the scheduler: from the graph and each step's state it answers which
//! steps to start, whether to cancel the running ones and, once nothing runs any more,
//! the run's outcome. The run's task applies it (`runner`); `forEach` iterations use it
//! too, as a graph without edges.

use crate::crd::Step;

/// Which steps each step waits for, by position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Graph {
    /// `deps[i]`: the positions of the steps step `i` waits for.
    pub deps: Vec<Vec<usize>>,
    /// True when the steps form a graph (some step has `needs`); false for a chain.
    pub parallel: bool,
}

/// Whether any step has `needs`: then the workflow is a graph.
pub fn is_graph(steps: &[Step]) -> bool {
    steps.iter().any(|s| !s.needs.is_empty())
}

/// A problem with the `needs` of a step: the field (`steps[2].needs[0]`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeedsProblem {
    pub path: String,
    pub message: String,
}

/// Every problem of the steps' `needs`, in the order of the spec: unknown ids,
/// self-references, duplicates, then each cycle (named, on the need that closes it).
pub fn problems(steps: &[Step]) -> Vec<NeedsProblem> {
    let mut found = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        for (j, need) in step.needs.iter().enumerate() {
            let path = format!("steps[{i}].needs[{j}]");
            let message = if *need == step.id {
                format!("step \"{need}\" needs itself")
            } else if step.needs[..j].contains(need) {
                format!("\"{need}\" is listed twice")
            } else if !steps.iter().any(|s| s.id == *need) {
                format!("needs step \"{need}\", which this workflow does not have")
            } else {
                continue;
            };
            found.push(NeedsProblem { path, message });
        }
    }
    found.extend(cycles(steps));
    found
}

/// Positions of the steps `step` needs that exist (not itself, each once).
fn edges(steps: &[Step], index: usize) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (j, need) in steps[index].needs.iter().enumerate() {
        if let Some(pos) = steps.iter().position(|s| s.id == *need)
            && pos != index
            && !out.iter().any(|(p, _)| *p == pos)
        {
            out.push((pos, j));
        }
    }
    out
}

/// A step on the depth-first path: its position, its edges (needed position, index in
/// `needs`) and the next edge to follow.
type Frame = (usize, Vec<(usize, usize)>, usize);

/// The cycles among the needs (depth-first, in declared order), each reported once on
/// the need that closes it: `cycle: a needs b, b needs c, c needs a`.
fn cycles(steps: &[Step]) -> Vec<NeedsProblem> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Closed,
    }
    let n = steps.len();
    let mut mark = vec![Mark::New; n];
    let mut found = Vec::new();
    for root in 0..n {
        if mark[root] != Mark::New {
            continue;
        }
        // (step, its edges, next edge to follow)
        let mut stack: Vec<Frame> = vec![(root, edges(steps, root), 0)];
        mark[root] = Mark::Open;
        while let Some((at, out, next)) = stack.last_mut() {
            let at = *at;
            let Some(&(to, j)) = out.get(*next) else {
                mark[at] = Mark::Closed;
                stack.pop();
                continue;
            };
            *next += 1;
            match mark[to] {
                Mark::New => {
                    mark[to] = Mark::Open;
                    let e = edges(steps, to);
                    stack.push((to, e, 0));
                }
                Mark::Open => {
                    let start = stack.iter().position(|(s, _, _)| *s == to).unwrap_or(0);
                    let chain: Vec<usize> = stack[start..].iter().map(|(s, _, _)| *s).collect();
                    let mut said: Vec<String> = chain
                        .windows(2)
                        .map(|w| format!("{} needs {}", steps[w[0]].id, steps[w[1]].id))
                        .collect();
                    said.push(format!("{} needs {}", steps[at].id, steps[to].id));
                    found.push(NeedsProblem {
                        path: format!("steps[{at}].needs[{j}]"),
                        message: format!("the needs form a cycle: {}", said.join(", ")),
                    });
                }
                Mark::Closed => {}
            }
        }
    }
    found
}

impl Graph {
    /// The graph `steps` are executed as: the chain of their order when no step has
    /// `needs`, else their needs. Err: the needs name unknown steps or form a cycle
    /// (the problems as one line).
    pub fn of(steps: &[Step]) -> Result<Graph, String> {
        let found = problems(steps);
        if !found.is_empty() {
            let text = found
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect::<Vec<_>>()
                .join("; ");
            return Err(crate::limits::cap_error(format!("invalid needs: {text}")));
        }
        Ok(Graph::lenient(steps))
    }

    /// The graph of `steps` with what is wrong left out: unknown ids, self-references
    /// and duplicates are ignored (cycles are kept; [`Graph::ancestors`] copes).
    pub fn lenient(steps: &[Step]) -> Graph {
        if !is_graph(steps) {
            let deps = (0..steps.len())
                .map(|i| if i == 0 { vec![] } else { vec![i - 1] })
                .collect();
            return Graph {
                deps,
                parallel: false,
            };
        }
        let deps = (0..steps.len())
            .map(|i| edges(steps, i).into_iter().map(|(p, _)| p).collect())
            .collect();
        Graph {
            deps,
            parallel: true,
        }
    }

    /// `n` independent nodes (the iterations of a `forEach` step).
    pub fn independent(n: usize) -> Graph {
        Graph {
            deps: vec![Vec::new(); n],
            parallel: true,
        }
    }

    /// Which steps are ancestors of step `index` (reachable through its needs, or
    /// earlier in a chain): the steps whose outputs it may read.
    pub fn ancestors(&self, index: usize) -> Vec<bool> {
        let mut seen = vec![false; self.deps.len()];
        let mut todo: Vec<usize> = self.deps.get(index).cloned().unwrap_or_default();
        while let Some(at) = todo.pop() {
            if at < seen.len() && !seen[at] {
                seen[at] = true;
                todo.extend(self.deps[at].iter().copied());
            }
        }
        seen
    }
}

/// Where a step (or an iteration) stands, as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Not started by this execution (pending, or unfinished before a restart).
    Waiting,
    /// Its task is running.
    Running,
    /// `succeeded` or `skipped`: what needs it may start.
    Done,
    /// Failed (retries exhausted, or a deterministic error).
    Failed,
    /// Stopped by a cancel, the run timeout, or a failure elsewhere.
    Cancelled,
    /// A `wait` or `approval` step waiting for its time or a decision, without a task.
    Parked,
}

/// How the run ends, once nothing runs any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every step is done.
    Succeeded,
    /// A step failed (the caller names the first one).
    Failed,
    /// Stopped by a cancel or the run timeout.
    Stopped,
    /// These steps can never start (cannot happen with a checked graph).
    Stuck(Vec<usize>),
    /// Nothing runs and nothing can start, but steps are parked (waiting for a time or
    /// a decision): the run is parked until one of them is due.
    Parked,
}

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// Steps to start now, in declared order.
    pub start: Vec<usize>,
    /// Cancel the running steps (a failure, or a stop).
    pub cancel_running: bool,
    /// The outcome, once no step runs and none may start.
    pub outcome: Option<Outcome>,
}

/// The scheduler. `stopping`: a cancel or the run timeout was asked for. After a
/// failure or a stop nothing new starts and the running steps are cancelled; the
/// outcome comes when they have all stopped. A failure outranks a stop.
pub fn decide(graph: &Graph, states: &[State], parallelism: usize, stopping: bool) -> Decision {
    let running = states.iter().filter(|s| **s == State::Running).count();
    let failed = states.contains(&State::Failed);
    if failed || stopping {
        let outcome = (running == 0).then_some(if failed {
            Outcome::Failed
        } else {
            Outcome::Stopped
        });
        return Decision {
            start: Vec::new(),
            cancel_running: running > 0,
            outcome,
        };
    }
    if states.contains(&State::Cancelled) {
        // Only a stop cancels: the caller passes `stopping` with it. Defensive.
        return Decision {
            start: Vec::new(),
            cancel_running: running > 0,
            outcome: (running == 0).then_some(Outcome::Stopped),
        };
    }
    let free = parallelism.max(1).saturating_sub(running);
    let start: Vec<usize> = (0..states.len())
        .filter(|&i| {
            states[i] == State::Waiting
                && graph
                    .deps
                    .get(i)
                    .is_none_or(|d| d.iter().all(|&d| states.get(d) == Some(&State::Done)))
        })
        .take(free)
        .collect();
    let outcome = (running == 0 && start.is_empty()).then(|| {
        let waiting: Vec<usize> = (0..states.len())
            .filter(|&i| states[i] == State::Waiting)
            .collect();
        if states.contains(&State::Parked) {
            Outcome::Parked
        } else if waiting.is_empty() {
            Outcome::Succeeded
        } else {
            Outcome::Stuck(waiting)
        }
    });
    Decision {
        start,
        cancel_running: false,
        outcome,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use State::{Cancelled, Done, Failed, Running, Waiting};
    use serde_json::{Value, json};

    fn steps(v: Value) -> Vec<Step> {
        serde_json::from_value(v).unwrap()
    }

    fn diamond() -> Vec<Step> {
        steps(json!([
            {"id": "a", "action": "fail"},
            {"id": "b", "action": "fail", "needs": ["a"]},
            {"id": "c", "action": "fail", "needs": ["a"]},
            {"id": "d", "action": "fail", "needs": ["b", "c"]},
        ]))
    }

    fn said(found: Vec<NeedsProblem>) -> Vec<(String, String)> {
        found.into_iter().map(|p| (p.path, p.message)).collect()
    }

    #[test]
    fn without_needs_the_steps_are_a_chain() {
        let s = steps(
            json!([{"id": "a", "action": "fail"}, {"id": "b", "action": "fail"},
                             {"id": "c", "action": "fail"}]),
        );
        let g = Graph::of(&s).unwrap();
        assert!(!g.parallel);
        assert_eq!(g.deps, vec![vec![], vec![0], vec![1]]);
        assert_eq!(g.ancestors(2), [true, true, false]);
        assert!(Graph::of(&[]).unwrap().deps.is_empty());
    }

    #[test]
    fn a_chain_runs_one_step_at_a_time_in_order() {
        let g = Graph::of(&steps(
            json!([{"id": "a", "action": "fail"}, {"id": "b", "action": "fail"}]),
        ))
        .unwrap();
        // Whatever the parallelism.
        assert_eq!(decide(&g, &[Waiting, Waiting], 10, false).start, [0]);
        assert_eq!(
            decide(&g, &[Running, Waiting], 10, false).start,
            Vec::<usize>::new()
        );
        assert_eq!(decide(&g, &[Done, Waiting], 10, false).start, [1]);
        // Resumed after a restart: the finished step is not started again.
        assert_eq!(
            decide(&g, &[Done, Done], 10, false).outcome,
            Some(Outcome::Succeeded)
        );
    }

    #[test]
    fn a_diamond_runs_its_middle_in_parallel() {
        let g = Graph::of(&diamond()).unwrap();
        assert!(g.parallel);
        assert_eq!(g.deps, vec![vec![], vec![0], vec![0], vec![1, 2]]);
        assert_eq!(g.ancestors(3), [true, true, true, false]);
        assert_eq!(g.ancestors(1), [true, false, false, false]);
        let d = decide(&g, &[Waiting; 4], 10, false);
        assert_eq!(d.start, [0]);
        assert_eq!(d.outcome, None);
        assert_eq!(
            decide(&g, &[Done, Waiting, Waiting, Waiting], 10, false).start,
            [1, 2]
        );
        // d waits for both.
        assert!(
            decide(&g, &[Done, Done, Running, Waiting], 10, false)
                .start
                .is_empty()
        );
        assert_eq!(
            decide(&g, &[Done, Done, Done, Waiting], 10, false).start,
            [3]
        );
        assert_eq!(
            decide(&g, &[Done; 4], 10, false).outcome,
            Some(Outcome::Succeeded)
        );
    }

    #[test]
    fn parallelism_bounds_the_steps_running_at_once() {
        let g = Graph::independent(5);
        assert_eq!(decide(&g, &[Waiting; 5], 2, false).start, [0, 1]);
        assert_eq!(
            decide(&g, &[Done, Running, Waiting, Waiting, Waiting], 2, false).start,
            [2]
        );
        assert!(
            decide(&g, &[Running, Running, Waiting, Waiting, Waiting], 2, false)
                .start
                .is_empty()
        );
    }

    #[test]
    fn a_failure_cancels_the_running_steps_and_starts_nothing() {
        let g = Graph::of(&diamond()).unwrap();
        let d = decide(&g, &[Done, Failed, Running, Waiting], 10, false);
        assert_eq!(
            d,
            Decision {
                start: vec![],
                cancel_running: true,
                outcome: None
            }
        );
        let d = decide(&g, &[Done, Failed, Cancelled, Waiting], 10, false);
        assert_eq!(d.outcome, Some(Outcome::Failed));
        assert!(!d.cancel_running);
        // Also when a stop comes on top of it.
        assert_eq!(
            decide(&g, &[Done, Failed, Cancelled, Waiting], 10, true).outcome,
            Some(Outcome::Failed)
        );
    }

    #[test]
    fn a_stop_cancels_every_branch() {
        let g = Graph::of(&diamond()).unwrap();
        let d = decide(&g, &[Done, Running, Running, Waiting], 10, true);
        assert!(d.start.is_empty() && d.cancel_running && d.outcome.is_none());
        assert_eq!(
            decide(&g, &[Done, Cancelled, Cancelled, Waiting], 10, true).outcome,
            Some(Outcome::Stopped)
        );
        // A run resumed past its deadline starts nothing.
        assert_eq!(
            decide(&g, &[Waiting; 4], 10, true).outcome,
            Some(Outcome::Stopped)
        );
    }

    #[test]
    fn parked_steps_park_the_run_once_nothing_else_can_progress() {
        use State::Parked;
        let g = Graph::of(&diamond()).unwrap();
        // b waits for an approval, c still runs: keep going.
        let d = decide(&g, &[Done, Parked, Running, Waiting], 10, false);
        assert_eq!(d.outcome, None);
        // c done, d needs b: park.
        assert_eq!(
            decide(&g, &[Done, Parked, Done, Waiting], 10, false).outcome,
            Some(Outcome::Parked)
        );
        // A failure or a stop outranks parking.
        assert_eq!(
            decide(&g, &[Done, Parked, Failed, Waiting], 10, false).outcome,
            Some(Outcome::Failed)
        );
        assert_eq!(
            decide(&g, &[Done, Parked, Done, Waiting], 10, true).outcome,
            Some(Outcome::Stopped)
        );
    }

    #[test]
    fn skipped_steps_count_as_done_for_what_needs_them() {
        // The runner maps `skipped` to Done: d starts after b succeeded and c skipped.
        let g = Graph::of(&diamond()).unwrap();
        assert_eq!(
            decide(&g, &[Done, Done, Done, Waiting], 1, false).start,
            [3]
        );
    }

    #[test]
    fn needs_problems_name_their_field() {
        let s = steps(json!([
            {"id": "a", "action": "fail", "needs": ["a", "ghost"]},
            {"id": "b", "action": "fail", "needs": ["a", "a"]},
        ]));
        assert_eq!(
            said(problems(&s)),
            [
                ("steps[0].needs[0]", r#"step "a" needs itself"#),
                (
                    "steps[0].needs[1]",
                    r#"needs step "ghost", which this workflow does not have"#
                ),
                ("steps[1].needs[1]", r#""a" is listed twice"#),
            ]
            .map(|(p, m)| (p.to_string(), m.to_string()))
        );
        assert!(
            Graph::of(&s)
                .unwrap_err()
                .starts_with("invalid needs: steps[0].needs[0]")
        );
        assert!(problems(&diamond()).is_empty());
    }

    #[test]
    fn cycles_are_named() {
        let s = steps(json!([
            {"id": "a", "action": "fail", "needs": ["c"]},
            {"id": "b", "action": "fail", "needs": ["a"]},
            {"id": "c", "action": "fail", "needs": ["b"]},
            {"id": "d", "action": "fail", "needs": ["a"]},
            {"id": "e", "action": "fail", "needs": ["f"]},
            {"id": "f", "action": "fail", "needs": ["e", "d"]},
        ]));
        assert_eq!(
            said(problems(&s)),
            [
                (
                    "steps[1].needs[0]",
                    "the needs form a cycle: a needs c, c needs b, b needs a"
                ),
                (
                    "steps[5].needs[0]",
                    "the needs form a cycle: e needs f, f needs e"
                ),
            ]
            .map(|(p, m)| (p.to_string(), m.to_string()))
        );
        assert!(Graph::of(&s).is_err());
    }
}
