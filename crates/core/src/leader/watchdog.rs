//! The leader's last line of defence: a plain OS thread, apart from the async
//! runtime, that runs `on_expiry` (the operator exits the process) when the renew
//! deadline passes without a renewal. The renewal loop gives up at the same deadline
//! by itself; the thread makes the stop independent of the runtime's health — a
//! worker thread stuck in a long computation or a blocking call delays every timer of
//! the runtime, not this one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Deadline value meaning "disarmed".
const DISARMED: u64 = u64::MAX;

struct Shared {
    /// Deadlines are kept as nanoseconds since `base`, so one atomic holds them.
    base: Instant,
    deadline: AtomicU64,
}

impl Shared {
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(DISARMED - 1)
    }
}

/// An armed watchdog.
pub struct Watchdog {
    shared: Arc<Shared>,
    /// Taken by the first `disarm`.
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Watchdog {
    /// Starts the thread; `on_expiry` runs once `deadline` passes unless it is moved
    /// on ([`Watchdog::extend`]) or the watchdog is disarmed first.
    pub fn arm(deadline: Instant, on_expiry: impl FnOnce() + Send + 'static) -> Watchdog {
        let shared = Arc::new(Shared {
            base: Instant::now(),
            deadline: AtomicU64::new(0),
        });
        shared
            .deadline
            .store(shared.nanos(deadline), Ordering::SeqCst);
        let watched = shared.clone();
        let thread = std::thread::Builder::new()
            .name("leader-watchdog".into())
            .spawn(move || {
                loop {
                    let deadline = watched.deadline.load(Ordering::SeqCst);
                    if deadline == DISARMED {
                        return;
                    }
                    let now = watched.nanos(Instant::now());
                    if now >= deadline {
                        on_expiry();
                        return;
                    }
                    // Wakes early on unpark (disarm) or spuriously; either way the loop
                    // reads the deadline again.
                    std::thread::park_timeout(Duration::from_nanos(deadline - now));
                }
            })
            .expect("spawning the leader watchdog thread");
        Watchdog {
            shared,
            thread: Mutex::new(Some(thread)),
        }
    }

    /// Moves the deadline on; an earlier one than the current is ignored (renewals
    /// may complete out of order).
    pub fn extend(&self, deadline: Instant) {
        let nanos = self.shared.nanos(deadline);
        let _ = self
            .shared
            .deadline
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| {
                (d != DISARMED && nanos > d).then_some(nanos)
            });
    }

    /// Stops the watchdog and waits for its thread to end: when this returns,
    /// `on_expiry` has either run already or never will.
    pub fn disarm(&self) {
        self.shared.deadline.store(DISARMED, Ordering::SeqCst);
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = thread {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn fired_at() -> (mpsc::Sender<Instant>, mpsc::Receiver<Instant>) {
        mpsc::channel()
    }

    #[test]
    fn it_fires_at_the_deadline_not_before() {
        let (tx, rx) = fired_at();
        let deadline = Instant::now() + Duration::from_millis(50);
        let _dog = Watchdog::arm(deadline, move || tx.send(Instant::now()).unwrap());
        let fired = rx.recv_timeout(Duration::from_secs(10)).expect("fired");
        assert!(fired >= deadline);
    }

    #[test]
    fn an_extended_deadline_is_the_one_that_counts() {
        let (tx, rx) = fired_at();
        let start = Instant::now();
        let dog = Watchdog::arm(start + Duration::from_millis(50), move || {
            tx.send(Instant::now()).unwrap()
        });
        dog.extend(start + Duration::from_millis(300));
        dog.extend(start + Duration::from_millis(100)); // older: ignored
        let fired = rx.recv_timeout(Duration::from_secs(10)).expect("fired");
        assert!(fired >= start + Duration::from_millis(300));
    }

    #[test]
    fn a_disarmed_watchdog_never_fires() {
        let (tx, rx) = fired_at();
        let dog = Watchdog::arm(Instant::now() + Duration::from_secs(3600), move || {
            tx.send(Instant::now()).unwrap()
        });
        dog.disarm();
        // The thread has ended: had it fired, the message would be there.
        assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Disconnected));
    }
}
