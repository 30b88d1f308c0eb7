//! A stalled connection (`stall`): one TCP connection between a client and a master has its
//! segments held for an RTO-like time (200 ms–3 s), as a lost segment and its retransmission
//! hold up everything after it on that connection, in order, while the client's other
//! connections to that master (the other pooled ones, the pub/sub one, one opened meanwhile)
//! flow. The requests are held, or the requests and the replies. When it lifts, what was held
//! is delivered in order: the master runs the stale requests then.
//!
//! Half of the stalls also reset the client's side partway (`Sim::reset_stream`: a middlebox,
//! a conntrack entry or a load balancer dropping the flow with an RST to the client only),
//! while what was held is still on its way (a delayed path, not a lost segment: a kernel would
//! not retransmit for a socket it closed) and lands on the master's side, still open, at the
//! lift. The library then reconnects, and the stale requests meet what it sent on the new
//! connection: unless the library closed the old connection on the master first
//! (`transport/orphan.rs`), they run after it, the reorder across reconnects.
//!
//! Its own stream of faults (one every 0.3–3 s, on a generator of its own), so that the other
//! two draw what they drew before it. Each master's connections are logged
//! ([`super::conns::ConnLog`]), to pick a connection to stall and to count what the stale
//! requests did.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use turmoil::{Protocol, Segment, Sim};

use super::history::History;
use super::host::{Served, PORT};
use crate::seed::SeedRng;

/// One stall in force.
struct Stall {
    client: usize,
    master: usize,
    /// The client's side of the connection, and the master's.
    peer: SocketAddr,
    at: SocketAddr,
    /// Replies held too.
    both_ways: bool,
    since: Duration,
    ends: Duration,
    /// When the client's side is reset, if it is (then `None` once done).
    reset_at: Option<Duration>,
    reset: bool,
    window: usize,
}

/// The stream of stalls of one run.
pub struct Stalls {
    rng: SeedRng,
    next: Duration,
    on: bool,
    masters: Vec<Rc<Served>>,
    clients: usize,
    active: Vec<Stall>,
}

impl Stalls {
    /// Stalls drawn from `seed` (when `on`) on the connections of `clients` client hosts
    /// (`c0`..) to `masters`.
    pub fn new(seed: u64, on: bool, masters: Vec<Rc<Served>>, clients: usize) -> Self {
        Self {
            rng: SeedRng::new(seed ^ 0x57A1_1C0E_0000_0003),
            next: Duration::from_millis(900),
            on,
            masters,
            clients,
            active: Vec::new(),
        }
    }

    /// Called between steps at `now`, before the heal: lifts the stalls that are over, resets
    /// the client sides that are due, starts the next stall.
    pub fn step(&mut self, sim: &mut Sim<'_>, now: Duration, history: &mut History) {
        let mut i = 0;
        while i < self.active.len() {
            if self.active[i].ends <= now {
                let stall = self.active.swap_remove(i);
                self.lift(sim, stall, now, history);
            } else {
                i += 1;
            }
        }
        for stall in &mut self.active {
            if stall.reset_at.is_some_and(|at| at <= now) {
                stall.reset_at = None;
                stall.reset = true;
                sim.reset_stream(stall.peer, stall.at);
                *history.effects.entry("stall-client-resets").or_default() += 1;
                history.event(
                    now,
                    format_args!(
                        "nemesis stall c{}:{} reset",
                        stall.client,
                        stall.peer.port()
                    ),
                );
            }
        }
        if self.on && now >= self.next {
            self.next = now + Duration::from_millis(300 + self.rng.below(2700));
            self.start(sim, now, history);
        }
    }

    /// Lifts every stall (the heal).
    pub fn heal(&mut self, sim: &mut Sim<'_>, now: Duration, history: &mut History) {
        for stall in std::mem::take(&mut self.active) {
            self.lift(sim, stall, now, history);
        }
    }

    fn start(&mut self, sim: &mut Sim<'_>, now: Duration, history: &mut History) {
        let client = self.rng.below(self.clients as u64) as usize;
        let master = self.rng.below(self.masters.len() as u64) as usize;
        let both_ways = self.rng.one_in(2);
        let lasts = Duration::from_millis(200 + self.rng.below(2800));
        let reset_at = self.rng.one_in(2).then(|| {
            now + Duration::from_millis(20 + self.rng.below(lasts.as_millis() as u64 - 40))
        });
        let pick = self.rng.next_u64();
        let ip = sim.lookup(format!("c{client}"));
        let open = self.masters[master].conns.borrow().open_from(ip);
        let Some(&peer) = open
            .iter()
            .filter(|p| !self.active.iter().any(|s| s.peer == **p))
            .nth(pick as usize % open.len().max(1))
        else {
            return;
        };
        let at = SocketAddr::new(sim.lookup(format!("m{master}")), PORT);
        self.masters[master].conns.borrow_mut().stalled(peer, now);
        sim.hold_stream(peer, at);
        if both_ways {
            sim.hold_stream(at, peer);
        }
        let ways = if both_ways { "both ways" } else { "requests" };
        let reset = match reset_at {
            Some(at) => format!(", client side reset at +{}ms", (at - now).as_millis()),
            None => String::new(),
        };
        // A held release or cleanup leaves its key until the lift, or until its TTL if the
        // client's side is reset meanwhile (the master closes the old connection, with what it
        // held, before the replacement carries anything): what other link faults excuse.
        let window = history.fault(master, Some(client), now);
        history.event(
            now,
            format_args!(
                "nemesis start stall c{client}:{}-m{master} ({ways}{reset}) for {}ms",
                peer.port(),
                lasts.as_millis()
            ),
        );
        self.active.push(Stall {
            client,
            master,
            peer,
            at,
            both_ways,
            since: now,
            ends: now + lasts,
            reset_at,
            reset: false,
            window,
        });
    }

    fn lift(&mut self, sim: &mut Sim<'_>, stall: Stall, now: Duration, history: &mut History) {
        let (mut requests, mut bytes, mut replies) = (0u64, 0u64, 0u64);
        sim.links(|links| {
            for link in links {
                for sent in link {
                    let Protocol::Tcp(Segment::Data(_, data)) = sent.protocol() else {
                        continue;
                    };
                    if sent.pair() == (stall.peer, stall.at) {
                        requests += 1;
                        bytes += data.len() as u64;
                    } else if stall.both_ways && sent.pair() == (stall.at, stall.peer) {
                        replies += 1;
                    }
                }
            }
        });
        // Still open on the master: the held requests run there when they land.
        let open =
            self.masters[stall.master]
                .conns
                .borrow_mut()
                .held(stall.peer, stall.since, bytes);
        sim.release_stream(stall.peer, stall.at);
        if stall.both_ways {
            sim.release_stream(stall.at, stall.peer);
        }
        history.lift(stall.window, now);
        let effects = &mut history.effects;
        *effects.entry("stall-requests-held").or_default() += requests;
        *effects.entry("stall-replies-held").or_default() += replies;
        if !open {
            *effects.entry("stall-requests-on-closed").or_default() += requests;
        }
        let landing = match open {
            true => "open",
            false => "closed",
        };
        history.event(
            now,
            format_args!(
                "nemesis lift stall c{}:{}-m{}{} (held {requests} request and {replies} reply \
                 segments; master side {landing})",
                stall.client,
                stall.peer.port(),
                stall.master,
                if stall.reset { ", reset" } else { "" },
            ),
        );
    }
}
