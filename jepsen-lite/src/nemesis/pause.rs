//! Pausing a process (`SIGSTOP`): a master, a lock client of a scripted run, or a workload's
//! worker or master. Proven at once by the process's state `T` (a stop is delivered
//! asynchronously, so the state is awaited up to a second); lifted by `SIGCONT`.

use std::time::Duration;

use nix::sys::signal::Signal;
use quorumlock_testkit::RedisMaster;

use serde_json::json;

use super::{Error, Fault, Nemesis, Targets, Verb};
use crate::evidence;

impl Nemesis {
    /// Stops master `n`, proven by its state; it continues when the faults are lifted.
    pub(super) fn pause_node(
        &mut self,
        t: &mut Targets<'_>,
        n: usize,
        label: String,
    ) -> Result<(), Error> {
        tokio::task::block_in_place(|| t.masters[n].pause())?;
        let check = t.masters[n]
            .pid()
            .ok_or_else(|| "no process".to_string())
            .and_then(evidence::process_stopped);
        self.evidence.record(label, check);
        Ok(())
    }

    /// Stops client `client`, proven by its state; it continues when the faults are lifted.
    /// `false` when the client had exited by itself (nothing to stop: no fault).
    pub(super) fn pause_client(
        &mut self,
        t: &Targets<'_>,
        fault: &Fault,
        client: usize,
        label: String,
    ) -> bool {
        let pid = t.clients.get(client).copied().unwrap_or(0);
        signal(pid, Signal::SIGSTOP);
        let check = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(wait_stopped(pid))
        });
        if check.is_err() && evidence::process_exited(pid) {
            // The client exited by itself (a crash while holding, which its history tells)
            // after the step was drawn: there was nothing to stop. Neither a fault nor an
            // unproven one; the watcher starts the client again.
            if let Some(n) = self.counts.get_mut(&fault.kind()) {
                *n = n.saturating_sub(1);
            }
            return false;
        }
        self.stopped_clients.push(client);
        self.evidence.record(label, check);
        true
    }

    /// Lifts the pauses of masters: each paused one continues (`resume` in the history if
    /// `record`).
    ///
    /// # Errors
    ///
    /// When a master cannot be signalled.
    pub(super) fn resume_nodes(&mut self, t: &mut Targets<'_>, record: bool) -> Result<(), Error> {
        for n in 0..t.masters.len() {
            if t.masters[n].is_paused() {
                t.masters[n].resume()?;
                if record {
                    self.record(Verb::Resume, json!({"node": n}));
                }
            }
        }
        Ok(())
    }

    /// Lifts the pauses of clients: each client this nemesis stopped continues
    /// (`resume-client` in the history if `record`).
    pub(super) fn resume_clients(&mut self, t: &Targets<'_>, record: bool) {
        for c in std::mem::take(&mut self.stopped_clients) {
            signal(t.clients.get(c).copied().unwrap_or(0), Signal::SIGCONT);
            if record {
                self.record(Verb::ResumeClient, json!({"client": c}));
            }
        }
    }
}

/// Sends `sig` to process `pid` (nothing for pid 0).
pub fn signal(pid: u32, sig: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        if pid > 0 {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }
}

/// Waits up to a second for process `pid` to show state `T` (a `SIGSTOP` is delivered
/// asynchronously); the reading, or why not.
///
/// # Errors
///
/// The process was not seen stopped within the second.
pub async fn wait_stopped(pid: u32) -> Result<String, String> {
    let t = tokio::time::Instant::now();
    loop {
        match evidence::process_stopped(pid) {
            Ok(r) => return Ok(r),
            Err(e) if t.elapsed() > Duration::from_secs(1) => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
}

/// Stops process `pid` (`SIGSTOP`) for `pause_for`, then continues it (`SIGCONT`): proven by
/// its state `T` right after the stop.
///
/// # Errors
///
/// The process was not seen stopped (it is continued all the same).
pub async fn pause(pid: u32, pause_for: Duration) -> Result<String, String> {
    signal(pid, Signal::SIGSTOP);
    let stopped = wait_stopped(pid).await;
    tokio::time::sleep(pause_for).await;
    signal(pid, Signal::SIGCONT);
    stopped
}

/// Stops `master` for `pause_for`, then continues it: proven by its state `T` after the stop.
///
/// # Errors
///
/// The master could not be stopped or was not seen stopped (it is continued all the same).
pub async fn pause_master(master: &mut RedisMaster, pause_for: Duration) -> Result<String, String> {
    let pid = master.pid().unwrap_or(0);
    let check = match tokio::task::block_in_place(|| master.pause()) {
        Ok(()) => wait_stopped(pid).await,
        Err(e) => Err(e.to_string()),
    };
    tokio::time::sleep(pause_for).await;
    tokio::task::block_in_place(|| {
        let _ = master.resume();
    });
    check
}
