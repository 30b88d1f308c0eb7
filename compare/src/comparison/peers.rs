//! The links between the members of etcd and ZooKeeper, through the fault proxy, so that a
//! member can be cut off from the others while every client still reaches it.
//!
//! * etcd names a member by its advertised peer URL, which every member must agree on: one
//!   proxy link per member, shared by the others. Cutting it discards everything sent on the
//!   connections to that member; etcd's peers send on connections the receiver dialed, so all
//!   the member says is lost, and what the others tell it still arrives on the connections it
//!   dialed: it hears the new term and steps down.
//! * ZooKeeper reads each server's own configuration: one link per ordered pair of servers,
//!   for its quorum port and its election port, so a cut is complete both ways.

use quorumlock_testkit::{free_port, Mode, Modes, Proxy};

use super::subjects::SubjectKind;
use crate::server::{EtcdCluster, ServerError, ZkEnsemble};

/// The proxy between the members of a cluster.
pub struct PeerLinks {
    proxy: Proxy,
    kind: SubjectKind,
    members: usize,
}

impl std::fmt::Debug for PeerLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerLinks")
            .field("kind", &self.kind)
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

/// Starts an etcd cluster of `n` members whose peer traffic goes through a proxy.
///
/// Must run on a blocking thread of a tokio runtime: the proxy's tasks run on it.
///
/// # Errors
///
/// Why the proxy or a member did not start.
pub(super) fn etcd(n: usize) -> Result<(EtcdCluster, PeerLinks), String> {
    let ports = fresh(n)?;
    let proxy = proxy(1, &ports)?;
    let advertised: Vec<u16> = (0..n).map(|j| proxy.addr(0, j).port()).collect();
    let cluster =
        EtcdCluster::start_routed(&ports, &advertised).map_err(|e| format!("etcd: {e}"))?;
    Ok((
        cluster,
        PeerLinks {
            proxy,
            kind: SubjectKind::Etcd,
            members: n,
        },
    ))
}

/// Starts a ZooKeeper ensemble of `n` servers whose quorum and election traffic goes
/// through a proxy: link (i, 2j) is server i's way to server j's quorum port, (i, 2j + 1) to
/// its election port.
///
/// Must run on a blocking thread of a tokio runtime: the proxy's tasks run on it.
///
/// # Errors
///
/// Why the proxy or a server did not start.
pub(super) fn zookeeper(n: usize) -> Result<(ZkEnsemble, PeerLinks), String> {
    let ports = fresh(2 * n)?;
    let proxy = proxy(n, &ports)?;
    let peers: Vec<[u16; 2]> = ports.chunks(2).map(|p| [p[0], p[1]]).collect();
    let route = |i: usize, j: usize| [proxy.addr(i, 2 * j).port(), proxy.addr(i, 2 * j + 1).port()];
    let ensemble =
        ZkEnsemble::start_routed(&peers, &route).map_err(|e| format!("zookeeper: {e}"))?;
    Ok((
        ensemble,
        PeerLinks {
            proxy,
            kind: SubjectKind::Zookeeper,
            members: n,
        },
    ))
}

impl PeerLinks {
    /// Cuts member `i` off from every other member (`Blackhole`: connections stay up and
    /// carry nothing), or heals it (`Pass`).
    pub fn set_member(&self, i: usize, mode: Mode) {
        for (c, n) in self.links_of(i) {
            self.proxy.set(c, n, Modes::both(mode));
        }
    }

    /// Bytes discarded or delayed and connections cut on member `i`'s links so far.
    pub fn affected(&self, i: usize) -> u64 {
        self.links_of(i)
            .into_iter()
            .map(|(c, n)| self.proxy.affected(c, n))
            .sum()
    }

    /// The (row, node) links that carry member `i`'s peer traffic.
    fn links_of(&self, i: usize) -> Vec<(usize, usize)> {
        match self.kind {
            SubjectKind::Zookeeper => (0..self.members)
                .filter(|&j| j != i)
                .flat_map(|j| [(i, 2 * j), (i, 2 * j + 1), (j, 2 * i), (j, 2 * i + 1)])
                .collect(),
            _ => vec![(0, i)],
        }
    }
}

fn fresh(n: usize) -> Result<Vec<u16>, String> {
    (0..n)
        .map(|_| free_port().map_err(|e| format!("a free port: {}", ServerError::from(e))))
        .collect()
}

fn proxy(rows: usize, ports: &[u16]) -> Result<Proxy, String> {
    tokio::runtime::Handle::current()
        .block_on(Proxy::start(rows, ports))
        .map_err(|e| format!("starting the peer proxy: {e}"))
}
