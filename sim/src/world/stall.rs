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
//! ([`ConnLog`]), to pick a connection to stall and to count what the stale requests did.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use turmoil::{Protocol, Segment, Sim};

use super::history::History;
use super::host::{Served, PORT};
use crate::seed::SeedRng;

/// The connections a master accepted, and what the stale requests of stalled ones did.
#[derive(Default)]
pub struct ConnLog {
    conns: Vec<Conn>,
    next_id: u64,
    /// What the stale requests did, by kind (summed into the run's effects at its end).
    pub effects: BTreeMap<&'static str, u64>,
    /// Stale scripts run after a newer connection's script: when, and what.
    pub violations: Vec<(Duration, String)>,
    /// When the first stall on this master began: connections accepted since are watched.
    watch_from: Option<Duration>,
}

/// The checker of stale requests: a script held on a connection never runs after a script
/// the same client sent on a connection it opened since (its replacement). The library keeps a
/// connection across timeouts (`transport/pooled.rs`: its requests stay in order) and closes a
/// broken one on the master before the replacement carries anything (`transport/orphan.rs`),
/// so a stale acquisition never lands after its cleanup sent on the replacement.
pub const STALE_AFTER_RECONNECT: &str = "stale-after-reconnect";

struct Conn {
    id: u64,
    /// The client's side (`ip:port`).
    peer: SocketAddr,
    accepted_at: Duration,
    closed_at: Option<Duration>,
    /// Whether a request arrived on it.
    fed: bool,
    /// Whether a script arrived on it (looked at only while stalls are watched).
    ran_script: bool,
    stale: Option<Stale>,
}

/// Requests held by a stall, delivered at its lift.
struct Stale {
    /// When the stall began: a connection accepted since is newer.
    since: Duration,
    /// Held bytes not arrived yet.
    left: u64,
    /// Held bytes arrived, not yet a whole request.
    partial: Vec<u8>,
}

/// How long a closed connection stays in the log: past the longest stall.
const KEPT: Duration = Duration::from_secs(10);

impl ConnLog {
    /// A connection from `peer` accepted at `now`: its id, for [`Self::fed`] and
    /// [`Self::closed`].
    pub fn accepted(&mut self, peer: SocketAddr, now: Duration) -> u64 {
        self.conns
            .retain(|c| c.closed_at.is_none_or(|closed| closed + KEPT > now));
        self.next_id += 1;
        self.conns.push(Conn {
            id: self.next_id,
            peer,
            accepted_at: now,
            closed_at: None,
            fed: false,
            ran_script: false,
            stale: None,
        });
        self.next_id
    }

    /// `bytes` arrived on connection `id` at `now` and were fed to the master: counts the
    /// stale requests among them, and those that run after a request on a newer connection of
    /// the same client (opened since the stall began); a stale script run after a newer
    /// connection's script is a violation (see [`STALE_AFTER_RECONNECT`]).
    pub fn fed(&mut self, id: u64, bytes: &[u8], now: Duration) {
        let Some(at) = self.conns.iter().position(|c| c.id == id) else {
            return;
        };
        let conn = &mut self.conns[at];
        conn.fed = true;
        // Only connections opened since a stall began are compared with stale requests.
        if self.watch_from.is_some_and(|from| conn.accepted_at >= from) && !conn.ran_script {
            conn.ran_script = bytes.windows(4).any(|w| w == b"EVAL");
        }
        let Some(stale) = conn.stale.as_mut() else {
            return;
        };
        let take = bytes.len().min(usize::try_from(stale.left).unwrap_or(usize::MAX));
        stale.left -= take as u64;
        stale.partial.extend_from_slice(&bytes[..take]);
        let (mut requests, mut scripts) = (0, 0);
        while let Ok(Some((args, used))) = crate::resp::parse_request(&stale.partial) {
            stale.partial.drain(..used);
            requests += 1;
            let name = args.first().map(Vec::as_slice).unwrap_or_default();
            if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL") {
                scripts += 1;
            }
        }
        let since = stale.since;
        if stale.left == 0 {
            conn.stale = None;
        }
        let peer = conn.peer;
        let newer = |script: bool| {
            self.conns.iter().any(|c| {
                c.id != id
                    && c.peer.ip() == peer.ip()
                    && c.accepted_at >= since
                    && c.fed
                    && (!script || c.ran_script)
            })
        };
        let (after_newer, after_newer_script) = (newer(false), newer(true));
        *self.effects.entry("stall-stale-requests").or_default() += requests;
        if after_newer {
            *self.effects.entry("stall-stale-after-newer").or_default() += requests;
        }
        if after_newer_script && scripts > 0 {
            self.violations.push((
                now,
                format!(
                    "{scripts} script(s) held on {peer} since {} µs ran after a script on a \
                     connection the client opened since",
                    since.as_micros()
                ),
            ));
        }
    }

    /// Connection `id` closed at `now` (its task ended: the client or the master closed it,
    /// or the master crashed).
    pub fn closed(&mut self, id: u64, now: Duration) {
        if let Some(conn) = self.conns.iter_mut().find(|c| c.id == id) {
            conn.closed_at = Some(now);
        }
    }

    /// The open connections from `ip`, oldest first.
    fn open_from(&self, ip: IpAddr) -> Vec<SocketAddr> {
        self.conns
            .iter()
            .filter(|c| c.closed_at.is_none() && c.peer.ip() == ip)
            .map(|c| c.peer)
            .collect()
    }

    /// The `bytes` held on the connection from `peer` since `since` are on their way: whether
    /// the master's side is still open to run them.
    fn held(&mut self, peer: SocketAddr, since: Duration, bytes: u64) -> bool {
        let Some(conn) = self
            .conns
            .iter_mut()
            .find(|c| c.peer == peer && c.closed_at.is_none())
        else {
            return false;
        };
        conn.stale = Some(Stale {
            since,
            left: bytes,
            partial: Vec::new(),
        });
        true
    }
}

/// Marks a connection closed in its master's log when its task ends, however it ends.
pub struct Logged {
    served: Rc<Served>,
    id: u64,
}

impl Logged {
    /// Logs a connection from `peer` to `served`, accepted now.
    pub fn new(served: &Rc<Served>, peer: SocketAddr) -> Self {
        let id = served.conns.borrow_mut().accepted(peer, super::host::now());
        Self {
            served: Rc::clone(served),
            id,
        }
    }

    /// `bytes` arrived and were fed to the master.
    pub fn fed(&self, bytes: &[u8]) {
        let now = super::host::now();
        self.served.conns.borrow_mut().fed(self.id, bytes, now);
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let now = super::host::now();
        self.served.conns.borrow_mut().closed(self.id, now);
    }
}

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
                    format_args!("nemesis stall c{}:{} reset", stall.client, stall.peer.port()),
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
        let reset_at = self
            .rng
            .one_in(2)
            .then(|| now + Duration::from_millis(20 + self.rng.below(lasts.as_millis() as u64 - 40)));
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
        let mut log = self.masters[master].conns.borrow_mut();
        log.watch_from.get_or_insert(now);
        drop(log);
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
        let open = self.masters[stall.master]
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
