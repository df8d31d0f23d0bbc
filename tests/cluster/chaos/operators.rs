//! The controller processes of the scenario: one `flowline operator --no-api` at a
//! time, SIGKILLed and restarted on demand, and restarted when it exits on its own (as
//! Kubernetes would restart its pod). Each generation logs to its own file.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;

use crate::support::{Process, TestNamespace, ready};

/// The Lease the operators elect their leader with (the flag's default).
const LEASE: &str = "flowline-controller";

pub struct Operators {
    ns: String,
    flags: Vec<String>,
    current: Process,
    /// Generations started so far (the first is 1).
    pub generation: u32,
    /// Times a generation exited without being killed.
    pub self_exits: u32,
    pub log_dir: PathBuf,
}

impl Operators {
    /// Starts the first generation with `flags` (after the namespace and lease flags).
    pub async fn start(ns: &TestNamespace, lease_seconds: u64, extra: Vec<String>) -> Operators {
        let log_dir = std::env::temp_dir().join(format!("flowline-chaos-{}", ns.name));
        std::fs::create_dir_all(&log_dir).unwrap();
        let mut flags: Vec<String> = [
            "--no-api",
            "--watch-namespace",
            &ns.name,
            "--leader-election-namespace",
            &ns.name,
            "--leader-lease-seconds",
            &lease_seconds.to_string(),
        ]
        .map(String::from)
        .into();
        flags.extend(extra);
        let (current, port) = spawn(&flags, &log_dir, 1);
        ready(port).await;
        Operators {
            ns: ns.name.clone(),
            flags,
            current,
            generation: 1,
            self_exits: 0,
            log_dir,
        }
    }

    /// SIGKILL: no cleanup, the lease stays held until it expires.
    pub fn kill(&mut self) -> Instant {
        self.current.kill();
        Instant::now()
    }

    /// Starts the next generation; returns when it was spawned.
    pub fn restart(&mut self) -> Instant {
        self.generation += 1;
        let (process, _) = spawn(&self.flags, &self.log_dir, self.generation);
        self.current = process;
        Instant::now()
    }

    /// Restarts a generation that exited on its own (e.g. it lost its lease); true
    /// when it did.
    pub fn supervise(&mut self) -> bool {
        if self.current.exit_status().is_none() {
            return false;
        }
        self.self_exits += 1;
        self.restart();
        true
    }

    /// Waits until a generation other than `old` holds the lease (restarting one that
    /// exits meanwhile); returns when that was seen.
    pub async fn await_leader(&mut self, client: &kube::Client, old: Option<&str>) -> Instant {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.supervise();
            let now = self.leader(client).await;
            if now.is_some() && now.as_deref() != old {
                return Instant::now();
            }
            assert!(
                Instant::now() < deadline,
                "no new leader within 2 minutes (logs: {})",
                self.log_dir.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The holder of the leader lease now, if any.
    pub async fn leader(&self, client: &kube::Client) -> Option<String> {
        let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), &self.ns);
        let lease = leases.get_opt(LEASE).await.ok()??;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    }
}

fn spawn(flags: &[String], log_dir: &std::path::Path, generation: u32) -> (Process, u16) {
    let port = crate::foundation::free_port();
    let log = std::fs::File::create(log_dir.join(format!("operator-{generation}.log"))).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flowline"));
    cmd.args(["operator", "--listen", &format!("127.0.0.1:{port}")])
        .args(flags)
        .stdout(Stdio::null())
        .stderr(log);
    (Process::spawn(cmd), port)
}
