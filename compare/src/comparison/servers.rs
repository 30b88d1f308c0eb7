//! The servers of one subject behind one interface for the faults: pause, crash and restart
//! with the data, restart without it, who leads, and a probe that says whether a server
//! answers. Synchronous, like the kits it wraps: call it from a blocking thread.

use std::time::Duration;

use quorumlock_testkit::RedisCluster;

use super::peers::PeerLinks;
use super::subjects::SubjectKind;
use crate::server::{EtcdCluster, PgServer, ServerProcess, ZkEnsemble};

/// How long a probe waits for a server's answer.
const PROBE: Duration = Duration::from_millis(500);

/// The running servers of a subject.
#[derive(Debug)]
pub enum Servers {
    /// Redis masters (one for `redis-single`).
    Redis(RedisCluster),
    /// An etcd cluster.
    Etcd(EtcdCluster),
    /// A ZooKeeper ensemble.
    Zookeeper(ZkEnsemble),
    /// A PostgreSQL server.
    Postgres(PgServer),
}

impl Servers {
    /// Starts the servers `kind` runs on.
    ///
    /// # Errors
    ///
    /// Why they did not start.
    pub fn start(kind: SubjectKind) -> Result<Self, String> {
        let failed = |e: crate::server::ServerError| format!("{}: {e}", kind.label());
        Ok(match kind {
            SubjectKind::RedisSingle | SubjectKind::Redlock3 | SubjectKind::Redlock5 => {
                Self::Redis(super::testbed::redis(kind.servers())?)
            }
            SubjectKind::Etcd => Self::Etcd(EtcdCluster::start(3).map_err(failed)?),
            SubjectKind::Zookeeper => Self::Zookeeper(ZkEnsemble::start(3).map_err(failed)?),
            SubjectKind::PgAdvisory | SubjectKind::PgLease => {
                Self::Postgres(PgServer::start().map_err(failed)?)
            }
        })
    }

    /// Starts the servers `kind` runs on, with the traffic between etcd or ZooKeeper members
    /// through a proxy that can cut one off (none for the others: they have no members).
    ///
    /// Must run on a blocking thread of a tokio runtime: the proxy's tasks run on it.
    ///
    /// # Errors
    ///
    /// Why they did not start.
    pub fn start_with_peer_links(kind: SubjectKind) -> Result<(Self, Option<PeerLinks>), String> {
        Ok(match kind {
            SubjectKind::Etcd => {
                let (cluster, links) = super::peers::etcd(3)?;
                (Self::Etcd(cluster), Some(links))
            }
            SubjectKind::Zookeeper => {
                let (ensemble, links) = super::peers::zookeeper(3)?;
                (Self::Zookeeper(ensemble), Some(links))
            }
            _ => (Self::start(kind)?, None),
        })
    }

    /// The client port of every server.
    pub fn ports(&self) -> Vec<u16> {
        match self {
            Self::Redis(c) => c.ports(),
            Self::Etcd(c) => c.client_ports(),
            Self::Zookeeper(e) => e.client_ports(),
            Self::Postgres(s) => vec![s.port()],
        }
    }

    /// How many servers.
    pub fn len(&self) -> usize {
        self.ports().len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The server a fault aims at: the leader where one leads, else the first.
    pub fn target(&self) -> usize {
        match self {
            Self::Etcd(c) => c.leader().unwrap_or(0),
            Self::Zookeeper(e) => e.leader().unwrap_or(0),
            _ => 0,
        }
    }

    /// Who leads as server `i` sees it: the index etcd member `i` names leader; for ZooKeeper
    /// `i` itself when it leads, else any other server that says it leads; `None` when it
    /// knows of none or for servers without a leader.
    pub fn leader_seen_by(&self, i: usize) -> Option<usize> {
        match self {
            Self::Etcd(c) => c.leader_seen_by(i),
            Self::Zookeeper(e) => match e[i].mode() {
                Ok(mode) if mode == "leader" => Some(i),
                Ok(_) => e.leader(),
                Err(_) => None,
            },
            _ => None,
        }
    }

    /// A server that does not lead (for a data loss the quorum can survive).
    pub fn follower(&self) -> usize {
        (self.target() + 1) % self.len().max(1)
    }

    /// How the pages name server `i`: `leader m1`, `master 0`, `postgres`.
    pub fn name(&self, i: usize) -> String {
        match self {
            Self::Redis(_) => format!("master {i}"),
            Self::Etcd(c) => {
                let role = if c.leader() == Some(i) {
                    "leader"
                } else {
                    "member"
                };
                format!("{role} {}", c[i].name())
            }
            Self::Zookeeper(e) => {
                let role = e[i].mode().unwrap_or_else(|_| "server".to_owned());
                format!("{role} {}", e[i].id())
            }
            Self::Postgres(_) => "postgres".to_owned(),
        }
    }

    /// The pid of server `i`, if it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        match self {
            Self::Redis(c) => c.get(i).and_then(|m| m.pid()),
            _ => self.process(i).and_then(ServerProcess::pid),
        }
    }

    fn process(&self, i: usize) -> Option<&ServerProcess> {
        match self {
            Self::Redis(_) => None,
            Self::Etcd(c) => c.members().get(i).map(|m| m.process()),
            Self::Zookeeper(e) => e.servers().get(i).map(|s| s.process()),
            Self::Postgres(s) => Some(s.process()),
        }
    }

    /// Whether server `i` answers a request now.
    ///
    /// # Errors
    ///
    /// What the probe met.
    pub fn probe(&self, i: usize) -> Result<(), String> {
        match self {
            Self::Redis(c) => c
                .get(i)
                .ok_or("no such master")?
                .ping(PROBE)
                .map_err(|e| e.to_string()),
            Self::Etcd(c) => {
                if c[i].is_healthy() {
                    Ok(())
                } else {
                    Err("not healthy".to_owned())
                }
            }
            Self::Zookeeper(e) => e[i].mode().map(drop),
            Self::Postgres(s) => s.wait_accepting(PROBE).map_err(|e| e.to_string()),
        }
    }

    /// Pauses server `i` (`SIGSTOP`).
    ///
    /// # Errors
    ///
    /// Why the signal failed.
    pub fn pause(&mut self, i: usize) -> Result<(), String> {
        match self {
            Self::Redis(c) => c.get_mut(i).ok_or("no such master")?.pause().map_err(text),
            Self::Etcd(c) => c[i].process_mut().pause().map_err(text),
            Self::Zookeeper(e) => e[i].process_mut().pause().map_err(text),
            Self::Postgres(s) => s.process_mut().pause().map_err(text),
        }
    }

    /// Resumes server `i` (`SIGCONT`).
    ///
    /// # Errors
    ///
    /// Why the signal failed.
    pub fn resume(&mut self, i: usize) -> Result<(), String> {
        match self {
            Self::Redis(c) => c.get_mut(i).ok_or("no such master")?.resume().map_err(text),
            Self::Etcd(c) => c[i].process_mut().resume().map_err(text),
            Self::Zookeeper(e) => e[i].process_mut().resume().map_err(text),
            Self::Postgres(s) => s.process_mut().resume().map_err(text),
        }
    }

    /// Kills server `i` (`SIGKILL`), leaving its data.
    ///
    /// # Errors
    ///
    /// Why the signal failed.
    pub fn kill(&mut self, i: usize) -> Result<(), String> {
        match self {
            Self::Redis(c) => c.get_mut(i).ok_or("no such master")?.kill().map_err(text),
            Self::Etcd(c) => c[i].process_mut().kill().map_err(text),
            Self::Zookeeper(e) => e[i].process_mut().kill().map_err(text),
            Self::Postgres(s) => s.process_mut().kill().map_err(text),
        }
    }

    /// Starts server `i` again with its data (killing it first if it runs) and waits until it
    /// serves.
    ///
    /// # Errors
    ///
    /// Why it did not come back.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        match self {
            Self::Redis(c) => c
                .get_mut(i)
                .ok_or("no such master")?
                .restart()
                .map_err(text),
            Self::Etcd(c) => c[i].restart().map_err(text),
            Self::Zookeeper(e) => e[i].restart().map_err(text),
            Self::Postgres(s) => s.restart().map_err(text),
        }
    }

    /// The directory server `i` loses in [`restart_empty`](Self::restart_empty), where it
    /// has one.
    pub fn data_dir(&self, i: usize) -> Option<std::path::PathBuf> {
        match self {
            Self::Etcd(c) => c.members().get(i).map(|m| m.data_dir().to_owned()),
            Self::Zookeeper(e) => e.servers().get(i).map(|s| s.data_dir().join("version-2")),
            Self::Redis(_) | Self::Postgres(_) => None,
        }
    }

    /// Kills server `i`, deletes its data and starts it again: a member that lost its disk.
    ///
    /// # Errors
    ///
    /// Why it did not come back (etcd may refuse a member that forgot what it acknowledged).
    pub fn restart_empty(&mut self, i: usize) -> Result<(), String> {
        match self {
            Self::Redis(c) => c
                .get_mut(i)
                .ok_or("no such master")?
                .restart_empty()
                .map_err(text),
            Self::Etcd(c) => c[i].restart_empty().map_err(text),
            Self::Zookeeper(e) => e[i].restart_empty().map_err(text),
            Self::Postgres(_) => Err("a lone PostgreSQL server has no peer to recover from".into()),
        }
    }
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}
