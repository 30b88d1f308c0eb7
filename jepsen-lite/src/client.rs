//! The lock client: a separate OS process (the jepsen-lite binary, hidden `client`
//! subcommand), so that the controller can pause a whole client with `SIGSTOP`.
//!
//! It reads [`Command`]s from stdin, one JSON object per line, writes [`Note`]s to stdout so the
//! controller can script faults between steps, and writes its own history file. A cycle is:
//! acquire → read the register → (wait for `go`) → (sleep) → (extend) → (check the remaining
//! validity; pause itself with `SIGSTOP` if asked) → write `counter + 1` and `set ∪ {id}` →
//! release.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use quorumlock::{Lease, LeaseOptions, LockError, LockGuard, NotHeldReason, Redlock};
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use crate::clock::{instant_ns, now_ns};
use crate::history::{Event, Kind, Process, Writer};
use crate::resource::{self, Op, Register, Request};

/// How a client is started (passed as one JSON argument).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientConfig {
    /// Process number.
    pub id: u32,
    /// Node URLs (through this client's proxy links).
    pub nodes: Vec<String>,
    /// The protected resource.
    pub resource_addr: SocketAddr,
    /// Where to write the history.
    pub history: PathBuf,
    /// Lock TTL.
    pub ttl_ms: u64,
    /// Per-node timeout.
    pub node_timeout_ms: u64,
    /// Upper bound of the retry jitter.
    pub retry_delay_ms: u64,
    /// Which register to use.
    pub register: Register,
    /// A library mutant, by name.
    pub mutation: Option<String>,
    /// Seed of this client's own random choices (critical-section lengths).
    pub seed: u64,
    /// Ask the library for fencing tokens and send them to the resource.
    #[serde(default)]
    pub fencing: bool,
    /// Restart protection on (max TTL = the lock TTL); every client provisions at start.
    #[serde(default)]
    pub restart_protection: bool,
    /// Provision the masters for restart protection at start (not a client started again
    /// after a crash: that would hide a master's restart).
    #[serde(default = "yes")]
    pub provision: bool,
    /// How many times this client number was started before (after crashes): its leases and
    /// set elements must not collide with those of its earlier processes.
    #[serde(default)]
    pub generation: u32,
}

fn yes() -> bool {
    true
}

/// A lock held by a guard or kept alive by a lease.
enum Held {
    Guard(LockGuard),
    Lease(Lease),
}

impl Held {
    fn remaining(&self) -> Duration {
        match self {
            Self::Guard(g) => g.remaining(),
            Self::Lease(l) => l.remaining(),
        }
    }

    fn fence(&self) -> Option<u64> {
        match self {
            Self::Guard(g) => g.fence(),
            Self::Lease(l) => l.fence(),
        }
    }

    /// The end of validity as host monotonic nanoseconds: exact, and in the past for a
    /// client that learns of its grant only after the validity ran out (stopped between the
    /// grant and here); the checkers then see a claim that held nothing.
    fn valid_until_ns(&self) -> u64 {
        instant_ns(match self {
            Self::Guard(g) => g.valid_until(),
            Self::Lease(l) => l.valid_until(),
        })
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Self::Guard(g) => g.release().await,
            Self::Lease(l) => l.release().await,
        }
    }

    /// Where the claim of a lease that has ended ended (host monotonic nanoseconds); `None`
    /// for a guard or a lease still held. Its holder was told it held until then, and the
    /// lease released its keys then:
    /// * a lease that expired (no renewal in time) ended `margin` (its safety margin) before
    ///   its validity;
    /// * one whose renewal found its lock on a minority (a master that held it came back
    ///   empty), or whose task stopped, lowered its validity to that moment and ended there,
    ///   so another client may take the lock before the validity reported earlier.
    async fn lease_ended_ns(&self, margin: Duration) -> Option<u64> {
        let Self::Lease(l) = self else {
            return None;
        };
        if !l.remaining().is_zero() {
            return None;
        }
        // Resolves at once for a lease that has ended; bounded all the same.
        let lowered = matches!(
            tokio::time::timeout(Duration::from_millis(20), l.lost()).await,
            Ok(LockError::NotHeld {
                reason: NotHeldReason::Lost { .. } | NotHeldReason::RenewalStopped,
                ..
            })
        );
        let until = if lowered {
            l.valid_until()
        } else {
            l.valid_until().checked_sub(margin)?
        };
        let now = std::time::Instant::now();
        // Read after `now`: the end comes out a little late, never early (an early end
        // could hide an overlap).
        let now_ns = now_ns();
        (until <= now).then(|| {
            now_ns.saturating_sub(u64::try_from((now - until).as_nanos()).unwrap_or(u64::MAX))
        })
    }
}

/// The safety margin of the clients' leases (the library's default, set explicitly so that
/// the claim of an expired lease ends where the lease did): a twentieth of the TTL, at most
/// 50 ms.
fn lease_margin(ttl_ms: u64) -> Duration {
    Duration::from_millis(ttl_ms / 20).min(Duration::from_millis(50))
}

/// One critical section.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CycleSpec {
    /// The resource to lock.
    pub resource: String,
    /// How long `lock_until` may retry.
    pub acquire_deadline_ms: u64,
    /// Touch the protected register (read, then write).
    #[serde(default)]
    pub access: bool,
    /// After the read, wait for a `go` command.
    #[serde(default)]
    pub wait_go: bool,
    /// Sleep inside the critical section (a loop draws uniformly below this).
    #[serde(default)]
    pub sleep_ms: u64,
    /// Extend by the TTL before the check.
    #[serde(default)]
    pub extend: bool,
    /// Extend at the last moment: wait until the validity is about to run out (up to 5 ms
    /// before, or up to 15 ms after it ran out), as a renewal with a thin margin would.
    #[serde(default)]
    pub extend_late: bool,
    /// Skip the write unless at least this much validity remains (None: no check at all).
    #[serde(default)]
    pub min_remaining_ms: Option<u64>,
    /// After the check, stop this process with `SIGSTOP` (the controller resumes it).
    #[serde(default)]
    pub pause_after_check: bool,
    /// Release at the end (otherwise the keys expire).
    #[serde(default)]
    pub release: bool,
    /// Hand the guard to the library's auto-extension (a lease) right after acquiring.
    #[serde(default)]
    pub keep_alive: bool,
    /// A loop draws each cycle's resource from these (the register is touched only under the
    /// first: one register protected by one lock).
    #[serde(default)]
    pub resources: Vec<String>,
    /// A loop draws each cycle's way of acquiring (single rounds retried here, `lock_until`,
    /// a reentrant or a fenced handle), whether it extends and whether it keeps the lock alive
    /// with a lease.
    #[serde(default)]
    pub mix: bool,
    /// How often (mean milliseconds between, per process; 0: never) a loop stops its own
    /// process (`SIGSTOP`) right after a grant, before its first access: Kleppmann's pause. The
    /// controller continues it after more than a TTL.
    #[serde(default)]
    pub pause_after_grant_every_ms: u64,
    /// How often (mean milliseconds between, per process; 0: never) a loop crashes its process
    /// (exit without release) while holding.
    #[serde(default)]
    pub crash_while_holding_every_ms: u64,
    /// How often (mean milliseconds between, per process; 0: never) a mixed loop holds for up
    /// to 1.5 TTL, kept alive by a lease.
    #[serde(default)]
    pub long_hold_every_ms: u64,
    /// How often (mean milliseconds between, per process; 0: never) a mixed loop extends at
    /// the last moment (see `extend_late`).
    #[serde(default)]
    pub late_extend_every_ms: u64,
    /// How many loops a `Loop` command runs at once in this process (0 or 1: one), on one lock
    /// manager, as the tasks of a service would: each with its own owner, randomness and
    /// connection to the resource. A cycle waiting for a lock another client holds, or sitting
    /// out a fault, then holds up only its own loop. The rare events above keep their pace per
    /// process.
    #[serde(default)]
    pub workers: usize,
}

/// The rare events of a loop, drawn per elapsed time rather than per cycle: a Poisson process
/// of the given mean interval, sampled at each cycle. Per cycle, their count (and the time
/// they hold a lock or a client up) would grow with the cycle rate and eat it: a long hold
/// or a pause blocks its resource and every client that draws it, a crash costs a restart.
/// Per time, a run sees the same number of them however fast the other cycles go.
fn happens(rng: &mut impl rand::Rng, since_last_cycle: Duration, every_ms: u64) -> bool {
    if every_ms == 0 {
        return false;
    }
    let p = 1.0 - (-since_last_cycle.as_secs_f64() * 1000.0 / every_ms as f64).exp();
    rng.random_bool(p.clamp(0.0, 1.0))
}

/// How a mixed cycle acquires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    /// Single `try_lock` rounds, retried by the client (it knows the winning round's start).
    Rounds,
    /// The library's own `lock_until`.
    LockUntil,
    /// Single `try_lock` rounds on a reentrant handle, retried by the client.
    Reentrant,
    /// Single `try_lock` rounds on a fenced handle, retried by the client.
    Fenced,
}

/// What the controller sends.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Command {
    /// One cycle.
    Cycle(CycleSpec),
    /// Cycles until the duration passed; `sleep_ms` is the bound of a random sleep.
    Loop {
        /// How long.
        duration_ms: u64,
        /// Each cycle.
        spec: CycleSpec,
    },
    /// Continue a cycle waiting after its read.
    Go,
    /// Exit.
    Exit,
}

/// What the client reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Note {
    /// `ready`, `acquiring`, `acquired`, `read`, `extended`, `checked`, `written`, `done`.
    pub note: String,
    /// Whether the step succeeded.
    pub ok: bool,
    /// Details.
    #[serde(default)]
    pub detail: String,
}

/// One loop of a client process (the first also reads the controller's commands).
struct Ctx {
    cfg: Rc<ClientConfig>,
    locks: Redlock,
    res: resource::Client,
    /// The process's history, shared by its loops.
    hist: Rc<RefCell<Writer>>,
    /// `None` in the extra loops of a `Loop` command.
    commands: Option<mpsc::UnboundedReceiver<Command>>,
    /// The process's next operation number, shared by its loops (leases and set elements
    /// stay unique).
    seq: Rc<Cell<u64>>,
    rng: rand::rngs::StdRng,
    owner: quorumlock::Owner,
    /// When the previous cycle started (the rare events are drawn per elapsed time).
    last_cycle: Option<Instant>,
    /// When the current `Loop` ends.
    loop_end: Option<Instant>,
}

fn note(name: &str, ok: bool, detail: impl Into<String>) {
    let n = Note {
        note: name.to_string(),
        ok,
        detail: detail.into(),
    };
    if let Ok(line) = serde_json::to_string(&n) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// The library mutant called `name`: only in a build with `--cfg quorumlock_mutants`.
#[cfg(quorumlock_mutants)]
fn mutation(name: &str) -> Option<quorumlock::Mutant> {
    use quorumlock::Mutant::*;
    Some(match name {
        "no-elapsed-check" => NoElapsedCheck,
        "zero-drift" => ZeroDrift,
        "minority-quorum" => MinorityQuorum,
        "plain-del-release" => PlainDelRelease,
        "extend-recreates" => ExtendRecreates,
        "clock-after-first-reply" => ClockAfterFirstReply,
        "late-extend" => LateExtend,
        "min-token" => MinToken,
        "skip-write-back" => SkipWriteBack,
        "quarantine-ignored" => QuarantineIgnored,
        "no-cleanup" => NoCleanupOnFailure,
        "reuse-after-timeout" => ReuseAfterTimeout,
        "extend-from-quorum" => ExtendFromQuorum,
        "grant-exhausted" => GrantExhausted,
        "no-cleanup-when-degraded" => NoCleanupWhenDegraded,
        _ => return None,
    })
}

/// Runs the client until `exit` or end of stdin.
///
/// # Errors
///
/// When the lock manager cannot be built or the history or resource cannot be opened.
pub async fn run(cfg: ClientConfig) -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = Redlock::builder()
        .nodes(cfg.nodes.clone())
        .node_timeout(Duration::from_millis(cfg.node_timeout_ms))
        .retry_delay(Duration::from_millis(cfg.retry_delay_ms));
    if cfg.restart_protection {
        builder = builder
            .restart_protection(true)
            .max_ttl(Duration::from_millis(cfg.ttl_ms));
    }
    if let Some(name) = &cfg.mutation {
        #[cfg(quorumlock_mutants)]
        {
            let m = mutation(name).ok_or_else(|| format!("unknown mutation {name:?}"))?;
            builder = builder.mutant(m);
        }
        #[cfg(not(quorumlock_mutants))]
        return Err(format!(
            "mutant {name:?} needs jepsen-lite built with RUSTFLAGS=\"--cfg quorumlock_mutants\" \
             (scripts/jepsen.sh builds it so)"
        )
        .into());
    }
    let locks = builder.build()?;
    let locks = if cfg.fencing { locks.fenced() } else { locks };
    if cfg.restart_protection && cfg.provision {
        // The masters are brand new: without this they would all sit out one max TTL.
        locks.provision().await?;
    }
    let res = resource::Client::connect(cfg.resource_addr).await?;
    let hist = Writer::create(&cfg.history)?;
    let (tx, commands) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match serde_json::from_str::<Command>(&line) {
                Ok(c) => {
                    if tx.send(c).is_err() {
                        return;
                    }
                }
                Err(e) => note("error", false, format!("bad command: {e}")),
            }
        }
        let _ = tx.send(Command::Exit);
    });
    let rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let mut ctx = Ctx {
        cfg: Rc::new(cfg),
        locks,
        res,
        hist: Rc::new(RefCell::new(hist)),
        commands: Some(commands),
        seq: Rc::new(Cell::new(0)),
        rng,
        owner: quorumlock::Owner::new(),
        last_cycle: None,
        loop_end: None,
    };
    // Warm up the connections (every one: a resource always uses the same connection to a
    // master, and the scripted resource need not share the warm-up's), so that the first
    // scripted acquisition is not a connect. A master that is down only fails the warm-up if
    // the lock below cannot be had.
    let connected = ctx.locks.connect().await;
    let warm = format!("warmup-{}", ctx.cfg.id);
    let deadline = Instant::now() + Duration::from_secs(5);
    // A failed release here is harmless (the key expires); only the acquisition must work.
    let (ok, mut detail) = match ctx
        .locks
        .lock_until(&warm, Duration::from_millis(ctx.cfg.ttl_ms), deadline)
        .await
    {
        Ok(g) => match g.release().await {
            Ok(()) => (true, String::new()),
            Err(e) => (true, format!("warm-up release: {e}")),
        },
        Err(e) => (false, e.to_string()),
    };
    if let Err(e) = connected {
        detail = format!("{detail}; connecting: {e}");
    }
    note("ready", ok, detail);
    while let Some(cmd) = ctx.next_command().await {
        match cmd {
            Command::Cycle(spec) => {
                let ok = ctx.cycle(&spec, false).await;
                note("done", ok, "");
            }
            Command::Loop { duration_ms, spec } => {
                let end = Instant::now() + Duration::from_millis(duration_ms);
                let mut others = Vec::new();
                for k in 1..spec.workers.max(1) {
                    match ctx.another(k).await {
                        Ok(w) => others.push(w),
                        // Fewer loops, not none: the run still has this one's grants.
                        Err(e) => note("error", false, format!("loop {k}: {e}")),
                    }
                }
                let (first, rest) = futures::join!(
                    ctx.looping(&spec, end),
                    futures::future::join_all(others.iter_mut().map(|w| w.looping(&spec, end)))
                );
                let n = first + rest.iter().sum::<u64>();
                note("done", true, format!("{n} cycles"));
            }
            Command::Go => {}
            Command::Exit => break,
        }
    }
    Ok(())
}

impl Ctx {
    /// Loop `k` beside this one: the same manager, process number and history; its own owner,
    /// randomness and connection to the resource.
    async fn another(&self, k: usize) -> std::io::Result<Self> {
        Ok(Self {
            cfg: Rc::clone(&self.cfg),
            locks: self.locks.clone(),
            res: resource::Client::connect(self.cfg.resource_addr).await?,
            hist: Rc::clone(&self.hist),
            commands: None,
            seq: Rc::clone(&self.seq),
            rng: rand::rngs::StdRng::seed_from_u64(
                self.cfg.seed ^ (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
            owner: quorumlock::Owner::new(),
            last_cycle: None,
            loop_end: None,
        })
    }

    async fn next_command(&mut self) -> Option<Command> {
        match &mut self.commands {
            Some(commands) => commands.recv().await,
            None => None,
        }
    }

    /// Cycles until `end`; how many acquired.
    async fn looping(&mut self, spec: &CycleSpec, end: Instant) -> u64 {
        self.loop_end = Some(end);
        let mut n = 0u64;
        while Instant::now() < end {
            if self.cycle(spec, true).await {
                n += 1;
            } else {
                tokio::time::sleep(Duration::from_millis(self.rng.random_range(0..50))).await;
            }
            // A little jitter, so that the clients do not fall into step; not more: idle time
            // is grants the faults do not see.
            tokio::time::sleep(Duration::from_millis(self.rng.random_range(0..5))).await;
        }
        n
    }

    /// A lease that has ended: its claim's end, where the lease put it (see
    /// [`Held::lease_ended_ns`]), as the last word on its validity.
    async fn log_lease_end(&mut self, guard: &Held, lease: &str) {
        if let Some(v) = guard.lease_ended_ns(lease_margin(self.cfg.ttl_ms)).await {
            self.log(
                Kind::Ok,
                "extend",
                json!({"lease": lease, "valid_until_ns": v, "by": "keep_alive", "ended": true}),
                None,
            );
        }
    }

    fn log(&mut self, kind: Kind, f: &str, mut value: serde_json::Value, error: Option<String>) {
        // The library's failed requests per master so far: the leak checker owes a key no
        // explanation when its client failed to reach that master (`leaks`).
        if let serde_json::Value::Object(fields) = &mut value {
            let errors: Vec<u64> = self.locks.stats().nodes.iter().map(|n| n.errors).collect();
            fields.insert("node_errors".into(), json!(errors));
        }
        let mut e = Event::now(Process::Client(self.cfg.id), kind, f, value);
        e.error = error;
        let _ = self.hist.borrow_mut().write(&e);
    }

    fn register_name(&self) -> &'static str {
        match self.cfg.register {
            Register::Unfenced => "unfenced",
            Register::Fenced => "fenced",
        }
    }

    async fn wait_go(&mut self) {
        while let Some(cmd) = self.next_command().await {
            if matches!(cmd, Command::Go | Command::Exit) {
                return;
            }
        }
    }

    /// One cycle; true if it acquired. A mixed loop draws this cycle's resource and method.
    async fn cycle(&mut self, spec: &CycleSpec, looping: bool) -> bool {
        let started = Instant::now();
        let since_last = self
            .last_cycle
            .replace(started)
            .map_or(Duration::ZERO, |t| started - t);
        // Per process: each of its loops draws at 1/workers of the pace.
        let per_loop = |every_ms: u64| every_ms.saturating_mul(spec.workers.max(1) as u64);
        let pause_after_grant = looping
            && happens(
                &mut self.rng,
                since_last,
                per_loop(spec.pause_after_grant_every_ms),
            );
        // Not within a TTL and 3 s of the loop's end: another client owes the lock within a
        // TTL and 1.5 s of the crash, which must fall while the loops still run.
        let judged = self.loop_end.is_none_or(|end| {
            end.saturating_duration_since(started)
                > Duration::from_millis(self.cfg.ttl_ms) + Duration::from_secs(3)
        });
        let crash_while_holding = looping
            && judged
            && happens(
                &mut self.rng,
                since_last,
                per_loop(spec.crash_while_holding_every_ms),
            );
        let mut method = Method::Rounds;
        let drawn;
        let spec = if spec.mix || !spec.resources.is_empty() {
            let mut s = spec.clone();
            if !spec.resources.is_empty() {
                let i = self.rng.random_range(0..spec.resources.len());
                s.resource = spec.resources[i].clone();
                // One register, protected by the first resource's lock only.
                s.access = spec.access && i == 0;
            }
            if spec.mix {
                method = [
                    Method::Rounds,
                    Method::LockUntil,
                    Method::Reentrant,
                    Method::Fenced,
                ][self.rng.random_range(0..4)];
                // Most cycles give up soon on a lock that is not to be had: one held long (a
                // lease, a late extension, a paused or crashed holder) would otherwise idle
                // every loop that drew it for the whole deadline. A quarter keep the full one,
                // retrying across the faults' transitions.
                if self.rng.random_bool(0.75) {
                    s.acquire_deadline_ms = s.acquire_deadline_ms.min(self.cfg.ttl_ms / 8);
                }
                s.keep_alive = self.rng.random_bool(0.2);
                // Now and then a long hold, kept alive by a lease: a holder that is still there
                // when a master it counted on crashes and comes back.
                if happens(&mut self.rng, since_last, per_loop(spec.long_hold_every_ms)) {
                    s.keep_alive = true;
                    s.sleep_ms = self.cfg.ttl_ms * 3 / 2;
                }
                s.extend_late = !s.keep_alive
                    && happens(
                        &mut self.rng,
                        since_last,
                        per_loop(spec.late_extend_every_ms),
                    );
                s.extend = s.extend_late || (!s.keep_alive && self.rng.random_bool(0.3));
            }
            drawn = s;
            &drawn
        } else {
            spec
        };
        let generation = self.cfg.generation;
        let seq = self.seq.get();
        self.seq.set(seq + 1);
        let lease = if generation == 0 {
            format!("{}-{seq}", self.cfg.id)
        } else {
            format!("{}.{generation}-{seq}", self.cfg.id)
        };
        let op_id = (u64::from(self.cfg.id) + 1000 * u64::from(generation)) * 1_000_000 + seq;
        let ttl = Duration::from_millis(self.cfg.ttl_ms);
        let deadline = Instant::now() + Duration::from_millis(spec.acquire_deadline_ms);
        // A reentrant acquisition may re-enter (and refresh) a key its owner left on a master
        // before: the leak checker needs to know which acquisitions can.
        let reentrant = method == Method::Reentrant;
        self.log(
            Kind::Invoke,
            "acquire",
            json!({"lease": lease, "resource": spec.resource, "reentrant": reentrant}),
            None,
        );
        if !looping {
            note("acquiring", true, &lease);
        }
        // One round per `try_lock`, retried here as `lock_until` would: so that `t_start` is the
        // start of the round that won, from which the checker bounds the reported validity
        // (`t_start + ttl − drift`) without trusting the library.
        // Only the library's own `lock_until` hides which of its rounds won.
        let (t_start, attempt) = if method == Method::LockUntil {
            let attempt = self.locks.lock_until(&spec.resource, ttl, deadline).await;
            // The winning round started before the call returned, at an unknown retry: a
            // start read before the call would wrongly bound a later round's validity, so
            // this bound is loose by the call, never wrong.
            (now_ns(), attempt)
        } else {
            let locks = match method {
                Method::Reentrant => self.locks.reentrant(self.owner.clone()),
                Method::Fenced => self.locks.fenced(),
                _ => self.locks.clone(),
            };
            self.rounds(&locks, spec, ttl, deadline).await
        };
        let guard = match attempt {
            Ok(g) => g,
            Err(e) => {
                let mut v = json!({"lease": lease, "resource": spec.resource});
                let error = failure(&mut v, &e);
                self.log(Kind::Fail, "acquire", v, error);
                if !looping {
                    note("acquired", false, e.to_string());
                }
                return false;
            }
        };
        // By index in the node order, as the nemesis names the masters it faults.
        let granted_by: Vec<usize> = guard.granted_by().collect();
        let guard = if spec.keep_alive {
            let margin = lease_margin(self.cfg.ttl_ms);
            match guard.keep_alive(LeaseOptions::new().safety_margin(margin)) {
                Ok(lease) => Held::Lease(lease),
                Err(e) => {
                    note("error", false, format!("keep_alive: {}", e.error()));
                    Held::Guard(e.into_guard())
                }
            }
        } else {
            Held::Guard(guard)
        };
        let valid_until = guard.valid_until_ns();
        self.log(
            Kind::Ok,
            "acquire",
            json!({"lease": lease, "resource": spec.resource, "t_start_ns": t_start,
                   "valid_until_ns": valid_until, "ttl_ms": self.cfg.ttl_ms, "token": guard.fence(),
                   "granted_by": granted_by}),
            None,
        );
        if !looping {
            note("acquired", true, &lease);
        }
        if pause_after_grant {
            // Kleppmann's pause: the grant is in hand, the first access not yet made.
            self.log(Kind::Info, "pause", json!({"lease": lease}), None);
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
        }
        let guard = self
            .critical_section(spec, guard, &lease, op_id, looping)
            .await;
        if crash_while_holding {
            // No release, no drop: the lock is left to expire. Another client must get it
            // within one TTL (and a margin) of this moment.
            self.log(
                Kind::Info,
                "crash",
                json!({"lease": lease, "resource": spec.resource}),
                None,
            );
            std::process::exit(3);
        }
        // It may have ended since the critical section's last look.
        self.log_lease_end(&guard, &lease).await;
        if spec.release {
            self.log(Kind::Invoke, "release", json!({"lease": lease}), None);
            match guard.release().await {
                Ok(()) => self.log(Kind::Ok, "release", json!({"lease": lease}), None),
                Err(e) => {
                    let kind = if e.is_not_held() {
                        Kind::Fail
                    } else {
                        Kind::Info
                    };
                    let mut v = json!({"lease": lease});
                    let error = failure(&mut v, &e);
                    self.log(kind, "release", v, error);
                }
            }
        } else {
            // Let the keys expire by themselves: nothing may be sent.
            std::mem::forget(guard);
        }
        true
    }

    /// Single `try_lock` rounds until one wins, the error is final or the deadline passes;
    /// the start of the last round with its result.
    async fn rounds(
        &mut self,
        locks: &Redlock,
        spec: &CycleSpec,
        ttl: Duration,
        deadline: Instant,
    ) -> (u64, Result<LockGuard, LockError>) {
        loop {
            let t_start = now_ns();
            match locks.try_lock(&spec.resource, ttl).await {
                Err(e) if e.is_retryable() && Instant::now() < deadline => {
                    let bound = self.cfg.retry_delay_ms.max(1);
                    let jitter = Duration::from_millis(self.rng.random_range(0..bound));
                    tokio::time::sleep(
                        jitter.min(deadline.saturating_duration_since(Instant::now())),
                    )
                    .await;
                }
                other => return (t_start, other),
            }
        }
    }

    async fn critical_section(
        &mut self,
        spec: &CycleSpec,
        mut guard: Held,
        lease: &str,
        op_id: u64,
        looping: bool,
    ) -> Held {
        let register = self.cfg.register;
        let reg_name = self.register_name();
        let mut read = None;
        if spec.access {
            self.log(
                Kind::Invoke,
                "read",
                json!({"lease": lease, "register": reg_name}),
                None,
            );
            let req = Request {
                op: Op::Read,
                register,
                client: self.cfg.id,
                lease: lease.to_string(),
                token: guard.fence(),
                counter: 0,
                set: Vec::new(),
                add: None,
            };
            match self.res.call(&req).await {
                Ok(r) if r.accepted => {
                    self.log(Kind::Ok, "read", json!({"lease": lease, "register": reg_name, "counter": r.counter, "set_len": r.set.len()}), None);
                    read = Some((r.counter, r.set));
                }
                Ok(r) => self.log(
                    Kind::Fail,
                    "read",
                    json!({"lease": lease, "register": reg_name}),
                    r.reason,
                ),
                Err(e) => self.log(
                    Kind::Info,
                    "read",
                    json!({"lease": lease, "register": reg_name}),
                    Some(e.to_string()),
                ),
            }
        }
        if !looping {
            note("read", read.is_some(), "");
        }
        if spec.wait_go {
            self.wait_go().await;
        }
        let sleep = if looping && spec.sleep_ms > 0 {
            self.rng.random_range(0..spec.sleep_ms)
        } else {
            spec.sleep_ms
        };
        if sleep > 0 {
            let nap = tokio::time::sleep(Duration::from_millis(sleep));
            tokio::pin!(nap);
            // A lease can end while its holder sleeps (a renewal that finds its lock on a
            // minority, after a master came back empty, lowers its validity to that moment
            // and releases the keys): its claim's end is logged as it happens, so that a
            // process that dies before waking up still leaves it in its history (else the
            // checker would take the grant's validity as the claim's end).
            let ended = match &guard {
                Held::Lease(l) => tokio::select! {
                    () = &mut nap => false,
                    _ = l.lost() => true,
                },
                Held::Guard(_) => {
                    (&mut nap).await;
                    false
                }
            };
            if ended {
                self.log_lease_end(&guard, lease).await;
                nap.await;
            }
        }
        if spec.extend && spec.extend_late {
            // From 5 ms before the end of validity to 15 ms after it.
            let offset = self.rng.random_range(0..20u64);
            let wait = (guard.remaining() + Duration::from_millis(15))
                .saturating_sub(Duration::from_millis(offset));
            tokio::time::sleep(wait).await;
        }
        if spec.extend {
            self.log(Kind::Invoke, "extend", json!({"lease": lease}), None);
            let ttl = Duration::from_millis(self.cfg.ttl_ms);
            // Read before the call: the extension round starts after it, so its validity ends
            // by `t_start + ttl − drift` (a lease's renewal ran before it: looser, never wrong).
            let t_start = now_ns();
            let extended = match &mut guard {
                Held::Guard(g) => g.extend(ttl).await,
                Held::Lease(_) => Ok(()),
            };
            match extended {
                Ok(()) => {
                    let valid_until = guard.valid_until_ns();
                    self.log(
                        Kind::Ok,
                        "extend",
                        json!({"lease": lease, "t_start_ns": t_start,
                               "valid_until_ns": valid_until, "ttl_ms": self.cfg.ttl_ms}),
                        None,
                    );
                    note("extended", true, "");
                }
                Err(e) => {
                    let mut v = json!({"lease": lease});
                    let error = failure(&mut v, &e);
                    self.log(Kind::Fail, "extend", v, error);
                    note("extended", false, e.to_string());
                    return guard;
                }
            }
        }
        // A lease whose validity ran out (its process was paused past it) extends nothing:
        // `now + 0` would stretch the claim to the moment it was read.
        if matches!(guard, Held::Lease(_)) && !guard.remaining().is_zero() {
            let v = guard.valid_until_ns();
            self.log(
                Kind::Ok,
                "extend",
                json!({"lease": lease, "valid_until_ns": v, "by": "keep_alive",
                       "ttl_ms": self.cfg.ttl_ms}),
                None,
            );
        }
        self.log_lease_end(&guard, lease).await;
        if let Some(min) = spec.min_remaining_ms {
            if guard.remaining() < Duration::from_millis(min) {
                self.log(
                    Kind::Info,
                    "check",
                    json!({"lease": lease, "remaining_ms": guard.remaining().as_millis() as u64}),
                    Some("validity too low; write skipped".into()),
                );
                if !looping {
                    note("checked", false, "");
                }
                return guard;
            }
        }
        if !looping {
            note("checked", true, "");
        }
        if spec.pause_after_check {
            // The GC pause Kleppmann describes: after the last check, before the write.
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
        }
        let Some((counter, mut set)) = read else {
            return guard;
        };
        set.push(op_id);
        self.log(
            Kind::Invoke,
            "write",
            json!({"lease": lease, "register": reg_name, "counter": counter + 1, "add": op_id}),
            None,
        );
        let req = Request {
            op: Op::Write,
            register,
            client: self.cfg.id,
            lease: lease.to_string(),
            token: guard.fence(),
            counter: counter + 1,
            set,
            add: Some(op_id),
        };
        let v = json!({"lease": lease, "register": reg_name, "counter": counter + 1, "add": op_id});
        match self.res.call(&req).await {
            Ok(r) if r.accepted => self.log(Kind::Ok, "write", v, None),
            Ok(r) => self.log(Kind::Fail, "write", v, r.reason),
            Err(e) => self.log(Kind::Info, "write", v, Some(e.to_string())),
        }
        if !looping {
            note("written", true, "");
        }
        guard
    }
}

/// A library error as the history logs it: its text, and in `value` what the verdict reads
/// of it without reading the text (the text is for people and may change with the library):
/// `refusal`, the kind of the last round's error ([`refusal`]); `quarantined`, how many masters
/// restart protection kept out of it; `unexpected_replies`, how many of the masters' answers
/// did not fit their request.
fn failure(value: &mut serde_json::Value, error: &LockError) -> Option<String> {
    let count = |kind: fn(&quorumlock::NodeErrorKind) -> bool| {
        error
            .node_errors()
            .iter()
            .filter(|e| kind(e.kind()))
            .count()
    };
    let unexpected = count(|k| matches!(k, quorumlock::NodeErrorKind::UnexpectedReply(_)));
    let quarantined = count(|k| matches!(k, quorumlock::NodeErrorKind::Quarantined { .. }));
    if let serde_json::Value::Object(fields) = value {
        fields.insert("refusal".into(), json!(refusal(error)));
        if unexpected > 0 {
            fields.insert("unexpected_replies".into(), json!(unexpected));
        }
        if quarantined > 0 {
            fields.insert("quarantined".into(), json!(quarantined));
        }
    }
    Some(error.to_string())
}

/// The kind of `error`, as the history names it; a deadline that passed is named by its last
/// round's error (what refused the claim), like the error's text.
pub fn refusal(error: &LockError) -> &'static str {
    match error {
        LockError::DeadlinePassed {
            last: Some(last), ..
        } => refusal(last),
        LockError::DeadlinePassed { last: None, .. } => "deadline-passed",
        LockError::InvalidArgument(_) => "invalid-argument",
        LockError::Contended { .. } => "contended",
        LockError::QuorumUnreachable { .. } => "quorum-unreachable",
        LockError::FenceUnconfirmed { .. } => "fence-unconfirmed",
        LockError::ValidityExhausted { .. } => "validity-exhausted",
        LockError::NotHeld { .. } => "not-held",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many events a loop of `cycles` cycles `step` apart draws at a pace of `every_ms`.
    fn count(cycles: u32, step: Duration, every_ms: u64) -> usize {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        (0..cycles)
            .filter(|_| happens(&mut rng, step, every_ms))
            .count()
    }

    #[test]
    fn rare_events_keep_their_pace_per_time_whatever_the_cycle_rate() {
        // 10 minutes at one event every 5 s: about 120, in 60,000 short cycles or 600 long ones.
        let fast = count(60_000, Duration::from_millis(10), 5_000);
        let slow = count(600, Duration::from_secs(1), 5_000);
        for n in [fast, slow] {
            assert!((80..=160).contains(&n), "fast {fast}, slow {slow}");
        }
        assert_eq!(count(1_000, Duration::from_secs(1), 0), 0, "0 is never");
        assert_eq!(count(1_000, Duration::ZERO, 5_000), 0);
    }
}
