//! One webhook's queue of attempts that are due, shared with the tasks that make
//! them. A task that finishes an attempt takes the next job itself instead of
//! waiting for the worker's loop to hand it one, so a busy endpoint keeps its
//! concurrency bound filled; other webhooks have their own lanes and are not held
//! up by it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

pub struct Lane<J, H> {
    inner: Mutex<Inner<J, H>>,
    limit: usize,
}

struct Inner<J, H> {
    queue: VecDeque<J>,
    /// Tasks currently taking jobs from this lane.
    active: usize,
    closed: bool,
    /// What the tasks need besides the job (the webhook as last seen).
    context: H,
}

impl<J, H: Clone> Lane<J, H> {
    /// A lane whose jobs run at most `limit` at a time.
    pub fn new(context: H, limit: usize) -> Arc<Self> {
        Arc::new(Lane {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                active: 0,
                closed: false,
                context,
            }),
            limit: limit.max(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner<J, H>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a job (at the front when `urgent`). Returns true when the caller must
    /// start one more task, which then calls [`Lane::next`] until it returns `None`.
    #[must_use]
    pub fn push(&self, job: J, urgent: bool) -> bool {
        let mut inner = self.lock();
        if inner.closed {
            return false;
        }
        if urgent {
            inner.queue.push_front(job);
        } else {
            inner.queue.push_back(job);
        }
        // Checked under the same lock as a task's decision to stop, so a job is
        // never left queued with no task to take it.
        if inner.active < self.limit {
            inner.active += 1;
            true
        } else {
            false
        }
    }

    /// The next job for a task, or `None`: the task must stop (it is no longer
    /// counted as active).
    pub fn next(&self) -> Option<(J, H)> {
        let mut inner = self.lock();
        match inner.queue.pop_front() {
            Some(job) if !inner.closed => Some((job, inner.context.clone())),
            _ => {
                inner.active -= 1;
                None
            }
        }
    }

    pub fn set_context(&self, context: H) {
        self.lock().context = context;
    }

    /// Drops the queued jobs and stops the tasks after their current attempt.
    pub fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        inner.queue.clear();
    }

    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_started_up_to_the_limit_and_drain_the_queue() {
        let lane = Lane::new("ctx", 2);
        assert!(lane.push(1, false), "first job starts a task");
        assert!(lane.push(2, false), "second job starts a second task");
        assert!(!lane.push(3, false), "the limit is reached");
        assert!(!lane.push(0, true));
        let order: Vec<i32> = std::iter::from_fn(|| lane.next().map(|(j, _)| j)).collect();
        assert_eq!(order, [0, 1, 2, 3], "urgent first, then in order");
        // That task stopped; one is still counted until it asks too.
        assert!(lane.push(4, false), "a free slot starts a task again");
        assert_eq!(lane.next(), Some((4, "ctx")));
        assert_eq!(lane.next(), None);
        assert_eq!(lane.next(), None);
        assert!(lane.push(5, false));
    }

    #[test]
    fn a_closed_lane_drops_its_jobs_and_stops_its_tasks() {
        let lane = Lane::new(0u8, 1);
        assert!(lane.push("a", false));
        assert!(!lane.push("b", false));
        lane.close();
        assert!(lane.is_empty());
        assert_eq!(lane.next(), None);
        assert!(!lane.push("c", false), "nothing starts on a closed lane");
    }
}
