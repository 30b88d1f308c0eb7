//! An ensemble of ZooKeeper servers (Debian's `zookeeper`), run with the system's Java, each
//! on its own client, quorum and election ports on loopback, with its data in a temporary
//! directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use quorumlock_testkit::free_port;
use tempfile::TempDir;

use super::ports::on_fresh_ports;
use super::process::{locate, RunAs, ServerProcess, Spec};
use super::{probe, ServerError};

/// How long starting waits for every server to serve (a leader elected and followed).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Socket timeout of one `srvr` probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// ZooKeeper's time unit. Sessions may last 2 to 300 ticks (the bounds are set below), so
/// tests can ask for sessions from 400 ms up to a minute.
const TICK: Duration = Duration::from_millis(200);
const MAX_SESSION_TICKS: u32 = 300;
/// Where Debian's packages put the jars (the server's jar lists its dependencies).
const JARS: &[&str] = &["/usr/share/java/zookeeper.jar"];
/// Logs to stderr (our log file) when present; without a binding ZooKeeper logs nothing.
const LOG_BINDING: &str = "/usr/share/java/slf4j-simple.jar";

/// `n` ZooKeeper servers forming one ensemble.
///
/// The server jar is `$QUORUMLOCK_ZOOKEEPER_JAR` if set, else Debian's
/// `/usr/share/java/zookeeper.jar`; Java is `java` on `$PATH`. Every process is killed on drop
/// and the data removed. The tick is 200 ms, so the session timeouts a client may ask for
/// range from 400 ms to 60 s.
#[derive(Debug)]
pub struct ZkEnsemble {
    servers: Vec<ZkServer>,
    // Last: removed after the servers' processes are killed.
    _dir: TempDir,
}

/// One server of a [`ZkEnsemble`].
#[derive(Debug)]
pub struct ZkServer {
    id: usize,
    client_port: u16,
    peer_ports: [u16; 2],
    data_dir: PathBuf,
    process: ServerProcess,
}

impl ZkEnsemble {
    /// Starts `n` servers and waits until each serves (a leader was elected and followed).
    ///
    /// # Errors
    ///
    /// [`ServerError::NotInstalled`] without Java or the server jar; [`ServerError::Exited`]
    /// or [`ServerError::NotReady`] (with the log's tail) when a server does not come up in
    /// 60 s.
    pub fn start(n: usize) -> Result<Self, ServerError> {
        let java = locate("java", "QUORUMLOCK_JAVA", &["java"], &["/usr/bin/java"])?;
        let jar = locate("zookeeper", "QUORUMLOCK_ZOOKEEPER_JAR", &[], JARS)?;
        on_fresh_ports(|| {
            let peers = (0..n)
                .map(|_| Ok([free_port()?, free_port()?]))
                .collect::<Result<Vec<[u16; 2]>, ServerError>>()?;
            Self::start_once(&java, &jar, &peers, None)
        })
    }

    /// Starts `n` servers as [`start`](Self::start) does, server `i` running with group id
    /// `groups[i]` (still as the current user): iptables' `owner` match then tells each
    /// server's packets apart, connections it dialed included, to cut it off from the others.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); [`ServerError::Spawn`] when the group cannot be set (not
    /// root).
    pub fn start_tagged(groups: &[u32]) -> Result<Self, ServerError> {
        let java = locate("java", "QUORUMLOCK_JAVA", &["java"], &["/usr/bin/java"])?;
        let jar = locate("zookeeper", "QUORUMLOCK_ZOOKEEPER_JAR", &[], JARS)?;
        on_fresh_ports(|| {
            let peers = groups
                .iter()
                .map(|_| Ok([free_port()?, free_port()?]))
                .collect::<Result<Vec<[u16; 2]>, ServerError>>()?;
            Self::start_once(&java, &jar, &peers, Some(groups))
        })
    }

    fn start_once(
        java: &Path,
        jar: &Path,
        peer_ports: &[[u16; 2]],
        groups: Option<&[u32]>,
    ) -> Result<Self, ServerError> {
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-zookeeper-")
            .tempdir()
            .map_err(|e| ServerError::io("creating the ZooKeeper directory", e))?;
        let n = peer_ports.len();
        let client_ports = (0..n)
            .map(|_| free_port())
            .collect::<Result<Vec<u16>, _>>()?;
        let members: String = peer_ports
            .iter()
            .enumerate()
            .map(|(j, [quorum, election])| {
                format!("server.{}=127.0.0.1:{quorum}:{election}\n", j + 1)
            })
            .collect();
        let mut classpath = jar.as_os_str().to_owned();
        if Path::new(LOG_BINDING).exists() {
            classpath.push(":");
            classpath.push(LOG_BINDING);
        }
        let mut servers = Vec::with_capacity(n);
        for (i, &client_port) in client_ports.iter().enumerate() {
            let id = i + 1;
            let home = dir.path().join(format!("s{id}"));
            let data_dir = home.join("data");
            std::fs::create_dir_all(&data_dir)
                .map_err(|e| ServerError::io(format!("creating {}", data_dir.display()), e))?;
            write(&data_dir.join("myid"), &format!("{id}\n"))?;
            let config = home.join("zoo.cfg");
            write(&config, &config_text(&data_dir, client_port, &members))?;
            let args: Vec<OsString> = vec![
                // Small heaps and one GC thread: up to a few ensembles share two cores.
                "-Xms32m".into(),
                "-Xmx128m".into(),
                "-XX:+UseSerialGC".into(),
                "-cp".into(),
                classpath.clone(),
                "org.apache.zookeeper.server.quorum.QuorumPeerMain".into(),
                config.into_os_string(),
            ];
            let spec = Spec {
                what: format!("zookeeper {id} on 127.0.0.1:{client_port}"),
                program: java.to_path_buf(),
                args,
                run_as: groups.and_then(|g| g.get(i)).map(|&gid| RunAs {
                    uid: nix::unistd::getuid().as_raw(),
                    gid,
                }),
                log: home.join("server.log"),
                stop_signal: Signal::SIGTERM,
                env: Vec::new(),
            };
            servers.push(ZkServer {
                id,
                client_port,
                peer_ports: peer_ports[i],
                data_dir,
                process: ServerProcess::spawn(spec)?,
            });
        }
        let ensemble = Self { servers, _dir: dir };
        for server in &ensemble.servers {
            server.wait_serving(READY_TIMEOUT)?;
        }
        Ok(ensemble)
    }

    /// The connection string of every server: `127.0.0.1:P1,127.0.0.1:P2,...`.
    pub fn connect_string(&self) -> String {
        connect_string(&self.client_ports())
    }

    /// The client ports of every server (for a fault proxy in front of them).
    pub fn client_ports(&self) -> Vec<u16> {
        self.servers.iter().map(|s| s.client_port).collect()
    }

    /// How many servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether the ensemble has no server.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Every server.
    pub fn servers(&self) -> &[ZkServer] {
        &self.servers
    }

    /// The index of the server that says it leads, `None` when none does now.
    pub fn leader(&self) -> Option<usize> {
        self.servers
            .iter()
            .position(|s| s.mode().is_ok_and(|mode| mode == "leader"))
    }
}

impl std::ops::Index<usize> for ZkEnsemble {
    type Output = ZkServer;

    fn index(&self, i: usize) -> &ZkServer {
        &self.servers[i]
    }
}

impl std::ops::IndexMut<usize> for ZkEnsemble {
    fn index_mut(&mut self, i: usize) -> &mut ZkServer {
        &mut self.servers[i]
    }
}

impl ZkServer {
    /// The server's id in the ensemble (1-based, as in `myid`).
    pub fn id(&self) -> usize {
        self.id
    }

    /// The client port.
    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// The ports it listens on for the others: quorum, then election.
    pub fn peer_ports(&self) -> [u16; 2] {
        self.peer_ports
    }

    /// The data directory (`myid`, the transaction log and snapshots under `version-2/`).
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

    /// The role the server reports (`leader`, `follower`), or why it serves nothing now.
    ///
    /// # Errors
    ///
    /// What the probe met: no answer, or "not currently serving requests".
    pub fn mode(&self) -> Result<String, String> {
        let answer = probe::four_letter(self.client_port, "srvr", PROBE_TIMEOUT)?;
        answer
            .lines()
            .find_map(|line| line.strip_prefix("Mode: "))
            .map(|mode| mode.trim().to_owned())
            .ok_or_else(|| format!("srvr answered {:?}", answer.trim()))
    }

    /// Waits until the server serves clients.
    ///
    /// # Errors
    ///
    /// [`ServerError::NotReady`] on timeout, [`ServerError::Exited`] when the process exits.
    pub fn wait_serving(&self, timeout: Duration) -> Result<(), ServerError> {
        self.process.wait_ready(timeout, || self.mode().map(drop))
    }

    /// Kills the server and starts it again with its data; waits until it serves.
    ///
    /// # Errors
    ///
    /// As [`ZkEnsemble::start`].
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.process.kill()?;
        self.process.start()?;
        self.wait_serving(READY_TIMEOUT)
    }

    /// Kills the server, deletes its transaction log and snapshots (keeping `myid`), and
    /// starts it again: a server that lost its disk. It rejoins as an empty follower, which
    /// ZooKeeper's protocol does not expect of a server that acknowledged writes.
    ///
    /// # Errors
    ///
    /// As [`restart`](Self::restart), and [`ServerError::Io`] if the data cannot be deleted.
    pub fn restart_empty(&mut self) -> Result<(), ServerError> {
        self.process.kill()?;
        let logs = self.data_dir.join("version-2");
        match std::fs::remove_dir_all(&logs) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(ServerError::io(format!("deleting {}", logs.display()), e))
            }
            _ => {}
        }
        self.process.start()?;
        self.wait_serving(READY_TIMEOUT)
    }
}

/// A connection string over the given client ports.
pub fn connect_string(ports: &[u16]) -> String {
    ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn config_text(data_dir: &Path, client_port: u16, members: &str) -> String {
    let tick = TICK.as_millis();
    let max_session = TICK.as_millis() * u128::from(MAX_SESSION_TICKS);
    format!(
        "tickTime={tick}\n\
         initLimit=50\n\
         syncLimit=10\n\
         maxSessionTimeout={max_session}\n\
         dataDir={}\n\
         clientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=srvr,mntr,ruok\n\
         {members}",
        data_dir.display()
    )
}

fn write(path: &Path, text: &str) -> Result<(), ServerError> {
    std::fs::write(path, text)
        .map_err(|e| ServerError::io(format!("writing {}", path.display()), e))
}
