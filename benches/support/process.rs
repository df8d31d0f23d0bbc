//! The release `flowline` binary as a child process, and what its `/metrics` says:
//! shared by the benchmarks that measure real processes.

use std::process::{Child, Command, Stdio};

/// One `flowline` process serving on `port`; killed when dropped.
pub struct Server {
    pub child: Child,
    pub port: u16,
    /// Its standard error (the log), kept for when it ends early.
    pub log: std::path::PathBuf,
}

impl Server {
    /// How it ended, once it has.
    #[allow(dead_code)] // each bench compiles this module on its own; not all use it
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `target/release/flowline <args> --listen 127.0.0.1:<a free port>`, its
/// log written to a file in the temporary directory.
pub fn spawn(args: &[&str]) -> Server {
    let port = free_port();
    let role = args.first().copied().unwrap_or("flowline");
    let log = std::env::temp_dir().join(format!("flowline-bench-{role}-{port}.log"));
    let child = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/release/flowline"
    ))
    .args(args)
    .args(["--listen", &format!("127.0.0.1:{port}")])
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("a log file in the temporary directory"))
    .spawn()
    .expect("target/release/flowline (the make bench-* target builds it)");
    Server { child, port, log }
}

/// The value of the metric `series` (name and labels exactly as exposed) of
/// `server`; None while it does not answer or has no such series.
pub async fn metric(server: &Server, series: &str) -> Option<f64> {
    let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", server.port))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}
