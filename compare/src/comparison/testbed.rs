//! One subject's servers, started fresh for a cell or a benchmark, with the fault proxy in
//! front of them: every lock client goes through a row of proxy links of its own, so that one
//! client can be cut off (a partition, a pause's silence, a crash's closed sockets) while the
//! others carry on.

use std::sync::Arc;
use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::{MasterOptions, Mode, Modes, Persistence, Proxy, RedisCluster};

use super::peers::PeerLinks;
use super::servers::Servers;
use super::subjects::SubjectKind;
use crate::server::{connect_string, conninfo};
use crate::{
    EtcdLock, EtcdOptions, LockSubject, PgAdvisoryLock, PgAdvisoryOptions, PgLeaseLock,
    PgLeaseOptions, RedlockSubject, SubjectError, ZkLock, ZkOptions,
};

/// How long one request of a Redlock client may take before it counts as failed: small
/// against the TTL (the spec's advice), wide for two shared cores.
const REDIS_NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// A subject's servers and a proxy row per client.
pub struct Testbed {
    /// Which subject.
    pub kind: SubjectKind,
    /// The servers, to pause, crash and restart.
    pub servers: Servers,
    /// Every client's links to the servers.
    pub links: Links,
    /// The links between etcd or ZooKeeper members, when the testbed was started with them.
    pub peers: Option<PeerLinks>,
    ttl: Duration,
}

/// The proxy in front of the servers: row `c` carries client `c`'s traffic to every server.
/// Cheap to clone, for the worker that cuts itself off.
#[derive(Clone)]
pub struct Links {
    proxy: Arc<Proxy>,
    servers: usize,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links")
            .field("servers", &self.servers)
            .finish_non_exhaustive()
    }
}

impl Links {
    /// Sets every link of client `row` to `mode` both ways.
    pub fn set_row(&self, row: usize, mode: Mode) {
        for n in 0..self.servers {
            self.proxy.set(row, n, Modes::both(mode));
        }
    }

    /// Bytes discarded or delayed and connections cut so far on client `row`'s links.
    pub fn row_affected(&self, row: usize) -> u64 {
        (0..self.servers).map(|n| self.proxy.affected(row, n)).sum()
    }

    /// Sets client `row`'s link to server `node` to `mode` both ways.
    pub fn set(&self, row: usize, node: usize, mode: Mode) {
        self.proxy.set(row, node, Modes::both(mode));
    }

    /// The ports of client `row`'s links, one per server.
    fn row_ports(&self, row: usize) -> Vec<u16> {
        (0..self.servers)
            .map(|n| self.proxy.addr(row, n).port())
            .collect()
    }
}

impl std::fmt::Debug for Testbed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Testbed")
            .field("kind", &self.kind)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Testbed {
    /// Starts the subject's servers and a proxy with `clients` rows; grants last `ttl` (the
    /// TTL, lease or session timeout of every subject that has one).
    ///
    /// # Errors
    ///
    /// Why a server or the proxy did not start.
    pub async fn start(kind: SubjectKind, clients: usize, ttl: Duration) -> Result<Self, String> {
        Self::start_with(kind, clients, ttl, false).await
    }

    /// As [`start`](Self::start), with the traffic between members through a proxy too when
    /// `peer_links` (etcd and ZooKeeper; the others have no members).
    ///
    /// # Errors
    ///
    /// Why a server or a proxy did not start.
    pub async fn start_with(
        kind: SubjectKind,
        clients: usize,
        ttl: Duration,
        peer_links: bool,
    ) -> Result<Self, String> {
        let (servers, peers) = tokio::task::spawn_blocking(move || {
            if peer_links {
                Servers::start_with_peer_links(kind)
            } else {
                Servers::start(kind).map(|s| (s, None))
            }
        })
        .await
        .map_err(|e| format!("starting the servers: {e}"))??;
        Self::around(kind, clients, ttl, servers, peers).await
    }

    /// As [`start`](Self::start), on servers already started (under a clock shim).
    ///
    /// # Errors
    ///
    /// Why the masters could not be provisioned or the proxy did not start.
    pub(super) async fn around(
        kind: SubjectKind,
        clients: usize,
        ttl: Duration,
        servers: Servers,
        peers: Option<PeerLinks>,
    ) -> Result<Self, String> {
        if let Servers::Redis(cluster) = &servers {
            provision(cluster, ttl).await?;
        }
        let proxy = Proxy::start(clients, &servers.ports())
            .await
            .map_err(|e| format!("starting the proxy: {e}"))?;
        let links = Links {
            proxy: Arc::new(proxy),
            servers: servers.len(),
        };
        Ok(Self {
            kind,
            servers,
            links,
            peers,
            ttl,
        })
    }

    /// The TTL, lease or session timeout of the grants.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A new lock client whose traffic goes through proxy row `row`.
    ///
    /// # Errors
    ///
    /// Why the client could not connect.
    pub async fn client(&self, row: usize) -> Result<Arc<dyn LockSubject>, SubjectError> {
        let ports = self.links.row_ports(row);
        let ttl = self.ttl;
        Ok(match self.kind {
            SubjectKind::RedisSingle | SubjectKind::Redlock3 | SubjectKind::Redlock5 => {
                let redlock = redlock(self.links.proxy.urls(row), ttl)
                    .map_err(|e| SubjectError::InvalidArgument(e.to_string()))?;
                Arc::new(RedlockSubject::new(redlock, ttl).fenced())
            }
            SubjectKind::Etcd => {
                let endpoints: Vec<String> = ports
                    .iter()
                    .map(|p| format!("http://127.0.0.1:{p}"))
                    .collect();
                Arc::new(EtcdLock::connect(&endpoints, EtcdOptions::new(ttl)).await?)
            }
            SubjectKind::Zookeeper => {
                Arc::new(ZkLock::connect(&connect_string(&ports), ZkOptions::new(ttl)).await?)
            }
            SubjectKind::PgAdvisory => Arc::new(
                PgAdvisoryLock::connect(&conninfo(ports[0]), PgAdvisoryOptions::new()).await?,
            ),
            SubjectKind::PgLease => {
                Arc::new(PgLeaseLock::connect(&conninfo(ports[0]), PgLeaseOptions::new(ttl)).await?)
            }
        })
    }
}

/// Starts a redis cluster of `n` masters, deployed as the README advises: an append-only file
/// synced every second (a killed master keeps what it acknowledged, as the page cache does).
pub(super) fn redis(n: usize) -> Result<RedisCluster, String> {
    redis_with(n, MasterOptions::new())
}

/// As [`redis`], with `opts` (a binary of their own: the clock shim's wrapper).
pub(super) fn redis_with(n: usize, opts: MasterOptions) -> Result<RedisCluster, String> {
    RedisCluster::start_with(n, opts.persistence(Persistence::AofEverySec))
        .map_err(|e| format!("starting {n} redis masters: {e}"))
}

/// A quorumlock client as the README deploys it: restart protection on, so that a master that
/// restarted stays out of quorums for one TTL.
fn redlock(urls: Vec<String>, ttl: Duration) -> Result<Redlock, quorumlock::ConfigError> {
    Redlock::builder()
        .nodes(urls)
        .node_timeout(REDIS_NODE_TIMEOUT)
        .max_ttl(ttl)
        .restart_protection(true)
        .build()
}

/// Vouches for brand-new masters, which restart protection would otherwise keep out for a TTL.
async fn provision(cluster: &RedisCluster, ttl: Duration) -> Result<(), String> {
    let manager = redlock(cluster.urls(), ttl).map_err(|e| e.to_string())?;
    manager
        .provision()
        .await
        .map_err(|e| format!("provisioning the masters: {e}"))
}
