//! The one fault type: every fault a run can inject, whichever workload injects it, with its
//! target, and the names the history, the evidence, the timeline and a soak's counts give it.
//! How each is put in place, proven and lifted is in its own file beside this one.

use std::time::Duration;

use quorumlock_testkit::Mode;
use serde_json::{json, Value};

use super::Verb;
use crate::scenario::Restart;

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
    pub(super) fn value(&self) -> Value {
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
            Self::Loss => json!({"nodes": "all", "probability": super::iptables::LOSS_PROBABILITY,
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
}

/// How a label names a set of clients.
pub(super) fn who(clients: &[usize]) -> String {
    match clients {
        [c] => format!("client {c}"),
        _ => format!("clients {clients:?}"),
    }
}
