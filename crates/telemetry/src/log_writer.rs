//! Log lines written off the thread that logs them. The tracing subscriber formats a
//! line where it is logged (an HTTP request's access-log line on the request's worker)
//! and appends the bytes to a bounded buffer; one writer thread takes the buffer every
//! few milliseconds ([`REST`]) and writes it to stderr in one go. A request never
//! waits on stderr (a slow terminal, a full pipe to a log collector).
//!
//! Why a shared buffer and not a channel of lines: a line per message meant an
//! allocation on the request's worker freed on the writer's thread, and a wake-up of
//! the writer per line; under load those cost the request path about as much as the
//! write they saved (perf: malloc's slow path and futex wakes on top). Appending to a
//! buffer that two threads swap costs a short lock and a copy.
//!
//! When the buffer is full (the writer is behind: stderr is stalled) the line is
//! dropped, never waited for, and counted: the counter
//! `flowline_log_lines_dropped_total`, and a line of the writer's own ("N log lines
//! dropped") once it has written again. Lines still buffered when the process is
//! killed outright are lost; an orderly exit flushes them ([`LogWriter::flush`]).

use std::io::Write;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tracing_subscriber::fmt::MakeWriter;

/// How many bytes of lines may wait for the writer: about 8,000 lines, several
/// seconds of a busy API's access log between two writes.
pub const BUFFER_BYTES: usize = 2 << 20;

/// How long the writer rests between two writes. Lines appear at most this late; at
/// 40,000 lines a second the buffer holds about 200 of them meanwhile.
const REST: Duration = Duration::from_millis(5);

/// The sending side: a [`MakeWriter`] for the tracing subscriber.
#[derive(Clone)]
pub struct LogWriter {
    shared: Arc<Shared>,
    /// Flush requests; dropping every writer ends the thread.
    flushes: SyncSender<SyncSender<()>>,
}

struct Shared {
    pending: Mutex<Vec<u8>>,
    capacity: usize,
    dropped: Counter,
}

/// Lines this process dropped because the buffer was full.
static DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// The writer of this process's logs, once logging is set up.
static PROCESS: OnceLock<LogWriter> = OnceLock::new();

/// Adds the dropped-lines counter to a registry.
pub fn register(registry: &mut Registry) {
    registry.register(
        "log_lines_dropped",
        "Log lines dropped because the log writer's buffer was full",
        DROPPED.clone(),
    );
}

/// The process's writer to stderr, started on first use.
pub fn process() -> LogWriter {
    process_ref().clone()
}

/// [`process`] without the clone (two reference counts), for the request path.
pub fn process_ref() -> &'static LogWriter {
    PROCESS.get_or_init(|| LogWriter::spawn(std::io::stderr(), BUFFER_BYTES, DROPPED.clone()))
}

/// Writes what the process's writer holds, if logging was set up (bounded wait).
pub fn flush_process() {
    flush_process_within(Duration::from_secs(2));
}

/// [`flush_process`], waiting at most `limit` (a process that must end within a
/// budget, like a leader that lost its lease).
pub fn flush_process_within(limit: Duration) {
    if let Some(writer) = PROCESS.get() {
        writer.flush(limit);
    }
}

impl LogWriter {
    /// Starts the writer thread over `sink`, with room for `capacity` bytes of lines.
    pub fn spawn<W: Write + Send + 'static>(sink: W, capacity: usize, dropped: Counter) -> Self {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Vec::new()),
            capacity,
            dropped,
        });
        let (flushes, requests) = mpsc::sync_channel(16);
        let drained = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || drain(&drained, &requests, sink));
        if let Err(err) = spawned {
            // Without the thread every line would be dropped: say so where it is seen.
            eprintln!("cannot start the log writer thread ({err}); log lines will be dropped");
        }
        LogWriter { shared, flushes }
    }

    /// Appends one whole line, or drops and counts it if it does not fit.
    fn append(&self, line: &[u8]) {
        let mut pending = self
            .shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if pending.len() + line.len() <= self.shared.capacity {
            pending.extend_from_slice(line);
        } else {
            drop(pending);
            self.shared.dropped.inc();
        }
    }

    /// Appends the line `format` writes straight into the buffer (no copy through a
    /// buffer of its own; the writer thread only swaps the buffer under this lock, so
    /// formatting under it holds nobody up), or drops and counts it if it does not fit.
    pub fn append_with(&self, format: impl FnOnce(&mut Vec<u8>)) {
        let mut pending = self
            .shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let before = pending.len();
        format(&mut pending);
        if pending.len() > self.shared.capacity {
            pending.truncate(before);
            drop(pending);
            self.shared.dropped.inc();
        }
    }

    /// Waits (at most `timeout`) until every line appended so far is written; false if
    /// it is not.
    pub fn flush(&self, timeout: Duration) -> bool {
        let (done, written) = mpsc::sync_channel(1);
        if self.flushes.send(done).is_err() {
            return false;
        }
        written.recv_timeout(timeout).is_ok()
    }
}

/// The writer thread: every [`REST`] (or at once when asked to flush), takes what is
/// pending, writes it, and reports drops.
fn drain<W: Write>(shared: &Shared, requests: &Receiver<SyncSender<()>>, mut sink: W) {
    let mut batch = Vec::new();
    let mut reported = 0;
    let mut answered: Vec<SyncSender<()>> = Vec::new();
    loop {
        // Everything appended before the flush requests in `answered` is taken here.
        std::mem::swap(
            &mut batch,
            &mut shared
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        // Nothing can be done about a failing stderr but to go on.
        if !batch.is_empty() {
            let _ = sink.write_all(&batch);
            batch.clear();
        }
        let total = shared.dropped.get();
        if total > reported {
            let _ = writeln!(
                sink,
                "log writer: {} log lines dropped (buffer full); {total} since start",
                total - reported
            );
            reported = total;
        }
        let _ = sink.flush();
        for done in answered.drain(..) {
            let _ = done.send(());
        }
        match requests.recv_timeout(REST) {
            Ok(done) => {
                answered.push(done);
                answered.extend(requests.try_iter());
            }
            Err(RecvTimeoutError::Timeout) => {}
            // Every writer is gone: nothing more can be appended but what is pending.
            Err(RecvTimeoutError::Disconnected) => {
                let pending = std::mem::take(
                    &mut *shared
                        .pending
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner),
                );
                let _ = sink.write_all(&pending);
                let _ = sink.flush();
                return;
            }
        }
    }
}

/// The writer the subscriber formats one event's line into: the fmt layer hands it
/// the whole line in one `write_all`, which arrives here as one `write`.
pub struct Line<'a> {
    writer: &'a LogWriter,
}

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer.append(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        Line { writer: self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Says a write has started, then waits for a permit.
    type Gate = (SyncSender<()>, Arc<Mutex<Receiver<()>>>);

    /// A sink that records what it is given, each write behind the gate if any.
    #[derive(Clone, Default)]
    struct Sink {
        written: Arc<Mutex<Vec<u8>>>,
        gate: Option<Gate>,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Some((started, permits)) = &self.gate {
                let _ = started.try_send(());
                let _ = permits.lock().unwrap().recv();
            }
            self.written.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn log(writer: &LogWriter, text: &str) {
        writer.make_writer().write_all(text.as_bytes()).unwrap();
    }

    fn text(sink: &Sink) -> String {
        String::from_utf8(sink.written.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn lines_arrive_whole_and_in_order() {
        let sink = Sink::default();
        // Room for every line: none may be dropped.
        let dropped = Counter::default();
        let writer = LogWriter::spawn(sink.clone(), 1 << 20, dropped.clone());
        for i in 0..1000 {
            log(&writer, &format!("line {i}\n"));
        }
        assert!(writer.flush(Duration::from_secs(10)));
        let expected: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text(&sink), expected);
        assert_eq!(dropped.get(), 0);
    }

    /// A writer of `capacity` bytes whose sink holds every write until it is
    /// permitted: `started_rx` says a write began, each `permit` lets one finish.
    struct Gated {
        writer: LogWriter,
        sink: Sink,
        dropped: Counter,
        started_rx: mpsc::Receiver<()>,
        permit: mpsc::SyncSender<()>,
    }

    fn gated(capacity: usize) -> Gated {
        let (started, started_rx) = mpsc::sync_channel(16);
        let (permit, permits) = mpsc::sync_channel(16);
        let sink = Sink {
            gate: Some((started, Arc::new(Mutex::new(permits)))),
            ..Sink::default()
        };
        let dropped = Counter::default();
        let writer = LogWriter::spawn(sink.clone(), capacity, dropped.clone());
        Gated {
            writer,
            sink,
            dropped,
            started_rx,
            permit,
        }
    }

    /// Lets a gated writer go on (one permit per write it will make) and flushes it.
    fn release(permit: &mpsc::SyncSender<()>, writer: &LogWriter) {
        for _ in 0..16 {
            permit.send(()).unwrap();
        }
        assert!(writer.flush(Duration::from_secs(10)));
    }

    #[test]
    fn a_full_buffer_drops_whole_lines_counts_them_and_says_so() {
        let g = gated(10);
        log(&g.writer, "first\n");
        g.started_rx.recv().unwrap(); // the writer is stuck in the sink
        log(&g.writer, "second\n"); // 7 of 10 bytes
        log(&g.writer, "third\n"); // 7 + 6 > 10: dropped whole
        log(&g.writer, "4th\n"); // 7 + 4 > 10: dropped
        log(&g.writer, "5\n"); // 7 + 2: fits
        assert_eq!(g.dropped.get(), 2, "the logging thread never waited");
        // Let the writer go on, and wait for what it holds to be written.
        release(&g.permit, &g.writer);
        // The drops happened while "first" was being written: reported right after it.
        assert_eq!(
            text(&g.sink),
            "first\nlog writer: 2 log lines dropped (buffer full); 2 since start\nsecond\n5\n"
        );
    }

    #[test]
    fn a_line_formatted_in_place_is_whole_or_dropped_whole() {
        let g = gated(10);
        let put = |line: &[u8]| g.writer.append_with(|buf| buf.extend_from_slice(line));
        put(b"first\n");
        g.started_rx.recv().unwrap(); // the writer is stuck in the sink
        put(b"second\n"); // 7 of 10 bytes
        put(b"third\n"); // too long: dropped
        put(b"5\n"); // fits
        assert_eq!(g.dropped.get(), 1);
        release(&g.permit, &g.writer);
        assert_eq!(
            text(&g.sink),
            "first\nlog writer: 1 log lines dropped (buffer full); 1 since start\nsecond\n5\n"
        );
    }

    #[test]
    fn dropping_every_writer_writes_what_is_pending_and_ends_the_thread() {
        let sink = Sink::default();
        let writer = LogWriter::spawn(sink.clone(), 1 << 20, Counter::default());
        log(&writer, "last words\n");
        // Weak: the thread's reference to the buffer is gone once it has ended.
        let shared = Arc::downgrade(&writer.shared);
        drop(writer);
        // The thread holds the last reference until it returns.
        while shared.strong_count() > 0 {
            std::thread::yield_now();
        }
        assert_eq!(text(&sink), "last words\n");
    }
}
