//! The cells of the comparison: each subject under each fault, with what its model says
//! should happen, declared before the run as jepsen-lite's matrix declares it.
//!
//! * **hold**: mutual exclusion holds: no two grants overlap, no update is lost.
//! * **break**: it breaks, and nothing in the subject stops a stale holder.
//! * **caught**: it breaks, and the fenced register, checking the subject's tokens, rejects
//!   every stale access: nothing acknowledged is lost there.

use jepsen_lite::scenario::Expect;
use serde::Serialize;

use super::subjects::SubjectKind;

/// A fault of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// Nothing: the workers contend.
    None,
    /// A holder stops after reading the registers, for longer than its TTL or session, with
    /// no packet leaving it (its links blackholed), then writes: Kleppmann's pause.
    ClientPause,
    /// A holder is cut off from every server (its links blackholed both ways) for longer than
    /// its TTL or session while it keeps working on the registers.
    Partition,
    /// A server (a Redlock master, the etcd or ZooKeeper leader, the PostgreSQL server) is
    /// stopped with `SIGSTOP` for longer than a TTL, then resumed.
    ServerPause,
    /// That server is killed with `SIGKILL` and started again with its data.
    ServerCrash,
    /// An etcd or ZooKeeper member that does not lead is killed, loses its data and is
    /// started again.
    DataLoss,
    /// The etcd or ZooKeeper leader is cut off from the other members (their peer links
    /// blackholed) for longer than a TTL while every client still reaches every member.
    MemberPartition,
    /// A random share of the packets to and from the servers' client ports is dropped, below
    /// TCP, for longer than a TTL.
    PacketLoss,
    /// An acquisition that queued is cancelled, then a holder crashes without releasing:
    /// what each left on the servers must be gone (or free) within its bound, read on the
    /// servers themselves.
    Orphans,
    /// Inside a holder's section, the wall clocks of a majority of the servers (the one
    /// server of `redis-single` and `pg-lease`) step forward by more than the TTL, under
    /// jepsen-lite's clock shim: only where it reaches the servers (see `clock.rs`).
    ClockBump,
    /// Kleppmann's case against Redlock: a holder stands on a bare majority of the masters
    /// (its links to the others are cut), and inside its section the clock of one master of
    /// that majority steps forward by more than the TTL.
    ClockBumpMinority,
}

impl Fault {
    /// Every fault, in the order of the page.
    pub const ALL: [Self; 11] = [
        Self::None,
        Self::ClientPause,
        Self::Partition,
        Self::ServerPause,
        Self::ServerCrash,
        Self::DataLoss,
        Self::MemberPartition,
        Self::PacketLoss,
        Self::Orphans,
        Self::ClockBump,
        Self::ClockBumpMinority,
    ];

    /// The label of reports.
    pub fn label(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::ClientPause => "client-pause",
            Self::Partition => "partition",
            Self::ServerPause => "server-pause",
            Self::ServerCrash => "server-crash",
            Self::DataLoss => "data-loss",
            Self::MemberPartition => "member-partition",
            Self::PacketLoss => "packet-loss",
            Self::Orphans => "orphans",
            Self::ClockBump => "clock-bump",
            Self::ClockBumpMinority => "clock-bump-minority",
        }
    }

    /// Whether the fault steps server clocks inside a holder's section.
    pub fn is_a_clock_bump(self) -> bool {
        matches!(self, Self::ClockBump | Self::ClockBumpMinority)
    }

    /// Whether a worker makes the fault itself, while it holds (the others are the
    /// nemesis's, on the servers).
    pub fn is_the_holders(self) -> bool {
        matches!(self, Self::ClientPause | Self::Partition)
    }
}

/// One subject under one fault, and what its model says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// The subject.
    pub subject: SubjectKind,
    /// The fault.
    pub fault: Fault,
    /// What should be observed.
    pub expect: Expect,
    /// Why, in one line, for the page.
    pub because: &'static str,
}

/// What the model of `subject` says of `fault`; `None` for a fault that does not apply.
pub fn expectation(subject: SubjectKind, fault: Fault) -> Option<(Expect, &'static str)> {
    use SubjectKind as S;
    Some(match fault {
        Fault::None => (Expect::Hold, "no fault: the lock excludes"),
        Fault::ClientPause | Fault::Partition => match subject {
            // The session's TCP connection stays up (a stopped process's kernel answers, a
            // blackholing link keeps it open), so the lock is never taken from the holder.
            S::PgAdvisory => (
                Expect::Hold,
                "the session stays open: the lock waits for its holder, however long",
            ),
            S::Etcd => (
                Expect::Caught,
                "the lease expires, the next waiter is granted; the revision fences the holder",
            ),
            S::Zookeeper => (
                Expect::Caught,
                "the session expires, the next waiter is granted; the zxid fences the holder",
            ),
            S::PgLease => (
                Expect::Caught,
                "the lease row expires; its sequence fences the holder",
            ),
            S::RedisSingle | S::Redlock3 | S::Redlock5 => (
                Expect::Caught,
                "the TTL runs out, the next waiter is granted; the quorum token fences the holder",
            ),
        },
        Fault::ServerPause => (
            Expect::Hold,
            "a stopped server grants nothing, and its grants end by their TTL or session",
        ),
        Fault::ServerCrash => match subject {
            S::RedisSingle | S::Redlock3 | S::Redlock5 => (
                Expect::Hold,
                "its data survives SIGKILL, and restart protection keeps it out for a TTL",
            ),
            S::Etcd | S::Zookeeper => (
                Expect::Hold,
                "the quorum elects a new leader; the old one rejoins with its log",
            ),
            S::PgAdvisory => (
                Expect::Hold,
                "the locks end with the sessions; holders finish before the server is back",
            ),
            S::PgLease => (Expect::Hold, "the lease rows are durable"),
        },
        Fault::DataLoss => match subject {
            S::Etcd | S::Zookeeper => (
                Expect::Hold,
                "one member of three forgets: the other two still hold every commit",
            ),
            _ => return None,
        },
        Fault::MemberPartition => match subject {
            S::Etcd => (
                Expect::Hold,
                "the others elect a leader; the old one steps down, its lease grants and \
                 revocations commit only through a majority",
            ),
            S::Zookeeper => (
                Expect::Hold,
                "the others elect a leader; the old one loses its quorum and stops serving, \
                 znodes and session expiries commit only through a majority",
            ),
            // Independent masters or one server: no members to cut apart.
            _ => return None,
        },
        Fault::PacketLoss => (
            Expect::Hold,
            "TCP retransmits below the lock: requests and replies come late, never twice or \
             out of order; holders act for far less than a TTL",
        ),
        Fault::Orphans => match subject {
            S::Etcd => (
                Expect::Hold,
                "a cancelled wait deletes its key; a crashed holder's key goes with its lease",
            ),
            S::Zookeeper => (
                Expect::Hold,
                "a cancelled wait deletes its znode; a crashed holder's goes with its session",
            ),
            S::PgAdvisory => (
                Expect::Hold,
                "a cancelled wait is cancelled on the server; a crashed holder's session ends \
                 with its connection, and the lock with it",
            ),
            S::PgLease => (
                Expect::Hold,
                "a wait leaves no row; a crashed holder's row expires with its TTL",
            ),
            // jepsen-lite's own orphan checks read quorumlock's keys on the masters.
            S::RedisSingle | S::Redlock3 | S::Redlock5 => return None,
        },
        Fault::ClockBump => match subject {
            S::RedisSingle => (
                Expect::Caught,
                "its master's clock steps past the TTL inside a section: the key expires under \
                 its holder, a waiter is granted; the token fences the holder",
            ),
            S::Redlock3 | S::Redlock5 => (
                Expect::Caught,
                "a majority of clocks step past the TTL inside a section, beyond the drift the \
                 model allows: their keys expire, a waiter wins a majority; the token fences \
                 the holder",
            ),
            S::PgLease => (
                Expect::Caught,
                "the database's clock steps past the lease inside a section: now() expires the \
                 row, a waiter is granted; the sequence fences the holder",
            ),
            // Not reached by the shim (etcd: Go reads the clock without libc; ZooKeeper: the
            // JVM's monotonic clock), or no clock at all (pg-advisory).
            S::Etcd | S::Zookeeper | S::PgAdvisory => return None,
        },
        Fault::ClockBumpMinority => match subject {
            S::Redlock3 | S::Redlock5 => (
                Expect::Caught,
                "the holder stands on a bare majority; one of its masters' clocks steps past \
                 the TTL: that master and the ones it lacks form a second majority \
                 (Kleppmann); the token, stored on the holder's quorum, fences it",
            ),
            // One server (a step of it is the clock-bump cell), or not reached by the shim.
            _ => return None,
        },
    })
}

/// The cells to run: every subject × every fault that applies to it (or, quick, each
/// subject with no fault and under a client pause).
pub fn catalog(subjects: &[SubjectKind], quick: bool) -> Vec<Cell> {
    let faults: &[Fault] = if quick {
        &[Fault::None, Fault::ClientPause]
    } else {
        &Fault::ALL
    };
    let mut cells = Vec::new();
    for &subject in subjects {
        for &fault in faults {
            if let Some((expect, because)) = expectation(subject, fault) {
                cells.push(Cell {
                    subject,
                    fault,
                    expect,
                    because,
                });
            }
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subject has a no-fault cell that must hold, a pause cell and a packet-loss cell;
    /// data loss and partitions between members only where there are members; orphans for
    /// the subjects jepsen-lite does not read.
    #[test]
    fn the_catalog_covers_every_subject() {
        let cells = catalog(&SubjectKind::ALL, false);
        for subject in SubjectKind::ALL {
            let of = |f| cells.iter().find(|c| c.subject == subject && c.fault == f);
            assert_eq!(of(Fault::None).map(|c| c.expect), Some(Expect::Hold));
            assert!(of(Fault::ClientPause).is_some());
            assert_eq!(of(Fault::DataLoss).is_some(), subject.has_leader());
            assert_eq!(of(Fault::MemberPartition).is_some(), subject.has_leader());
            assert_eq!(of(Fault::PacketLoss).map(|c| c.expect), Some(Expect::Hold));
            assert_eq!(
                of(Fault::Orphans).is_some(),
                !subject.client_bounds_validity()
            );
            // Where the clock shim reaches a clock the lock is judged on.
            let shimmed = subject.client_bounds_validity() || subject == SubjectKind::PgLease;
            assert_eq!(
                of(Fault::ClockBump).map(|c| c.expect),
                shimmed.then_some(Expect::Caught)
            );
            assert_eq!(
                of(Fault::ClockBumpMinority).is_some(),
                subject.client_bounds_validity() && subject.servers() > 1
            );
        }
        let quick = catalog(&SubjectKind::ALL, true);
        assert_eq!(quick.len(), 2 * SubjectKind::ALL.len());
    }
}
