//! The workloads' nemesis: each fault injected and read back, as the cron workload does (state
//! `T`, death by signal 9 and a new pid, a master's new pid answering `PING`, iptables packet
//! counters). A pause or kill of a holder also proves the claim was held: the holder had not
//! reported the claim's end before the signal.

use std::time::Duration;

use nix::sys::signal::Signal;
use rand::RngExt;

use super::checker::ClientFault;
use super::store::{Access, Kind};
use super::worker::Role;
use super::{dur_ns, Env, Fault, MASTERS};
use crate::clock::now_ns;
use crate::evidence;
use crate::nemesis::iptables::{self, Rule};

const PAUSE_FOR: Duration = Duration::from_secs(3);
const PARTITION_FOR: Duration = Duration::from_secs(3);
/// How long to look for a holder.
const FIND_FOR: Duration = Duration::from_secs(3);
/// A grant this recent is likely still held when the signal lands.
const FRESH: Duration = Duration::from_millis(20);

/// Removes iptables rules when dropped (an interrupted run leaves none behind).
struct RuleGuard(Vec<Rule>);

impl Drop for RuleGuard {
    fn drop(&mut self) {
        for rule in self.0.drain(..) {
            let _ = iptables::apply(false, rule);
        }
    }
}

/// A claim held by a live worker: (worker index, its grant).
type Holder = (usize, Access);

impl Env {
    pub(super) async fn inject(&mut self, fault: Fault) {
        match fault {
            Fault::PauseHolder => self.pause_holder().await,
            Fault::KillHolder => self.kill_holder().await,
            Fault::CrashMaster => self.crash_master().await,
            Fault::PartitionMinority => self.partition_minority().await,
            Fault::PauseMaster => self.pause_master().await,
        }
    }

    /// A worker that was granted a claim at most [`FRESH`] ago and has not ended it, waiting
    /// up to [`FIND_FOR`] for one; after a second, any claim not ended (a holder that keeps
    /// its claim long grants nothing fresh).
    async fn holder(&self) -> Option<Holder> {
        let started = tokio::time::Instant::now();
        while started.elapsed() < FIND_FOR {
            let tail = self.store.tail(200);
            let now = now_ns();
            let any_age = started.elapsed() > Duration::from_secs(1);
            let found = tail.iter().rev().find(|g| {
                g.req.kind == Kind::Grant
                    && (any_age || now.saturating_sub(g.time_ns) < dur_ns(FRESH))
                    && self.workers.iter().any(|p| p.pid == g.req.pid)
                    && !tail.iter().any(|e| {
                        e.req.kind == Kind::End
                            && e.req.pid == g.req.pid
                            && e.req.claim == g.req.claim
                    })
            });
            if let Some(g) = found {
                let w = self.workers.iter().position(|p| p.pid == g.req.pid)?;
                return Some((w, g.clone()));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        None
    }

    /// Whether the claim of `grant` was still held at `at_ns`: its end, if reported, came later.
    fn held_at(&self, grant: &Access, at_ns: u64) -> Result<String, String> {
        let log = self.store.tail(5000);
        match log.iter().find(|e| {
            e.req.kind == Kind::End && e.req.pid == grant.req.pid && e.req.claim == grant.req.claim
        }) {
            Some(e) if e.req.at_ns < at_ns => Err(format!(
                "claim {} of pid {} ended {:.1} ms before the signal",
                grant.req.claim,
                grant.req.pid,
                (at_ns - e.req.at_ns) as f64 / 1e6
            )),
            _ => Ok(format!(
                "holding {:?} (token {:?}, claim {})",
                grant.req.resources, grant.req.token, grant.req.claim
            )),
        }
    }

    async fn pause_holder(&mut self) {
        let Some((w, grant)) = self.holder().await else {
            self.evidence.record(
                "pause a holder",
                Err(format!("no fresh holder found within {FIND_FOR:?}")),
            );
            return;
        };
        let pid = self.workers[w].pid;
        let at_ns = now_ns();
        crate::nemesis::signal(pid, Signal::SIGSTOP);
        let stopped = wait_stopped(pid).await;
        tokio::time::sleep(PAUSE_FOR).await;
        crate::nemesis::signal(pid, Signal::SIGCONT);
        // Time for the holder to report an end it may have sent just before the stop.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let check = stopped.and_then(|s| self.held_at(&grant, at_ns).map(|h| format!("{s}, {h}")));
        if check.is_ok() {
            self.client_faults.push(ClientFault {
                at_ns,
                pid,
                resources: grant.req.resources.clone(),
                label: format!("pause of worker {w} (pid {pid})"),
            });
        }
        self.evidence
            .record(format!("pause worker {w} holding for {PAUSE_FOR:?}"), check);
    }

    async fn kill_holder(&mut self) {
        let Some((w, grant)) = self.holder().await else {
            self.evidence.record(
                "kill -9 a holder",
                Err(format!("no fresh holder found within {FIND_FOR:?}")),
            );
            return;
        };
        let old = self.workers[w].pid;
        let at_ns = now_ns();
        let _ = self.workers[w].child.start_kill();
        let status = self.workers[w].child.wait().await;
        let killed = {
            use std::os::unix::process::ExitStatusExt;
            status.ok().and_then(|s| s.signal()) == Some(9)
        };
        let held = self.held_at(&grant, at_ns);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let check = match self.spawn(Role::Worker, w) {
            Ok(p) => {
                let new = p.pid;
                self.workers[w] = p;
                match held {
                    Ok(h) if killed && new != old => Ok(format!(
                        "pid {old} died of signal 9 {h}; started again as pid {new}"
                    )),
                    Ok(_) => Err(format!("pid {old} did not die of SIGKILL, new pid {new}")),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(format!("pid {old} killed; could not start it again: {e}")),
        };
        if check.is_ok() {
            self.client_faults.push(ClientFault {
                at_ns,
                pid: old,
                resources: grant.req.resources.clone(),
                label: format!("kill -9 of worker {w} (pid {old})"),
            });
        }
        self.evidence
            .record(format!("kill -9 worker {w} holding"), check);
    }

    /// Masters that are not unusable now (a crashed one stays out for its quarantine).
    fn usable_masters(&self) -> Vec<usize> {
        let now = now_ns();
        (0..MASTERS)
            .filter(|&m| !self.unusable.iter().any(|&(u, _, to)| u == m && to > now))
            .collect()
    }

    async fn crash_master(&mut self) {
        let usable = self.usable_masters();
        let m = usable[self.rng.random_range(0..usable.len())];
        let old = self.masters.masters()[m].pid();
        let down = now_ns();
        let check = tokio::task::block_in_place(|| {
            let master = self
                .masters
                .get_mut(m)
                .ok_or_else(|| format!("no master {m}"))?;
            master.kill().map_err(|e| e.to_string())?;
            std::thread::sleep(Duration::from_millis(500));
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
        });
        let up = now_ns() + dur_ns(self.quarantine);
        self.unusable.push((m, down, up));
        self.evidence.record(
            format!(
                "crash master {m}, restart empty (quarantined {:?})",
                self.quarantine
            ),
            check,
        );
    }

    async fn partition_minority(&mut self) {
        // Two of the usable masters: the other three keep a quorum.
        let mut usable = self.usable_masters();
        let size = usable.len().saturating_sub(MASTERS / 2 + 1).min(2);
        let mut cut = Vec::new();
        for _ in 0..size {
            cut.push(usable.swap_remove(self.rng.random_range(0..usable.len())));
        }
        cut.sort_unstable();
        let ports: Vec<u16> = cut.iter().map(|&m| self.masters.ports()[m]).collect();
        let from = now_ns();
        let mut guard = RuleGuard(Vec::new());
        let mut check = if ports.is_empty() {
            Err("no master could be cut off without losing the quorum".to_string())
        } else {
            Ok(String::new())
        };
        for &port in &ports {
            match iptables::apply(true, Rule::Drop(port)) {
                Ok(()) => guard.0.push(Rule::Drop(port)),
                Err(e) => check = Err(format!("iptables: {e}")),
            }
        }
        if check.is_ok() {
            tokio::time::sleep(PARTITION_FOR).await;
            check = iptables::listing().and_then(|l| {
                let counts: Vec<u64> = ports
                    .iter()
                    .map(|&p| evidence::dropped_packets(&l, p))
                    .collect();
                if counts.iter().all(|&n| n > 0) {
                    Ok(format!("packets dropped to ports {ports:?}: {counts:?}"))
                } else {
                    Err(format!("packets dropped to ports {ports:?}: {counts:?}"))
                }
            });
        }
        drop(guard);
        let to = now_ns();
        for &m in &cut {
            self.unusable.push((m, from, to));
        }
        self.evidence.record(
            format!("partition masters {cut:?} for {PARTITION_FOR:?}"),
            check,
        );
    }

    async fn pause_master(&mut self) {
        let usable = self.usable_masters();
        let m = usable[self.rng.random_range(0..usable.len())];
        let pid = self.masters.masters()[m].pid().unwrap_or(0);
        let from = now_ns();
        let paused = tokio::task::block_in_place(|| {
            self.masters
                .get_mut(m)
                .map(|master| master.pause().map_err(|e| e.to_string()))
        });
        let check = match paused {
            Some(Ok(())) => wait_stopped(pid).await,
            Some(Err(e)) => Err(e),
            None => Err(format!("no master {m}")),
        };
        tokio::time::sleep(PAUSE_FOR).await;
        tokio::task::block_in_place(|| {
            if let Some(master) = self.masters.get_mut(m) {
                let _ = master.resume();
            }
        });
        self.unusable.push((m, from, now_ns()));
        self.evidence
            .record(format!("pause master {m} for {PAUSE_FOR:?}"), check);
    }
}

async fn wait_stopped(pid: u32) -> Result<String, String> {
    let t = tokio::time::Instant::now();
    loop {
        match evidence::process_stopped(pid) {
            Ok(r) => return Ok(r),
            Err(e) if t.elapsed() > Duration::from_secs(1) => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
}
