//! One PostgreSQL server (Debian's `postgresql`), on a loopback port, with its cluster in a
//! temporary directory.
//!
//! PostgreSQL refuses to run as root. When this process is root, the server (and `initdb`)
//! run as the `postgres` user that Debian's package creates, and the data directory is handed
//! to that user; otherwise they run as the current user.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::{Uid, User};
use quorumlock_testkit::free_port;
use tempfile::TempDir;

use super::ports::on_fresh_ports;
use super::process::{locate, RunAs, ServerProcess, Spec};
use super::ServerError;

/// How long starting waits for the server to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The database user the clients log in as (`initdb -U`), with `trust` authentication.
pub const PG_USER: &str = "postgres";

/// One PostgreSQL server.
///
/// The programs come from `$QUORUMLOCK_PG_BIN` (a directory) if set, else from the newest
/// `/usr/lib/postgresql/*/bin`. `initdb` runs once per machine and PostgreSQL version into a
/// template under the temporary directory (it takes seconds); each server starts from a copy.
/// The server keeps PostgreSQL's defaults (`fsync` on, `synchronous_commit` on). The process
/// group is killed on drop and the data removed.
#[derive(Debug)]
pub struct PgServer {
    port: u16,
    data_dir: PathBuf,
    process: ServerProcess,
    // Last: removed after the process group is killed.
    _dir: TempDir,
}

impl PgServer {
    /// Starts a server on a free port and waits until it accepts connections.
    ///
    /// # Errors
    ///
    /// [`ServerError::NotInstalled`] without PostgreSQL's programs, [`ServerError::Spawn`]
    /// when running as root without a `postgres` user, [`ServerError::Exited`] or
    /// [`ServerError::NotReady`] (with the log's tail) when it does not come up in 30 s.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with_env(&[])
    }

    /// As [`start`](Self::start), with `env` added to the server's environment (and so to
    /// every backend it forks), on every start and restart: a clock shim's `LD_PRELOAD`.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_with_env(env: &[(OsString, OsString)]) -> Result<Self, ServerError> {
        let bin = bin_dir()?;
        let run_as = run_as()?;
        let template = template(&bin, run_as)?;
        on_fresh_ports(|| Self::start_once(&bin, run_as, &template, env))
    }

    fn start_once(
        bin: &Path,
        run_as: Option<RunAs>,
        template: &Path,
        env: &[(OsString, OsString)],
    ) -> Result<Self, ServerError> {
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-postgres-")
            .tempdir()
            .map_err(|e| ServerError::io("creating the PostgreSQL directory", e))?;
        let data_dir = dir.path().join("data");
        // `cp -a` keeps the owner and the 0700 mode PostgreSQL insists on.
        run(
            Command::new("cp").arg("-a").arg(template).arg(&data_dir),
            "copying the template",
        )?;
        if let Some(user) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid))
                .map_err(|e| ServerError::io("handing the directory to the postgres user", e))?;
        }
        let port = free_port()?;
        let args: Vec<OsString> = vec![
            "-D".into(),
            data_dir.clone().into_os_string(),
            "-p".into(),
            port.to_string().into(),
            "-c".into(),
            "listen_addresses=127.0.0.1".into(),
            // No Unix socket: the default directory belongs to the system's own cluster.
            "-c".into(),
            "unix_socket_directories=".into(),
            "-c".into(),
            "max_connections=200".into(),
        ];
        let spec = Spec {
            what: format!("postgres on 127.0.0.1:{port}"),
            program: bin.join("postgres"),
            args,
            run_as,
            log: dir.path().join("server.log"),
            stop_signal: Signal::SIGINT,
            env: env.to_vec(),
        };
        let server = Self {
            port,
            data_dir,
            process: ServerProcess::spawn(spec)?,
            _dir: dir,
        };
        server.wait_accepting(READY_TIMEOUT)?;
        Ok(server)
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A `tokio-postgres` connection string: `host=127.0.0.1 port=PORT user=postgres
    /// dbname=postgres`.
    pub fn conninfo(&self) -> String {
        conninfo(self.port)
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The process group: pid, state, log tail.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }

    /// The process group, to pause, resume, kill or stop it. A pause stops the postmaster and
    /// every backend.
    pub fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// Waits until the server accepts connections.
    ///
    /// # Errors
    ///
    /// [`ServerError::NotReady`] on timeout, [`ServerError::Exited`] when the process exits.
    pub fn wait_accepting(&self, timeout: Duration) -> Result<(), ServerError> {
        let connect = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        self.process.wait_ready(timeout, || {
            // A TCP connect is not enough (the postmaster listens before recovery ends): the
            // startup handshake is, and it needs no client library here.
            probe_startup(connect).map_err(|e| format!("startup handshake: {e}"))
        })
    }

    /// Kills the server group and starts it again on its data (crash recovery replays the
    /// WAL); waits until it accepts connections.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.process.kill()?;
        self.process.start()?;
        self.wait_accepting(READY_TIMEOUT)
    }
}

/// A `tokio-postgres` connection string for a server of this kit on `port`.
pub fn conninfo(port: u16) -> String {
    format!("host=127.0.0.1 port={port} user={PG_USER} dbname=postgres connect_timeout=5")
}

/// Sends a protocol-3 startup message and reads the first answer: `R` (authentication, here
/// "ok" under trust) means the server accepts connections; `E` carries why not yet ("the
/// database system is starting up").
fn probe_startup(addr: std::net::SocketAddr) -> Result<(), String> {
    use std::io::{Read, Write};
    let timeout = Duration::from_secs(1);
    let mut stream =
        std::net::TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    body.extend_from_slice(&196_608_u32.to_be_bytes()); // protocol 3.0
    for (key, value) in [("user", PG_USER), ("database", "postgres")] {
        body.extend_from_slice(key.as_bytes());
        body.push(0);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let len = u32::try_from(body.len() + 4).map_err(|e| e.to_string())?;
    let mut message = len.to_be_bytes().to_vec();
    message.extend_from_slice(&body);
    stream.write_all(&message).map_err(|e| e.to_string())?;
    let mut answer = [0_u8; 512];
    let n = stream.read(&mut answer).map_err(|e| e.to_string())?;
    match answer.first() {
        Some(b'R') => Ok(()),
        Some(b'E') => Err(String::from_utf8_lossy(&answer[..n]).replace('\0', " ")),
        _ => Err(format!("unexpected answer {:?}", &answer[..n])),
    }
}

/// `$QUORUMLOCK_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin` with a `postgres`.
fn bin_dir() -> Result<PathBuf, ServerError> {
    if let Some(dir) = std::env::var_os("QUORUMLOCK_PG_BIN").filter(|v| !v.is_empty()) {
        return locate("postgresql", "QUORUMLOCK_PG_BIN", &[], &[]).map(|_| PathBuf::from(dir));
    }
    let versions = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((major, bin))
        });
    versions
        .max_by_key(|(major, _)| *major)
        .map(|(_, bin)| bin)
        .ok_or(ServerError::NotInstalled {
            server: "postgresql",
            looked_at: "$QUORUMLOCK_PG_BIN and /usr/lib/postgresql/*/bin/postgres".to_owned(),
        })
}

/// The `postgres` user when this process is root, else nobody (run as ourselves).
fn run_as() -> Result<Option<RunAs>, ServerError> {
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    let user = User::from_name(PG_USER)
        .ok()
        .flatten()
        .ok_or_else(|| ServerError::Spawn {
            what: "postgres".to_owned(),
            detail: "PostgreSQL refuses to run as root, and there is no `postgres` user to run it \
                 as (Debian's postgresql package creates it)"
                .to_owned(),
        })?;
    Ok(Some(RunAs {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    }))
}

/// The initialised cluster every server copies, made once per machine, PostgreSQL binary
/// directory and user: `initdb` costs seconds on a loaded machine, a copy a fraction of one.
fn template(bin: &Path, run_as: Option<RunAs>) -> Result<PathBuf, ServerError> {
    static TEMPLATE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| make_template(bin, run_as).map_err(|e| e.to_string()))
        .clone()
        .map_err(|detail| ServerError::Spawn {
            what: "initdb".to_owned(),
            detail,
        })
}

fn make_template(bin: &Path, run_as: Option<RunAs>) -> Result<PathBuf, ServerError> {
    let tag: String = bin
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let uid = run_as.map_or_else(|| Uid::effective().as_raw(), |u| u.uid);
    let path = std::env::temp_dir().join(format!("quorumlock-pg-template{tag}-{uid}"));
    if path.join("PG_VERSION").is_file() {
        return Ok(path);
    }
    // Made under a name of this process and renamed into place, so that concurrent test
    // processes never copy a half-made template.
    let partial = std::env::temp_dir().join(format!(
        "quorumlock-pg-template{tag}-{uid}.{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&partial);
    let mut initdb = Command::new(bin.join("initdb"));
    initdb.arg("-D").arg(&partial).args([
        "-A",
        "trust",
        "-U",
        PG_USER,
        "-E",
        "UTF8",
        "--no-locale",
        "--no-sync",
    ]);
    if let Some(user) = run_as {
        use std::os::unix::process::CommandExt;
        initdb.uid(user.uid).gid(user.gid);
    }
    run(&mut initdb, "initdb")?;
    match std::fs::rename(&partial, &path) {
        Ok(()) => Ok(path),
        // Another process won the race; its template is as good.
        Err(_) if path.join("PG_VERSION").is_file() => {
            let _ = std::fs::remove_dir_all(&partial);
            Ok(path)
        }
        Err(e) => Err(ServerError::io(
            format!("moving the template to {}", path.display()),
            e,
        )),
    }
}

/// Runs a command to completion; its output goes into the error when it fails.
fn run(command: &mut Command, what: &str) -> Result<(), ServerError> {
    let output = command.output().map_err(|e| ServerError::Spawn {
        what: what.to_owned(),
        detail: e.to_string(),
    })?;
    if output.status.success() {
        return Ok(());
    }
    Err(ServerError::Exited {
        what: what.to_owned(),
        status: output.status.to_string(),
        log_tail: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    })
}
