//! The generator: the faults of each step of a random run, drawn from the run's seeded
//! randomness, so that `run --seed S` replays the same schedule.
//!
//! A random run alternates fault steps (the faults on for `hold`) and quiet gaps (`quiet`);
//! a composed run keeps its faults on for a larger share of the time.
//! A single-fault scenario draws its one kind of fault; a composed one draws one to three
//! faults of any kind at once, Jepsen-style, with the faults on masters (pauses, crashes,
//! kernel partitions, clock bumps and strobes) kept to a minority of them so that a quorum
//! stays possible and the run keeps granting locks under fault.

use std::collections::BTreeSet;
use std::time::Duration;

use quorumlock_testkit::{Mode, Persistence};
use rand::{Rng, RngExt};

use crate::nemesis::{Fault, Path};
use crate::scenario::{RandomFault, Restart};

/// What the generator may draw from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// Masters.
    pub nodes: usize,
    /// Client processes.
    pub clients: usize,
    /// The lock TTL.
    pub ttl: Duration,
    /// What each master keeps on disk (which restart kinds fit it).
    pub persistence: Vec<Persistence>,
    /// Whether iptables DROP rules work here.
    pub iptables: bool,
    /// Whether the iptables `statistic` match works (packet loss).
    pub loss: bool,
    /// Whether the clock shim is in place.
    pub clocks: bool,
}

/// One step of a random run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The faults, injected together.
    pub faults: Vec<Fault>,
    /// How long they stay on.
    pub hold: Duration,
    /// The quiet gap after they are lifted.
    pub quiet: Duration,
}

/// What a random run draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// One kind of fault, step after step.
    Single(RandomFault),
    /// Any kind, several at once.
    Composed,
}

fn blackhole_or_reset(rng: &mut impl Rng) -> Mode {
    if rng.random_bool(0.5) {
        Mode::Blackhole
    } else {
        Mode::Reset
    }
}

/// The next step.
pub fn step(rng: &mut impl Rng, mix: Mix, shape: &Shape) -> Step {
    let faults = match mix {
        Mix::Single(fault) => single(rng, fault, shape),
        Mix::Composed => composed(rng, shape),
    };
    // A composed run exists to grant locks under fault: its faults stay on about four fifths
    // of the time (a 30-minute soak of steps on for 1-3 s and off for 0.5-1.5 s spent under
    // half its time under fault). The quiet gaps stay long enough for a hand-over between
    // steps (several round trips and a retry delay).
    let (hold_ms, quiet_ms) = match mix {
        Mix::Single(_) => (1000..3000, 500..1500),
        Mix::Composed => (1500..4000, 300..1000),
    };
    let mut hold = Duration::from_millis(rng.random_range(hold_ms));
    if let Some(Fault::QuorumRestart { cut_for, .. }) = faults.first() {
        // Its crash comes after the cut, and the master after the crash: room for both.
        hold = hold.max(*cut_for + QUORUM_RESTART_AFTER);
    }
    let quiet = Duration::from_millis(rng.random_range(quiet_ms));
    Step {
        faults,
        hold,
        quiet,
    }
}

/// How long a [`Fault::QuorumRestart`] step lasts at least after its cut: the crash, the
/// restart (300 ms later) and time for another client to try the lock a holder still holds.
const QUORUM_RESTART_AFTER: Duration = Duration::from_millis(1500);

/// How often a composed step on three masters or more is one [`Fault::QuorumRestart`] alone:
/// locks granted on a bare quorum during its cut, then one master of that quorum restarted
/// with its data lost while their holders may still hold them. Drawn from the other faults it
/// is rare (a minority cut while a lock is acquired, then that lock still held when one of its
/// masters comes back empty): `quarantine-ignored` was not caught in 13 seeds without it.
const QUORUM_RESTART_SHARE: f64 = 0.2;

/// The draws of the single-fault scenarios.
fn single(rng: &mut impl Rng, fault: RandomFault, shape: &Shape) -> Vec<Fault> {
    let n = shape.nodes;
    match fault {
        RandomFault::None => Vec::new(),
        RandomFault::MinorityPartition => (0..shape.clients)
            .map(|c| {
                let a = rng.random_range(0..n);
                let b = (a + rng.random_range(1..n.max(2))) % n;
                Fault::Partition {
                    clients: vec![c],
                    nodes: vec![a, b],
                    mode: blackhole_or_reset(rng),
                }
            })
            .collect(),
        RandomFault::NodePause => vec![Fault::PauseNode(rng.random_range(0..n))],
        RandomFault::SlowLinks => {
            let mut faults = Vec::new();
            for c in 0..shape.clients {
                for _ in 0..rng.random_range(1..3) {
                    faults.push(Fault::Delay {
                        clients: vec![c],
                        node: rng.random_range(0..n),
                        by: Duration::from_millis(rng.random_range(100..3000)),
                    });
                }
            }
            faults
        }
        RandomFault::KernelDrop => vec![Fault::KernelDrop(rng.random_range(0..n))],
        RandomFault::MajoritiesRing => vec![Fault::Ring {
            clients: shape.clients,
            nodes: n,
            mode: blackhole_or_reset(rng),
        }],
        RandomFault::PacketLoss => vec![Fault::Loss],
    }
}

/// A random non-empty set of masters no fault of this step touched yet, within the budget.
fn free_nodes(
    rng: &mut impl Rng,
    touched: &BTreeSet<usize>,
    budget: usize,
    n: usize,
) -> Option<Vec<usize>> {
    let mut free: Vec<usize> = (0..n).filter(|m| !touched.contains(m)).collect();
    let room = budget.saturating_sub(touched.len()).min(free.len());
    if room == 0 {
        return None;
    }
    let k = rng.random_range(1..=room);
    for i in 0..k {
        let j = rng.random_range(i..free.len());
        free.swap(i, j);
    }
    let mut picked = free[..k].to_vec();
    picked.sort_unstable();
    Some(picked)
}

/// The proxy links (client, node) a fault sets a mode on.
pub fn links_of(fault: &Fault, shape: &Shape) -> Vec<(usize, usize)> {
    fault
        .proxy_links(shape.nodes)
        .map(|(links, _)| links)
        .unwrap_or_default()
}

/// The masters a fault takes out of every client's reach (or whose clock or data it touches):
/// what the minority budget counts. A ring, a client pause and packet loss leave every master
/// to some client.
pub fn masters_touched(fault: &Fault) -> Vec<usize> {
    match fault {
        Fault::PauseNode(m)
        | Fault::KernelDrop(m)
        | Fault::Crash { node: m, .. }
        | Fault::ClockBump { node: m, .. }
        | Fault::ClockStrobe { node: m, .. }
        | Fault::LaggingMaster { node: m, .. }
        | Fault::Delay { node: m, .. } => vec![*m],
        Fault::Partition { nodes, .. }
        | Fault::OneWay { nodes, .. }
        | Fault::HoldReplies { nodes, .. } => nodes.clone(),
        // The cut, then (not at the same time) the crash: drawn alone, see `quorum_restart`.
        Fault::QuorumRestart { cut, node, .. } => {
            cut.iter().copied().chain(std::iter::once(*node)).collect()
        }
        _ => Vec::new(),
    }
}

/// Every client: a fault on links is proven by traffic, and one client may be paused or
/// between cycles for the whole step, so link faults act on every client's links.
fn every(shape: &Shape) -> Vec<usize> {
    (0..shape.clients).collect()
}

/// A master no fault of this step touched yet, while the budget lasts.
fn pick_master(
    rng: &mut impl Rng,
    touched: &BTreeSet<usize>,
    budget: usize,
    n: usize,
) -> Option<usize> {
    if touched.len() >= budget {
        return None;
    }
    let free: Vec<usize> = (0..n).filter(|m| !touched.contains(m)).collect();
    (!free.is_empty()).then(|| free[rng.random_range(0..free.len())])
}

/// One to three faults of any kind (a slow client network among them, so that a round's timing is
/// tested with requests that take a while); faults that take masters out of every client's reach
/// touch at most a minority of them (one for a single master), each master at most once.
fn composed(rng: &mut impl Rng, shape: &Shape) -> Vec<Fault> {
    let n = shape.nodes;
    if n >= 3 && rng.random_bool(QUORUM_RESTART_SHARE) {
        if let Some(fault) = quorum_restart(rng, shape) {
            return vec![fault];
        }
    }
    let budget = if n == 1 { 1 } else { (n - 1) / 2 };
    let mut touched: BTreeSet<usize> = BTreeSet::new();
    let mut faults = Vec::new();
    let mut kinds_used = BTreeSet::new();
    let mut used_links: BTreeSet<(usize, usize)> = BTreeSet::new();
    let ttl_ms = u64::try_from(shape.ttl.as_millis()).unwrap_or(2000);
    let wanted = rng.random_range(1..=3);
    // A bounded number of draws: a kind that does not fit (no budget left, no iptables) is
    // drawn again.
    for _ in 0..20 {
        if faults.len() >= wanted {
            break;
        }
        let kind = rng.random_range(0..14u8);
        if !kinds_used.insert(kind) {
            continue;
        }
        let fault = match kind {
            0 => free_nodes(rng, &touched, budget, n).map(|nodes| Fault::Partition {
                clients: every(shape),
                nodes,
                mode: blackhole_or_reset(rng),
            }),
            1 => free_nodes(rng, &touched, budget, n).map(|nodes| Fault::OneWay {
                clients: every(shape),
                nodes,
                path: if rng.random_bool(0.5) {
                    Path::Requests
                } else {
                    Path::Replies
                },
            }),
            // A ring leaves each client a bare majority: with any master out of reach as
            // well, some clients see no quorum, and the run owes no liveness it can judge
            // (a ring with a paused and a dropped master keeps every client off a lock a
            // crashed holder left). So it takes the whole budget.
            2 if n >= 3 && touched.is_empty() => {
                touched.extend(0..n);
                Some(Fault::Ring {
                    clients: shape.clients,
                    nodes: n,
                    mode: blackhole_or_reset(rng),
                })
            }
            3 => pick_master(rng, &touched, budget, n).map(Fault::PauseNode),
            4 => Some(Fault::PauseClient {
                client: rng.random_range(0..shape.clients),
            }),
            5 => pick_master(rng, &touched, budget, n).map(|node| {
                let kinds: Vec<Restart> = [
                    Restart::ImmediateEmpty,
                    Restart::DelayedEmpty,
                    Restart::Snapshot,
                    Restart::PowerLoss,
                    Restart::Immediate,
                    Restart::RestoredBackup,
                ]
                .into_iter()
                .filter(|&r| {
                    Fault::restart_fits(r, shape.persistence.get(node).copied().unwrap_or_default())
                })
                .collect();
                Fault::Crash {
                    node,
                    restart: kinds[rng.random_range(0..kinds.len())],
                }
            }),
            6 if shape.clocks => pick_master(rng, &touched, budget, n).map(|node| {
                let offset =
                    i64::try_from(rng.random_range(ttl_ms / 2..=ttl_ms * 2)).unwrap_or(1000);
                Fault::ClockBump {
                    node,
                    offset_ms: if rng.random_bool(0.5) {
                        offset
                    } else {
                        -offset
                    },
                }
            }),
            7 if shape.clocks => {
                pick_master(rng, &touched, budget, n).map(|node| Fault::ClockStrobe {
                    node,
                    offset_ms: i64::try_from(ttl_ms).unwrap_or(2000),
                })
            }
            8 => pick_master(rng, &touched, budget, n).map(|node| Fault::Delay {
                clients: every(shape),
                node,
                // Longer than the TTL: a request that lands after its lock expired.
                by: shape.ttl + Duration::from_millis(rng.random_range(100..1000)),
            }),
            9 if shape.loss => Some(Fault::Loss),
            10 if shape.iptables => pick_master(rng, &touched, budget, n).map(Fault::KernelDrop),
            11 => free_nodes(rng, &touched, budget, n).map(|nodes| Fault::HoldReplies {
                clients: every(shape),
                nodes,
            }),
            // Two clients: one of them may be stopped for the whole step, and the fault is
            // proven by the traffic it delayed.
            12 if shape.clients >= 2 => {
                let a = rng.random_range(0..shape.clients);
                let b = (a + rng.random_range(1..shape.clients)) % shape.clients;
                Some(Fault::SlowClients {
                    clients: vec![a.min(b), a.max(b)],
                    // Above the overstated check's slack, below the node timeout.
                    by: Duration::from_millis(rng.random_range(15..45)),
                })
            }
            13 if shape.clocks && shape.iptables => {
                pick_master(rng, &touched, budget, n).map(|node| Fault::LaggingMaster {
                    node,
                    offset_ms: -i64::try_from(rng.random_range(ttl_ms..=ttl_ms * 2))
                        .unwrap_or(2000),
                    cut_for: Duration::from_millis(600),
                })
            }
            _ => None,
        };
        let Some(fault) = fault else { continue };
        // One fault per proxy link: a second would overwrite the first's modes, and the first's
        // proof would count traffic the second affected.
        let links = links_of(&fault, shape);
        if links.iter().any(|l| used_links.contains(l)) {
            continue;
        }
        // On a single master, a slow client network or packet loss next to a fault on that
        // master (a pause, a crash, a drop) would see no traffic to delay or drop, and its
        // proof would fail the run ("0 packets matched"): it takes the master's budget.
        if n == 1 && matches!(fault, Fault::SlowClients { .. } | Fault::Loss) {
            if !touched.is_empty() {
                continue;
            }
            touched.insert(0);
        }
        used_links.extend(links);
        touched.extend(masters_touched(&fault));
        faults.push(fault);
    }
    faults
}

/// A [`Fault::QuorumRestart`]: every client cut from a minority as large as the budget, then
/// a master of the remaining bare quorum crashed and restarted with what it took since the
/// step began lost (empty, from the step's snapshot, its AOF cut back, or, for a durable
/// master, restored from a backup taken as the step began).
fn quorum_restart(rng: &mut impl Rng, shape: &Shape) -> Option<Fault> {
    let n = shape.nodes;
    let budget = (n - 1) / 2;
    let mut order: Vec<usize> = (0..n).collect();
    for i in 0..n {
        let j = rng.random_range(i..n);
        order.swap(i, j);
    }
    let mut cut = order[..budget].to_vec();
    cut.sort_unstable();
    let node = order[budget];
    let kinds: Vec<Restart> = [
        Restart::ImmediateEmpty,
        Restart::Snapshot,
        Restart::PowerLoss,
        Restart::RestoredBackup,
    ]
    .into_iter()
    .filter(|&r| Fault::restart_fits(r, shape.persistence.get(node).copied().unwrap_or_default()))
    .collect();
    (!kinds.is_empty() && budget > 0).then(|| Fault::QuorumRestart {
        clients: every(shape),
        cut,
        node,
        restart: kinds[rng.random_range(0..kinds.len())],
        cut_for: Duration::from_millis(rng.random_range(1000..1500)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn shape(nodes: usize) -> Shape {
        Shape {
            nodes,
            clients: 6,
            ttl: Duration::from_secs(2),
            persistence: (0..nodes)
                .map(|n| {
                    [
                        Persistence::None,
                        Persistence::AofEverySec,
                        Persistence::AofAlways,
                    ][n % 3]
                })
                .collect(),
            iptables: true,
            loss: true,
            clocks: true,
        }
    }

    #[test]
    fn a_seed_replays_its_schedule() {
        let draw = |seed| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            (0..20)
                .map(|_| step(&mut rng, Mix::Composed, &shape(5)))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn composed_steps_keep_master_faults_to_a_minority_and_fit_restarts() {
        for nodes in [1, 3, 5, 7] {
            let shape = shape(nodes);
            let mut rng = rand::rngs::StdRng::seed_from_u64(nodes as u64);
            let mut kinds = BTreeSet::new();
            let mut restored_under_a_bare_quorum = false;
            for _ in 0..2000 {
                let s = step(&mut rng, Mix::Composed, &shape);
                assert!((1..=3).contains(&s.faults.len()), "{s:?}");
                let masters: Vec<usize> = s.faults.iter().flat_map(masters_touched).collect();
                let links: Vec<(usize, usize)> =
                    s.faults.iter().flat_map(|f| links_of(f, &shape)).collect();
                let distinct_links: BTreeSet<_> = links.iter().collect();
                assert_eq!(distinct_links.len(), links.len(), "a link set twice: {s:?}");
                if nodes == 1
                    && s.faults
                        .iter()
                        .any(|f| matches!(f, Fault::SlowClients { .. } | Fault::Loss))
                {
                    assert!(
                        masters.is_empty(),
                        "a slow network to a faulty master: {s:?}"
                    );
                }
                let distinct: BTreeSet<_> = masters.iter().collect();
                assert_eq!(distinct.len(), masters.len(), "a master hit twice: {s:?}");
                if s.faults.iter().any(|f| matches!(f, Fault::Ring { .. })) {
                    // A bare majority each: nothing else may take a master away.
                    assert!(masters.is_empty(), "a ring with a master fault: {s:?}");
                }
                if let Some(Fault::QuorumRestart {
                    cut,
                    cut_for,
                    restart,
                    ..
                }) = s.faults.first()
                {
                    restored_under_a_bare_quorum |= *restart == Restart::RestoredBackup;
                    // Alone; the cut is a minority as large as the budget, the crash one
                    // master of the rest (not at once), and the step outlasts both.
                    assert_eq!(s.faults.len(), 1, "{s:?}");
                    assert!(nodes >= 3);
                    assert_eq!(cut.len(), (nodes - 1) / 2, "{s:?}");
                    assert!(s.hold >= *cut_for + QUORUM_RESTART_AFTER, "{s:?}");
                } else {
                    assert!(masters.len() <= if nodes == 1 { 1 } else { (nodes - 1) / 2 });
                }
                for f in &s.faults {
                    if let Fault::Crash { node, restart }
                    | Fault::QuorumRestart { node, restart, .. } = f
                    {
                        assert!(Fault::restart_fits(*restart, shape.persistence[*node]));
                    }
                    kinds.insert(f.kind());
                }
            }
            // Every kind shows up (the ring needs three masters; a single master's only
            // persistence is an RDB snapshot).
            let expected = match nodes {
                1 => 16,
                _ => 21,
            };
            assert_eq!(kinds.len(), expected, "N = {nodes}: {kinds:?}");
            assert_eq!(restored_under_a_bare_quorum, nodes >= 3, "N = {nodes}");
        }
    }
}
