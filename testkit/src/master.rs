//! One `redis-server` process on a free loopback port, with its own data directory.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tempfile::TempDir;

use super::process::{self, Backoff};
use super::resp::{Conn, Reply};
use super::startup::Startup;
use super::{MasterOptions, TestingError};

/// How long [`RedisMaster::stop`] waits after `SIGTERM` before it sends `SIGKILL`.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Socket timeout of [`RedisMaster::command`] and [`RedisMaster::query`].
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`RedisMaster::pause`] waits for the kernel to report the process stopped.
const PAUSE_TIMEOUT: Duration = Duration::from_secs(2);
/// The server's log, inside its data directory; kept by [`RedisMaster::restart_empty`].
pub(super) const LOG_FILE: &str = "redis.log";

/// One `redis-server` process on `127.0.0.1:<free port>` with its own temporary data directory.
///
/// The process is killed and reaped on drop, also when a test panics, and the directory is
/// removed. Only a process that is itself killed by `SIGKILL` leaves servers behind.
///
/// A `RedisMaster` is `Send` and `Sync`: the methods that change the process take `&mut self`,
/// the others (`command`, `wait_ready`, `pid`, ...) can run from several threads.
#[derive(Debug)]
pub struct RedisMaster {
    pub(super) port: u16,
    pub(super) opts: MasterOptions,
    pub(super) binary: PathBuf,
    /// Where `CONFIG GET dir` points, to tell our server from another one on the same port.
    pub(super) canonical_dir: PathBuf,
    /// Where the current run's output starts in the log files, which restarts append to.
    pub(super) log_offset: u64,
    pub(super) stderr_offset: u64,
    pub(super) process: Mutex<Option<Running>>,
    /// Connections this kit opened to the port, for [`RedisMaster::connections_opened`].
    pub(super) kit_connections: AtomicU64,
    // Last, so that it is removed only after `Drop` has killed the process.
    pub(super) dir: TempDir,
}

/// A spawned process and whether it is paused.
#[derive(Debug)]
pub(super) struct Running {
    pub(super) child: Child,
    pub(super) paused: bool,
}

impl RedisMaster {
    /// Starts a server on a free port and waits until it answers `PING`.
    ///
    /// # Errors
    ///
    /// [`TestingError::ServerNotFound`] without a `redis-server` binary, [`TestingError::Exited`]
    /// or [`TestingError::NotReady`] (with the log's tail) when it does not come up within 10 s,
    /// [`TestingError::AddrInUse`] when five ports in a row were taken by the time it bound them.
    pub fn start(opts: MasterOptions) -> Result<Self, TestingError> {
        let mut master = Self::launch(opts)?;
        master.finish_start()?;
        Ok(master)
    }

    /// The TCP port on 127.0.0.1. It stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL to give a client: `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process id, or `None` when no process runs (killed, stopped, or exited by itself).
    /// A paused process still has its pid.
    pub fn pid(&self) -> Option<u32> {
        let mut slot = self.slot();
        reap(&mut slot);
        slot.as_ref().map(|running| running.child.id())
    }

    /// Whether a process runs (paused counts as running).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Whether the process is paused by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        let mut slot = self.slot();
        reap(&mut slot);
        slot.as_ref().is_some_and(|running| running.paused)
    }

    /// The data directory: the AOF (in `appendonlydir/`), `dump.rdb`, and the server's log
    /// `redis.log`. It lives as long as the `RedisMaster`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file, inside [`dir`](Self::dir); restarts append to it.
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    /// The options the server was started with.
    pub fn options(&self) -> &MasterOptions {
        &self.opts
    }

    /// Kills the process with `SIGKILL` and reaps it, like a crash. Nothing is flushed, but
    /// with an AOF the data written so far is already in the page cache and survives.
    /// Does nothing if no process runs.
    ///
    /// # Errors
    ///
    /// [`TestingError::Signal`] or [`TestingError::Io`] if the process cannot be killed or reaped.
    pub fn kill(&mut self) -> Result<(), TestingError> {
        let slot = self
            .process
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(mut running) = slot.take() else {
            return Ok(());
        };
        let pid = running.child.id();
        // SIGKILL before SIGCONT: resuming first would let a paused server run the requests
        // queued on its sockets before it dies.
        let result = running
            .child
            .kill()
            .map_err(|source| TestingError::Signal {
                signal: Signal::SIGKILL.as_str(),
                pid,
                source,
            })
            .and_then(|()| {
                if running.paused {
                    // A dying process needs no SIGCONT; sent anyway so nothing stays stopped.
                    let _ = process::send(pid, Signal::SIGCONT);
                }
                running
                    .child
                    .wait()
                    .map_err(|e| TestingError::io(format!("reaping redis-server pid {pid}"), e))
            });
        if result.is_err() {
            // Keep it, so that `Drop` tries again.
            *slot = Some(running);
        }
        result.map(drop)
    }

    /// Stops the process gracefully with `SIGTERM` (the server flushes its AOF and exits) and
    /// reaps it; a paused process is resumed so that it can act on the signal. If it has not
    /// exited within 10 s, it is killed. Does nothing if no process runs.
    ///
    /// # Errors
    ///
    /// [`TestingError::Signal`] or [`TestingError::Io`] if the process cannot be signalled or
    /// reaped.
    pub fn stop(&mut self) -> Result<(), TestingError> {
        let slot = self
            .process
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        reap(slot);
        let Some(running) = slot.as_mut() else {
            return Ok(());
        };
        let pid = running.child.id();
        process::send(pid, Signal::SIGTERM)?;
        if running.paused {
            process::send(pid, Signal::SIGCONT)?;
            running.paused = false;
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        let mut backoff = Backoff::new();
        while Instant::now() < deadline {
            match running.child.try_wait() {
                Ok(Some(_)) => {
                    *slot = None;
                    return Ok(());
                }
                Ok(None) => backoff.sleep(),
                Err(_) => break,
            }
        }
        self.kill()
    }

    /// Pauses the process with `SIGSTOP`: it keeps its sockets and data but answers nothing, as
    /// in a long GC pause. Returns once the kernel reports the process stopped.
    ///
    /// # Errors
    ///
    /// [`TestingError::NotRunning`] if no process runs, [`TestingError::Signal`] if the signal
    /// fails.
    pub fn pause(&mut self) -> Result<(), TestingError> {
        let running = self.running_mut()?;
        let pid = running.child.id();
        process::send(pid, Signal::SIGSTOP)?;
        running.paused = true;
        process::wait_stopped(pid, PAUSE_TIMEOUT);
        Ok(())
    }

    /// Resumes a paused process with `SIGCONT`; it then answers the requests queued meanwhile.
    /// Harmless on a process that is not paused.
    ///
    /// # Errors
    ///
    /// [`TestingError::NotRunning`] if no process runs, [`TestingError::Signal`] if the signal
    /// fails.
    pub fn resume(&mut self) -> Result<(), TestingError> {
        let running = self.running_mut()?;
        process::send(running.child.id(), Signal::SIGCONT)?;
        running.paused = false;
        Ok(())
    }

    /// Starts the server again on the same port and data directory, killing it first if it
    /// runs, and waits until it answers `PING` (after loading its AOF, if any). What survives
    /// depends on [`Persistence`](super::Persistence).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); [`TestingError::AddrInUse`] if something else took the port
    /// meanwhile and keeps it for about 1.5 s.
    pub fn restart(&mut self) -> Result<(), TestingError> {
        self.kill()?;
        self.spawn()?;
        self.boot(false)
    }

    /// Kills the server, deletes everything in its data directory except its logs, and starts
    /// it again on the same port: a node that lost its data.
    ///
    /// # Errors
    ///
    /// As [`restart`](Self::restart), and [`TestingError::Io`] if the data cannot be deleted.
    pub fn restart_empty(&mut self) -> Result<(), TestingError> {
        self.kill()?;
        self.wipe()?;
        self.spawn()?;
        self.boot(false)
    }

    /// Waits until the server answers `PING` with `PONG`, polling, for at most `timeout`. A
    /// paused server makes this time out; one still loading its AOF is waited for.
    ///
    /// # Errors
    ///
    /// [`TestingError::NotReady`] on timeout, [`TestingError::NotRunning`] if no process runs,
    /// [`TestingError::Exited`] if it exits meanwhile.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), TestingError> {
        self.poll_ready(timeout).map_err(|failure| match failure {
            Startup::AddrInUse { log_tail } => TestingError::AddrInUse {
                port: self.port,
                attempts: 1,
                log_tail,
            },
            Startup::Failed(e) => e,
        })
    }

    /// Sends one `PING` and waits at most `timeout` for `PONG`; unlike
    /// [`wait_ready`](Self::wait_ready) it does not retry.
    ///
    /// # Errors
    ///
    /// [`TestingError::Io`] if it cannot connect or no answer comes in time (then
    /// [`TestingError::is_timeout`] is true), or an unexpected or error reply.
    pub fn ping(&self, timeout: Duration) -> Result<(), TestingError> {
        match self.open(timeout)?.call(&["PING"])? {
            Reply::Status(s) if s == "PONG" => Ok(()),
            other => Err(self.unexpected(other, "PONG")),
        }
    }

    /// Runs one command, e.g. `&["SET", "k", "v"]`, and returns the reply as text: `OK`, `v`,
    /// `1`, `(nil)`, array elements one per line. See [`Reply`] for the rendering. Each socket
    /// operation times out after 10 s, so a paused server makes this slow: use
    /// [`ping`](Self::ping) to probe one.
    ///
    /// # Errors
    ///
    /// [`TestingError::ServerError`] for an error reply, [`TestingError::NotRunning`],
    /// [`TestingError::Io`] or [`TestingError::UnexpectedReply`] otherwise.
    pub fn command(&self, args: &[&str]) -> Result<String, TestingError> {
        self.query(args).map(|reply| reply.to_string())
    }

    /// Like [`command`](Self::command), but returns the parsed [`Reply`].
    ///
    /// # Errors
    ///
    /// As [`command`](Self::command).
    pub fn query(&self, args: &[&str]) -> Result<Reply, TestingError> {
        if !self.is_running() {
            return Err(TestingError::NotRunning { port: self.port });
        }
        match self.open(COMMAND_TIMEOUT)?.call(args)? {
            Reply::Error(message) => Err(TestingError::ServerError {
                port: self.port,
                message,
            }),
            reply => Ok(reply),
        }
    }

    /// How many connections this kit has opened to the master's port so far, over every run
    /// of the process: one per [`command`](Self::command), [`query`](Self::query) and
    /// [`ping`](Self::ping), and the readiness checks of a start or restart.
    ///
    /// Subtracted from the growth of the server's `total_connections_received` (`INFO stats`)
    /// between two readings taken while the same process runs, it gives how many connections
    /// other clients (the code under test) opened in between, closed ones included. The
    /// server's count of connected clients cannot tell that: it still includes a kit
    /// connection for a moment after the kit closed it, until the server has read the close.
    pub fn connections_opened(&self) -> u64 {
        self.kit_connections.load(Ordering::SeqCst)
    }

    /// Opens a kit connection to the master, counting it for
    /// [`connections_opened`](Self::connections_opened).
    pub(super) fn open(&self, timeout: Duration) -> Result<Conn, TestingError> {
        let conn = Conn::open(self.port, timeout)?;
        self.kit_connections.fetch_add(1, Ordering::SeqCst);
        Ok(conn)
    }

    pub(super) fn slot(&self) -> MutexGuard<'_, Option<Running>> {
        // The slot holds no invariant a panic could break.
        self.process.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn running_mut(&mut self) -> Result<&mut Running, TestingError> {
        let port = self.port;
        let slot = self
            .process
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        reap(slot);
        slot.as_mut().ok_or(TestingError::NotRunning { port })
    }

    fn unexpected(&self, reply: Reply, expected: &str) -> TestingError {
        match reply {
            Reply::Error(message) => TestingError::ServerError {
                port: self.port,
                message,
            },
            other => TestingError::UnexpectedReply {
                port: self.port,
                detail: format!("expected {expected}, got {other:?}"),
            },
        }
    }
}

/// Reaps the process if it has exited, emptying the slot; returns its exit status, rendered.
pub(super) fn reap(slot: &mut Option<Running>) -> Option<String> {
    let running = slot.as_mut()?;
    let status = match running.child.try_wait() {
        Ok(None) => return None,
        Ok(Some(status)) => status.to_string(),
        Err(e) => format!("status unknown: {e}"),
    };
    *slot = None;
    Some(status)
}

impl Drop for RedisMaster {
    /// Kills the process (`SIGKILL`, then `SIGCONT` in case it was paused) and reaps it; the
    /// data directory is removed afterwards.
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
