//! One run of one scenario: start the masters, the proxy, the resource and the clients; play
//! the script; heal; check; write the files.
//!
//! Everything started here is owned by the run's environment and stopped when it is dropped:
//! on success, on error, and when the run future is dropped on Ctrl-C (clients are killed on
//! drop, masters by the test kit, the proxy's tasks aborted, paused processes resumed or
//! killed).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use quorumlock::testing::{MasterOptions, RedisCluster};
use rand::{RngExt, SeedableRng};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use crate::checker::{self, Params};
use crate::client::{ClientConfig, Command, CycleSpec, Note};
use crate::clock::ms;
use crate::clockshim::Clocks;
use crate::evidence::{
    clock_offset_ms, dropped_packets, offset_took_effect, process_stopped, Evidence,
};
use crate::history::{self, Event, Kind, Process};
use crate::outcome::{Outcome, Verdict};
use crate::proxy::{Mode, Modes, Proxy};
use crate::resource::{self, Register};
use crate::scenario::{Expect, RandomFault, Restart, Scenario, Script};
use crate::verdict::{judge, pivot, ClaimsCheck};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A client process seen from the controller.
struct ClientHandle {
    child: Child,
    stdin: ChildStdin,
    notes: mpsc::UnboundedReceiver<Note>,
    pid: u32,
    history: PathBuf,
}

impl ClientHandle {
    async fn send(&mut self, cmd: &Command) -> Result<(), Error> {
        let mut line = serde_json::to_vec(cmd)?;
        line.push(b'\n');
        self.stdin.write_all(&line).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Waits for the note `name`, skipping others.
    async fn wait(&mut self, name: &str, within: Duration) -> Result<Note, Error> {
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

    fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid).unwrap_or(0));
        let _ = nix::sys::signal::kill(pid, sig);
    }

    /// Whether the kernel reports the process stopped.
    fn is_stopped(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()
                    .map(|r| r.trim_start().starts_with('T'))
            })
            .unwrap_or(false)
    }
}

/// Everything one run started.
struct Env {
    sc: Scenario,
    cluster: RedisCluster,
    proxy: Proxy,
    resource: resource::Server,
    clients: Vec<ClientHandle>,
    nemesis: Vec<Event>,
    clocks: Option<Clocks>,
    dir: PathBuf,
    rng: rand::rngs::StdRng,
    progress: Option<ProgressBar>,
    /// The iptables rules in place (partition or loss), removed on heal and on drop.
    dropped: Vec<Rule>,
    /// Every fault injected and whether it took effect.
    evidence: Evidence,
    /// Faults whose effect is read when they end (traffic they touched, packets they dropped).
    pending: Vec<Pending>,
}

/// A fault whose effect can only be read once it has had time to act: checked when it ends.
#[derive(Debug)]
enum Pending {
    /// Proxy links in a fault mode: some traffic must have been cut, discarded, delayed or
    /// held, counted from `baseline`.
    Links {
        label: String,
        links: Vec<(usize, usize)>,
        baseline: u64,
    },
    /// iptables DROP rules on these node ports: they must have matched packets.
    Rules { label: String, ports: Vec<u16> },
    /// Every master's clock running fast: its offset must have grown.
    ClockRate {
        label: String,
        ppm: i64,
        since: Instant,
    },
}

/// One iptables rule on loopback input that a run may put in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Drop every packet to `port` (a kernel partition).
    Drop(u16),
    /// Drop 20% of the packets to `port`, at random (requests reaching a node).
    LossTo(u16),
    /// Drop 20% of the packets from `port`, at random (a node's replies).
    LossFrom(u16),
}

/// The share of packets a loss rule drops.
const LOSS_PROBABILITY: &str = "0.2";
/// The iptables match that picks a random `LOSS_PROBABILITY` share of packets.
const RANDOM_SHARE: [&str; 6] = [
    "-m",
    "statistic",
    "--mode",
    "random",
    "--probability",
    LOSS_PROBABILITY,
];

impl Rule {
    fn args(self) -> Vec<String> {
        let mut a: Vec<String> = ["INPUT", "-i", "lo", "-p", "tcp"]
            .iter()
            .map(ToString::to_string)
            .collect();
        let (dir, port, lossy) = match self {
            Self::Drop(p) => ("--dport", p, false),
            Self::LossTo(p) => ("--dport", p, true),
            Self::LossFrom(p) => ("--sport", p, true),
        };
        a.extend([dir.to_string(), port.to_string()]);
        if lossy {
            a.extend(RANDOM_SHARE.iter().map(ToString::to_string));
        }
        a.extend(["-j".to_string(), "DROP".to_string()]);
        a
    }
}

/// Adds or deletes one loopback rule.
fn iptables(add: bool, rule: Rule) -> std::io::Result<()> {
    let status = std::process::Command::new("iptables")
        .arg(if add { "-I" } else { "-D" })
        .args(rule.args())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "iptables failed for {rule:?}"
        )))
    }
}

/// Whether the `statistic` match works: a rule without a target (it only counts packets, so
/// it affects no traffic) is inserted and deleted again.
fn iptables_statistic_available() -> bool {
    let probe = |op: &str| {
        std::process::Command::new("iptables")
            .args([op, "INPUT", "-i", "lo", "-p", "tcp", "--dport", "9"])
            .args(RANDOM_SHARE)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    probe("-I") && probe("-D")
}

/// The loopback input rules with their packet counters (`iptables -L INPUT -v -x -n`).
fn iptables_listing() -> Result<String, String> {
    let out = std::process::Command::new("iptables")
        .args(["-L", "INPUT", "-v", "-x", "-n"])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("iptables -L exited with {}", out.status))
    }
}

fn iptables_available() -> bool {
    std::process::Command::new("iptables")
        .args(["-L", "INPUT", "-n"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Drop for Env {
    fn drop(&mut self) {
        for rule in self.dropped.drain(..) {
            let _ = iptables(false, rule);
        }
        for c in &self.clients {
            c.signal(nix::sys::signal::Signal::SIGKILL);
            c.signal(nix::sys::signal::Signal::SIGCONT);
        }
        if let Some(clocks) = &self.clocks {
            for port in self.cluster.ports() {
                let _ = clocks.reset(port);
            }
        }
        // Masters are killed by the cluster's own Drop, paused ones included.
    }
}

/// How many nodes every run uses.
pub const NODES: usize = 5;

impl Env {
    fn ttl(&self) -> Duration {
        Duration::from_millis(self.sc.ttl_ms)
    }

    fn phase(&self, msg: &str) {
        if let Some(p) = &self.progress {
            p.set_message(format!("{}: {msg}", self.sc.name));
        }
    }

    fn nem(&mut self, f: &str, value: serde_json::Value) {
        self.nemesis
            .push(Event::now(Process::nemesis(), Kind::Info, f, value));
    }

    fn cut(&mut self, client: usize, nodes: &[usize], mode: Mode) {
        let links: Vec<(usize, usize)> = nodes.iter().map(|&n| (client, n)).collect();
        self.set_links(
            format!("{mode:?} client {client} from nodes {nodes:?}").to_lowercase(),
            &links,
            Modes::both(mode),
        );
        self.nem(
            "partition",
            json!({"client": client, "nodes": nodes, "mode": mode}),
        );
    }

    /// Puts `links` in `modes` (a proxy fault), to be shown to take effect when it ends.
    fn set_links(&mut self, label: String, links: &[(usize, usize)], modes: Modes) {
        let baseline = links.iter().map(|&(c, n)| self.proxy.affected(c, n)).sum();
        for &(c, n) in links {
            self.proxy.set(c, n, modes);
        }
        self.pending.push(Pending::Links {
            label,
            links: links.to_vec(),
            baseline,
        });
    }

    /// Reads what the faults still on did, into the evidence (before they are lifted: an
    /// iptables rule's counters go with it).
    fn settle(&mut self) {
        let listing = self
            .pending
            .iter()
            .any(|p| matches!(p, Pending::Rules { .. }))
            .then(iptables_listing);
        for pending in std::mem::take(&mut self.pending) {
            let (label, check) = match pending {
                Pending::Links {
                    label,
                    links,
                    baseline,
                } => {
                    let now: u64 = links.iter().map(|&(c, n)| self.proxy.affected(c, n)).sum();
                    let affected = now.saturating_sub(baseline);
                    let check = if affected > 0 {
                        Ok(format!("{affected} bytes and connections affected"))
                    } else {
                        Err("no traffic crossed the faulty links".to_string())
                    };
                    (label, check)
                }
                Pending::Rules { label, ports } => {
                    let check = match &listing {
                        Some(Ok(listing)) => {
                            let packets: u64 =
                                ports.iter().map(|&p| dropped_packets(listing, p)).sum();
                            if packets > 0 {
                                Ok(format!("{packets} packets dropped"))
                            } else {
                                Err("0 packets matched".to_string())
                            }
                        }
                        Some(Err(e)) => Err(format!("cannot read the counters: {e}")),
                        None => Err("no counters read".to_string()),
                    };
                    (label, check)
                }
                Pending::ClockRate { label, ppm, since } => {
                    let elapsed_ms = i64::try_from(since.elapsed().as_millis()).unwrap_or(0);
                    let expected = elapsed_ms.saturating_mul(ppm) / 1_000_000;
                    let check = self.clock_offset(0).and_then(|measured| {
                        if measured >= expected / 2 && expected > 0 {
                            Ok(format!("node 0 {measured} ms ahead after {elapsed_ms} ms"))
                        } else {
                            Err(format!(
                                "node 0 {measured} ms ahead after {elapsed_ms} ms, expected about {expected}"
                            ))
                        }
                    });
                    (label, check)
                }
            };
            self.evidence.record(label, check);
        }
    }

    /// How far node `n`'s wall clock (its `TIME`) runs ahead of this host's, in ms.
    fn clock_offset(&self, n: usize) -> Result<i64, String> {
        let reply = self.cluster[n]
            .query(&["TIME"])
            .map_err(|e| format!("TIME on node {n}: {e}"))?;
        let host_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let field = |i: usize| -> Option<u64> {
            match &reply {
                quorumlock::testing::Reply::Array(items) => match items.get(i) {
                    Some(quorumlock::testing::Reply::Bulk(b)) => {
                        String::from_utf8_lossy(b).parse().ok()
                    }
                    _ => None,
                },
                _ => None,
            }
        };
        match (field(0), field(1)) {
            (Some(secs), Some(micros)) => Ok(clock_offset_ms(secs, micros, host_us)),
            _ => Err(format!("TIME on node {n} gave {reply:?}")),
        }
    }

    /// Checks that a clock bump of `offset_ms` on node `n` took effect.
    fn prove_clock_bump(&mut self, n: usize, offset_ms: i64) {
        let check = self.clock_offset(n).and_then(|measured| {
            if offset_took_effect(measured, offset_ms) {
                Ok(format!("node {n} TIME {measured} ms off"))
            } else {
                Err(format!(
                    "node {n} TIME {measured} ms off, expected {offset_ms}"
                ))
            }
        });
        self.evidence
            .record(format!("clock bump {offset_ms} ms on node {n}"), check);
    }

    fn heal(&mut self) -> Result<(), Error> {
        self.lift_faults()?;
        self.nem("heal", json!({}));
        Ok(())
    }

    /// Lifts every fault still on (after reading what they did), without a `heal` event in the
    /// history: the end of a run, which asks no client for liveness after it.
    fn lift_faults(&mut self) -> Result<(), Error> {
        self.settle();
        self.proxy.heal_all();
        for rule in std::mem::take(&mut self.dropped) {
            iptables(false, rule)?;
        }
        for n in 0..NODES {
            if self.cluster[n].is_paused() {
                self.cluster[n].resume()?;
            }
        }
        if let Some(clocks) = &self.clocks {
            for port in self.cluster.ports() {
                clocks.reset(port)?;
            }
        }
        for c in &self.clients {
            c.signal(nix::sys::signal::Signal::SIGCONT);
        }
        Ok(())
    }

    fn spec(&self, resource: &str) -> CycleSpec {
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

    async fn cycle(&mut self, c: usize, spec: CycleSpec) -> Result<(), Error> {
        self.clients[c].send(&Command::Cycle(spec)).await
    }

    async fn wait(&mut self, c: usize, note: &str) -> Result<Note, Error> {
        let within = self.ttl() * 3 + Duration::from_secs(10);
        self.clients[c].wait(note, within).await
    }
}

async fn sleep(d: Duration) {
    tokio::time::sleep(d).await;
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
    let stderr = std::fs::File::create(dir.join(format!("client-{}.stderr", cfg.id)))?;
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
        stdin,
        notes,
        pid,
        history: cfg.history.clone(),
    })
}

/// Runs one scenario and writes `history.jsonl`, `resource.jsonl` and `results.json` into a
/// fresh directory under `out`.
///
/// # Errors
///
/// When the environment cannot be set up or a scripted step times out.
pub async fn run(
    sc: &Scenario,
    seed: u64,
    duration: Duration,
    out: &Path,
    clocks: Option<&Clocks>,
    progress: Option<ProgressBar>,
) -> Result<Outcome, Error> {
    let started = Instant::now();
    let dir = out.join(format!("{}-{seed}", sc.name));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let skip = |why: String| Outcome {
        scenario: sc.name.to_string(),
        kind: sc.kind.to_string(),
        expected: sc.expect,
        observed: why,
        verdict: Verdict::Skipped,
        seed,
        seconds: 0.0,
        report: None,
        orphan_keys: 0,
        orphan_lifetime_ms: None,
        notes: Vec::new(),
        evidence: Evidence::default(),
        why: String::new(),
        fenced: String::new(),
        dir: dir.clone(),
    };
    let needs_iptables = matches!(
        sc.script,
        Script::Random(RandomFault::KernelDrop | RandomFault::PacketLoss)
    );
    if needs_iptables && !iptables_available() {
        return Ok(skip(
            "skipped: iptables not available (scripts/jepsen.sh installs it)".into(),
        ));
    }
    if sc.script == Script::Random(RandomFault::PacketLoss) && !iptables_statistic_available() {
        return Ok(skip(
            "skipped: the iptables statistic match is not available".into(),
        ));
    }
    let needs_clock = matches!(sc.script, Script::ClockJump(_) | Script::ClockRate(_));
    if needs_clock && clocks.is_none() {
        return Ok(skip("skipped: clock shim unavailable (no cc?)".into()));
    }
    let opts = MasterOptions::new().persistence(sc.persistence);
    let cluster = tokio::task::block_in_place(|| RedisCluster::start_with(NODES, opts))?;
    if let Some(clocks) = clocks {
        for port in cluster.ports() {
            clocks.reset(port)?;
        }
    }
    let proxy = Proxy::start(sc.clients, &cluster.ports()).await?;
    let resource = resource::Server::start().await?;
    let mut clients = Vec::new();
    for c in 0..sc.clients {
        let cfg = ClientConfig {
            id: u32::try_from(c).unwrap_or(0),
            nodes: proxy.urls(c),
            resource_addr: resource.addr,
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
        };
        clients.push(spawn_client(&cfg, &dir).await?);
    }
    let mut env = Env {
        sc: sc.clone(),
        cluster,
        proxy,
        resource,
        clients,
        nemesis: Vec::new(),
        clocks: clocks.cloned(),
        dir: dir.clone(),
        rng: rand::rngs::StdRng::seed_from_u64(seed),
        progress,
        dropped: Vec::new(),
        evidence: Evidence::default(),
        pending: Vec::new(),
    };
    env.phase("starting clients");
    for c in 0..env.clients.len() {
        let ready = env.wait(c, "ready").await?;
        if !ready.ok {
            return Err(format!("client {c} could not warm up: {}", ready.detail).into());
        }
    }
    let mut notes = Vec::new();
    play(&mut env, duration, &mut notes).await?;
    finish(env, sc, seed, started, notes).await
}

/// Plays the script, ending with a heal and a liveness probe.
async fn play(env: &mut Env, duration: Duration, notes: &mut Vec<String>) -> Result<(), Error> {
    let ttl = env.ttl();
    let ttl_ms = env.sc.ttl_ms;
    match env.sc.script {
        Script::Random(fault) => {
            let spec = CycleSpec {
                acquire_deadline_ms: 2000,
                sleep_ms: ttl_ms / 10,
                min_remaining_ms: Some(ttl_ms / 2),
                ..env.spec("r")
            };
            let loop_ms = u64::try_from(duration.as_millis()).unwrap_or(10_000);
            for c in 0..env.clients.len() {
                env.clients[c]
                    .send(&Command::Loop {
                        duration_ms: loop_ms,
                        spec: spec.clone(),
                    })
                    .await?;
            }
            let loops_end = Instant::now() + duration;
            let faults_until = Instant::now() + duration.saturating_sub(Duration::from_secs(3));
            while fault != RandomFault::None && Instant::now() < faults_until {
                match fault {
                    RandomFault::MinorityPartition => {
                        for c in 0..env.clients.len() {
                            let a = env.rng.random_range(0..NODES);
                            let b = (a + env.rng.random_range(1..NODES)) % NODES;
                            let mode = if env.rng.random_bool(0.5) {
                                Mode::Blackhole
                            } else {
                                Mode::Reset
                            };
                            env.cut(c, &[a, b], mode);
                        }
                        env.phase("partition");
                    }
                    RandomFault::NodePause => {
                        let n = env.rng.random_range(0..NODES);
                        tokio::task::block_in_place(|| env.cluster[n].pause())?;
                        let check = env.cluster[n]
                            .pid()
                            .ok_or_else(|| "no process".to_string())
                            .and_then(process_stopped);
                        env.evidence.record(format!("pause node {n}"), check);
                        env.nem("pause", json!({"node": n}));
                        env.phase(&format!("node {n} paused"));
                    }
                    RandomFault::SlowLinks => {
                        for c in 0..env.clients.len() {
                            let k = env.rng.random_range(1..3);
                            for _ in 0..k {
                                let n = env.rng.random_range(0..NODES);
                                let d = Duration::from_millis(env.rng.random_range(100..3000));
                                env.set_links(
                                    format!("delay {d:?} client {c} to node {n}"),
                                    &[(c, n)],
                                    Modes {
                                        to_node: Mode::Delay(d),
                                        to_client: Mode::Pass,
                                    },
                                );
                                env.nem(
                                    "delay",
                                    json!({"client": c, "node": n, "ms": d.as_millis() as u64}),
                                );
                            }
                        }
                        env.phase("slow links");
                    }
                    RandomFault::KernelDrop => {
                        let n = env.rng.random_range(0..NODES);
                        let port = env.cluster.ports()[n];
                        iptables(true, Rule::Drop(port))?;
                        env.dropped.push(Rule::Drop(port));
                        env.pending.push(Pending::Rules {
                            label: format!("iptables drop node {n}"),
                            ports: vec![port],
                        });
                        env.nem("partition", json!({"node": n, "how": "iptables DROP"}));
                        env.phase(&format!("node {n} dropped by iptables"));
                    }
                    RandomFault::MajoritiesRing => {
                        for c in 0..env.clients.len() {
                            // Client c reaches c, c+1, c+2 and is cut from c+3, c+4.
                            let cut = [(c + 3) % NODES, (c + 4) % NODES];
                            let mode = if env.rng.random_bool(0.5) {
                                Mode::Blackhole
                            } else {
                                Mode::Reset
                            };
                            env.cut(c, &cut, mode);
                        }
                        env.phase("majorities ring");
                    }
                    RandomFault::PacketLoss => {
                        // Below TCP, on this run's node ports only (the proxy's upstream leg
                        // carries all of this run's lock traffic), both directions.
                        for port in env.cluster.ports() {
                            for rule in [Rule::LossTo(port), Rule::LossFrom(port)] {
                                iptables(true, rule)?;
                                env.dropped.push(rule);
                            }
                        }
                        env.pending.push(Pending::Rules {
                            label: "iptables 20% loss on every node".to_string(),
                            ports: env.cluster.ports(),
                        });
                        env.nem(
                            "loss",
                            json!({"nodes": "all", "probability": LOSS_PROBABILITY, "how": "iptables statistic"}),
                        );
                        env.phase("20% packet loss");
                    }
                    RandomFault::None => {}
                }
                sleep(Duration::from_millis(env.rng.random_range(1000..3000))).await;
                env.settle();
                env.proxy.heal_all();
                for rule in std::mem::take(&mut env.dropped) {
                    iptables(false, rule)?;
                }
                for n in 0..NODES {
                    if env.cluster[n].is_paused() {
                        env.cluster[n].resume()?;
                        env.nem("resume", json!({"node": n}));
                    }
                }
                env.nem("partition-end", json!({}));
                env.phase("quiet");
                sleep(Duration::from_millis(env.rng.random_range(500..1500))).await;
            }
            env.heal()?;
            env.phase("clients finishing");
            // The loops run for the whole duration; the wait below covers only their last cycle.
            sleep(loops_end.saturating_duration_since(Instant::now())).await;
            for c in 0..env.clients.len() {
                env.wait(c, "done").await?;
            }
        }
        Script::ClientPause => {
            env.phase("A acquires, checks, pauses itself");
            env.cycle(
                0,
                CycleSpec {
                    pause_after_check: true,
                    min_remaining_ms: Some(ttl_ms / 2),
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "checked").await?;
            let t = Instant::now();
            while !env.clients[0].is_stopped() {
                if t.elapsed() > Duration::from_secs(5) {
                    return Err("client 0 did not stop".into());
                }
                sleep(Duration::from_millis(5)).await;
            }
            env.evidence.record(
                "pause client 0 after its check",
                Ok("client process in state T".to_string()),
            );
            env.nem("pause-client", json!({"client": 0}));
            sleep(ttl + Duration::from_millis(300)).await;
            env.phase("B runs while A is paused");
            env.cycle(1, env.spec("r")).await?;
            env.wait(1, "done").await?;
            env.clients[0].signal(nix::sys::signal::Signal::SIGCONT);
            env.nem("resume-client", json!({"client": 0}));
            env.wait(0, "done").await?;
        }
        Script::SlowCs => {
            env.phase("A acquires and reads");
            env.cycle(
                0,
                CycleSpec {
                    wait_go: true,
                    min_remaining_ms: None,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "read").await?;
            sleep(ttl + Duration::from_millis(300)).await;
            env.phase("B runs while A is still working");
            env.cycle(1, env.spec("r")).await?;
            env.wait(1, "done").await?;
            env.clients[0].send(&Command::Go).await?;
            env.wait(0, "done").await?;
        }
        Script::Crash(restart) => {
            // The delayed restart and its mutant: A keeps its lock (no release) and B polls from
            // the crash on, so only the delay can keep B from {2,3,4} while A holds.
            let b_polls_through_restart =
                matches!(restart, Restart::DelayedEmpty | Restart::UndelayedEmpty);
            let delay = if restart == Restart::DelayedEmpty {
                ttl + Duration::from_millis(ttl_ms / 100 + 2 + 500)
            } else {
                Duration::ZERO
            };
            env.cut(0, &[3, 4], Mode::Reset);
            env.cut(1, &[0, 1], Mode::Reset);
            let aof_before = aof_incr(env.cluster[2].dir()).map(|p| {
                (
                    p.clone(),
                    std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0),
                )
            });
            if restart == Restart::Snapshot {
                // What node 2 will come back with: everything before A's lock.
                tokio::task::block_in_place(|| env.cluster[2].command(&["SAVE"]))?;
                env.nem("save-snapshot", json!({"node": 2}));
            }
            env.phase("A acquires {0,1,2}");
            env.cycle(
                0,
                CycleSpec {
                    wait_go: true,
                    release: !b_polls_through_restart,
                    ..env.spec("r")
                },
            )
            .await?;
            let acquired = env.wait(0, "acquired").await?;
            if !acquired.ok {
                return Err(format!("A could not acquire: {}", acquired.detail).into());
            }
            env.wait(0, "read").await?;
            env.phase("node 2 crashes");
            let crashed_pid = env.cluster[2].pid();
            tokio::task::block_in_place(|| env.cluster[2].kill())?;
            let killed = !env.cluster[2].is_running();
            env.nem("kill", json!({"node": 2}));
            let b_spec = CycleSpec {
                sleep_ms: 200,
                // B must get its chance while A still believes it holds the lock, also on a
                // loaded box where the restart and B's first connections are slow: it keeps
                // trying for half of A's TTL (a quick matrix under load once saw B give up
                // after the default 1 s, and this must-break scenario held), after the delay.
                acquire_deadline_ms: ttl_ms / 2
                    + u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                ..env.spec("r")
            };
            if b_polls_through_restart {
                env.phase("B polls {2,3,4} while node 2 is down");
                env.cycle(1, b_spec.clone()).await?;
                sleep(delay).await;
            }
            match restart {
                Restart::Immediate | Restart::Snapshot => {
                    tokio::task::block_in_place(|| env.cluster[2].restart())?
                }
                Restart::PowerLoss => {
                    // The writes since the sample were never fsynced: they are gone.
                    let (path, len) = aof_before.ok_or("node 2 has no AOF to truncate")?;
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)?
                        .set_len(len)?;
                    env.nem("truncate-aof", json!({"node": 2, "bytes": len}));
                    tokio::task::block_in_place(|| env.cluster[2].restart())?;
                }
                Restart::ImmediateEmpty | Restart::DelayedEmpty | Restart::UndelayedEmpty => {
                    tokio::task::block_in_place(|| env.cluster[2].restart_empty())?;
                }
            }
            let restarted_pid = env.cluster[2].pid();
            let check = match (crashed_pid, restarted_pid) {
                (Some(old), Some(new)) if killed && old != new => {
                    Ok(format!("pid {old} killed, pid {new} serving"))
                }
                (old, new) => Err(format!(
                    "crash not shown: killed {killed}, pid before {old:?}, after {new:?}"
                )),
            };
            env.evidence
                .record(format!("crash node 2, restart {restart:?}"), check);
            env.nem("restart", json!({"node": 2, "how": restart}));
            if !b_polls_through_restart {
                env.phase("B tries {2,3,4}");
                env.cycle(1, b_spec).await?;
            }
            env.wait(1, "done").await?;
            env.clients[0].send(&Command::Go).await?;
            env.wait(0, "done").await?;
        }
        Script::ClockJump(offset_ms) => {
            env.cut(0, &[3, 4], Mode::Reset);
            env.cut(1, &[0, 1], Mode::Reset);
            env.phase("A acquires {0,1,2}");
            env.cycle(
                0,
                CycleSpec {
                    wait_go: true,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "read").await?;
            let port = env.cluster.ports()[2];
            if let Some(clocks) = &env.clocks {
                clocks.set(port, offset_ms, 0)?;
            }
            tokio::task::block_in_place(|| env.prove_clock_bump(2, offset_ms));
            env.nem("clock-bump", json!({"node": 2, "delta_ms": offset_ms}));
            env.phase("B tries {2,3,4}");
            env.cycle(
                1,
                CycleSpec {
                    sleep_ms: 200,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(1, "done").await?;
            env.clients[0].send(&Command::Go).await?;
            env.wait(0, "done").await?;
        }
        Script::ClockRate(ppm) => {
            if let Some(clocks) = &env.clocks {
                for port in env.cluster.ports() {
                    clocks.set(port, 0, ppm)?;
                }
            }
            env.pending.push(Pending::ClockRate {
                label: format!("clocks {ppm} ppm fast on every node"),
                ppm,
                since: Instant::now(),
            });
            env.nem("clock-rate", json!({"nodes": "all", "rate_ppm": ppm}));
            env.phase("A acquires and keeps the lock");
            env.cycle(
                0,
                CycleSpec {
                    release: false,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "done").await?;
            env.phase("B polls while A's keys expire");
            let spec = CycleSpec {
                acquire_deadline_ms: ttl_ms + 1000,
                ..env.spec("r")
            };
            env.cycle(1, spec).await?;
            env.wait(1, "done").await?;
        }
        Script::SplitMinority => {
            env.cut(0, &[2, 3, 4], Mode::Reset);
            env.cut(1, &[0, 1], Mode::Reset);
            env.phase("A and B acquire at once");
            let spec = CycleSpec {
                wait_go: true,
                ..env.spec("r")
            };
            env.cycle(0, spec.clone()).await?;
            env.cycle(1, spec).await?;
            // Whoever acquired holds on (waits for go) while the other finishes.
            let mut holding = Vec::new();
            for c in [0, 1] {
                if env.wait(c, "acquired").await?.ok {
                    env.wait(c, "read").await?;
                    holding.push(c);
                } else {
                    env.wait(c, "done").await?;
                }
            }
            sleep(Duration::from_millis(200)).await;
            for c in holding.into_iter().rev() {
                env.clients[c].send(&Command::Go).await?;
                env.wait(c, "done").await?;
            }
        }
        Script::HeldReplies => {
            let links: Vec<(usize, usize)> = (0..NODES).map(|n| (0, n)).collect();
            env.set_links(
                "hold replies to client 0".to_string(),
                &links,
                Modes {
                    to_node: Mode::Pass,
                    to_client: Mode::Hold,
                },
            );
            env.nem(
                "hold",
                json!({"client": 0, "nodes": "all", "direction": "to_client"}),
            );
            env.phase("A's replies are held");
            env.cycle(
                0,
                CycleSpec {
                    acquire_deadline_ms: 1,
                    release: false,
                    min_remaining_ms: None,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "acquiring").await?;
            sleep(ttl + Duration::from_millis(500)).await;
            for n in 0..NODES {
                env.proxy.set(0, n, Modes::PASS);
            }
            env.nem("release", json!({"client": 0}));
            env.phase("B polls");
            env.cycle(
                1,
                CycleSpec {
                    acquire_deadline_ms: ttl_ms,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "done").await?;
            env.wait(1, "done").await?;
        }
        Script::LateRelease => {
            env.phase("A acquires and stalls past its TTL");
            env.cycle(
                0,
                CycleSpec {
                    wait_go: true,
                    access: false,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "read").await?;
            sleep(ttl + Duration::from_millis(300)).await;
            env.phase("B acquires");
            env.cycle(
                1,
                CycleSpec {
                    wait_go: true,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(1, "read").await?;
            env.phase("A releases late; C tries");
            env.clients[0].send(&Command::Go).await?;
            env.wait(0, "done").await?;
            env.cycle(
                2,
                CycleSpec {
                    acquire_deadline_ms: 300,
                    sleep_ms: 200,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(2, "done").await?;
            env.clients[1].send(&Command::Go).await?;
            env.wait(1, "done").await?;
        }
        Script::ExtendAfterExpiry => {
            env.phase("A acquires all five");
            env.cycle(
                0,
                CycleSpec {
                    wait_go: true,
                    extend: true,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "read").await?;
            let key = "quorumlock:r";
            for n in 0..3 {
                tokio::task::block_in_place(|| env.cluster[n].command(&["DEL", key]))?;
            }
            env.nem("expire-keys", json!({"nodes": [0, 1, 2], "key": key}));
            env.phase("A extends");
            env.clients[0].send(&Command::Go).await?;
            let extended = env.wait(0, "extended").await?;
            if extended.ok {
                notes.push(
                    "an extension succeeded although the lock's keys were gone on 3 of 5 nodes"
                        .into(),
                );
            }
            env.wait(0, "done").await?;
        }
    }
    if !env.nemesis.iter().any(|e| e.f == "heal") || !matches!(env.sc.script, Script::Random(_)) {
        env.heal()?;
    }
    env.phase("liveness probe");
    let probe = CycleSpec {
        acquire_deadline_ms: ttl_ms + 2000,
        ..env.spec("r")
    };
    env.cycle(0, probe).await?;
    env.wait(0, "done").await?;
    let _ = &env.dir;
    Ok(())
}

/// The incremental AOF file of a master's data directory, if it has one.
fn aof_incr(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir.join("appendonlydir"))
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
}

/// The lock keys a run uses (fence counters and epoch markers live on purpose).
fn lock_keys(env: &Env) -> Vec<String> {
    std::iter::once("quorumlock:r".to_string())
        .chain((0..env.clients.len()).map(|c| format!("quorumlock:warmup-{c}")))
        .collect()
}

/// How many lock keys are still on the running, unpaused masters.
fn lock_keys_left(env: &Env) -> usize {
    let keys = lock_keys(env);
    env.cluster
        .iter()
        .filter(|m| m.is_running() && !m.is_paused())
        .map(|m| {
            keys.iter()
                .filter(|key| {
                    m.command(&["EXISTS", key.as_str()])
                        .is_ok_and(|reply| reply.trim() == "1")
                })
                .count()
        })
        .sum()
}

/// After the faults healed: how long until no lock key is left on any master, polled for at
/// most one TTL and a grace of half a second (a key set by a late write, a cleanup that never
/// ran). `Err` with the keys left if some outlive that.
async fn orphan_lifetime(env: &Env, healed: Instant) -> Result<Duration, usize> {
    let limit = env.ttl() + Duration::from_millis(500);
    loop {
        let left = tokio::task::block_in_place(|| lock_keys_left(env));
        if left == 0 {
            return Ok(healed.elapsed());
        }
        if healed.elapsed() > limit {
            return Err(left);
        }
        sleep(Duration::from_millis(50)).await;
    }
}

/// Orphans: lock keys without a TTL, or with more left than the lock TTL (-2: no key).
fn orphan_keys(env: &Env) -> usize {
    let mut orphans = 0;
    for m in env.cluster.iter() {
        if !m.is_running() || m.is_paused() {
            continue;
        }
        for key in &lock_keys(env) {
            let pttl: i64 = m
                .command(&["PTTL", key.as_str()])
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(-2);
            if pttl == -1 || pttl > i64::try_from(env.sc.ttl_ms).unwrap_or(i64::MAX) {
                orphans += 1;
            }
        }
    }
    orphans
}

async fn finish(
    mut env: Env,
    sc: &Scenario,
    seed: u64,
    started: Instant,
    notes: Vec<String>,
) -> Result<Outcome, Error> {
    env.settle();
    env.phase("collecting");
    let orphans = tokio::task::block_in_place(|| orphan_keys(&env));
    // Every fault lifted (a scripted one may still be on), then the lock keys left behind by
    // failed or abandoned rounds and late writes must be gone within one TTL.
    env.lift_faults()?;
    let healed = Instant::now();
    env.phase("waiting for lock keys to expire");
    let orphan_life = orphan_lifetime(&env, healed).await;
    let mut parts = Vec::new();
    for c in 0..env.clients.len() {
        let _ = env.clients[c].send(&Command::Exit).await;
        let _ = tokio::time::timeout(Duration::from_secs(3), env.clients[c].child.wait()).await;
        parts.push(history::read_jsonl::<Event>(&env.clients[c].history)?);
    }
    parts.push(env.nemesis.clone());
    let events = history::merge(parts);
    let (accesses, unfenced, fenced) = env.resource.snapshot();
    history::write_jsonl(&env.dir.join("history.jsonl"), &events)?;
    history::write_jsonl(&env.dir.join("resource.jsonl"), &accesses)?;
    let params = Params {
        epsilon_ns: ms(1),
        liveness_bound_ns: ms(sc.ttl_ms + 2000),
    };
    let report = checker::check(&events, &accesses, &unfenced, &fenced, &params);
    let broke = report.broke() || !notes.is_empty();
    let claims_observed =
        if report.claims.overlaps.is_empty() && report.claims.overstated.is_empty() {
            Expect::Hold
        } else {
            Expect::Break
        };
    let (observed, mut observed_text) = if sc.fenced {
        let rejected = report.effects_fenced.rejections;
        let tokens_ok = report.tokens.order_violations.is_empty() && report.tokens.with_token > 0;
        if report.lost_fenced.lost_any() || !report.effects_fenced.overlaps.is_empty() {
            let lost = report.lost_fenced.lost_increments;
            (
                Expect::Break,
                format!("break: fencing missed ({lost} lost)"),
            )
        } else if !tokens_ok {
            (
                Expect::Break,
                "break: tokens missing or not increasing".to_string(),
            )
        } else if rejected > 0 {
            (Expect::Caught, format!("caught ({rejected} rejected)"))
        } else if report.claims.overlaps.is_empty() {
            (Expect::Hold, "hold".to_string())
        } else {
            (
                Expect::Break,
                "break (nothing stale reached the resource)".to_string(),
            )
        }
    } else if broke {
        (Expect::Break, "break".to_string())
    } else {
        (Expect::Hold, "hold".to_string())
    };
    if sc.expect != Expect::Hold && sc.expect_claims().is_some() {
        observed_text = format!("{observed_text}, claims {claims_observed}");
    }
    let mut judgement = judge(
        sc.expect,
        observed,
        report.claims.claims,
        &env.evidence,
        sc.minimum(),
        &pivot(sc, &events),
        ClaimsCheck {
            expected: sc.expect_claims(),
            observed: claims_observed,
        },
    );
    if judgement.verdict == Verdict::Pass
        && sc.expect == Expect::Hold
        && (!report.liveness.ok || orphans > 0 || orphan_life.is_err())
    {
        judgement.verdict = Verdict::Fail;
        observed_text = format!(
            "{observed_text} (liveness {}, orphans {orphans}{})",
            if report.liveness.ok { "ok" } else { "FAILED" },
            match orphan_life {
                Err(left) => format!(", {left} lock keys outlived one TTL after heal"),
                Ok(_) => String::new(),
            }
        );
    }
    let orphan_lifetime_ms = orphan_life
        .ok()
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    if judgement.verdict == Verdict::Inconclusive {
        observed_text = format!("inconclusive: {}", judgement.why);
    }
    let fenced = if sc.fenced {
        format!(
            "{} rejected, {} lost, token order violations {}",
            report.effects_fenced.rejections,
            report.lost_fenced.lost_increments,
            report.tokens.order_violations.len()
        )
    } else {
        "not used".to_string()
    };
    let outcome = Outcome {
        scenario: sc.name.to_string(),
        kind: sc.kind.to_string(),
        expected: sc.expect,
        observed: observed_text,
        verdict: judgement.verdict,
        seed,
        seconds: started.elapsed().as_secs_f64(),
        report: Some(report),
        orphan_keys: orphans,
        orphan_lifetime_ms,
        notes,
        evidence: env.evidence.clone(),
        why: judgement.why,
        fenced,
        dir: env.dir.clone(),
    };
    std::fs::write(
        env.dir.join("results.json"),
        serde_json::to_vec_pretty(&outcome)?,
    )?;
    crate::report::write_run_html(&env.dir, sc, &outcome, &events, &accesses)?;
    Ok(outcome)
}
