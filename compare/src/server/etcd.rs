//! A cluster of `etcd` members (Debian's `etcd-server`), each on its own client and peer port
//! on loopback, with its data in a temporary directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use quorumlock_testkit::free_port;
use tempfile::TempDir;

use super::ports::on_fresh_ports;
use super::process::{locate, RunAs, ServerProcess, Spec};
use super::{probe, ServerError};

/// How long starting waits for every member to report healthy (a leader elected): generous,
/// for two shared cores.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Socket timeout of one health or status probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// `n` etcd members forming one cluster.
///
/// The binary is `$QUORUMLOCK_ETCD` if set, else `etcd` on `$PATH`, else `/usr/bin/etcd`.
/// Members keep etcd's default timing (heartbeat 100 ms, election timeout 1 s), so a lease's
/// TTL is at least 2 s (etcd raises shorter ones to 1.5 election timeouts, rounded up). Every
/// process is killed on drop and the data removed.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdMember>,
    // Last: removed after the members' processes are killed.
    _dir: TempDir,
}

/// One member of an [`EtcdCluster`].
#[derive(Debug)]
pub struct EtcdMember {
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    process: ServerProcess,
}

impl EtcdCluster {
    /// Starts `n` members and waits until each reports healthy (the cluster has a leader).
    ///
    /// # Errors
    ///
    /// [`ServerError::NotInstalled`] without `etcd`; [`ServerError::Exited`] or
    /// [`ServerError::NotReady`] (with the log's tail) when a member does not come up in 30 s.
    pub fn start(n: usize) -> Result<Self, ServerError> {
        let binary = locate("etcd", "QUORUMLOCK_ETCD", &["etcd"], &["/usr/bin/etcd"])?;
        on_fresh_ports(|| {
            let peers = (0..n)
                .map(|_| free_port())
                .collect::<Result<Vec<u16>, _>>()?;
            Self::start_once(&binary, &peers, None)
        })
    }

    /// Starts `n` members as [`start`](Self::start) does, member `i` running with group id
    /// `groups[i]` (still as the current user): iptables' `owner` match then tells each
    /// member's packets apart, connections it dialed included, to cut it off from the others.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); [`ServerError::Spawn`] when the group cannot be set (not
    /// root).
    pub fn start_tagged(groups: &[u32]) -> Result<Self, ServerError> {
        let binary = locate("etcd", "QUORUMLOCK_ETCD", &["etcd"], &["/usr/bin/etcd"])?;
        on_fresh_ports(|| {
            let peers = groups
                .iter()
                .map(|_| free_port())
                .collect::<Result<Vec<u16>, _>>()?;
            Self::start_once(&binary, &peers, Some(groups))
        })
    }

    fn start_once(
        binary: &Path,
        peer_ports: &[u16],
        groups: Option<&[u32]>,
    ) -> Result<Self, ServerError> {
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-etcd-")
            .tempdir()
            .map_err(|e| ServerError::io("creating the etcd directory", e))?;
        let ports = peer_ports
            .iter()
            .map(|&peer| Ok((free_port()?, peer)))
            .collect::<Result<Vec<(u16, u16)>, ServerError>>()?;
        let initial_cluster = peer_ports
            .iter()
            .enumerate()
            .map(|(i, peer)| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        // One token per cluster: members of another test's cluster can never join this one.
        let token = dir
            .path()
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| "quorumlock".to_owned());
        let mut members = Vec::with_capacity(ports.len());
        for (i, &(client_port, peer_port)) in ports.iter().enumerate() {
            let name = format!("m{i}");
            let data_dir = dir.path().join(&name);
            let client_url = format!("http://127.0.0.1:{client_port}");
            let peer_url = format!("http://127.0.0.1:{peer_port}");
            let args: Vec<OsString> = [
                "--name",
                &name,
                "--data-dir",
                &data_dir.to_string_lossy(),
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
                "--initial-cluster",
                &initial_cluster,
                // Ignored once the member has data: a restart rejoins with what it kept.
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                &token,
                "--logger",
                "zap",
                "--log-outputs",
                "stderr",
            ]
            .iter()
            .map(OsString::from)
            .collect();
            let spec = Spec {
                what: format!("etcd {name} on 127.0.0.1:{client_port}"),
                program: binary.to_path_buf(),
                args,
                run_as: groups.and_then(|g| g.get(i)).map(|&gid| RunAs {
                    uid: nix::unistd::getuid().as_raw(),
                    gid,
                }),
                log: dir.path().join(format!("{name}.log")),
                stop_signal: Signal::SIGTERM,
                env: Vec::new(),
            };
            members.push(EtcdMember {
                name,
                client_port,
                peer_port,
                data_dir,
                process: ServerProcess::spawn(spec)?,
            });
        }
        let cluster = Self { members, _dir: dir };
        for member in &cluster.members {
            member.wait_healthy(READY_TIMEOUT)?;
        }
        Ok(cluster)
    }

    /// The client URLs of every member, `http://127.0.0.1:PORT`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdMember::endpoint).collect()
    }

    /// The client ports of every member (for a fault proxy in front of them).
    pub fn client_ports(&self) -> Vec<u16> {
        self.members.iter().map(|m| m.client_port).collect()
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Every member.
    pub fn members(&self) -> &[EtcdMember] {
        &self.members
    }

    /// Member `i`, to pause, kill or restart it.
    pub fn member_mut(&mut self, i: usize) -> Option<&mut EtcdMember> {
        self.members.get_mut(i)
    }

    /// The index of the member that member `i` names as leader, `None` when it names none or
    /// does not answer.
    pub fn leader_seen_by(&self, i: usize) -> Option<usize> {
        let leader_id = self.members.get(i)?.status().ok()?.1?;
        self.members
            .iter()
            .position(|m| m.status().is_ok_and(|(own, _)| own == leader_id))
    }

    /// The index of the member the running, unpaused members name as leader, `None` when
    /// none answers or they name none.
    pub fn leader(&self) -> Option<usize> {
        self.members
            .iter()
            .filter(|m| m.process.is_running() && !m.process.is_paused())
            .find_map(|m| m.status().ok().and_then(|(_, leader)| leader))
            .and_then(|leader_id| {
                self.members.iter().position(|m| {
                    m.process.is_running()
                        && !m.process.is_paused()
                        && m.status().is_ok_and(|(own, _)| own == leader_id)
                })
            })
    }
}

impl std::ops::Index<usize> for EtcdCluster {
    type Output = EtcdMember;

    fn index(&self, i: usize) -> &EtcdMember {
        &self.members[i]
    }
}

impl std::ops::IndexMut<usize> for EtcdCluster {
    fn index_mut(&mut self, i: usize) -> &mut EtcdMember {
        &mut self.members[i]
    }
}

impl EtcdMember {
    /// The member's name in the cluster (`m0`, `m1`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The client port.
    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// The port it listens on for its peers.
    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }

    /// The data directory (its `member/` holds the WAL and the database).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The process: pid, state, log tail.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }

    /// The process, to pause, resume, kill or stop it.
    pub fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// Whether the member reports healthy now (it sees a leader and can serve).
    pub fn is_healthy(&self) -> bool {
        self.health().is_ok()
    }

    /// Waits until the member reports healthy.
    ///
    /// # Errors
    ///
    /// [`ServerError::NotReady`] on timeout, [`ServerError::Exited`] when the process exits.
    pub fn wait_healthy(&self, timeout: Duration) -> Result<(), ServerError> {
        self.process.wait_ready(timeout, || self.health())
    }

    /// Kills the member and starts it again with its data; waits until it is healthy.
    ///
    /// # Errors
    ///
    /// As [`EtcdCluster::start`].
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.process.kill()?;
        self.process.start()?;
        self.wait_healthy(READY_TIMEOUT)
    }

    /// Kills the member, deletes its data, and starts it again with the same name and
    /// cluster: a member that lost its disk. etcd does not expect this (the others remember
    /// entries it no longer has); the member may refuse to run, and the error then says how.
    ///
    /// # Errors
    ///
    /// As [`restart`](Self::restart), and [`ServerError::Io`] if the data cannot be deleted.
    pub fn restart_empty(&mut self) -> Result<(), ServerError> {
        self.process.kill()?;
        match std::fs::remove_dir_all(&self.data_dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(ServerError::io(
                    format!("deleting {}", self.data_dir.display()),
                    e,
                ))
            }
            _ => {}
        }
        self.process.start()?;
        self.wait_healthy(READY_TIMEOUT)
    }

    fn health(&self) -> Result<(), String> {
        let body = probe::http(self.client_port, "GET", "/health", "", PROBE_TIMEOUT)?;
        if body.contains("\"health\":\"true\"") {
            Ok(())
        } else {
            Err(format!("/health answered {body}"))
        }
    }

    /// This member's id and the leader it knows of (ids as etcd prints them, decimal).
    fn status(&self) -> Result<(String, Option<String>), String> {
        let body = probe::http(
            self.client_port,
            "POST",
            "/v3/maintenance/status",
            "{}",
            PROBE_TIMEOUT,
        )?;
        let value: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("status {body:?}: {e}"))?;
        let field = |v: &serde_json::Value| v.as_str().map(str::to_owned);
        let own = field(&value["header"]["member_id"])
            .ok_or_else(|| format!("status without member_id: {body}"))?;
        let leader = field(&value["leader"]).filter(|id| id != "0");
        Ok((own, leader))
    }
}
