//! Log lines written off the thread that logs them. The tracing subscriber formats a
//! line where it is logged (an HTTP request's access-log line on the request's worker)
//! and hands the bytes to a bounded queue; one writer thread drains it to stderr,
//! batching what has piled up into one write (it rests a few milliseconds between
//! batches, see [`REST`]). A request never waits on stderr (a slow
//! terminal, a full pipe to a log collector).
//!
//! When the queue is full the line is dropped, never waited for, and counted: the
//! counter `flowline_log_lines_dropped_total`, and a line of the writer's own
//! ("N log lines dropped") once the queue has room again. Lines still queued when the
//! process is killed outright are lost; an orderly exit flushes them
//! ([`LogWriter::flush`]).

use std::io::Write;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tracing_subscriber::fmt::MakeWriter;

/// How many lines may wait for the writer: at a few hundred bytes a line, about
/// 2 MB at most, and several seconds of a busy API's access log.
pub const QUEUE_LINES: usize = 8192;

/// How long the writer rests after writing a batch before it looks again. Waking the
/// writer for every line (a futex wake per line, and a thread switch) cost the
/// request path about as much as the write it saved; resting makes a busy process's
/// lines pile up and go out in one write, and a logging thread finds no sleeping
/// writer to wake. Lines appear at most this late; at 40,000 lines a second the queue
/// holds about 200 of them meanwhile.
const REST: Duration = Duration::from_millis(5);

enum Message {
    Line(Vec<u8>),
    /// Answered once every line queued before it is written.
    Flush(SyncSender<()>),
}

/// The sending side: a [`MakeWriter`] for the tracing subscriber.
#[derive(Clone)]
pub struct LogWriter {
    queue: SyncSender<Message>,
    dropped: Counter,
}

/// Lines this process dropped because the queue was full.
static DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// The writer of this process's logs, once logging is set up.
static PROCESS: OnceLock<LogWriter> = OnceLock::new();

/// Adds the dropped-lines counter to a registry.
pub fn register(registry: &mut Registry) {
    registry.register(
        "log_lines_dropped",
        "Log lines dropped because the log writer's queue was full",
        DROPPED.clone(),
    );
}

/// The process's writer to stderr, started on first use.
pub fn process() -> LogWriter {
    PROCESS
        .get_or_init(|| LogWriter::spawn(std::io::stderr(), QUEUE_LINES, DROPPED.clone()))
        .clone()
}

/// Writes what the process's writer holds, if logging was set up (bounded wait).
pub fn flush_process() {
    if let Some(writer) = PROCESS.get() {
        writer.flush(Duration::from_secs(2));
    }
}

impl LogWriter {
    /// Starts the writer thread over `sink`, with room for `capacity` lines.
    pub fn spawn<W: Write + Send + 'static>(sink: W, capacity: usize, dropped: Counter) -> Self {
        let (queue, lines) = mpsc::sync_channel(capacity);
        let counted = dropped.clone();
        let spawned = std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || drain(lines, sink, &counted));
        if let Err(err) = spawned {
            // Without the thread every line would be dropped: say so where it is seen.
            eprintln!("cannot start the log writer thread ({err}); log lines will be dropped");
        }
        LogWriter { queue, dropped }
    }

    fn send(&self, line: Vec<u8>) {
        match self.queue.try_send(Message::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.inc();
            }
        }
    }

    /// Waits (at most `timeout`) until every line queued so far is written; false if
    /// it is not.
    pub fn flush(&self, timeout: Duration) -> bool {
        let (done, written) = mpsc::sync_channel(1);
        if self.queue.send(Message::Flush(done)).is_err() {
            return false;
        }
        written.recv_timeout(timeout).is_ok()
    }
}

/// The writer thread: writes lines as they come, batching those already queued, and
/// reports drops.
fn drain<W: Write>(lines: Receiver<Message>, sink: W, dropped: &Counter) {
    let mut sink = std::io::BufWriter::with_capacity(64 * 1024, sink);
    let mut reported = 0;
    while let Ok(first) = lines.recv() {
        let mut flushes = Vec::new();
        let mut next = Some(first);
        while let Some(message) = next {
            match message {
                Message::Line(line) => {
                    let _ = sink.write_all(&line);
                }
                Message::Flush(done) => flushes.push(done),
            }
            next = lines.try_recv().ok();
        }
        // The queue is empty, so there is room again: say what was lost meanwhile.
        let total = dropped.get();
        if total > reported {
            let _ = writeln!(
                sink,
                "log writer: {} log lines dropped (queue full); {total} since start",
                total - reported
            );
            reported = total;
        }
        // Nothing can be done about a failing stderr but to go on.
        let _ = sink.flush();
        let flushed = !flushes.is_empty();
        for done in flushes {
            let _ = done.send(());
        }
        // A flush is a process about to exit: answer the next one at once.
        if !flushed {
            std::thread::sleep(REST);
        }
    }
}

/// One line being formatted; sent whole when the subscriber is done with it.
pub struct Line<'a> {
    writer: &'a LogWriter,
    bytes: Vec<u8>,
}

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line<'_> {
    fn drop(&mut self) {
        if !self.bytes.is_empty() {
            self.writer.send(std::mem::take(&mut self.bytes));
        }
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        Line {
            writer: self,
            bytes: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

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
        let writer = LogWriter::spawn(sink.clone(), 100, dropped.clone());
        for i in 0..100 {
            log(&writer, &format!("line {i}\n"));
        }
        assert!(writer.flush(Duration::from_secs(10)));
        let expected: String = (0..100).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text(&sink), expected);
        assert_eq!(dropped.get(), 0);
    }

    #[test]
    fn a_full_queue_drops_lines_counts_them_and_says_so() {
        let (started, started_rx) = mpsc::sync_channel(16);
        let (permit, permits) = mpsc::sync_channel(16);
        let sink = Sink {
            gate: Some((started, Arc::new(Mutex::new(permits)))),
            ..Sink::default()
        };
        let dropped = Counter::default();
        // BufWriter passes lines through to the sink only when it flushes, so the
        // thread blocks in the sink once it has written the first batch.
        let writer = LogWriter::spawn(sink.clone(), 1, dropped.clone());
        log(&writer, "first\n");
        started_rx.recv().unwrap(); // the writer is stuck in the sink
        log(&writer, "second\n"); // fills the queue
        log(&writer, "third\n");
        log(&writer, "fourth\n");
        assert_eq!(dropped.get(), 2, "the logging thread never waited");
        // Let the writer go on: one permit per write it will make.
        for _ in 0..16 {
            permit.send(()).unwrap();
        }
        assert!(writer.flush(Duration::from_secs(10)));
        let out = text(&sink);
        assert!(out.starts_with("first\nsecond\n"), "{out}");
        assert!(!out.contains("third") && !out.contains("fourth"), "{out}");
        assert!(
            out.contains("log writer: 2 log lines dropped (queue full); 2 since start"),
            "{out}"
        );
    }
}
