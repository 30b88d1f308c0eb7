//! The environment of the workloads that run their own worker processes (`cron`, `workload
//! --kind election|lock-all`): the masters, provisioned for restart protection and tracked
//! while faults make them unusable ([`TrackedMasters`]); the worker processes, started from this
//! binary ([`WorkerProc`]); the managers both sides build ([`fenced_manager`],
//! [`worker_manager`]); waiting for the workers' first reports ([`wait_for_reports`]); and the
//! host-monotonic time helpers the controllers schedule their faults with.
//!
//! The faults themselves, with their proofs, are the [`nemesis`](crate::nemesis)'s.

use std::error::Error;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use quorumlock::{Redlock, RedlockBuilder};
use quorumlock_testkit::{MasterOptions, RedisCluster};
use serde::Serialize;

use crate::clock::now_ns;
use crate::evidence::Evidence;
use crate::nemesis::{crash, kernel_drop, kill};

/// How many worker processes each workload runs (the election's observers come on top).
pub const WORKERS: usize = 5;
/// How many masters: five, so that two can be cut off or down and a quorum stays.
pub const MASTERS: usize = 5;
/// Every manager's max TTL, ms: it sizes restart protection's quarantine (about 2 s).
pub const MAX_TTL_MS: u64 = 2000;
/// The workers' per-master timeout, ms: generous for a loaded two-core host.
pub const NODE_TIMEOUT_MS: u64 = 100;
/// How long the workers run before the first fault and before the checkers' window opens.
pub const WARM_UP: Duration = Duration::from_secs(3);

/// A manager builder with what every manager of these workloads has on: restart protection,
/// and the max TTL that sizes restart protection's quarantine. Callers make the built manager
/// [`fenced`](Redlock::fenced).
pub fn fenced_manager(nodes: Vec<String>, max_ttl: Duration) -> RedlockBuilder {
    Redlock::builder()
        .nodes(nodes)
        .restart_protection(true)
        .max_ttl(max_ttl)
}

/// A worker process's manager: [`fenced_manager`] with the per-master timeout, connected as
/// far as it goes (a master may be down when a killed worker comes back: the others are
/// enough).
///
/// # Errors
///
/// A configuration the library refuses.
pub async fn worker_manager(
    nodes: Vec<String>,
    node_timeout: Duration,
    max_ttl: Duration,
) -> Result<Redlock, Box<dyn Error>> {
    let locks = fenced_manager(nodes, max_ttl)
        .node_timeout(node_timeout)
        .build()?
        .fenced();
    let _ = locks.connect().await;
    Ok(locks)
}

/// The masters of a run and the intervals in which faults made each unusable.
#[derive(Debug)]
pub struct TrackedMasters {
    /// The masters.
    pub cluster: RedisCluster,
    /// Unusable intervals (master, from, to), host monotonic ns: a crash's runs until its
    /// quarantine ends, a partition's or a pause's until it is lifted.
    pub unusable: Vec<(usize, u64, u64)>,
    /// Restart protection's quarantine of a master that restarted empty.
    pub quarantine: Duration,
}

impl TrackedMasters {
    /// Starts [`MASTERS`] masters and provisions them for restart protection with
    /// [`MAX_TTL_MS`] (the workers' managers use the same).
    ///
    /// # Errors
    ///
    /// A master that does not start, or a provision that fails.
    pub async fn start() -> Result<Self, Box<dyn Error>> {
        let cluster = tokio::task::block_in_place(|| {
            RedisCluster::start_with(MASTERS, MasterOptions::new())
        })?;
        let admin = fenced_manager(cluster.urls(), Duration::from_millis(MAX_TTL_MS))
            .build()?
            .fenced();
        admin.provision().await?;
        let quarantine = admin.restart_quarantine().unwrap_or_default();
        Ok(Self {
            cluster,
            unusable: Vec::new(),
            quarantine,
        })
    }

    /// How many masters.
    pub fn len(&self) -> usize {
        self.cluster.masters().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The masters that are not unusable now (a crashed one stays out for its quarantine).
    pub fn usable(&self) -> Vec<usize> {
        let now = now_ns();
        (0..self.len())
            .filter(|&m| !self.unusable.iter().any(|&(u, _, to)| u == m && to > now))
            .collect()
    }

    /// Crashes master `m` and restarts it empty after `down_for`
    /// ([`crash::crash_restart_empty`]); it is unusable from the crash until restart
    /// protection's quarantine has passed after the restart.
    ///
    /// # Errors
    ///
    /// The crash or the restart is not proven (the reading says why).
    pub fn crash(&mut self, m: usize, down_for: Duration) -> Result<String, String> {
        let down = now_ns();
        let check = crash::crash_restart_empty(&mut self.cluster, m, down_for);
        let up = now_ns() + dur_ns(self.quarantine);
        self.unusable.push((m, down, up));
        check
    }

    /// Cuts masters `cut` off for `cut_for` ([`kernel_drop::partition`]): the packets dropped to
    /// each. They are unusable while the rules stand.
    ///
    /// # Errors
    ///
    /// A rule could not be installed or its counters read.
    pub async fn partition(
        &mut self,
        cut: &[usize],
        cut_for: Duration,
    ) -> Result<Vec<u64>, String> {
        let ports = self.ports(cut);
        let from = now_ns();
        let check = kernel_drop::partition(&ports, cut_for).await;
        let to = now_ns();
        for &m in cut {
            self.unusable.push((m, from, to));
        }
        check
    }

    /// The ports of masters `ms`.
    pub fn ports(&self, ms: &[usize]) -> Vec<u16> {
        let ports = self.cluster.ports();
        ms.iter().filter_map(|&m| ports.get(m).copied()).collect()
    }
}

/// A worker process started from this binary.
#[derive(Debug)]
pub struct WorkerProc {
    /// The process (killed when dropped).
    pub child: tokio::process::Child,
    /// Its pid.
    pub pid: u32,
}

impl WorkerProc {
    /// Starts this binary's `subcommand` with `--config` and `config` as JSON, then whatever
    /// `more` adds (arguments, environment); stdin and stdout closed, stderr appended to
    /// `stderr`, no `QUORUMLOCK_REDIS_SERVER` inherited, killed when dropped.
    ///
    /// # Errors
    ///
    /// The binary, the stderr file or the config cannot be had, or the process exits at once.
    pub fn spawn(
        subcommand: &str,
        config: &impl Serialize,
        stderr: &Path,
        more: impl FnOnce(&mut tokio::process::Command),
    ) -> Result<Self, Box<dyn Error>> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(stderr)?;
        let mut cmd = tokio::process::Command::new(own_exe()?);
        cmd.arg(subcommand)
            .arg("--config")
            .arg(serde_json::to_string(config)?);
        more(&mut cmd);
        let child = cmd
            .env_remove("QUORUMLOCK_REDIS_SERVER")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().ok_or("a worker exited at once")?;
        Ok(Self { child, pid })
    }

    /// Kills the process with `SIGKILL` and waits for its exit ([`kill::kill9`]): its pid,
    /// and whether it died of signal 9. Its place is for [`WorkerProc::restarted`].
    pub async fn kill9(&mut self) -> (u32, bool) {
        (self.pid, kill::kill9(&mut self.child).await)
    }

    /// Puts `new` in the place of this killed process and proves the kill and restart
    /// ([`kill::killed_and_restarted`]): `old` and `killed` as [`WorkerProc::kill9`] said,
    /// `holding` what it was doing.
    pub fn restarted(
        &mut self,
        (old, killed): (u32, bool),
        new: Result<Self, Box<dyn Error>>,
        holding: Result<String, String>,
    ) -> Result<String, String> {
        let new = new.map(|p| {
            *self = p;
            self.pid
        });
        kill::killed_and_restarted(old, killed, new.map_err(|e| e.to_string()), holding)
    }
}

/// This binary, through `/proc`: a rebuild that replaces the file meanwhile must not fail a
/// respawn (the running inode stays valid).
///
/// # Errors
///
/// Neither `/proc/self/exe` nor the current executable's path can be had.
pub fn own_exe() -> std::io::Result<std::path::PathBuf> {
    let proc_exe = Path::new("/proc/self/exe");
    if proc_exe.exists() {
        Ok(proc_exe.to_path_buf())
    } else {
        std::env::current_exe()
    }
}

/// Waits up to `within` until `reported()` counts `want` processes that reported.
///
/// # Errors
///
/// Fewer reported in time: `only N of WANT {noun} reported within ... (see {stderr_files})`.
pub async fn wait_for_reports(
    within: Duration,
    want: usize,
    noun: &str,
    stderr_files: &str,
    reported: impl Fn() -> usize,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let ready = reported();
        if ready >= want {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "only {ready} of {want} {noun} reported within {within:?} (see {stderr_files})"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Prints each fault's check under a run's table: proven or not, what, the reading.
pub fn print_checks(evidence: &Evidence) {
    for c in &evidence.checks {
        println!(
            "  {} {}: {}",
            if c.took_effect { "proven " } else { "UNPROVEN" },
            c.fault,
            c.reading
        );
    }
}

/// Writes a run's files into `dir`, `summary.json` (indented, for people) and
/// `history.json` (compact, for tools), and says where they are (with the seed, to replay).
///
/// # Errors
///
/// A file cannot be written.
pub fn write_run_files(
    dir: &Path,
    seed: u64,
    summary: &serde_json::Value,
    history: &serde_json::Value,
) -> Result<(), Box<dyn Error>> {
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_vec_pretty(summary)?,
    )?;
    std::fs::write(dir.join("history.json"), serde_json::to_vec(history)?)?;
    println!("seed {seed}; files in {}", dir.display());
    Ok(())
}

/// A duration in nanoseconds (saturating), to add to host monotonic times.
pub fn dur_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Sleeps until host monotonic time `t` (ns); at once if it has passed.
pub async fn sleep_until_ns(t: u64) {
    let now = now_ns();
    if t > now {
        tokio::time::sleep(Duration::from_nanos(t - now)).await;
    }
}
