//! The election and lock-all workloads' nemesis: which process or master each fault hits, and
//! the bookkeeping the checker needs. The faults and their proofs (state `T`, death by signal 9
//! and a new pid, a master's new pid answering `PING`, iptables packet counters) are
//! the [`nemesis`](crate::nemesis) fault files', shared with every workload. A pause or
//! kill of a holder also proves the claim was held: the holder had not reported the claim's
//! end before the signal.

use std::time::Duration;

use rand::RngExt;

use super::checker::ClientFault;
use super::request::{Access, Kind};
use super::worker::Role;
use super::Env;
use crate::clock::now_ns;
use crate::nemesis::pause;
use crate::process_env::{dur_ns, MASTERS};

const PAUSE_FOR: Duration = Duration::from_secs(3);
const PARTITION_FOR: Duration = Duration::from_secs(3);
/// How long to look for a holder.
const FIND_FOR: Duration = Duration::from_secs(3);
/// A grant this recent is likely still held when the signal lands.
const FRESH: Duration = Duration::from_millis(20);

/// A claim held by a live worker: (worker index, its grant).
type Holder = (usize, Access);

impl Env {
    /// Injects the `k`th fault of the cycle.
    pub(super) async fn inject(&mut self, k: usize) {
        match k {
            0 => self.pause_holder().await,
            1 => self.crash_master(),
            2 => self.kill_holder().await,
            3 => self.partition_minority().await,
            _ => self.pause_master().await,
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

    /// A holder to hit with `fault` ([`Env::holder`]); when none is found, the fault is
    /// recorded as not injected.
    async fn holder_for(&mut self, fault: &str) -> Option<Holder> {
        let found = self.holder().await;
        if found.is_none() {
            self.evidence.record(
                fault,
                Err(format!("no fresh holder found within {FIND_FOR:?}")),
            );
        }
        found
    }

    /// Records the pause or kill (`fault`) of process `pid` holding `grant` at `at_ns`: its
    /// `check` in the evidence and, when proven, the client fault (`label`) that the checker
    /// times a takeover from.
    fn record_holder_fault(
        &mut self,
        fault: String,
        check: Result<String, String>,
        (grant, at_ns, pid): (&Access, u64, u32),
        label: String,
    ) {
        if check.is_ok() {
            self.client_faults.push(ClientFault {
                at_ns,
                pid,
                resources: grant.req.resources.clone(),
                label,
            });
        }
        self.evidence.record(fault, check);
    }

    async fn pause_holder(&mut self) {
        let Some((w, grant)) = self.holder_for("pause a holder").await else {
            return;
        };
        let pid = self.workers[w].pid;
        let at_ns = now_ns();
        let stopped = pause::pause(pid, PAUSE_FOR).await;
        // Time for the holder to report an end it may have sent just before the stop.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let check = stopped.and_then(|s| self.held_at(&grant, at_ns).map(|h| format!("{s}, {h}")));
        self.record_holder_fault(
            format!("pause worker {w} holding for {PAUSE_FOR:?}"),
            check,
            (&grant, at_ns, pid),
            format!("pause of worker {w} (pid {pid})"),
        );
    }

    async fn kill_holder(&mut self) {
        let Some((w, grant)) = self.holder_for("kill -9 a holder").await else {
            return;
        };
        let at_ns = now_ns();
        let killed = self.workers[w].kill9().await;
        let old = killed.0;
        let held = self.held_at(&grant, at_ns);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let new = self.spawn(Role::Worker, w);
        let check = self.workers[w].restarted(killed, new, held);
        self.record_holder_fault(
            format!("kill -9 worker {w} holding"),
            check,
            (&grant, at_ns, old),
            format!("kill -9 of worker {w} (pid {old})"),
        );
    }

    fn crash_master(&mut self) {
        let usable = self.masters.usable();
        let m = usable[self.rng.random_range(0..usable.len())];
        let check = self.masters.crash(m, Duration::from_millis(500));
        self.evidence.record(
            format!(
                "crash master {m}, restart empty (quarantined {:?})",
                self.masters.quarantine
            ),
            check,
        );
    }

    async fn partition_minority(&mut self) {
        // Two of the usable masters: the other three keep a quorum.
        let mut usable = self.masters.usable();
        let size = usable.len().saturating_sub(MASTERS / 2 + 1).min(2);
        let mut cut = Vec::new();
        for _ in 0..size {
            cut.push(usable.swap_remove(self.rng.random_range(0..usable.len())));
        }
        cut.sort_unstable();
        let ports = self.masters.ports(&cut);
        let check = if cut.is_empty() {
            Err("no master could be cut off without losing the quorum".to_string())
        } else {
            self.masters
                .partition(&cut, PARTITION_FOR)
                .await
                .and_then(|counts| {
                    let reading = format!("packets dropped to ports {ports:?}: {counts:?}");
                    if counts.iter().all(|&n| n > 0) {
                        Ok(reading)
                    } else {
                        Err(reading)
                    }
                })
        };
        self.evidence.record(
            format!("partition masters {cut:?} for {PARTITION_FOR:?}"),
            check,
        );
    }

    async fn pause_master(&mut self) {
        let usable = self.masters.usable();
        let m = usable[self.rng.random_range(0..usable.len())];
        let from = now_ns();
        let check = match self.masters.cluster.get_mut(m) {
            Some(master) => pause::pause_master(master, PAUSE_FOR).await,
            None => Err(format!("no master {m}")),
        };
        self.masters.unusable.push((m, from, now_ns()));
        self.evidence
            .record(format!("pause master {m} for {PAUSE_FOR:?}"), check);
    }
}
