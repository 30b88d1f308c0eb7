//! The links between the members of etcd and ZooKeeper, cut by iptables so that a member can
//! be cut off from the others, both ways, while every client still reaches it.
//!
//! A member's traffic with the others runs on two kinds of connection: those the others
//! dialed to its peer ports, and those it dialed to theirs. The first are told by port (every
//! member listens on ports of its own). The second come from `127.0.0.1` and an ephemeral
//! port, like the others' connections to the same member: neither etcd nor ZooKeeper binds
//! the sockets it dials, so no address or port tells them apart. Each member therefore runs
//! with a group id of its own, and a rule of the `mangle` table marks every connection a
//! member sends a packet on with the member's bit (`CONNMARK`, from iptables' `owner` match on
//! the group); the mark is there from a dialed connection's first packet. Cutting member `i`
//! off drops, on loopback input (which every loopback packet crosses once, whichever way it
//! goes), every packet to or from its peer ports, and every packet of a connection that
//! carries its bit to or from another member's peer ports. The client ports carry no rule.
//! The marks and the cut touch only this cluster's ports and groups.

use std::sync::atomic::{AtomicU32, Ordering};

use super::rules::Rules;
use super::subjects::SubjectKind;
use crate::server::{EtcdCluster, ZkEnsemble};

/// The first connection mark bit; member `i` uses bit `MARK_SHIFT + i`.
const MARK_SHIFT: usize = 20;
/// At most this many members get a bit.
const MAX_MEMBERS: usize = 8;

static NEXT_GROUP: AtomicU32 = AtomicU32::new(0);

/// The members' peer ports and groups, and the rules that mark their connections (for as
/// long as this lives).
pub struct PeerLinks {
    kind: SubjectKind,
    groups: Vec<u32>,
    peer_ports: Vec<Vec<u16>>,
    _marks: Rules,
}

impl std::fmt::Debug for PeerLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerLinks")
            .field("kind", &self.kind)
            .field("groups", &self.groups)
            .field("peer_ports", &self.peer_ports)
            .finish_non_exhaustive()
    }
}

/// A member cut off from the others: the cut lasts until this is dropped or
/// [`heal`](Self::heal)ed.
#[derive(Debug)]
pub struct Cut {
    rules: Rules,
    tags: Vec<String>,
}

impl Cut {
    /// Packets the cut's rules dropped so far.
    ///
    /// # Errors
    ///
    /// The counters could not be read.
    pub fn dropped(&self) -> Result<u64, String> {
        self.tags.iter().map(|t| self.rules.packets(t)).sum()
    }

    /// Removes the cut's rules.
    ///
    /// # Errors
    ///
    /// The rules that could not be removed.
    pub fn heal(mut self) -> Result<(), String> {
        self.rules.remove()
    }
}

/// Group ids for `n` members, unique to this process and call.
fn groups(n: usize) -> Vec<u32> {
    // Far above the ids of real groups; the low bits keep concurrent processes apart.
    let base = 0x4000_0000 | ((std::process::id() & 0xffff) << 12);
    (0..n)
        .map(|_| base | (NEXT_GROUP.fetch_add(1, Ordering::Relaxed) & 0xfff))
        .collect()
}

/// The rules that mark each member's connections with its bit.
fn marks(groups: &[u32]) -> Result<Rules, String> {
    if groups.len() > MAX_MEMBERS {
        return Err(format!("at most {MAX_MEMBERS} members can be cut apart"));
    }
    let mut rules = Rules::new();
    for (i, gid) in groups.iter().enumerate() {
        let matches = [
            "-o",
            "lo",
            "-p",
            "tcp",
            "-m",
            "owner",
            "--gid-owner",
            &gid.to_string(),
        ]
        .map(str::to_owned);
        let bit = format!("{:#x}", bit(i));
        rules.insert(
            "mangle",
            "OUTPUT",
            &matches,
            &["-j", "CONNMARK", "--or-mark", &bit],
        )?;
    }
    Ok(rules)
}

fn bit(i: usize) -> u32 {
    1 << (MARK_SHIFT + i)
}

/// Starts an etcd cluster of `n` members that can be cut apart.
///
/// # Errors
///
/// Why the marks or a member could not be put in place (iptables missing, not root).
pub(super) fn etcd(n: usize) -> Result<(EtcdCluster, PeerLinks), String> {
    let groups = groups(n);
    let marks = marks(&groups)?;
    let cluster = EtcdCluster::start_tagged(&groups).map_err(|e| format!("etcd: {e}"))?;
    let peer_ports = cluster
        .members()
        .iter()
        .map(|m| vec![m.peer_port()])
        .collect();
    Ok((
        cluster,
        PeerLinks {
            kind: SubjectKind::Etcd,
            groups,
            peer_ports,
            _marks: marks,
        },
    ))
}

/// Starts a ZooKeeper ensemble of `n` servers that can be cut apart (quorum and election
/// ports both).
///
/// # Errors
///
/// Why the marks or a server could not be put in place (iptables missing, not root).
pub(super) fn zookeeper(n: usize) -> Result<(ZkEnsemble, PeerLinks), String> {
    let groups = groups(n);
    let marks = marks(&groups)?;
    let ensemble = ZkEnsemble::start_tagged(&groups).map_err(|e| format!("zookeeper: {e}"))?;
    let peer_ports = ensemble
        .servers()
        .iter()
        .map(|s| s.peer_ports().to_vec())
        .collect();
    Ok((
        ensemble,
        PeerLinks {
            kind: SubjectKind::Zookeeper,
            groups,
            peer_ports,
            _marks: marks,
        },
    ))
}

impl PeerLinks {
    /// Cuts member `i` off from every other member, both ways.
    ///
    /// # Errors
    ///
    /// What iptables said (no rule is left in place then).
    pub fn cut(&self, i: usize) -> Result<Cut, String> {
        let own = self
            .peer_ports
            .get(i)
            .ok_or_else(|| format!("no member {i}"))?;
        let others: Vec<u16> = (0..self.peer_ports.len())
            .filter(|&j| j != i)
            .flat_map(|j| self.peer_ports[j].iter().copied())
            .collect();
        let list = |ports: &[u16]| {
            ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        let on_lo = ["-i", "lo", "-p", "tcp"].map(str::to_owned);
        let mut to_own = on_lo.to_vec();
        to_own.extend(["-m", "multiport", "--ports", &list(own)].map(str::to_owned));
        let mark = format!("{:#x}/{:#x}", bit(i), bit(i));
        let mut dialed = on_lo.to_vec();
        dialed.extend(
            [
                "-m",
                "connmark",
                "--mark",
                &mark,
                "-m",
                "multiport",
                "--ports",
                &list(&others),
            ]
            .map(str::to_owned),
        );
        let mut rules = Rules::new();
        let tags = vec![
            rules.insert("filter", "INPUT", &to_own, &["-j", "DROP"])?,
            rules.insert("filter", "INPUT", &dialed, &["-j", "DROP"])?,
        ];
        Ok(Cut { rules, tags })
    }

    /// Member `i`'s peer ports.
    pub fn ports_of(&self, i: usize) -> &[u16] {
        self.peer_ports.get(i).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_unique_and_bits_distinct() {
        let (a, b) = (groups(3), groups(3));
        let mut all: Vec<u32> = a.iter().chain(&b).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 6);
        assert!(all.iter().all(|&g| g >= 0x4000_0000));
        assert_eq!(bit(0) & bit(1), 0);
        assert!(marks(&[1; MAX_MEMBERS + 1]).is_err());
    }
}
