//! The subjects of the comparison, by label.

use serde::Serialize;

/// One lock system as the comparison runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubjectKind {
    /// quorumlock on one redis master.
    RedisSingle,
    /// quorumlock on three masters.
    Redlock3,
    /// quorumlock on five masters.
    Redlock5,
    /// etcd's mutex recipe on a 3-member cluster.
    Etcd,
    /// Curator's mutex recipe on a 3-server ensemble.
    Zookeeper,
    /// `pg_advisory_lock` on one PostgreSQL server.
    PgAdvisory,
    /// A ShedLock-style lease row on one PostgreSQL server.
    PgLease,
}

impl SubjectKind {
    /// Every subject, in the order of the page.
    pub const ALL: [Self; 7] = [
        Self::RedisSingle,
        Self::Redlock3,
        Self::Redlock5,
        Self::Etcd,
        Self::Zookeeper,
        Self::PgAdvisory,
        Self::PgLease,
    ];

    /// The label of reports, as the subject's client names itself.
    pub fn label(self) -> &'static str {
        match self {
            Self::RedisSingle => "redis-single",
            Self::Redlock3 => "redlock-3",
            Self::Redlock5 => "redlock-5",
            Self::Etcd => "etcd",
            Self::Zookeeper => "zookeeper",
            Self::PgAdvisory => "pg-advisory",
            Self::PgLease => "pg-lease",
        }
    }

    /// The subject of a label.
    ///
    /// # Errors
    ///
    /// The labels there are, for an unknown one.
    pub fn parse(label: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|s| s.label() == label)
            .ok_or_else(|| {
                let all: Vec<&str> = Self::ALL.iter().map(|s| s.label()).collect();
                format!(
                    "unknown subject {label:?}: expected one of {}",
                    all.join(", ")
                )
            })
    }

    /// Whether the subject's grants carry a fencing token.
    pub fn fences(self) -> bool {
        self != Self::PgAdvisory
    }

    /// Whether the client bounds its grant on its own clock (a TTL counted by the client):
    /// quorumlock's validity. The checkers then bound the grant by it.
    pub fn client_bounds_validity(self) -> bool {
        matches!(self, Self::RedisSingle | Self::Redlock3 | Self::Redlock5)
    }

    /// Whether the servers are a quorum of several (etcd, ZooKeeper, Redlock).
    pub fn servers(self) -> usize {
        match self {
            Self::RedisSingle | Self::PgAdvisory | Self::PgLease => 1,
            Self::Redlock3 | Self::Etcd | Self::Zookeeper => 3,
            Self::Redlock5 => 5,
        }
    }

    /// Whether the client keeps its grants alive with heartbeats (etcd's lease keep-alives,
    /// ZooKeeper's pings): a paused holder's silence then shows as heartbeats discarded.
    pub fn keeps_alive(self) -> bool {
        matches!(self, Self::Etcd | Self::Zookeeper)
    }

    /// Whether one server leads the others (etcd, ZooKeeper): the target of server faults.
    pub fn has_leader(self) -> bool {
        matches!(self, Self::Etcd | Self::Zookeeper)
    }
}
