//! The faults, all drawn from the seed, injected between simulation steps: links held (a
//! partition: TCP keeps the bytes and delivers them when it heals, never loses them inside a
//! connection), held one way only, or in a ring (each client cut from a different minority of
//! the masters), slow links, a slow master, a master isolated, paused, crashed and restarted
//! (at once or after a while) with all its data, none, or an older snapshot (on a durable
//! master: a restored backup), a client process frozen (every task and timer of its host) for
//! longer than its leases, and the clients' wall clocks jumping (they only propose fencing
//! tokens: outside the lock's model, inside the tokens'). Clock drift within the bound is set
//! per master at the start (see `world`). At the stop time everything heals.

use std::net::IpAddr;
use std::rc::Rc;
use std::time::Duration;

use turmoil::Sim;

use super::beyond::Beyond;
use super::history::{History, PauseWindow};
use super::host::Served;
use super::seams::SimWorld;
use super::stall::Stalls;
use crate::keyspace::Keyspace;
use crate::seed::SeedRng;

/// The faults by name (`--faults`), with the draw that picks each. The first stream of faults
/// draws one of the first ten (a crash three times in ten, the others once), the second
/// stream, on a generator of its own, one of the last three: adding the second moved none of
/// the first's faults. Stalled connections come from a third stream ([`super::stall`]).
pub const FAULTS: [(&str, u64); 12] = [
    ("hold", 0),
    ("isolate", 1),
    ("slow-link", 2),
    ("master-pause", 3),
    ("client-clock", 4),
    ("crash", 5),
    ("slow-master", 8),
    ("quorum-restore", 9),
    ("one-way", 10),
    ("ring", 11),
    ("client-pause", 12),
    ("stall", 13),
];

/// The faults named in `names` (comma-separated), as `--faults` takes them.
///
/// # Errors
///
/// An unknown name, with the known ones.
pub fn faults_by_name(names: &str) -> Result<Vec<&'static str>, String> {
    names
        .split(',')
        .map(|name| {
            FAULTS
                .iter()
                .find(|(known, _)| *known == name)
                .map(|(known, _)| *known)
                .ok_or_else(|| {
                    let known: Vec<&str> = FAULTS.iter().map(|(n, _)| *n).collect();
                    format!("unknown fault {name:?}; known: {}", known.join(", "))
                })
        })
        .collect()
}

/// The usual link latency bound.
const BASE_LATENCY: Duration = Duration::from_millis(2);

/// A fault in force, and when it ends.
enum Active {
    Held {
        client: usize,
        master: usize,
    },
    /// One direction of a link held (TCP keeps the bytes: a real connection retransmits
    /// them until the path heals), the other open: the link is held both ways in turmoil and
    /// what goes the open way is let through at every step.
    OneWay {
        client: usize,
        master: usize,
        /// Requests held (client to master); else replies and pushes (master to client).
        requests: bool,
        /// The open direction: (from, to).
        open: (IpAddr, IpAddr),
        /// Segments let through the open way so far.
        passed: u64,
    },
    /// Every client cut (links held both ways) from all but a majority of the masters, each
    /// client from a different minority: client `c` reaches the masters `c + offset ..` (a
    /// majority of them, around the ring).
    Ring {
        offset: usize,
        cut: Vec<(usize, usize)>,
    },
    /// A client's process frozen: no task of its host runs, no timer fires, nothing is
    /// delivered to it, while the rest goes on; then its clock jumps and it resumes with what
    /// it believed (outside the lock's model, like a GC pause; inside the fencing tokens').
    ClientPause {
        client: usize,
    },
    Isolated {
        master: usize,
    },
    Slow {
        client: usize,
        master: usize,
    },
    SlowMaster {
        master: usize,
    },
    Down {
        master: usize,
        restart: Restart,
    },
    ClientClock {
        by_ms: i64,
    },
    /// A master's clock ahead by more than the drift bound (outside the model: only with
    /// [`Beyond::ClockJump`]); it steps back when lifted.
    MasterClock {
        master: usize,
        ahead: Duration,
    },
    /// One master cut from every client while the others grant; then one of those (durable
    /// if any is) crashes and is restored from a backup taken when the cut began, and the cut
    /// heals: a quorum that forgot the claims granted meanwhile, unless the restored master
    /// is quarantined.
    QuorumRestore {
        cut: usize,
        restored: usize,
        backup: Keyspace,
    },
}

/// What a crashed master comes back with.
#[derive(Debug, Clone, Copy)]
enum Restart {
    /// Everything (`appendfsync always`).
    AllData,
    /// Nothing (no persistence, or the files lost).
    Empty,
    /// The last snapshot (an RDB save, a restored backup, an AOF that lost its tail).
    Snapshot,
}

/// The nemesis of one run.
pub struct Nemesis {
    rng: SeedRng,
    world: Rc<SimWorld>,
    masters: Vec<Rc<Served>>,
    clients: usize,
    /// Faults in force: when each ends, what it is, and its windows in the history.
    active: Vec<(Duration, Active, Vec<usize>)>,
    snapshots: Vec<Keyspace>,
    next_fault: Duration,
    next_snapshot: Duration,
    /// The second stream of faults (see [`FAULTS`]): its generator and its next fault.
    second_rng: SeedRng,
    next_second: Duration,
    healed: bool,
    beyond: Option<Beyond>,
    /// The draws of the only faults injected, if not all of them (`--faults`).
    only: Option<Vec<u64>>,
    /// The third stream: stalled connections.
    stalls: Stalls,
}

impl Nemesis {
    /// A nemesis over `masters` and `clients` client hosts, drawing from `seed`, with the fault
    /// outside the model `beyond`, if any, among its faults, and only the faults named in
    /// `only` ([`FAULTS`]) if given.
    pub fn new(
        seed: u64,
        world: Rc<SimWorld>,
        masters: Vec<Rc<Served>>,
        clients: usize,
        beyond: Option<Beyond>,
        only: Option<&[&str]>,
    ) -> Self {
        let stalls = Stalls::new(
            seed,
            only.is_none_or(|names| names.contains(&"stall")),
            masters.clone(),
            clients,
        );
        let only = only.map(|names| {
            FAULTS
                .iter()
                .filter(|(name, _)| names.contains(name) && *name != "stall")
                .map(|&(_, draw)| draw)
                .collect()
        });
        let snapshots = masters.iter().map(|_| Keyspace::default()).collect();
        Self {
            rng: SeedRng::new(seed),
            world,
            masters,
            clients,
            active: Vec::new(),
            snapshots,
            next_fault: Duration::from_millis(500),
            next_snapshot: Duration::from_secs(1),
            second_rng: SeedRng::new(seed ^ 0x5EC0_4D57_4EA4_0001),
            next_second: Duration::from_millis(700),
            healed: false,
            beyond,
            only,
            stalls,
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n.max(1)
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from))
    }

    /// Lifts every fault in force that `lifted(ends_at, fault)` picks, and closes its windows.
    fn lift_where(
        &mut self,
        sim: &mut Sim<'_>,
        now: Duration,
        history: &mut History,
        lifted: impl Fn(Duration, &Active) -> bool,
    ) {
        let mut i = 0;
        while i < self.active.len() {
            if lifted(self.active[i].0, &self.active[i].1) {
                let (_, fault, windows) = self.active.swap_remove(i);
                self.lift(sim, fault, now, history);
                for window in windows {
                    history.lift(window, now);
                }
            } else {
                i += 1;
            }
        }
    }

    /// Called between steps at simulated time `now`: ends faults that are over, starts new ones
    /// until `stop_at`, then heals everything once.
    pub fn step(
        &mut self,
        sim: &mut Sim<'_>,
        now: Duration,
        stop_at: Duration,
        history: &mut History,
    ) {
        if now >= stop_at {
            if !self.healed {
                self.healed = true;
                for (_, fault, windows) in std::mem::take(&mut self.active) {
                    self.lift(sim, fault, now, history);
                    for window in windows {
                        history.lift(window, now);
                    }
                }
                self.stalls.heal(sim, now, history);
                history.healed = Some(now);
                history.event(now, format_args!("nemesis healed"));
            }
            return;
        }
        self.lift_where(sim, now, history, |ends, _| ends <= now);
        if now >= self.next_snapshot {
            let m = self.below(self.masters.len() as u64) as usize;
            self.snapshots[m] = self.masters[m].master.borrow_mut().keyspace().clone();
            // Often, so that a restart from one loses recent claims that are still valid.
            self.next_snapshot = now + self.millis(50, 1000);
        }
        if now >= self.next_fault {
            self.next_fault = now + self.millis(100, 1500);
            self.start(sim, now, history, false);
        }
        if now >= self.next_second {
            let after = Duration::from_millis(500 + self.second_rng.next_u64() % 3500);
            self.next_second = now + after;
            self.start_second(sim, now, history);
        }
        self.stalls.step(sim, now, history);
        self.pass_one_way(sim);
    }

    /// Starts a fault of the second stream: one-way holds, rings and client pauses, drawn from
    /// a generator of their own.
    fn start_second(&mut self, sim: &mut Sim<'_>, now: Duration, history: &mut History) {
        std::mem::swap(&mut self.rng, &mut self.second_rng);
        self.start(sim, now, history, true);
        std::mem::swap(&mut self.rng, &mut self.second_rng);
    }

    fn start(&mut self, sim: &mut Sim<'_>, now: Duration, history: &mut History, second: bool) {
        if self.only.as_ref().is_some_and(Vec::is_empty) {
            return;
        }
        let master = self.below(self.masters.len() as u64) as usize;
        let client = self.below(self.clients as u64) as usize;
        // The first stream's faults never wait for the second's (see `claim_links`).
        let busy = self.active.iter().any(|(_, f, _)| match f {
            Active::ClientClock { .. } | Active::Ring { .. } | Active::ClientPause { .. } => false,
            Active::OneWay { .. } => false,
            Active::MasterClock { master: m, .. } => *m == master,
            Active::QuorumRestore { cut, restored, .. } => *cut == master || *restored == master,
            Active::Down { master: m, .. }
            | Active::Isolated { master: m }
            | Active::SlowMaster { master: m } => *m == master,
            Active::Held {
                client: c,
                master: m,
            }
            | Active::Slow {
                client: c,
                master: m,
            } => *m == master && *c == client,
        });
        // The second stream's faults wait only for holds on their own links (`claim_links`)
        // and a pause of their own client: a master crashed, paused or slow meanwhile is
        // independent of them.
        if busy && !second {
            return;
        }
        let mut lasts = self.millis(50, 2000);
        if !second && self.beyond == Some(Beyond::ClockJump) && self.rng.one_in(3) {
            // Ahead by more than any TTL: every key there expires early.
            let ahead = Beyond::jump(super::workload::MAX_TTL, self.below(1000));
            let us = i64::try_from(ahead.as_micros()).unwrap_or(i64::MAX);
            self.masters[master].jump_us.set(us);
            self.start_fault(now, lasts, Active::MasterClock { master, ahead }, history);
            return;
        }
        let draw = match (&self.only, second) {
            (Some(only), _) => only[self.rng.next_u64() as usize % only.len().max(1)],
            (None, false) => self.below(10),
            (None, true) if self.beyond == Some(Beyond::PausedHolders) => 12,
            (None, true) => 10 + self.below(3),
        };
        let fault = match draw {
            0 => {
                if !self.claim_links(sim, &[(client, master)], now, history, second) {
                    return;
                }
                sim.hold(format!("c{client}"), format!("m{master}"));
                Active::Held { client, master }
            }
            1 => {
                let links: Vec<_> = (0..self.clients).map(|c| (c, master)).collect();
                if !self.claim_links(sim, &links, now, history, second) {
                    return;
                }
                for c in 0..self.clients {
                    sim.hold(format!("c{c}"), format!("m{master}"));
                }
                Active::Isolated { master }
            }
            10 => {
                if !self.claim_links(sim, &[(client, master)], now, history, second) {
                    return;
                }
                let requests = self.rng.one_in(2);
                let (c, m) = (format!("c{client}"), format!("m{master}"));
                let (c_ip, m_ip) = (sim.lookup(c.as_str()), sim.lookup(m.as_str()));
                sim.hold(c, m);
                let open = match requests {
                    true => (m_ip, c_ip),
                    false => (c_ip, m_ip),
                };
                Active::OneWay {
                    client,
                    master,
                    requests,
                    open,
                    passed: 0,
                }
            }
            11 => {
                let n = self.masters.len();
                let offset = self.below(n as u64) as usize;
                let cut: Vec<(usize, usize)> = (0..self.clients)
                    .flat_map(|c| (n / 2 + 1..n).map(move |k| (c, (c + offset + k) % n)))
                    .collect();
                if !self.claim_links(sim, &cut, now, history, second) {
                    return;
                }
                for &(c, m) in &cut {
                    sim.hold(format!("c{c}"), format!("m{m}"));
                }
                Active::Ring { offset, cut }
            }
            12 => {
                if self
                    .active
                    .iter()
                    .any(|(_, f, _)| matches!(f, Active::ClientPause { client: c } if *c == client))
                {
                    return;
                }
                sim.pause(format!("c{client}"));
                Active::ClientPause { client }
            }
            2 => {
                let latency = self.millis(5, 300);
                sim.set_link_max_message_latency(
                    format!("c{client}"),
                    format!("m{master}"),
                    latency,
                );
                Active::Slow { client, master }
            }
            3 => {
                let until = now + lasts;
                self.masters[master].paused_until.set(until);
                let window = history.fault(master, None, now);
                history.lift(window, until);
                history.event(
                    now,
                    format_args!("nemesis pause m{master} for {}ms", lasts.as_millis()),
                );
                return;
            }
            9 => {
                let others: Vec<usize> = (0..self.masters.len()).filter(|&m| m != master).collect();
                let durable: Vec<usize> = others
                    .iter()
                    .copied()
                    .filter(|&m| self.masters[m].master.borrow().is_durable())
                    .collect();
                let pool = if durable.is_empty() {
                    &others
                } else {
                    &durable
                };
                let Some(&restored) = pool.get(self.below(pool.len() as u64) as usize) else {
                    return;
                };
                if self.active.iter().any(|(_, f, _)| match f {
                    Active::Down { master: m, .. }
                    | Active::Isolated { master: m }
                    | Active::SlowMaster { master: m } => *m == restored,
                    Active::QuorumRestore {
                        cut, restored: r, ..
                    } => *cut == restored || *r == restored,
                    _ => false,
                }) {
                    return;
                }
                let links: Vec<_> = (0..self.clients).map(|c| (c, master)).collect();
                if !self.claim_links(sim, &links, now, history, second) {
                    return;
                }
                for c in 0..self.clients {
                    sim.hold(format!("c{c}"), format!("m{master}"));
                }
                let backup = self.masters[restored]
                    .master
                    .borrow_mut()
                    .keyspace()
                    .clone();
                Active::QuorumRestore {
                    cut: master,
                    restored,
                    backup,
                }
            }
            8 => {
                // Every link of one master slow, below the node timeout: rounds that need it
                // for their quorum take long, and short claims win too late.
                let latency = self.millis(10, 45);
                for c in 0..self.clients {
                    sim.set_link_max_message_latency(
                        format!("c{c}"),
                        format!("m{master}"),
                        latency,
                    );
                }
                Active::SlowMaster { master }
            }
            4 => {
                if self
                    .active
                    .iter()
                    .any(|(_, f, _)| matches!(f, Active::ClientClock { .. }))
                {
                    return;
                }
                // Beyond the fencing lead and the masters' cap, either way.
                let by_ms = i64::try_from(self.below(4000)).unwrap_or(0) + 1000;
                let by_ms = if self.rng.one_in(2) { -by_ms } else { by_ms };
                self.world.clock_offset_us.set(by_ms * 1000);
                Active::ClientClock { by_ms }
            }
            _ => {
                sim.crash(format!("m{master}"));
                // Half come back at once (a process restarted by its supervisor), while the
                // claims their keys backed are still valid.
                if self.rng.one_in(2) {
                    lasts = self.millis(1, 30);
                }
                let restart = match self.below(3) {
                    // Without restart protection, a master that forgot its keys and came
                    // straight back is what breaks the lock.
                    _ if self.beyond == Some(Beyond::UnprotectedRestarts) => {
                        lasts = self.millis(1, 30);
                        Restart::Empty
                    }
                    0 => Restart::AllData,
                    1 => Restart::Empty,
                    _ => Restart::Snapshot,
                };
                Active::Down { master, restart }
            }
        };
        self.start_fault(now, lasts, fault, history);
    }

    /// Records `fault`, started `now` for `lasts`, to be lifted then.
    fn start_fault(
        &mut self,
        now: Duration,
        lasts: Duration,
        fault: Active,
        history: &mut History,
    ) {
        if let Active::Down { master, .. } = &fault {
            self.masters[*master].down_until.set(now + lasts);
        }
        history.event(
            now,
            format_args!(
                "nemesis start {} for {}ms",
                describe(&fault),
                lasts.as_millis()
            ),
        );
        if let Active::ClientPause { client } = fault {
            history.pauses.push(PauseWindow {
                client,
                from: now,
                to: Duration::MAX,
            });
        }
        let windows = touched(&fault, self.masters.len())
            .into_iter()
            .map(|(master, client)| history.fault(master, client, now))
            .collect();
        self.active.push((now + lasts, fault, windows));
    }

    /// Makes `links` ((client, master)) free for a new hold: holds are per link in turmoil, so
    /// the first lift would release the other's. A fault of the second stream gives way to
    /// one of the first, which replaces what holds its links (lifted now), so that the first
    /// stream's faults are the same with the second as without it; a fault of the second
    /// stream starts only on free links. Whether the links are free.
    fn claim_links(
        &mut self,
        sim: &mut Sim<'_>,
        links: &[(usize, usize)],
        now: Duration,
        history: &mut History,
        second: bool,
    ) -> bool {
        let clients = self.clients;
        let holds = |f: &Active| {
            let held: Vec<(usize, usize)> = match f {
                Active::Held { client, master } | Active::OneWay { client, master, .. } => {
                    vec![(*client, *master)]
                }
                Active::Isolated { master } | Active::QuorumRestore { cut: master, .. } => {
                    (0..clients).map(|c| (c, *master)).collect()
                }
                Active::Ring { cut, .. } => cut.clone(),
                _ => Vec::new(),
            };
            held.iter().any(|link| links.contains(link))
        };
        if !self.active.iter().any(|(_, f, _)| holds(f)) {
            return true;
        }
        if second {
            return false;
        }
        self.lift_where(sim, now, history, |_, fault| holds(fault));
        true
    }

    /// Lets what goes the open way of every one-way hold through (called at every step while
    /// one is in force).
    fn pass_one_way(&mut self, sim: &Sim<'_>) {
        for (_, fault, _) in &mut self.active {
            let Active::OneWay { open, passed, .. } = fault else {
                continue;
            };
            let (from, to) = *open;
            sim.links(|links| {
                for link in links {
                    let (a, b) = link.pair();
                    if (a, b) != (from, to) && (a, b) != (to, from) {
                        continue;
                    }
                    for sent in link {
                        let (src, dst) = sent.pair();
                        // A stalled connection's segments stay held (`stall`).
                        if (src.ip(), dst.ip()) == (from, to) && sent.deliver() {
                            *passed += 1;
                        }
                    }
                }
            });
        }
    }

    /// Segments held on the link between `client` and `master` (those from `from` only, if
    /// given), before it is released.
    fn held_on(sim: &Sim<'_>, client: usize, master: usize, from: Option<IpAddr>) -> u64 {
        let (c, m) = (
            sim.lookup(format!("c{client}")),
            sim.lookup(format!("m{master}")),
        );
        let mut held = 0;
        sim.links(|links| {
            for link in links {
                let (a, b) = link.pair();
                if (a, b) != (c, m) && (a, b) != (m, c) {
                    continue;
                }
                held += link
                    .filter(|sent| from.is_none_or(|from| sent.pair().0.ip() == from))
                    .count() as u64;
            }
        });
        held
    }

    fn lift(&mut self, sim: &mut Sim<'_>, fault: Active, now: Duration, history: &mut History) {
        let mut effect = String::new();
        match &fault {
            Active::Held { client, master } => {
                sim.release(format!("c{client}"), format!("m{master}"))
            }
            Active::OneWay {
                client,
                master,
                requests,
                open,
                passed,
            } => {
                // The held way is the open way reversed.
                let held = Self::held_on(sim, *client, *master, Some(open.1));
                let kind = match requests {
                    true => "one-way-requests-held",
                    false => "one-way-replies-held",
                };
                *history.effects.entry(kind).or_default() += held;
                *history.effects.entry("one-way-passed").or_default() += passed;
                effect = format!(" (held {held} segments, let {passed} through)");
                sim.release(format!("c{client}"), format!("m{master}"));
            }
            Active::Ring { cut, .. } => {
                let held: u64 = cut
                    .iter()
                    .map(|&(c, m)| Self::held_on(sim, c, m, None))
                    .sum();
                *history.effects.entry("ring-held").or_default() += held;
                effect = format!(" (held {held} segments)");
                for &(c, m) in cut {
                    sim.release(format!("c{c}"), format!("m{m}"));
                }
            }
            Active::ClientPause { client } => {
                sim.resume(format!("c{client}"));
                if let Some(pause) = history
                    .pauses
                    .iter_mut()
                    .rev()
                    .find(|p| p.client == *client)
                {
                    pause.to = now;
                }
                *history.effects.entry("client-pauses").or_default() += 1;
            }
            Active::Isolated { master } => {
                for c in 0..self.clients {
                    sim.release(format!("c{c}"), format!("m{master}"));
                }
            }
            Active::Slow { client, master } => {
                sim.set_link_max_message_latency(
                    format!("c{client}"),
                    format!("m{master}"),
                    BASE_LATENCY,
                );
            }
            Active::Down { master, restart } => {
                let served = &self.masters[*master];
                let data = match restart {
                    Restart::AllData => served.master.borrow_mut().keyspace().clone(),
                    Restart::Empty => Keyspace::default(),
                    Restart::Snapshot => self.snapshots[*master].clone(),
                };
                // Lua state allocation is all that can fail: the run stops with it.
                if let Err(error) = served.master.borrow_mut().restart(data) {
                    history.event(now, format_args!("m{master} failed to restart: {error}"));
                }
                sim.bounce(format!("m{master}"));
            }
            Active::SlowMaster { master } => {
                for c in 0..self.clients {
                    sim.set_link_max_message_latency(
                        format!("c{c}"),
                        format!("m{master}"),
                        BASE_LATENCY,
                    );
                }
            }
            Active::ClientClock { .. } => self.world.clock_offset_us.set(0),
            Active::MasterClock { master, .. } => self.masters[*master].jump_us.set(0),
            Active::QuorumRestore {
                cut,
                restored,
                backup,
            } => {
                sim.crash(format!("m{restored}"));
                let served = &self.masters[*restored];
                served.down_until.set(now);
                if let Err(error) = served.master.borrow_mut().restart(backup.clone()) {
                    history.event(now, format_args!("m{restored} failed to restart: {error}"));
                }
                sim.bounce(format!("m{restored}"));
                for c in 0..self.clients {
                    sim.release(format!("c{c}"), format!("m{cut}"));
                }
            }
        }
        history.event(
            now,
            format_args!("nemesis lift {}{effect}", describe(&fault)),
        );
    }
}

/// The masters (and links: with a client) a fault may leave keys on beyond their operations.
/// A client's clock jump leaves none: it only proposes fencing tokens.
/// A client's pause touches its links to every master: its cleanups wait with it.
fn touched(fault: &Active, masters: usize) -> Vec<(usize, Option<usize>)> {
    match *fault {
        Active::Held { client, master }
        | Active::Slow { client, master }
        | Active::OneWay { client, master, .. } => {
            vec![(master, Some(client))]
        }
        Active::Ring { ref cut, .. } => cut.iter().map(|&(c, m)| (m, Some(c))).collect(),
        Active::ClientPause { client } => (0..masters).map(|m| (m, Some(client))).collect(),
        Active::Isolated { master }
        | Active::SlowMaster { master }
        | Active::Down { master, .. }
        | Active::MasterClock { master, .. } => vec![(master, None)],
        Active::QuorumRestore { cut, restored, .. } => vec![(cut, None), (restored, None)],
        Active::ClientClock { .. } => Vec::new(),
    }
}

fn describe(fault: &Active) -> String {
    match fault {
        Active::Held { client, master } => format!("hold c{client}-m{master}"),
        Active::OneWay {
            client,
            master,
            requests,
            ..
        } => match requests {
            true => format!("hold one way c{client}->m{master}"),
            false => format!("hold one way m{master}->c{client}"),
        },
        Active::Ring { offset, .. } => format!("ring +{offset}"),
        Active::ClientPause { client } => format!("pause c{client}"),
        Active::Isolated { master } => format!("isolate m{master}"),
        Active::Slow { client, master } => format!("slow c{client}-m{master}"),
        Active::Down { master, restart } => format!("crash m{master} restart {restart:?}"),
        Active::ClientClock { by_ms } => format!("client clocks {by_ms:+}ms"),
        Active::MasterClock { master, ahead } => {
            format!(
                "m{master} clock +{}ms (beyond the bound)",
                ahead.as_millis()
            )
        }
        Active::SlowMaster { master } => format!("slow m{master}"),
        Active::QuorumRestore { cut, restored, .. } => {
            format!("cut m{cut}, then restore m{restored} from a backup")
        }
    }
}
