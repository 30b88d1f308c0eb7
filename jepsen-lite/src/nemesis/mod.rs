//! The nemesis: every fault a run can inject, as one typed operation ([`Fault`]) paired with
//! the check that shows it took effect, and the state needed to lift it again. Each fault, or
//! family of faults on one mechanism, is put in place, proven and lifted in its own file:
//! [`links`] (the proxy's partitions, rings, one-way cuts, held replies and delays), [`pause`],
//! [`kill`], [`kernel_drop`] (iptables drops and loss), [`clock_skew`] (jumps, rates, strobes,
//! a lagging master) and [`crash`] (restarts of every kind, the crash under a bare quorum).
//! The scripted and random runs inject through [`Nemesis`]; the workloads that run their own
//! workers (`cron`, `workload`) call the same files' timed faults.
//!
//! A fault whose effect can be read at once (a paused process in state `T`, a master's `TIME`
//! under the clock shim) is checked when it is injected; one whose effect needs time to show
//! (traffic a proxy link cut or held, packets an iptables rule dropped, a clock's rate) is
//! checked when it ends, before it is lifted (a rule's counters go with it). Either way the
//! reading lands in the run's [`Evidence`], and a fault that did not take effect fails the run.
//! Every fault also writes a nemesis event ([`Verb`]) into the history.

pub mod backup;
pub mod clock_skew;
pub mod crash;
mod fault;
pub mod iptables;
pub mod kernel_drop;
pub mod kill;
pub mod links;
pub mod pause;
mod verb;

use std::time::{Duration, Instant};

use quorumlock_testkit::{Persistence, Proxy};
use serde_json::{json, Value};

use crate::clockshim::Clocks;
use crate::cluster::Masters;
use crate::evidence::Evidence;
use crate::history::{Event, Kind, Process};
use crate::scenario::Restart;
pub use clock_skew::clock_offset;
pub use crash::{aof_incr, restart_delay, CRASH_DOWNTIME};
pub use fault::{Fault, Path};
pub use iptables::Rule;
pub use pause::signal;
pub use verb::Verb;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// What the nemesis acts on.
pub struct Targets<'a> {
    /// The masters.
    pub masters: &'a mut Masters,
    /// The fault proxy between clients and masters.
    pub proxy: &'a Proxy,
    /// The client processes' pids, by client number.
    pub clients: &'a [u32],
}

/// A fault whose effect can only be read once it has had time to act: checked when it ends.
#[derive(Debug)]
enum Pending {
    /// Proxy links in a fault mode: some traffic must have been cut, discarded, delayed or
    /// held, counted from each link's `baselines` entry (the reading names the links that
    /// saw nothing: a client may rightly leave a link idle, but a cut that missed a link
    /// shows there).
    Links {
        label: String,
        links: Vec<(usize, usize)>,
        baselines: Vec<u64>,
    },
    /// iptables DROP rules on these node ports: they must have matched packets.
    Rules { label: String, ports: Vec<u16> },
    /// Every master's clock running fast: its offset must have grown.
    ClockRate {
        label: String,
        ppm: i64,
        since: Instant,
    },
    /// A crashed master, restarted when the fault ends.
    Crash {
        label: String,
        node: usize,
        restart: Restart,
        old_pid: Option<u32>,
        killed: bool,
        /// Not before this (a delayed restart).
        not_before: Instant,
    },
    /// A master cut off for a while by a rule a timer thread removes: the thread's reading of
    /// the rule's packet counters, taken before it deleted the rule.
    TimedDrop {
        label: String,
        timer: std::thread::JoinHandle<Result<String, String>>,
        rule: Rule,
    },
    /// A strobing clock's task, stopped when the fault ends (its check was its first swing).
    Strobe { task: tokio::task::JoinHandle<()> },
    /// The cut of a [`Fault::QuorumRestart`]: at `at`, its links are read (some traffic must
    /// have been cut) and let through, and master `node` crashes (then a [`Pending::Crash`]).
    CutThenCrash {
        label: String,
        links: Vec<(usize, usize)>,
        baseline: u64,
        at: Instant,
        node: usize,
        restart: Restart,
        crash_label: String,
    },
}

/// The nemesis of one run: its history, its evidence and the faults still on.
pub struct Nemesis {
    /// The nemesis events, in order.
    pub history: Vec<Event>,
    /// Every fault injected and whether it took effect.
    pub evidence: Evidence,
    /// The clock shim, when it could be installed.
    pub clocks: Option<Clocks>,
    /// The lock TTL (a delayed restart waits longer).
    ttl: Duration,
    rules: Vec<Rule>,
    pending: Vec<Pending>,
    /// Clients stopped by a fault.
    stopped_clients: Vec<usize>,
    /// The size of each AOF at the start of the current step (what a power loss returns to).
    aof_sizes: Vec<Option<(std::path::PathBuf, u64)>>,
    /// The backups taken at the start of the current step, by master, for the step's restored
    /// backups.
    backups: Vec<Option<backup::Taken>>,
    /// Faults injected, by kind.
    pub counts: std::collections::BTreeMap<&'static str, usize>,
}

impl std::fmt::Debug for Nemesis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nemesis")
            .field("events", &self.history.len())
            .field("evidence", &self.evidence)
            .finish_non_exhaustive()
    }
}

impl Nemesis {
    /// A nemesis with nothing injected yet.
    pub fn new(clocks: Option<Clocks>, ttl: Duration) -> Self {
        Self {
            history: Vec::new(),
            evidence: Evidence::default(),
            clocks,
            ttl,
            rules: Vec::new(),
            pending: Vec::new(),
            stopped_clients: Vec::new(),
            aof_sizes: Vec::new(),
            backups: Vec::new(),
            counts: std::collections::BTreeMap::new(),
        }
    }

    /// Records a nemesis event.
    pub fn record(&mut self, verb: Verb, value: Value) {
        self.record_at(crate::clock::now_ns(), verb, value);
    }

    /// Records a nemesis event that happened at `time_ns`.
    fn record_at(&mut self, time_ns: u64, verb: Verb, value: Value) {
        self.history.push(Event::at(
            time_ns,
            Process::nemesis(),
            Kind::Info,
            verb.as_str(),
            value,
        ));
    }

    /// Before a random step: samples what a crash in it can fall back to (each AOF's size, a
    /// fresh RDB snapshot on masters without an AOF, a backup of the masters that `faults`
    /// restore from one).
    pub fn begin_step(&mut self, t: &mut Targets<'_>, faults: &[Fault]) {
        self.backups = (0..t.masters.len()).map(|_| None).collect();
        for fault in faults {
            if let Fault::Crash {
                node,
                restart: Restart::Snapshot,
            } = fault
            {
                // Taken below, with every master's without an AOF.
                self.record(Verb::SaveSnapshot, json!({"node": node}));
            }
            let (Fault::Crash {
                node,
                restart: Restart::RestoredBackup,
            }
            | Fault::QuorumRestart {
                node,
                restart: Restart::RestoredBackup,
                ..
            }) = fault
            else {
                continue;
            };
            // A failed backup is not fatal here: the restart's proof then fails the run.
            let taken = tokio::task::block_in_place(|| backup::Taken::from(&t.masters[*node]));
            if taken.is_ok() {
                self.record(Verb::Backup, json!({"node": node}));
            }
            self.backups[*node] = taken.ok();
        }
        self.aof_sizes = (0..t.masters.len())
            .map(|n| {
                let m = &t.masters[n];
                if !m.is_running() || m.is_paused() {
                    return None;
                }
                if m.options().persistence == Persistence::None {
                    let _ = m.command(&["SAVE"]);
                }
                aof_incr(m.dir()).map(|p| {
                    let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
                    (p, len)
                })
            })
            .collect();
    }

    /// Injects `fault`, records it in the history, and checks it (at once, or when it ends).
    ///
    /// # Errors
    ///
    /// When the fault cannot be put in place (an iptables or clock-shim failure, a master that
    /// cannot be signalled).
    pub fn inject(&mut self, t: &mut Targets<'_>, fault: &Fault) -> Result<(), Error> {
        // The fault's window opens when its injection begins: it may act (a clock jumps, a
        // lock expires early) before the injection and its took-effect check return, and a
        // grant in between would be seen outside the window (two claims overlapping a fraction
        // of a millisecond before the recorded fault).
        let started = crate::clock::now_ns();
        *self.counts.entry(fault.kind()).or_default() += 1;
        let label = fault.label();
        if let Some((links, modes)) = fault.proxy_links(t.masters.len()) {
            self.set_links(t, label, &links, modes);
        } else {
            match fault {
                Fault::PauseNode(n) => self.pause_node(t, *n, label)?,
                Fault::PauseClient { client } => {
                    if !self.pause_client(t, fault, *client, label) {
                        return Ok(());
                    }
                }
                Fault::KernelDrop(n) => self.kernel_drop(t, *n, label)?,
                Fault::Loss => self.loss(t, label)?,
                Fault::ClockBump { node, offset_ms } => {
                    self.clock_bump(t, *node, *offset_ms, label)?;
                }
                Fault::ClockRate { ppm } => self.clock_rate(t, *ppm, label)?,
                Fault::ClockStrobe { node, offset_ms } => {
                    self.clock_strobe(t, *node, *offset_ms, label)?;
                }
                Fault::LaggingMaster {
                    node,
                    offset_ms,
                    cut_for,
                } => self.lagging_master(t, *node, *offset_ms, *cut_for, label)?,
                Fault::Crash { node, restart } => self.crash(t, *node, *restart, label)?,
                Fault::QuorumRestart {
                    clients,
                    cut,
                    node,
                    restart,
                    cut_for,
                } => self.quorum_restart(t, clients, cut, *node, *restart, *cut_for),
                // Put on the proxy's links above.
                Fault::Partition { .. }
                | Fault::Ring { .. }
                | Fault::OneWay { .. }
                | Fault::HoldReplies { .. }
                | Fault::Delay { .. }
                | Fault::SlowClients { .. } => {}
            }
        }
        self.record_at(started, fault.verb(), fault.value());
        Ok(())
    }

    /// Whether client `c` is stopped by a fault of this nemesis.
    pub fn stops(&self, c: usize) -> bool {
        self.stopped_clients.contains(&c)
    }

    /// Restarts the crashed masters whose downtime is over (see [`CRASH_DOWNTIME`]), with their
    /// proof; the other faults stay on.
    ///
    /// # Errors
    ///
    /// When a master cannot be restarted.
    pub fn restart_due(&mut self, t: &mut Targets<'_>) -> Result<(), Error> {
        let now = Instant::now();
        let (cuts, rest): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| matches!(p, Pending::CutThenCrash { at, .. } if *at <= now));
        self.pending = rest;
        for cut in cuts {
            self.cut_then_crash(t, cut, true)?;
        }
        let (due, rest): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| matches!(p, Pending::Crash { not_before, .. } if *not_before <= now));
        self.pending = rest;
        if due.is_empty() {
            return Ok(());
        }
        // Settles only the due crashes: the others are back in `pending` afterwards.
        let others = std::mem::replace(&mut self.pending, due);
        let settled = self.settle(t);
        self.pending = others;
        settled
    }

    /// The longest a fault still on needs before it may end (a delayed restart).
    pub fn due_in(&self) -> Duration {
        self.pending
            .iter()
            .filter_map(|p| match p {
                Pending::Crash { not_before, .. } => {
                    Some(not_before.saturating_duration_since(Instant::now()))
                }
                _ => None,
            })
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// Reads what the faults still on did, into the evidence, and restarts crashed masters
    /// (they end here: their check is the new pid). Call before the faults are lifted.
    ///
    /// # Errors
    ///
    /// When a crashed master cannot be restarted.
    pub fn settle(&mut self, t: &mut Targets<'_>) -> Result<(), Error> {
        let listing = self
            .pending
            .iter()
            .any(|p| matches!(p, Pending::Rules { .. }))
            .then(iptables::listing);
        for pending in std::mem::take(&mut self.pending) {
            let (label, check) = match pending {
                Pending::Links {
                    label,
                    links,
                    baselines,
                } => (label, links::prove(t, &links, &baselines)),
                Pending::Rules { label, ports } => {
                    (label, kernel_drop::prove(listing.as_ref(), &ports))
                }
                Pending::ClockRate { label, ppm, since } => {
                    (label, clock_skew::prove_rate(t, ppm, since))
                }
                Pending::TimedDrop { label, timer, .. } => {
                    let check = tokio::task::block_in_place(|| timer.join())
                        .unwrap_or_else(|_| Err("the timer thread panicked".to_string()));
                    (label, check)
                }
                Pending::Strobe { task, .. } => {
                    // Its check was the first swing.
                    task.abort();
                    continue;
                }
                // The step ended before its crash: the cut is proven, nothing crashes.
                cut @ Pending::CutThenCrash { .. } => {
                    self.cut_then_crash(t, cut, false)?;
                    continue;
                }
                Pending::Crash {
                    label,
                    node,
                    restart,
                    old_pid,
                    killed,
                    not_before,
                } => {
                    let check =
                        self.settle_crash(t, node, restart, (old_pid, killed), not_before)?;
                    (label, check)
                }
            };
            self.evidence.record(label, check);
        }
        Ok(())
    }

    /// Lifts every fault still on (after reading what it did): links pass, rules go, paused
    /// processes continue, clocks are reset, crashed masters restart. Records the resumptions,
    /// not the end itself (see [`end_step`](Self::end_step) and [`heal`](Self::heal)).
    ///
    /// # Errors
    ///
    /// When a rule cannot be deleted, a clock reset or a master resumed or restarted.
    pub fn lift(&mut self, t: &mut Targets<'_>, record: bool) -> Result<(), Error> {
        self.settle(t)?;
        Self::pass_links(t);
        self.delete_rules()?;
        self.resume_nodes(t, record)?;
        self.reset_clocks(t)?;
        self.resume_clients(t, record);
        Ok(())
    }

    /// Ends a random step: every fault lifted, `partition-end` in the history.
    ///
    /// # Errors
    ///
    /// As [`lift`](Self::lift).
    pub fn end_step(&mut self, t: &mut Targets<'_>) -> Result<(), Error> {
        self.lift(t, true)?;
        self.record(Verb::PartitionEnd, json!({}));
        Ok(())
    }

    /// Heals: every fault lifted, `heal` in the history (clients owe liveness from here).
    ///
    /// # Errors
    ///
    /// As [`lift`](Self::lift).
    pub fn heal(&mut self, t: &mut Targets<'_>) -> Result<(), Error> {
        self.lift(t, false)?;
        self.record(Verb::Heal, json!({}));
        Ok(())
    }

    /// Best effort on drop of the run: rules deleted, clocks reset, strobes stopped.
    pub fn abandon(&mut self, ports: &[u16]) {
        for rule in self.rules.drain(..) {
            let _ = iptables::apply(false, rule);
        }
        for p in self.pending.drain(..) {
            match p {
                Pending::Strobe { task, .. } => task.abort(),
                // Its timer may not have run yet: the rule must not outlive the run.
                Pending::TimedDrop { rule, .. } => {
                    let _ = iptables::apply(false, rule);
                }
                _ => {}
            }
        }
        if let Some(clocks) = &self.clocks {
            for &port in ports {
                let _ = clocks.reset(port);
            }
        }
    }
}
