//! One controller of a scenario, like one pod of a Deployment: a `flowline operator
//! --no-api` process at a time, SIGKILLed and restarted on demand, and restarted when
//! it exits on its own (as Kubernetes would restart the pod). Each generation of the
//! process logs to its own file.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;

use crate::support::{Process, TestNamespace, ready};

/// The Lease the operators elect their leader with (the flag's default).
const LEASE: &str = "flowline-controller";

pub struct Operators {
    ns: String,
    /// Names the log files.
    role: &'static str,
    flags: Vec<String>,
    env: Vec<(String, std::ffi::OsString)>,
    current: Option<Process>,
    /// Generations started so far (the first is 1).
    generation: u32,
    /// Times a generation exited without being killed (and was restarted).
    pub self_exits: u32,
    pub log_dir: PathBuf,
}

impl Operators {
    /// Starts the first generation with `extra` flags (after the namespace and lease
    /// flags) and `env` added to its environment (e.g. its own KUBECONFIG); logs go to
    /// `<role>-<generation>.log`.
    pub async fn start(
        ns: &TestNamespace,
        role: &'static str,
        lease_seconds: u64,
        extra: Vec<String>,
        env: Vec<(String, std::ffi::OsString)>,
    ) -> Operators {
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
        let mut operators = Operators {
            ns: ns.name.clone(),
            role,
            flags,
            env,
            current: None,
            generation: 0,
            self_exits: 0,
            log_dir,
        };
        let port = operators.spawn_next();
        ready(port).await;
        operators
    }

    /// Spawns the next generation; returns the port it serves health and metrics on.
    fn spawn_next(&mut self) -> u16 {
        self.generation += 1;
        let port = crate::foundation::free_port();
        let log = format!("{}-{}.log", self.role, self.generation);
        let log = std::fs::File::create(self.log_dir.join(log)).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flowline"));
        cmd.args(["operator", "--listen", &format!("127.0.0.1:{port}")])
            .args(&self.flags)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log);
        self.current = Some(Process::spawn(cmd));
        port
    }

    /// SIGKILL: no cleanup, the lease stays held until it expires.
    pub fn kill(&mut self) -> Instant {
        if let Some(process) = &mut self.current {
            process.kill();
        }
        Instant::now()
    }

    /// Starts the next generation; returns when it was spawned.
    pub fn restart(&mut self) -> Instant {
        self.spawn_next();
        Instant::now()
    }

    /// How the current generation exited, if it has.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.current.as_mut()?.exit_status()
    }

    /// Restarts a generation that exited on its own (e.g. it lost its lease); true
    /// when it did.
    pub fn supervise(&mut self) -> bool {
        let Some(status) = self.exit_status() else {
            return false;
        };
        // Said at once: a crash loop shows while a long `make chaos` is still running.
        eprintln!(
            "chaos: {} {} exited on its own ({status}); restarting (log: {})",
            self.role,
            self.generation,
            self.log_dir.display()
        );
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
            // The poll interval of a wait for a new leader, not a check.
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
