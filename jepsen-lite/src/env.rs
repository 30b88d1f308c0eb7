//! The environment of one run: the masters, the fault proxy, the protected resource, the
//! client processes and the nemesis, started together and stopped together.
//!
//! Everything started here is owned by [`Env`] and stopped when it is dropped: on success, on
//! error, and when the run future is dropped on Ctrl-C (clients are killed on drop, masters by
//! the test kit, the proxy's tasks aborted, paused processes resumed or killed, iptables rules
//! deleted, clocks reset).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use quorumlock_testkit::{Persistence, Proxy};
use rand::SeedableRng;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use crate::client::{ClientConfig, Command, CycleSpec, Note};
use crate::clockshim::Clocks;
use crate::cluster::Masters;
use crate::history::Event;
use crate::nemesis::{signal, Fault, Nemesis, Targets};
use crate::resource::{self, Register};
use crate::scenario::Scenario;
use crate::verdict::KeyLifetimes;

/// The error of a run that could not be carried out.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// A client process seen from the controller.
pub struct ClientHandle {
    child: Child,
    /// `None` once closed by [`ClientHandle::exit`].
    stdin: Option<ChildStdin>,
    notes: mpsc::UnboundedReceiver<Note>,
    /// Its OS pid.
    pub pid: u32,
    /// Its history file.
    pub history: PathBuf,
}

impl ClientHandle {
    /// Sends one command.
    ///
    /// # Errors
    ///
    /// When the client's stdin is closed.
    pub async fn send(&mut self, cmd: &Command) -> Result<(), Error> {
        let mut line = serde_json::to_vec(cmd)?;
        line.push(b'\n');
        let stdin = self.stdin.as_mut().ok_or("the client's stdin is closed")?;
        stdin.write_all(&line).await?;
        stdin.flush().await?;
        Ok(())
    }

    /// Waits for the note `name`, skipping others.
    ///
    /// # Errors
    ///
    /// When the client exits or sends no such note in time.
    pub async fn wait(&mut self, name: &str, within: Duration) -> Result<Note, Error> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.notes.recv()).await {
                Ok(Some(n)) if n.note == name => return Ok(n),
                Ok(Some(_)) => {}
                Ok(None) => {
                    return Err(format!("client {} exited waiting for {name}", self.pid).into())
                }
                Err(_) => {
                    return Err(
                        format!("client {} sent no {name} within {within:?}", self.pid).into(),
                    )
                }
            }
        }
    }

    /// Sends a signal to the process.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        signal(self.pid, sig);
    }

    /// Whether the process has exited (crashed on purpose, or otherwise).
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Asks the client to exit, closes its stdin and waits a little for it.
    ///
    /// Closing matters: the client reads stdin on a blocking thread that its runtime waits for
    /// when it shuts down, so with the pipe left open every client sat out the whole wait below
    /// (3 s each, 18 s at the end of every composed run).
    pub async fn exit(&mut self) {
        let _ = self.send(&Command::Exit).await;
        self.stdin = None;
        let _ = tokio::time::timeout(Duration::from_secs(3), self.child.wait()).await;
    }

    /// Whether the kernel reports the process stopped.
    pub fn is_stopped(&self) -> bool {
        crate::evidence::process_stopped(self.pid).is_ok()
    }
}

/// Everything one run started.
pub struct Env {
    /// The scenario.
    pub sc: Scenario,
    /// The masters.
    pub masters: Masters,
    /// The fault proxy (one link per client and master).
    pub proxy: Proxy,
    /// The protected resource.
    pub resource: resource::Server,
    /// The client processes, by number.
    pub clients: Vec<ClientHandle>,
    /// Every client process that was started, crashed ones included: their histories.
    pub histories: Vec<PathBuf>,
    /// The nemesis: faults, their history and their evidence.
    pub nemesis: Nemesis,
    /// The run's directory.
    pub dir: PathBuf,
    /// The run's seeded randomness (the generator's draws).
    pub rng: rand::rngs::StdRng,
    /// What the key sampler read during a random run (see [`crate::key_sampler`]).
    pub samples: Vec<Event>,
    progress: Option<ProgressBar>,
    configs: Vec<ClientConfig>,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.nemesis.abandon(&self.masters.ports());
        for c in &self.clients {
            c.signal(nix::sys::signal::Signal::SIGKILL);
            c.signal(nix::sys::signal::Signal::SIGCONT);
        }
        // Masters are killed by their own Drop, paused ones included.
    }
}

impl Env {
    /// Starts the masters (their persistence mixed for a composed run), the proxy, the
    /// resource and the clients, and waits until every client is warm.
    ///
    /// # Errors
    ///
    /// When a process cannot be started or a client cannot warm up.
    pub async fn start(
        sc: &Scenario,
        seed: u64,
        dir: &Path,
        clocks: Option<&Clocks>,
        progress: Option<ProgressBar>,
    ) -> Result<Self, Error> {
        let masters = tokio::task::block_in_place(|| {
            if sc.mixed_persistence() {
                Masters::mixed(&mixed_persistence(sc.nodes))
            } else {
                Masters::uniform(sc.nodes, sc.persistence)
            }
        })?;
        if let Some(clocks) = clocks {
            for port in masters.ports() {
                clocks.reset(port)?;
            }
        }
        let proxy = Proxy::start(sc.clients, &masters.ports()).await?;
        let resource = resource::Server::start().await?;
        let mut env = Self {
            sc: sc.clone(),
            masters,
            proxy,
            resource,
            clients: Vec::new(),
            histories: Vec::new(),
            nemesis: Nemesis::new(clocks.cloned(), Duration::from_millis(sc.ttl_ms)),
            dir: dir.to_path_buf(),
            rng: rand::rngs::StdRng::seed_from_u64(seed),
            samples: Vec::new(),
            progress,
            configs: Vec::new(),
        };
        for c in 0..sc.clients {
            let cfg = ClientConfig {
                id: u32::try_from(c).unwrap_or(0),
                nodes: env.proxy.urls(c),
                resource_addr: env.resource.addr,
                history: dir.join(format!("history-{c}.jsonl")),
                ttl_ms: sc.ttl_ms,
                node_timeout_ms: sc.node_timeout_ms,
                retry_delay_ms: sc.retry_delay_ms,
                register: if sc.fenced {
                    Register::Fenced
                } else {
                    Register::Unfenced
                },
                fencing: sc.fenced,
                restart_protection: sc.protection,
                mutation: sc.mutation.map(str::to_string),
                seed: seed.wrapping_add(c as u64),
                provision: true,
                generation: 0,
            };
            env.histories.push(cfg.history.clone());
            env.clients.push(spawn_client(&cfg, dir).await?);
            env.configs.push(cfg);
        }
        env.phase("starting clients");
        for c in 0..env.clients.len() {
            let ready = env.wait(c, "ready").await?;
            if !ready.ok {
                return Err(format!("client {c} could not warm up: {}", ready.detail).into());
            }
        }
        Ok(env)
    }

    /// Starts client `c` again after it crashed, with a history file of its own (its number
    /// stays: the checker sees one process that crashed and came back). It does not provision
    /// the masters again (that would reset the restart markers of a quarantined master).
    ///
    /// # Errors
    ///
    /// When the process cannot be started.
    pub async fn respawn(&mut self, c: usize) -> Result<(), Error> {
        let generation = self.histories.len();
        let mut cfg = self.configs[c].clone();
        cfg.history = self.dir.join(format!("history-{c}-{generation}.jsonl"));
        cfg.seed = cfg.seed.wrapping_add(1_000_003 * generation as u64);
        cfg.provision = false;
        cfg.generation += 1;
        self.histories.push(cfg.history.clone());
        self.clients[c] = spawn_client(&cfg, &self.dir).await?;
        self.configs[c] = cfg;
        Ok(())
    }

    /// The lock TTL.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.sc.ttl_ms)
    }

    /// Shows `msg` on the progress line.
    pub fn phase(&self, msg: &str) {
        if let Some(p) = &self.progress {
            p.set_message(format!("{}: {msg}", self.sc.name));
        }
    }

    /// The client pids, by number.
    pub fn pids(&self) -> Vec<u32> {
        self.clients.iter().map(|c| c.pid).collect()
    }

    /// Injects `fault` (see [`Nemesis::inject`]).
    ///
    /// # Errors
    ///
    /// When the fault cannot be put in place.
    pub fn inject(&mut self, fault: &Fault) -> Result<(), Error> {
        let pids = self.pids();
        let mut t = Targets {
            masters: &mut self.masters,
            proxy: &self.proxy,
            clients: &pids,
        };
        self.nemesis.inject(&mut t, fault)
    }

    /// Runs `f` on the nemesis with its targets.
    ///
    /// # Errors
    ///
    /// As `f`.
    pub fn with_nemesis<T>(
        &mut self,
        f: impl FnOnce(&mut Nemesis, &mut Targets<'_>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let pids = self.pids();
        let mut t = Targets {
            masters: &mut self.masters,
            proxy: &self.proxy,
            clients: &pids,
        };
        f(&mut self.nemesis, &mut t)
    }

    /// Every fault lifted, `heal` in the history.
    ///
    /// # Errors
    ///
    /// As [`Nemesis::heal`].
    pub fn heal(&mut self) -> Result<(), Error> {
        self.with_nemesis(|n, t| n.heal(t))
    }

    /// Every fault lifted without a `heal` event: the end of a run, which asks no client for
    /// liveness after it.
    ///
    /// # Errors
    ///
    /// As [`Nemesis::lift`].
    pub fn lift_faults(&mut self) -> Result<(), Error> {
        self.with_nemesis(|n, t| n.lift(t, false))?;
        for c in &self.clients {
            c.signal(nix::sys::signal::Signal::SIGCONT);
        }
        Ok(())
    }

    /// A scripted cycle on resource `resource` with the scenario's defaults.
    pub fn spec(&self, resource: &str) -> CycleSpec {
        CycleSpec {
            resource: resource.to_string(),
            acquire_deadline_ms: 1000,
            access: true,
            release: true,
            min_remaining_ms: Some(self.sc.ttl_ms / 4),
            keep_alive: self.sc.keep_alive,
            ..CycleSpec::default()
        }
    }

    /// Has client `c` run one cycle.
    ///
    /// # Errors
    ///
    /// When the client is gone.
    pub async fn cycle(&mut self, c: usize, spec: CycleSpec) -> Result<(), Error> {
        self.clients[c].send(&Command::Cycle(spec)).await
    }

    /// Waits for client `c`'s note `note`, for at most three TTLs and ten seconds.
    ///
    /// # Errors
    ///
    /// When it does not come.
    pub async fn wait(&mut self, c: usize, note: &str) -> Result<Note, Error> {
        let within = self.ttl() * 3 + Duration::from_secs(10);
        self.clients[c].wait(note, within).await
    }

    /// The lock keys of the run's resources, with the resource each locks (the warm-up keys
    /// left out), for the key sampler.
    pub fn resource_keys(&self) -> Vec<(String, String)> {
        self.sc
            .resources()
            .into_iter()
            .map(|r| (format!("quorumlock:{r}"), r))
            .collect()
    }

    /// The lock keys a run uses (fence counters and epoch markers live on purpose), with the
    /// resource each locks.
    fn lock_keys(&self) -> Vec<(String, String)> {
        self.sc
            .resources()
            .into_iter()
            .chain((0..self.clients.len()).map(|c| format!("warmup-{c}")))
            .map(|r| (format!("quorumlock:{r}"), r))
            .collect()
    }

    /// How many of each resource's lock keys are still on the running, unpaused masters, for
    /// the resources that have some.
    fn lock_keys_left(&self) -> BTreeMap<String, usize> {
        let mut left = BTreeMap::new();
        let keys = self.lock_keys();
        for m in self
            .masters
            .iter()
            .filter(|m| m.is_running() && !m.is_paused())
        {
            for (key, resource) in &keys {
                if m.command(&["EXISTS", key.as_str()])
                    .is_ok_and(|reply| reply.trim() == "1")
                {
                    *left.entry(resource.clone()).or_insert(0) += 1;
                }
            }
        }
        left
    }

    /// After the faults healed: how long until no lock key is left on any master, by resource
    /// (when each resource's keys were last seen), polled for at most one TTL and a grace of
    /// half a second (a key set by a late write, a cleanup that never ran). `Err` with the keys
    /// left for a resource whose keys outlive that.
    pub async fn orphan_lifetime(&self, healed: Instant) -> KeyLifetimes {
        let limit = self.ttl() + Duration::from_millis(500);
        let mut lifetimes = KeyLifetimes::new();
        loop {
            let left = tokio::task::block_in_place(|| self.lock_keys_left());
            if left.is_empty() {
                return lifetimes;
            }
            let elapsed = healed.elapsed();
            for (resource, n) in left {
                let lifetime = if elapsed > limit { Err(n) } else { Ok(elapsed) };
                lifetimes.insert(resource, lifetime);
            }
            if elapsed > limit {
                return lifetimes;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Orphans: lock keys without a TTL, or with more left than the lock TTL.
    pub fn orphan_keys(&self) -> usize {
        let keys = self.lock_keys();
        let mut orphans = 0;
        for m in self.masters.iter() {
            if !m.is_running() || m.is_paused() {
                continue;
            }
            for (key, _) in &keys {
                // -2: no key.
                let pttl: i64 = m
                    .command(&["PTTL", key.as_str()])
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(-2);
                if pttl == -1 || pttl > i64::try_from(self.sc.ttl_ms).unwrap_or(i64::MAX) {
                    orphans += 1;
                }
            }
        }
        orphans
    }
}

/// The persistence of each master of a composed run, so that every restart kind has a node to
/// act on: no AOF (an RDB snapshot), an AOF fsynced every second (power loss), an AOF fsynced
/// always, in turn.
pub fn mixed_persistence(nodes: usize) -> Vec<Persistence> {
    const KINDS: [Persistence; 3] = [
        Persistence::None,
        Persistence::AofEverySec,
        Persistence::AofAlways,
    ];
    (0..nodes).map(|n| KINDS[n % KINDS.len()]).collect()
}

async fn spawn_client(cfg: &ClientConfig, dir: &Path) -> Result<ClientHandle, Error> {
    // Through /proc: a rebuild that replaces the binary during a long matrix (another
    // `cargo build`) must not make the next client spawn fail; the running inode stays valid.
    let proc_exe = Path::new("/proc/self/exe");
    let exe = if proc_exe.exists() {
        proc_exe.to_path_buf()
    } else {
        std::env::current_exe()?
    };
    let stem = cfg.history.file_stem().map_or_else(
        || format!("client-{}", cfg.id),
        |s| s.to_string_lossy().replace("history", "client"),
    );
    let stderr = std::fs::File::create(dir.join(format!("{stem}.stderr")))?;
    let mut child = tokio::process::Command::new(exe)
        .arg("client")
        .arg("--config")
        .arg(serde_json::to_string(cfg)?)
        .env_remove("QUORUMLOCK_REDIS_SERVER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("client exited at once")?;
    let stdin = child.stdin.take().ok_or("no client stdin")?;
    let stdout = child.stdout.take().ok_or("no client stdout")?;
    let (tx, notes) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(n) = serde_json::from_str::<Note>(&line) {
                if tx.send(n).is_err() {
                    return;
                }
            }
        }
    });
    Ok(ClientHandle {
        child,
        stdin: Some(stdin),
        notes,
        pid,
        history: cfg.history.clone(),
    })
}
