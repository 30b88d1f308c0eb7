//! The faults of the workloads that run their own worker processes (`cron`, `workload --kind
//! election|lock-all`), each injected and read back, as the [nemesis](super) does for the
//! scripted runs: a pause proven by the process's state `T`, a `kill -9` proven by the exit
//! status (signal 9) and a new pid, a master's crash proven by its new pid answering `PING`,
//! a partition proven by the iptables rules' packet counters.
//!
//! Each primitive answers with the reading (`Ok`: it took effect, `Err`: it did not, or it
//! could not be injected); the workload words the evidence and keeps its own bookkeeping
//! (which master is unusable when, which holder a pause or kill hit). The async ones wait on
//! the runtime, so that the store keeps serving the workers meanwhile.

use std::time::Duration;

use nix::sys::signal::Signal;
use quorumlock::testing::RedisCluster;

use super::iptables::{self, Rule};
use crate::evidence;

/// Removes iptables rules when dropped, so that an interrupted run leaves none behind.
#[derive(Debug, Default)]
pub struct InstalledRules(Vec<Rule>);

impl Drop for InstalledRules {
    fn drop(&mut self) {
        for rule in self.0.drain(..) {
            let _ = iptables::apply(false, rule);
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
    super::signal(pid, Signal::SIGSTOP);
    let stopped = wait_stopped(pid).await;
    tokio::time::sleep(pause_for).await;
    super::signal(pid, Signal::SIGCONT);
    stopped
}

/// Kills `child` with `SIGKILL` and waits for its exit: whether it died of signal 9.
pub async fn kill9(child: &mut tokio::process::Child) -> bool {
    use std::os::unix::process::ExitStatusExt;
    let _ = child.start_kill();
    let status = child.wait().await;
    status.ok().and_then(|s| s.signal()) == Some(9)
}

/// The proof of a `kill -9` and restart of a worker: pid `old` died of signal 9 (`killed`),
/// and `new` (its replacement, if it could be started) is another process. `holding` says
/// what the worker was doing when it died ("running ...", "holding ..."), or why it was not
/// holding what the fault was meant to hit.
///
/// # Errors
///
/// The replacement could not be started, the worker was not holding, or the kill is not
/// proven.
pub fn killed_and_restarted(
    old: u32,
    killed: bool,
    new: Result<u32, String>,
    holding: Result<String, String>,
) -> Result<String, String> {
    let new = new.map_err(|e| format!("pid {old} killed; could not start it again: {e}"))?;
    match holding {
        Ok(h) if killed && new != old => Ok(format!(
            "pid {old} died of signal 9 {h}; started again as pid {new}"
        )),
        Ok(_) => Err(format!(
            "pid {old} did not die of SIGKILL ({killed}), new pid {new}"
        )),
        Err(e) => Err(e),
    }
}

/// Kills master `m` of `masters`, leaves it down for `down_for`, restarts it empty (no data,
/// as after a crash without persistence) and waits for it to answer `PING`: proven by a new
/// pid. Blocks the worker thread meanwhile (the masters' handles are synchronous).
///
/// # Errors
///
/// No such master, a step failed, or no new process answers.
pub fn crash_restart_empty(
    masters: &mut RedisCluster,
    m: usize,
    down_for: Duration,
) -> Result<String, String> {
    let old = masters.masters().get(m).and_then(|master| master.pid());
    tokio::task::block_in_place(|| {
        let master = masters.get_mut(m).ok_or_else(|| format!("no master {m}"))?;
        master.kill().map_err(|e| e.to_string())?;
        std::thread::sleep(down_for);
        master.restart_empty().map_err(|e| e.to_string())?;
        master
            .ping(Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        let new = master.pid();
        if new.is_some() && new != old {
            Ok(format!(
                "pid {old:?} killed, restarted empty as pid {new:?}, answering PING"
            ))
        } else {
            Err(format!("pid {old:?} → {new:?}: no new process"))
        }
    })
}

/// Drops every packet to `ports` (iptables) for `cut_for`, then lifts the rules: the number
/// of packets each rule dropped, read before it goes (a rule's counters go with it).
///
/// # Errors
///
/// A rule could not be installed (none is left installed, and there is no wait), or the
/// counters could not be read.
pub async fn partition(ports: &[u16], cut_for: Duration) -> Result<Vec<u64>, String> {
    let mut rules = InstalledRules::default();
    let mut failed = None;
    for &port in ports {
        match iptables::apply(true, Rule::Drop(port)) {
            Ok(()) => rules.0.push(Rule::Drop(port)),
            Err(e) => failed = Some(format!("iptables: {e}")),
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    tokio::time::sleep(cut_for).await;
    let listing = iptables::listing();
    drop(rules);
    let listing = listing?;
    Ok(ports
        .iter()
        .map(|&p| evidence::dropped_packets(&listing, p))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_is_proven_only_by_signal_9_and_a_new_pid() {
        let holding = || Ok("running job-a slot 1".to_string());
        assert_eq!(
            killed_and_restarted(10, true, Ok(11), holding()),
            Ok("pid 10 died of signal 9 running job-a slot 1; started again as pid 11".into())
        );
        assert!(killed_and_restarted(10, false, Ok(11), holding()).is_err());
        assert!(killed_and_restarted(10, true, Ok(10), holding()).is_err());
        assert_eq!(
            killed_and_restarted(10, true, Err("no exe".into()), holding()),
            Err("pid 10 killed; could not start it again: no exe".into())
        );
        assert_eq!(
            killed_and_restarted(10, true, Ok(11), Err("claim ended".into())),
            Err("claim ended".into())
        );
    }
}
