//! Each master's log of the connections it accepted (`host.rs` keeps it), for the stalled
//! connections (`stall.rs`): which connections of a client are open (one to stall), and what
//! the requests a stall held did when they landed: how many ran late, how many after a request
//! on a connection the same client opened since the stall began, and the checker
//! `stale-after-reconnect` over the scripts among them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use super::host::Served;

/// The connections a master accepted, and what the stale requests of stalled ones did.
#[derive(Default)]
pub struct ConnLog {
    conns: Vec<Conn>,
    next_id: u64,
    /// What the stale requests did, by kind (summed into the run's effects at its end).
    pub effects: BTreeMap<&'static str, u64>,
    /// Stale scripts run after a newer connection's script: when, and what.
    pub violations: Vec<(Duration, String)>,
}

/// The checker of stale requests: a script held on a connection never runs after a script for
/// the same key and lock value (an acquisition's cleanup, a release) that the same client sent
/// on a connection it opened since (its replacement: a key's requests all go on one
/// connection). The library keeps a
/// connection across timeouts (`transport/pooled.rs`: its requests stay in order) and closes a
/// broken one on the master before the replacement carries anything (`transport/orphan.rs`),
/// so a stale acquisition never lands after its cleanup sent on the replacement.
pub const STALE_AFTER_RECONNECT: &str = "stale-after-reconnect";

/// A script's first key and a lock value it carried.
type Claim = (Vec<u8>, u64);

struct Conn {
    id: u64,
    /// The client's side (`ip:port`).
    peer: SocketAddr,
    accepted_at: Duration,
    closed_at: Option<Duration>,
    /// Whether a request arrived on it.
    fed: bool,
    /// Since when a stall holds it, until what it held has landed.
    stalled_since: Option<Duration>,
    /// The keys and lock values its scripts carried, while one of its client's stalls may still land
    /// (see [`ConnLog::fed`]), and the part of a request that arrived.
    values: BTreeSet<Claim>,
    partial: Vec<u8>,
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
            stalled_since: None,
            values: BTreeSet::new(),
            partial: Vec::new(),
            stale: None,
        });
        self.next_id
    }

    /// `bytes` arrived on connection `id` at `now` and were fed to the master: counts the
    /// stale requests among them, and those that run after a request on a newer connection of
    /// the same client (opened since the stall began); a stale script run after a newer
    /// connection's script for the same key and lock value is a violation (see
    /// [`STALE_AFTER_RECONNECT`]).
    pub fn fed(&mut self, id: u64, bytes: &[u8], now: Duration) {
        let Some(at) = self.conns.iter().position(|c| c.id == id) else {
            return;
        };
        let (ip, accepted_at) = (self.conns[at].peer.ip(), self.conns[at].accepted_at);
        // A connection opened since one of its client's stalls began, while that stall's
        // requests may still land: the lock values of its scripts are remembered.
        let watched = self.conns.iter().any(|c| {
            c.id != id && c.peer.ip() == ip && c.stalled_since.is_some_and(|s| accepted_at >= s)
        });
        let conn = &mut self.conns[at];
        conn.fed = true;
        if watched && conn.stale.is_none() {
            conn.partial.extend_from_slice(bytes);
            while let Ok(Some((args, used))) = crate::resp::parse_request(&conn.partial) {
                conn.partial.drain(..used);
                conn.values.extend(script_claims(&args));
            }
        }
        let Some(stale) = conn.stale.as_mut() else {
            return;
        };
        let take = bytes
            .len()
            .min(usize::try_from(stale.left).unwrap_or(usize::MAX));
        stale.left -= take as u64;
        stale.partial.extend_from_slice(&bytes[..take]);
        let (mut requests, mut values) = (0, BTreeSet::new());
        while let Ok(Some((args, used))) = crate::resp::parse_request(&stale.partial) {
            stale.partial.drain(..used);
            requests += 1;
            values.extend(script_claims(&args));
        }
        let since = stale.since;
        if stale.left == 0 {
            conn.stale = None;
            conn.stalled_since = None;
        }
        let peer = conn.peer;
        let newer: Vec<&Conn> = self
            .conns
            .iter()
            .filter(|c| c.id != id && c.peer.ip() == ip && c.accepted_at >= since && c.fed)
            .collect();
        *self.effects.entry("stall-stale-requests").or_default() += requests;
        if !newer.is_empty() {
            *self.effects.entry("stall-stale-after-newer").or_default() += requests;
        }
        let overtaken = values
            .iter()
            .filter(|v| newer.iter().any(|c| c.values.contains(v)))
            .count();
        if overtaken > 0 {
            self.violations.push((
                now,
                format!(
                    "{overtaken} script(s) held on {peer} since {} µs ran after a script for \
                     the same key and value on a connection the client opened since",
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
    pub(super) fn open_from(&self, ip: IpAddr) -> Vec<SocketAddr> {
        self.conns
            .iter()
            .filter(|c| c.closed_at.is_none() && c.peer.ip() == ip)
            .map(|c| c.peer)
            .collect()
    }

    /// A stall holds the connection from `peer` since `since`.
    pub(super) fn stalled(&mut self, peer: SocketAddr, since: Duration) {
        if let Some(conn) = self
            .conns
            .iter_mut()
            .find(|c| c.peer == peer && c.closed_at.is_none())
        {
            conn.stalled_since = Some(since);
        }
    }

    /// The `bytes` held on the connection from `peer` since `since` are on their way: whether
    /// the master's side is still open to run them.
    pub(super) fn held(&mut self, peer: SocketAddr, since: Duration, bytes: u64) -> bool {
        let Some(conn) = self
            .conns
            .iter_mut()
            .find(|c| c.peer == peer && c.closed_at.is_none())
        else {
            return false;
        };
        if bytes == 0 {
            conn.stalled_since = None;
            return true;
        }
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

/// What a request carries if it is a script (`EVAL`, `EVALSHA`) on a key: its first key (which
/// picks its connection in the library) with each argument that starts with 32 hex digits (a
/// lock value, or an election's `value:identity`), as [`super::seams::first_half`] reads it.
fn script_claims(args: &[Vec<u8>]) -> Vec<Claim> {
    let name = args.first().map(Vec::as_slice).unwrap_or_default();
    if !name.eq_ignore_ascii_case(b"EVALSHA") && !name.eq_ignore_ascii_case(b"EVAL") {
        return Vec::new();
    }
    let keys = args
        .get(2)
        .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
        .unwrap_or(0);
    let Some(key) = args.get(3).filter(|_| keys > 0) else {
        return Vec::new();
    };
    args.iter()
        .skip(3 + keys)
        .filter(|arg| {
            arg.get(..32)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
        })
        .filter_map(|arg| super::seams::first_half(arg))
        .map(|value| (key.clone(), value))
        .collect()
}
