//! Bringing a master up: spawning `redis-server`, waiting until it answers, and starting it
//! again when another process took its port first.

use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::master::{reap, Running, LOG_FILE};
use super::process::{self, Backoff};
use super::resp::Reply;
use super::{port, MasterOptions, RedisMaster, TestingError};

/// How long starting or restarting waits for `PONG`: generous, because CI runs many servers on
/// two shared cores.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the first readiness probe waits for an answer. A local server answers in well under
/// a millisecond; a short first wait matters when something that is not our server (say a proxy
/// that never answers) holds the port, so that our server's exit is noticed soon.
const FIRST_PROBE_TIMEOUT: Duration = Duration::from_millis(50);
/// Probes that time out wait twice as long next time, up to this, for a loaded machine.
const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How many times a server is started when its port turns out to be taken.
const START_ATTEMPTS: u32 = 5;
/// What the server writes to stderr before its log is open (e.g. a bad argument).
pub(super) const STDERR_FILE: &str = "redis.stderr";

/// Why a start attempt failed: a taken port is retried, anything else is final.
pub(super) enum Startup {
    AddrInUse { log_tail: String },
    Failed(TestingError),
}

impl RedisMaster {
    /// Spawns the process without waiting, so that a cluster's servers start in parallel.
    pub(super) fn launch(opts: MasterOptions) -> Result<Self, TestingError> {
        Self::launch_on(opts, port::free_port()?)
    }

    /// Spawns the process on `port` without waiting.
    pub(super) fn launch_on(opts: MasterOptions, port: u16) -> Result<Self, TestingError> {
        let binary = match &opts.binary {
            Some(binary) => binary.clone(),
            None => process::locate_server()?,
        };
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-redis-")
            .tempdir()
            .map_err(|e| TestingError::io("creating a data directory", e))?;
        let canonical_dir = dir
            .path()
            .canonicalize()
            .map_err(|e| TestingError::io("resolving the data directory", e))?;
        let mut master = Self {
            port,
            opts,
            binary,
            canonical_dir,
            log_offset: 0,
            stderr_offset: 0,
            process: Mutex::new(None),
            kit_connections: AtomicU64::new(0),
            dir,
        };
        master.spawn()?;
        Ok(master)
    }

    /// Waits for a launched server, moving it to another port while its port is taken.
    pub(super) fn finish_start(&mut self) -> Result<(), TestingError> {
        self.boot(true)
    }

    /// Spawns `redis-server` on the current port and data directory; its output goes to the
    /// log file, stderr to `redis.stderr` (for errors before the log is open).
    pub(super) fn spawn(&mut self) -> Result<(), TestingError> {
        let dir = self.dir.path();
        let log = dir.join(LOG_FILE);
        let stderr_path = dir.join(STDERR_FILE);
        self.log_offset = process::file_len(&log);
        self.stderr_offset = process::file_len(&stderr_path);
        let stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stderr_path)
            .map_err(|e| TestingError::io(format!("opening {}", stderr_path.display()), e))?;
        let child = Command::new(&self.binary)
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
            .args(["--daemonize", "no", "--dbfilename", "dump.rdb"])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(&log)
            .args(self.opts.persistence.args())
            .args(&self.opts.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::NotFound => TestingError::ServerNotFound {
                    looked_at: self.binary.display().to_string(),
                },
                _ => TestingError::Spawn {
                    binary: self.binary.clone(),
                    source,
                },
            })?;
        *self
            .process
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = Some(Running {
            child,
            paused: false,
        });
        Ok(())
    }

    /// Waits for the spawned server. While its port is taken, starts it again: on a new port
    /// for a fresh server, on the same port (after a pause) for a restart.
    pub(super) fn boot(&mut self, new_port_allowed: bool) -> Result<(), TestingError> {
        let mut attempt = 1;
        let mut pause = Duration::from_millis(100);
        let result = loop {
            match self.poll_ready(READY_TIMEOUT) {
                Ok(()) => break Ok(()),
                Err(Startup::Failed(e)) => break Err(e),
                Err(Startup::AddrInUse { log_tail }) if attempt >= START_ATTEMPTS => {
                    break Err(TestingError::AddrInUse {
                        port: self.port,
                        attempts: attempt,
                        log_tail,
                    })
                }
                Err(Startup::AddrInUse { .. }) => {
                    attempt += 1;
                    if new_port_allowed {
                        self.port = port::free_port()?;
                    } else {
                        std::thread::sleep(pause);
                        pause *= 2;
                    }
                    self.spawn()?;
                }
            }
        };
        if result.is_err() {
            // A server that did not come up is not left running half-started.
            let _ = self.kill();
        }
        result
    }

    /// Polls until our server answers `PONG`, it exits, or `timeout` passes.
    pub(super) fn poll_ready(&self, timeout: Duration) -> Result<(), Startup> {
        let deadline = Instant::now() + timeout;
        let mut backoff = Backoff::new();
        let mut probe_timeout = FIRST_PROBE_TIMEOUT;
        loop {
            {
                let mut slot = self.slot();
                if let Some(status) = reap(&mut slot) {
                    return Err(self.exit_failure(status));
                }
                if slot.is_none() {
                    return Err(Startup::Failed(TestingError::NotRunning {
                        port: self.port,
                    }));
                }
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let last_error = match self.probe(remaining.min(probe_timeout)) {
                Ok(None) => return Ok(()),
                Ok(Some(not_yet)) => not_yet,
                Err(e) => {
                    if e.is_timeout() {
                        probe_timeout = (probe_timeout * 2).min(MAX_PROBE_TIMEOUT);
                    }
                    e.to_string()
                }
            };
            if Instant::now() >= deadline {
                return Err(Startup::Failed(TestingError::NotReady {
                    port: self.port,
                    timeout,
                    last_error,
                    log_tail: self.log_tail(),
                }));
            }
            backoff.sleep();
        }
    }

    /// One readiness check: `None` when our server answers `PONG`, else why not yet.
    fn probe(&self, timeout: Duration) -> Result<Option<String>, TestingError> {
        let mut conn = self.open(timeout)?;
        match conn.call(&["PING"])? {
            Reply::Status(s) if s == "PONG" => {}
            other => return Ok(Some(format!("PING answered {other}"))),
        }
        // Another test's server may hold this port while ours fails to bind it: only a server
        // working in our directory is ours. A server that refuses CONFIG cannot be told apart.
        match conn.call(&["CONFIG", "GET", "dir"])? {
            Reply::Array(items) => match items.get(1) {
                Some(Reply::Bulk(dir))
                    if dir.as_slice() != self.canonical_dir.as_os_str().as_bytes() =>
                {
                    Ok(Some(format!(
                        "port {} is answered by another server (dir {})",
                        self.port,
                        String::from_utf8_lossy(dir)
                    )))
                }
                _ => Ok(None),
            },
            _ => Ok(None),
        }
    }

    fn exit_failure(&self, status: String) -> Startup {
        let log_tail = self.log_tail();
        if log_tail.contains("Address already in use") {
            Startup::AddrInUse { log_tail }
        } else {
            Startup::Failed(TestingError::Exited {
                port: self.port,
                status,
                log_tail,
            })
        }
    }

    /// The current run's last log lines, and its stderr if it wrote any.
    fn log_tail(&self) -> String {
        let log = process::log_tail(&self.dir.path().join(LOG_FILE), self.log_offset);
        let stderr = process::log_tail(&self.dir.path().join(STDERR_FILE), self.stderr_offset);
        match (log.is_empty(), stderr.is_empty()) {
            (true, true) => "(empty)".to_owned(),
            (false, true) => log,
            (true, false) => format!("[stderr]\n{stderr}"),
            (false, false) => format!("{log}\n[stderr]\n{stderr}"),
        }
    }

    /// Deletes the data directory's contents except the logs.
    pub(super) fn wipe(&self) -> Result<(), TestingError> {
        let dir = self.dir.path();
        let context = || format!("wiping {}", dir.display());
        let entries = std::fs::read_dir(dir).map_err(|e| TestingError::io(context(), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| TestingError::io(context(), e))?;
            if entry.file_name() == LOG_FILE || entry.file_name() == STDERR_FILE {
                continue;
            }
            let path = entry.path();
            let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|e| TestingError::io(format!("deleting {}", path.display()), e))?;
        }
        Ok(())
    }
}
