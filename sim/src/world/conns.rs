//! Each master's log of the connections it accepted (`host.rs` keeps it), for the stalled
//! connections (`stall.rs`): which connections of a client are open (one to stall), and what
//! the requests a stall held did when they landed: how many ran late, how many after a request
//! on a connection the same client opened since the stall began, and the checker
//! `stale-after-reconnect` over the scripts among them.

use std::collections::BTreeMap;
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
    /// When the first stall on this master began: connections accepted since are watched.
    pub(super) watch_from: Option<Duration>,
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
        let take = bytes
            .len()
            .min(usize::try_from(stale.left).unwrap_or(usize::MAX));
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
    pub(super) fn open_from(&self, ip: IpAddr) -> Vec<SocketAddr> {
        self.conns
            .iter()
            .filter(|c| c.closed_at.is_none() && c.peer.ip() == ip)
            .map(|c| c.peer)
            .collect()
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
