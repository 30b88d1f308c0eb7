//! Crashing a master (`SIGKILL`) and starting it again after a downtime, as the restart kind
//! says (at once with what its persistence kept, empty, after a delay longer than the TTL,
//! after a power loss that cut its AOF, from an older RDB snapshot, from a restored backup);
//! and the crash of one master of a bare quorum, after a cut that made the quorum bare. Proven
//! by the new pid that serves (and, for a restored backup, by its data); a crashed master is
//! restarted when its downtime is over, or when the step ends at the latest.

use std::time::{Duration, Instant};

use quorumlock_testkit::{Mode, Modes, Persistence, RedisCluster};
use serde_json::json;

use super::{Error, Fault, Nemesis, Pending, Targets, Verb};
use crate::scenario::Restart;

/// How long a crashed master stays down before a restart that is not delayed.
pub const CRASH_DOWNTIME: Duration = Duration::from_millis(300);

/// How much longer than the TTL a delayed restart keeps a crashed master down: the drift
/// allowance plus half a second.
pub fn restart_delay(ttl: Duration) -> Duration {
    ttl + ttl / 100 + Duration::from_millis(502)
}

/// The incremental AOF file of a master's data directory, if it has one.
pub fn aof_incr(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(dir.join("appendonlydir"))
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
}

impl Fault {
    /// Whether the restart kind `restart` can act on a master keeping `persistence`: a power
    /// loss needs an AOF fsynced every second, a snapshot reload needs no AOF, a plain restart
    /// keeps the lock only with `appendfsync always`, and a restored backup is the way such a
    /// durable master comes back with older data.
    pub fn restart_fits(restart: Restart, persistence: Persistence) -> bool {
        match restart {
            Restart::Immediate | Restart::RestoredBackup => persistence == Persistence::AofAlways,
            Restart::PowerLoss => persistence == Persistence::AofEverySec,
            Restart::Snapshot => persistence == Persistence::None,
            Restart::ImmediateEmpty | Restart::DelayedEmpty | Restart::UndelayedEmpty => true,
        }
    }
}

impl Nemesis {
    /// Kills master `n`; it comes back as `restart` says once its downtime is over.
    pub(super) fn crash(
        &mut self,
        t: &mut Targets<'_>,
        n: usize,
        restart: Restart,
        label: String,
    ) -> Result<(), Error> {
        let old_pid = t.masters[n].pid();
        tokio::task::block_in_place(|| t.masters[n].kill())?;
        let killed = !t.masters[n].is_running();
        // Down for a moment (a holder that counted on it is most likely still holding when it
        // is back), or, for a delayed restart, longer than the max TTL.
        let not_before = Instant::now()
            + if restart == Restart::DelayedEmpty {
                restart_delay(self.ttl)
            } else {
                CRASH_DOWNTIME
            };
        self.pending.push(Pending::Crash {
            label,
            node: n,
            restart,
            old_pid,
            killed,
            not_before,
        });
        Ok(())
    }

    /// Cuts `clients` from the minority `cut` for `cut_for`; then master `node` crashes (see
    /// [`Fault::QuorumRestart`]).
    pub(super) fn quorum_restart(
        &mut self,
        t: &Targets<'_>,
        clients: &[usize],
        cut: &[usize],
        node: usize,
        restart: Restart,
        cut_for: Duration,
    ) {
        let links = super::links::links(clients, cut);
        let baseline = links.iter().map(|&(c, n)| t.proxy.affected(c, n)).sum();
        for &(c, n) in &links {
            t.proxy.set(c, n, Modes::both(Mode::Blackhole));
        }
        self.pending.push(Pending::CutThenCrash {
            label: format!(
                "blackhole {} from nodes {cut:?}",
                super::fault::who(clients)
            ),
            links,
            baseline,
            at: Instant::now() + cut_for,
            node,
            restart,
            crash_label: format!("crash node {node} under a bare quorum, restart {restart:?}"),
        });
    }

    /// Ends the cut of a [`Fault::QuorumRestart`] whose time has come (or `now`: the step
    /// ends first, and nothing crashes), with the proof of the cut; then crashes its master.
    pub(super) fn cut_then_crash(
        &mut self,
        t: &mut Targets<'_>,
        pending: Pending,
        crash: bool,
    ) -> Result<(), Error> {
        let Pending::CutThenCrash {
            label,
            links,
            baseline,
            node,
            restart,
            crash_label,
            ..
        } = pending
        else {
            return Ok(());
        };
        let now: u64 = links.iter().map(|&(c, n)| t.proxy.affected(c, n)).sum();
        let affected = now.saturating_sub(baseline);
        for &(c, n) in &links {
            t.proxy.set(c, n, Modes::PASS);
        }
        let check = if affected > 0 {
            Ok(format!("{affected} bytes and connections affected"))
        } else {
            Err("no traffic crossed the faulty links".to_string())
        };
        self.evidence.record(label, check);
        if !crash {
            return Ok(());
        }
        // The cut's end is not recorded as a step's end (which lifts every band): its
        // partition event says how long it lasted (`for_ms`).
        let old_pid = t.masters[node].pid();
        tokio::task::block_in_place(|| t.masters[node].kill())?;
        let killed = !t.masters[node].is_running();
        self.record(
            Verb::Kill,
            json!({"node": node, "restart": format!("{restart:?}")}),
        );
        self.pending.push(Pending::Crash {
            label: crash_label,
            node,
            restart,
            old_pid,
            killed,
            not_before: Instant::now() + CRASH_DOWNTIME,
        });
        Ok(())
    }

    /// Restarts crashed master `node` once `not_before` has passed, and proves the crash: a
    /// new pid serves (and says what the restart brought back).
    pub(super) fn settle_crash(
        &mut self,
        t: &mut Targets<'_>,
        node: usize,
        restart: Restart,
        (old_pid, killed): (Option<u32>, bool),
        not_before: Instant,
    ) -> Result<Result<String, String>, Error> {
        let wait = not_before.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            tokio::task::block_in_place(|| std::thread::sleep(wait));
        }
        let came_back = self.restart(t, node, restart)?;
        let new_pid = t.masters[node].pid();
        Ok(match (old_pid, new_pid) {
            (Some(old), Some(new)) if killed && old != new => {
                came_back.map(|what| format!("pid {old} killed, pid {new} serving{what}"))
            }
            (old, new) => Err(format!(
                "crash not shown: killed {killed}, pid before {old:?}, after {new:?}"
            )),
        })
    }

    /// Restarts crashed master `n` as `restart` says. Says what a power loss cut off, or
    /// whether a restored master came back with its backup's data (`Err`: it did not, so the
    /// fault did not take effect).
    pub(super) fn restart(
        &mut self,
        t: &mut Targets<'_>,
        n: usize,
        restart: Restart,
    ) -> Result<Result<String, String>, Error> {
        let mut what = String::new();
        match restart {
            Restart::RestoredBackup => {
                let Some(taken) = self.backups.get_mut(n).and_then(Option::take) else {
                    tokio::task::block_in_place(|| t.masters[n].restart())?;
                    self.record(Verb::Restart, json!({"node": n, "how": "Immediate"}));
                    return Ok(Err("no backup was taken to restore from".to_string()));
                };
                tokio::task::block_in_place(|| taken.restore(&mut t.masters[n]))?;
                self.record(
                    Verb::Restart,
                    json!({"node": n, "how": format!("{restart:?}")}),
                );
                return Ok(tokio::task::block_in_place(|| taken.proof(&t.masters[n]))
                    .map(|proof| format!(", {proof}")));
            }
            Restart::Immediate | Restart::Snapshot => {
                tokio::task::block_in_place(|| t.masters[n].restart())?;
            }
            Restart::PowerLoss => {
                // The writes since the step began were never fsynced: they are gone.
                if let Some(Some((path, len))) = self.aof_sizes.get(n).cloned() {
                    let now = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)?
                        .set_len(len.min(now))?;
                    self.record(Verb::TruncateAof, json!({"node": n, "bytes": len}));
                    what = format!(", AOF cut by {} bytes", now.saturating_sub(len));
                }
                tokio::task::block_in_place(|| t.masters[n].restart())?;
            }
            Restart::ImmediateEmpty | Restart::DelayedEmpty | Restart::UndelayedEmpty => {
                tokio::task::block_in_place(|| t.masters[n].restart_empty())?;
            }
        }
        self.record(
            Verb::Restart,
            json!({"node": n, "how": format!("{restart:?}")}),
        );
        Ok(Ok(what))
    }
}

/// Kills master `m` of `masters`, leaves it down for `down_for`, restarts it empty (no data,
/// as after a crash without persistence) and waits for it to answer `PING` (the workloads'
/// crash): proven by a new pid. Blocks the worker thread meanwhile (the masters' handles are
/// synchronous).
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
