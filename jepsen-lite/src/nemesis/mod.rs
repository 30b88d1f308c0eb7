//! The nemesis: every fault a run can inject, as a typed operation ([`Fault`]) paired with the
//! check that shows it took effect, and the state needed to lift it again.
//!
//! A fault whose effect can be read at once (a paused process in state `T`, a master's `TIME`
//! under the clock shim) is checked when it is injected; one whose effect needs time to show
//! (traffic a proxy link cut or held, packets an iptables rule dropped, a clock's rate) is
//! checked when it ends, before it is lifted (a rule's counters go with it). Either way the
//! reading lands in the run's [`Evidence`], and a fault that did not take effect fails the run.
//! Every fault also writes a nemesis event ([`Verb`]) into the history.

pub mod backup;
pub mod iptables;
pub mod proven;
mod verb;

use std::time::{Duration, Instant};

use quorumlock::testing::{Mode, Modes, Persistence, Proxy};
use serde_json::{json, Value};

use crate::clockshim::Clocks;
use crate::cluster::Masters;
use crate::evidence::Evidence;
use crate::evidence::{clock_offset_ms, dropped_packets, offset_took_effect, process_stopped};
use crate::history::{Event, Kind, Process};
use crate::scenario::Restart;
pub use iptables::Rule;
pub use verb::Verb;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Which path of a link a one-way partition cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Client → node: requests never arrive.
    Requests,
    /// Node → client: requests are applied, replies never arrive.
    Replies,
}

/// One fault, with its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Clients `clients` cut from `nodes` both ways, through the proxy (blackhole or reset).
    Partition {
        /// The clients.
        clients: Vec<usize>,
        /// The nodes they no longer reach.
        nodes: Vec<usize>,
        /// Blackhole (TCP stays up, bytes vanish) or reset (fails fast).
        mode: Mode,
    },
    /// A majorities ring: client `c` reaches only nodes `c .. c + quorum` (mod `nodes`), and is
    /// cut from the others. Every client can form a quorum, each with a different majority.
    Ring {
        /// How many clients.
        clients: usize,
        /// How many nodes.
        nodes: usize,
        /// Blackhole or reset.
        mode: Mode,
    },
    /// One path of the links from `clients` to `nodes` blackholed.
    OneWay {
        /// The clients.
        clients: Vec<usize>,
        /// The nodes.
        nodes: Vec<usize>,
        /// Requests or replies.
        path: Path,
    },
    /// The replies from `nodes` to `clients` held back until the fault ends.
    HoldReplies {
        /// The clients.
        clients: Vec<usize>,
        /// The nodes.
        nodes: Vec<usize>,
    },
    /// The requests of `clients` to `node` delayed by `by`.
    Delay {
        /// The clients.
        clients: Vec<usize>,
        /// The node.
        node: usize,
        /// How long.
        by: Duration,
    },
    /// Every request of `clients` delayed by `by` (shorter than the node timeout): a slow
    /// network between those clients and every master. Within Redlock's model, as long as the
    /// validity counts the time the requests took.
    SlowClients {
        /// The clients.
        clients: Vec<usize>,
        /// How long.
        by: Duration,
    },
    /// Master `n` stopped (`SIGSTOP`).
    PauseNode(usize),
    /// Client process `client` stopped (`SIGSTOP`) wherever it is.
    PauseClient {
        /// The client.
        client: usize,
    },
    /// Every packet to master `n`'s port dropped by iptables (TCP retransmits after the end).
    KernelDrop(usize),
    /// A random share of the packets to and from every master dropped by iptables.
    Loss,
    /// Master `node`'s wall clock jumps by `offset_ms`.
    ClockBump {
        /// The node.
        node: usize,
        /// The jump.
        offset_ms: i64,
    },
    /// Every master's wall clock runs `ppm` fast.
    ClockRate {
        /// Parts per million.
        ppm: i64,
    },
    /// Master `node`'s wall clock jumps between `+offset_ms` and `-offset_ms` every few tens of
    /// milliseconds (a strobe), until the fault ends.
    ClockStrobe {
        /// The node.
        node: usize,
        /// The amplitude.
        offset_ms: i64,
    },
    /// Master `node` falls behind: its wall clock jumps back by `offset_ms` (negative) and
    /// iptables drops every packet to it for the first `cut_for` of the step, so that locks are
    /// granted without it; then it serves again, behind, with counters that missed those
    /// grants. What makes the masters of a quorum issue different fencing tokens.
    LaggingMaster {
        /// The node.
        node: usize,
        /// The clock jump (negative).
        offset_ms: i64,
        /// How long it is cut off first.
        cut_for: Duration,
    },
    /// Master `node` killed (`SIGKILL`); it comes back as `restart` says when the fault ends.
    Crash {
        /// The node.
        node: usize,
        /// How it comes back.
        restart: Restart,
    },
    /// A holder's quorum crashes under it: `clients` are cut (blackhole) from the minority
    /// `cut` for `cut_for`, so that locks granted meanwhile hold on a bare quorum without those
    /// masters; then the cut ends and master `node`, one of that quorum, crashes and comes back
    /// at once as `restart` says (losing the keys set since the step began), while the holders
    /// of those locks may still hold. The cut masters and the restarted one are a quorum that
    /// has not seen those locks: restart protection must keep the restarted one out.
    QuorumRestart {
        /// The clients.
        clients: Vec<usize>,
        /// The masters cut off first.
        cut: Vec<usize>,
        /// The master that crashes then.
        node: usize,
        /// How it comes back (one that loses recent writes).
        restart: Restart,
        /// How long the cut lasts before the crash.
        cut_for: Duration,
    },
}

impl Fault {
    /// The history's verb for it.
    pub fn verb(&self) -> Verb {
        match self {
            Self::Partition { .. }
            | Self::Ring { .. }
            | Self::OneWay { .. }
            | Self::KernelDrop(_) => Verb::Partition,
            Self::HoldReplies { .. } => Verb::Hold,
            Self::Delay { .. } | Self::SlowClients { .. } => Verb::Delay,
            Self::PauseNode(_) => Verb::Pause,
            Self::PauseClient { .. } => Verb::PauseClient,
            Self::Loss => Verb::Loss,
            Self::ClockBump { .. } | Self::LaggingMaster { .. } => Verb::ClockBump,
            Self::ClockRate { .. } => Verb::ClockRate,
            Self::ClockStrobe { .. } => Verb::ClockStrobe,
            Self::Crash { .. } => Verb::Kill,
            Self::QuorumRestart { .. } => Verb::Partition,
        }
    }

    /// The kind a soak counts it under.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Partition { .. } => "partition",
            Self::Ring { .. } => "majorities ring",
            Self::OneWay {
                path: Path::Requests,
                ..
            } => "one-way requests",
            Self::OneWay {
                path: Path::Replies,
                ..
            } => "one-way replies",
            Self::HoldReplies { .. } => "held replies",
            Self::Delay { .. } => "delay past the TTL",
            Self::SlowClients { .. } => "slow client network",
            Self::PauseNode(_) => "pause master",
            Self::PauseClient { .. } => "pause client",
            Self::KernelDrop(_) => "iptables drop",
            Self::Loss => "packet loss",
            Self::ClockBump { .. } => "clock bump",
            Self::LaggingMaster { .. } => "lagging master",
            Self::ClockRate { .. } => "clock rate",
            Self::ClockStrobe { .. } => "clock strobe",
            Self::Crash { restart, .. } => match restart {
                Restart::Immediate => "crash, fsync always",
                Restart::ImmediateEmpty => "crash, restart empty",
                Restart::DelayedEmpty | Restart::UndelayedEmpty => "crash, delayed restart",
                Restart::PowerLoss => "crash, AOF tail lost",
                Restart::Snapshot => "crash, RDB snapshot",
                Restart::RestoredBackup => "crash, restored backup",
            },
            Self::QuorumRestart { .. } => "crash under a bare quorum",
        }
    }

    /// The label of its evidence and of its timeline band: the fault and its target.
    pub fn label(&self) -> String {
        match self {
            Self::Partition {
                clients,
                nodes,
                mode,
            } => format!("{mode:?} {} from nodes {nodes:?}", who(clients)).to_lowercase(),
            Self::Ring { mode, .. } => format!("{mode:?} majorities ring").to_lowercase(),
            Self::OneWay {
                clients,
                nodes,
                path,
            } => format!("cut {path:?} of {} from nodes {nodes:?}", who(clients)).to_lowercase(),
            Self::HoldReplies { clients, nodes } => {
                format!("hold replies to {} from nodes {nodes:?}", who(clients))
            }
            Self::Delay { clients, node, by } => {
                format!("delay {by:?} {} to node {node}", who(clients))
            }
            Self::SlowClients { clients, by } => {
                format!("delay {by:?} {} to every node", who(clients))
            }
            Self::PauseNode(n) => format!("pause node {n}"),
            Self::PauseClient { client } => format!("pause client {client}"),
            Self::KernelDrop(n) => format!("iptables drop node {n}"),
            Self::Loss => "iptables 20% loss on every node".to_string(),
            Self::ClockBump { node, offset_ms } => {
                format!("clock bump {offset_ms} ms on node {node}")
            }
            Self::ClockRate { ppm } => format!("clocks {ppm} ppm fast on every node"),
            Self::LaggingMaster {
                node,
                offset_ms,
                cut_for,
            } => format!("node {node} {offset_ms} ms behind, cut off for {cut_for:?} first"),
            Self::ClockStrobe { node, offset_ms } => {
                format!("clock strobe ±{offset_ms} ms on node {node}")
            }
            Self::Crash { node, restart } => format!("crash node {node}, restart {restart:?}"),
            Self::QuorumRestart {
                clients,
                cut,
                node,
                restart,
                cut_for,
            } => format!(
                "blackhole {} from nodes {cut:?} for {cut_for:?}, then crash node {node}, restart {restart:?}",
                who(clients)
            ),
        }
    }

    /// What the history records of it.
    fn value(&self) -> Value {
        let mode = |m: &Mode| format!("{m:?}").to_lowercase();
        match self {
            Self::Partition {
                clients,
                nodes,
                mode: m,
            } => json!({"clients": clients, "nodes": nodes, "mode": mode(m)}),
            Self::Ring { mode: m, .. } => json!({"clients": "all", "ring": true, "mode": mode(m)}),
            Self::OneWay {
                clients,
                nodes,
                path,
            } => json!({"clients": clients, "nodes": nodes, "mode": "blackhole",
                         "path": format!("{path:?}").to_lowercase()}),
            Self::HoldReplies { clients, nodes } => {
                json!({"clients": clients, "nodes": nodes, "direction": "to_client"})
            }
            Self::Delay { clients, node, by } => {
                json!({"clients": clients, "node": node, "ms": u64::try_from(by.as_millis()).unwrap_or(u64::MAX)})
            }
            Self::SlowClients { clients, by } => {
                json!({"clients": clients, "nodes": "all", "ms": u64::try_from(by.as_millis()).unwrap_or(u64::MAX)})
            }
            Self::PauseNode(n) => json!({"node": n}),
            Self::PauseClient { client } => json!({"client": client}),
            Self::KernelDrop(n) => json!({"node": n, "how": "iptables DROP"}),
            Self::Loss => json!({"nodes": "all", "probability": iptables::LOSS_PROBABILITY,
                                 "how": "iptables statistic"}),
            Self::ClockBump { node, offset_ms } => json!({"node": node, "delta_ms": offset_ms}),
            Self::ClockRate { ppm } => json!({"nodes": "all", "rate_ppm": ppm}),
            Self::LaggingMaster {
                node,
                offset_ms,
                cut_for,
            } => json!({"node": node, "delta_ms": offset_ms, "lagging": true,
                        "cut_ms": u64::try_from(cut_for.as_millis()).unwrap_or(u64::MAX)}),
            Self::ClockStrobe { node, offset_ms } => {
                json!({"node": node, "amplitude_ms": offset_ms})
            }
            Self::Crash { node, restart } => {
                json!({"node": node, "restart": format!("{restart:?}")})
            }
            Self::QuorumRestart {
                clients,
                cut,
                cut_for,
                ..
            } => json!({"clients": clients, "nodes": cut, "mode": "blackhole",
                        "for_ms": u64::try_from(cut_for.as_millis()).unwrap_or(u64::MAX)}),
        }
    }

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

/// What the nemesis acts on.
pub struct Targets<'a> {
    /// The masters.
    pub masters: &'a mut Masters,
    /// The fault proxy between clients and masters.
    pub proxy: &'a Proxy,
    /// The client processes' pids, by client number.
    pub clients: &'a [u32],
}

/// The took-effect reading of a proxy fault on `links`, which were `affected` each: proven
/// when any traffic was affected, naming the links that saw none.
fn links_reading(links: &[(usize, usize)], affected: &[u64]) -> Result<String, String> {
    let total: u64 = affected.iter().sum();
    if total == 0 {
        return Err("no traffic crossed the faulty links".to_string());
    }
    let idle: Vec<String> = links
        .iter()
        .zip(affected)
        .filter(|(_, &a)| a == 0)
        .map(|(&(c, n), _)| format!("client {c} to node {n}"))
        .collect();
    Ok(if idle.is_empty() {
        format!("{total} bytes and connections affected")
    } else {
        format!(
            "{total} bytes and connections affected; none on {}",
            idle.join(", ")
        )
    })
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
        match fault {
            Fault::Partition {
                clients,
                nodes,
                mode,
            } => self.set_links(t, label, &links(clients, nodes), Modes::both(*mode)),
            Fault::Ring {
                clients,
                nodes,
                mode,
            } => {
                let quorum = nodes / 2 + 1;
                let cut: Vec<(usize, usize)> = (0..*clients)
                    .flat_map(|c| (quorum..*nodes).map(move |k| (c, (c + k) % nodes)))
                    .collect();
                self.set_links(t, label, &cut, Modes::both(*mode));
            }
            Fault::OneWay {
                clients,
                nodes,
                path,
            } => {
                let modes = match path {
                    Path::Requests => Modes {
                        to_node: Mode::Blackhole,
                        to_client: Mode::Pass,
                    },
                    Path::Replies => Modes {
                        to_node: Mode::Pass,
                        to_client: Mode::Blackhole,
                    },
                };
                self.set_links(t, label, &links(clients, nodes), modes);
            }
            Fault::HoldReplies { clients, nodes } => {
                let modes = Modes {
                    to_node: Mode::Pass,
                    to_client: Mode::Hold,
                };
                self.set_links(t, label, &links(clients, nodes), modes);
            }
            Fault::Delay { clients, node, by } => {
                let modes = Modes {
                    to_node: Mode::Delay(*by),
                    to_client: Mode::Pass,
                };
                self.set_links(t, label, &links(clients, &[*node]), modes);
            }
            Fault::SlowClients { clients, by } => {
                let modes = Modes {
                    to_node: Mode::Delay(*by),
                    to_client: Mode::Pass,
                };
                let nodes: Vec<usize> = (0..t.masters.len()).collect();
                self.set_links(t, label, &links(clients, &nodes), modes);
            }
            Fault::PauseNode(n) => {
                tokio::task::block_in_place(|| t.masters[*n].pause())?;
                let check = t.masters[*n]
                    .pid()
                    .ok_or_else(|| "no process".to_string())
                    .and_then(process_stopped);
                self.evidence.record(label, check);
            }
            Fault::PauseClient { client } => {
                let pid = t.clients.get(*client).copied().unwrap_or(0);
                signal(pid, nix::sys::signal::Signal::SIGSTOP);
                let check = tokio::task::block_in_place(|| wait_stopped(pid));
                if check.is_err() && crate::evidence::process_exited(pid) {
                    // The client exited by itself (a crash while holding, which its history
                    // tells) after the step was drawn: there was nothing to stop. Neither a
                    // fault nor an unproven one; the watcher starts the client again.
                    if let Some(n) = self.counts.get_mut(&fault.kind()) {
                        *n = n.saturating_sub(1);
                    }
                    return Ok(());
                }
                self.stopped_clients.push(*client);
                self.evidence.record(label, check);
            }
            Fault::KernelDrop(n) => {
                let port = t.masters.ports()[*n];
                iptables::apply(true, Rule::Drop(port))?;
                self.rules.push(Rule::Drop(port));
                self.pending.push(Pending::Rules {
                    label,
                    ports: vec![port],
                });
            }
            Fault::Loss => {
                // Below TCP, on this run's node ports only (the proxy's upstream leg carries
                // all of this run's lock traffic), both directions.
                for port in t.masters.ports() {
                    for rule in [Rule::LossTo(port), Rule::LossFrom(port)] {
                        iptables::apply(true, rule)?;
                        self.rules.push(rule);
                    }
                }
                self.pending.push(Pending::Rules {
                    label,
                    ports: t.masters.ports(),
                });
            }
            Fault::ClockBump { node, offset_ms } => {
                let clocks = self.clocks.as_ref().ok_or("clock shim unavailable")?;
                clocks.set(t.masters.ports()[*node], *offset_ms, 0)?;
                let check = tokio::task::block_in_place(|| {
                    clock_offset(&t.masters[*node], *node).and_then(|measured| {
                        if offset_took_effect(measured, *offset_ms) {
                            Ok(format!("node {node} TIME {measured} ms off"))
                        } else {
                            Err(format!(
                                "node {node} TIME {measured} ms off, expected {offset_ms}"
                            ))
                        }
                    })
                });
                self.evidence.record(label, check);
            }
            Fault::ClockRate { ppm } => {
                let clocks = self.clocks.as_ref().ok_or("clock shim unavailable")?;
                for port in t.masters.ports() {
                    clocks.set(port, 0, *ppm)?;
                }
                self.pending.push(Pending::ClockRate {
                    label,
                    ppm: *ppm,
                    since: Instant::now(),
                });
            }
            Fault::ClockStrobe { node, offset_ms } => {
                let clocks = self.clocks.clone().ok_or("clock shim unavailable")?;
                let port = t.masters.ports()[*node];
                // Proven at once: the first swing must show on the master.
                clocks.set(port, *offset_ms, 0)?;
                let check = tokio::task::block_in_place(|| {
                    clock_offset(&t.masters[*node], *node).and_then(|measured| {
                        if offset_took_effect(measured, *offset_ms) {
                            Ok(format!(
                                "node {node} TIME {measured} ms off on the first swing"
                            ))
                        } else {
                            Err(format!(
                                "node {node} TIME {measured} ms off, expected {offset_ms}"
                            ))
                        }
                    })
                });
                self.evidence.record(label.clone(), check);
                let amplitude = *offset_ms;
                let task = tokio::spawn(async move {
                    let mut sign = -1;
                    loop {
                        tokio::time::sleep(Duration::from_millis(40)).await;
                        let _ = clocks.set(port, sign * amplitude, 0);
                        sign = -sign;
                    }
                });
                self.pending.push(Pending::Strobe { task });
            }
            Fault::LaggingMaster {
                node,
                offset_ms,
                cut_for,
            } => {
                let clocks = self.clocks.as_ref().ok_or("clock shim unavailable")?;
                let port = t.masters.ports()[*node];
                let rule = Rule::Drop(port);
                iptables::apply(true, rule)?;
                let cut_for = *cut_for;
                let timer = std::thread::spawn(move || {
                    std::thread::sleep(cut_for);
                    let packets = iptables::listing().map(|l| dropped_packets(&l, port));
                    let deleted = iptables::apply(false, rule);
                    match (packets, deleted) {
                        (Ok(p), Ok(())) if p > 0 => {
                            Ok(format!("{p} packets dropped, then let through"))
                        }
                        (Ok(p), Ok(())) => Err(format!("{p} packets matched")),
                        (Err(e), _) => Err(format!("cannot read the counters: {e}")),
                        (_, Err(e)) => Err(format!("the rule could not be removed: {e}")),
                    }
                });
                self.pending.push(Pending::TimedDrop {
                    label: format!("iptables drop node {node} for {cut_for:?}"),
                    timer,
                    rule,
                });
                clocks.set(port, *offset_ms, 0)?;
                let check = tokio::task::block_in_place(|| {
                    clock_offset(&t.masters[*node], *node).and_then(|measured| {
                        if offset_took_effect(measured, *offset_ms) {
                            Ok(format!("node {node} TIME {measured} ms off"))
                        } else {
                            Err(format!(
                                "node {node} TIME {measured} ms off, expected {offset_ms}"
                            ))
                        }
                    })
                });
                self.evidence.record(label, check);
                self.record(
                    Verb::Partition,
                    json!({"node": node, "how": "iptables DROP", "for_ms": u64::try_from(cut_for.as_millis()).unwrap_or(u64::MAX)}),
                );
            }
            Fault::Crash { node, restart } => {
                let n = *node;
                let old_pid = t.masters[n].pid();
                tokio::task::block_in_place(|| t.masters[n].kill())?;
                let killed = !t.masters[n].is_running();
                // Down for a moment (a holder that counted on it is most likely still holding
                // when it is back), or, for a delayed restart, longer than the max TTL.
                let not_before = Instant::now()
                    + if *restart == Restart::DelayedEmpty {
                        restart_delay(self.ttl)
                    } else {
                        CRASH_DOWNTIME
                    };
                self.pending.push(Pending::Crash {
                    label,
                    node: n,
                    restart: *restart,
                    old_pid,
                    killed,
                    not_before,
                });
            }
            Fault::QuorumRestart {
                clients,
                cut,
                node,
                restart,
                cut_for,
            } => {
                let links = links(clients, cut);
                let baseline = links.iter().map(|&(c, n)| t.proxy.affected(c, n)).sum();
                for &(c, n) in &links {
                    t.proxy.set(c, n, Modes::both(Mode::Blackhole));
                }
                self.pending.push(Pending::CutThenCrash {
                    label: format!("blackhole {} from nodes {cut:?}", who(clients)),
                    links,
                    baseline,
                    at: Instant::now() + *cut_for,
                    node: *node,
                    restart: *restart,
                    crash_label: format!(
                        "crash node {node} under a bare quorum, restart {restart:?}"
                    ),
                });
            }
        }
        self.record_at(started, fault.verb(), fault.value());
        Ok(())
    }

    /// Ends the cut of a [`Fault::QuorumRestart`] whose time has come (or `now`: the step
    /// ends first, and nothing crashes), with the proof of the cut; then crashes its master.
    fn cut_then_crash(
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

    fn set_links(
        &mut self,
        t: &Targets<'_>,
        label: String,
        links: &[(usize, usize)],
        modes: Modes,
    ) {
        let links = links.to_vec();
        let baselines = links.iter().map(|&(c, n)| t.proxy.affected(c, n)).collect();
        for &(c, n) in &links {
            t.proxy.set(c, n, modes);
        }
        self.pending.push(Pending::Links {
            label,
            links,
            baselines,
        });
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
                } => {
                    let each: Vec<u64> = links
                        .iter()
                        .zip(&baselines)
                        .map(|(&(c, n), &base)| t.proxy.affected(c, n).saturating_sub(base))
                        .collect();
                    (label, links_reading(&links, &each))
                }
                Pending::Rules { label, ports } => {
                    let check = match &listing {
                        Some(Ok(listing)) => {
                            let packets: u64 =
                                ports.iter().map(|&p| dropped_packets(listing, p)).sum();
                            if packets > 0 {
                                Ok(format!("{packets} packets dropped"))
                            } else {
                                Err("0 packets matched".to_string())
                            }
                        }
                        Some(Err(e)) => Err(format!("cannot read the counters: {e}")),
                        None => Err("no counters read".to_string()),
                    };
                    (label, check)
                }
                Pending::ClockRate { label, ppm, since } => {
                    let elapsed_ms = i64::try_from(since.elapsed().as_millis()).unwrap_or(0);
                    let expected = elapsed_ms.saturating_mul(ppm) / 1_000_000;
                    let check = tokio::task::block_in_place(|| clock_offset(&t.masters[0], 0))
                        .and_then(|measured| {
                            if measured >= expected / 2 && expected > 0 {
                                Ok(format!("node 0 {measured} ms ahead after {elapsed_ms} ms"))
                            } else {
                                Err(format!(
                                    "node 0 {measured} ms ahead after {elapsed_ms} ms, expected about {expected}"
                                ))
                            }
                        });
                    (label, check)
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
                    let wait = not_before.saturating_duration_since(Instant::now());
                    if !wait.is_zero() {
                        tokio::task::block_in_place(|| std::thread::sleep(wait));
                    }
                    let came_back = self.restart(t, node, restart)?;
                    let new_pid = t.masters[node].pid();
                    let check = match (old_pid, new_pid) {
                        (Some(old), Some(new)) if killed && old != new => came_back
                            .map(|what| format!("pid {old} killed, pid {new} serving{what}")),
                        (old, new) => Err(format!(
                            "crash not shown: killed {killed}, pid before {old:?}, after {new:?}"
                        )),
                    };
                    (label, check)
                }
            };
            self.evidence.record(label, check);
        }
        Ok(())
    }

    /// Restarts crashed master `n` as `restart` says. Says what a power loss cut off, or
    /// whether a restored master came back with its backup's data (`Err`: it did not, so the
    /// fault did not take effect).
    fn restart(
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

    /// Lifts every fault still on (after reading what it did): links pass, rules go, paused
    /// processes continue, clocks are reset, crashed masters restart. Records the resumptions,
    /// not the end itself (see [`end_step`](Self::end_step) and [`heal`](Self::heal)).
    ///
    /// # Errors
    ///
    /// When a rule cannot be deleted, a clock reset or a master resumed or restarted.
    pub fn lift(&mut self, t: &mut Targets<'_>, record: bool) -> Result<(), Error> {
        self.settle(t)?;
        t.proxy.heal_all();
        for rule in std::mem::take(&mut self.rules) {
            iptables::apply(false, rule)?;
        }
        for n in 0..t.masters.len() {
            if t.masters[n].is_paused() {
                t.masters[n].resume()?;
                if record {
                    self.record(Verb::Resume, json!({"node": n}));
                }
            }
        }
        if let Some(clocks) = &self.clocks {
            for port in t.masters.ports() {
                clocks.reset(port)?;
            }
        }
        for c in std::mem::take(&mut self.stopped_clients) {
            signal(
                t.clients.get(c).copied().unwrap_or(0),
                nix::sys::signal::Signal::SIGCONT,
            );
            if record {
                self.record(Verb::ResumeClient, json!({"client": c}));
            }
        }
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

/// Every link from `clients` to `nodes`.
fn links(clients: &[usize], nodes: &[usize]) -> Vec<(usize, usize)> {
    clients
        .iter()
        .flat_map(|&c| nodes.iter().map(move |&n| (c, n)))
        .collect()
}

/// How a label names a set of clients.
fn who(clients: &[usize]) -> String {
    match clients {
        [c] => format!("client {c}"),
        _ => format!("clients {clients:?}"),
    }
}

/// Sends `sig` to process `pid` (nothing for pid 0).
pub fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        if pid > 0 {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }
}

/// Waits up to a second for process `pid` to show as stopped.
fn wait_stopped(pid: u32) -> Result<String, String> {
    let t = Instant::now();
    loop {
        match process_stopped(pid) {
            Ok(r) => return Ok(r),
            Err(e) if t.elapsed() > Duration::from_secs(1) => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// How far master `n`'s wall clock (its `TIME`) runs ahead of this host's, in ms.
pub fn clock_offset(master: &quorumlock::testing::RedisMaster, n: usize) -> Result<i64, String> {
    use quorumlock::testing::Reply;
    let reply = master
        .query(&["TIME"])
        .map_err(|e| format!("TIME on node {n}: {e}"))?;
    let host_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let field = |i: usize| -> Option<u64> {
        match &reply {
            Reply::Array(items) => match items.get(i) {
                Some(Reply::Bulk(b)) => String::from_utf8_lossy(b).parse().ok(),
                _ => None,
            },
            _ => None,
        }
    };
    match (field(0), field(1)) {
        (Some(secs), Some(micros)) => Ok(clock_offset_ms(secs, micros, host_us)),
        _ => Err(format!("TIME on node {n} gave {reply:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::links_reading;

    /// A proxy fault is proven by any traffic it affected; the links it left untouched are
    /// named (a cut that missed one of its links shows there), and none at all is no proof.
    #[test]
    fn links_reading_names_the_untouched_links() {
        let links = [(0, 2), (0, 3), (0, 4)];
        assert_eq!(
            links_reading(&links, &[40, 45, 40]),
            Ok("125 bytes and connections affected".to_string())
        );
        assert_eq!(
            links_reading(&links, &[40, 0, 85]),
            Ok("125 bytes and connections affected; none on client 0 to node 3".to_string())
        );
        assert!(links_reading(&links, &[0, 0, 0]).is_err());
    }
}
