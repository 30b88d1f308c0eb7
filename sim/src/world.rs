//! One simulated run: N simulated masters and C clients running the real library on turmoil's
//! simulated network and time, a nemesis injecting faults from the seed, the checkers over
//! what the clients believed they held. Everything comes from the seed: the same seed gives
//! the same trace, byte for byte.
//!
//! * [`host`]: a master as a turmoil host; [`seams`]: the library's outside world, simulated;
//! * [`workload`]: a client host; [`nemesis`]: the faults; [`history`]: holds and the trace;
//! * [`checker`]: mutual exclusion, semaphore, read-write, token order.

pub mod batches;
pub mod beyond;
pub mod checker;
pub mod conns;
pub mod flood;
pub mod handoff;
pub mod history;
pub mod host;
pub mod intent;
pub mod leases;
pub mod lifetime;
pub mod mutants;
pub mod nemesis;
pub mod reentrant;
pub mod scheduled;
pub mod seams;
pub mod slots;
pub mod stall;
pub mod waiter;
pub mod workload;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use checker::{Limits, Violations};
use history::History;
use host::Served;
use nemesis::Nemesis;
use workload::Client;

use crate::clock::SimClock;
use crate::master::SimMaster;
use crate::seed::SeedRng;

/// What one run is made of.
#[derive(Debug, Clone)]
pub struct Config {
    /// Everything random comes from it.
    pub seed: u64,
    /// Masters.
    pub masters: usize,
    /// Client hosts.
    pub clients: usize,
    /// Concurrent workers per client.
    pub workers: usize,
    /// Simulated time with faults; the heal and the liveness probes follow.
    pub faulty_for: Duration,
    /// The library mutant every client runs, by name (see [`mutants`]).
    pub mutant: Option<String>,
    /// A fault outside the model, which must break the lock (see [`beyond`]); none unless named.
    pub beyond: Option<beyond::Beyond>,
    /// The only faults injected, by name ([`nemesis::FAULTS`]); all of them if `None`.
    pub faults: Option<Vec<&'static str>>,
}

/// What one run found.
#[derive(Debug)]
pub struct Outcome {
    /// Acquisitions granted.
    pub grants: u64,
    /// Scripts the masters ran.
    pub scripts: u64,
    /// Violations, by checker.
    pub violations: Violations,
    /// The hash of the event trace.
    pub trace_hash: String,
    /// Lines in the trace.
    pub trace_lines: u64,
    /// The last lines of the trace, for a failing seed.
    pub tail: Vec<String>,
    /// The first violations seen as they happened, as trace lines.
    pub first_violations: Vec<String>,
    /// What the faults did, by kind (see [`history::History::effects`]).
    pub effects: std::collections::BTreeMap<&'static str, u64>,
    /// Simulated time the run took.
    pub simulated: Duration,
    /// Why the simulation itself stopped early, if it did.
    pub error: Option<String>,
}

/// Simulated time zero on the wall clock: fixed, so that a seed replays.
const EPOCH_SECS: u64 = 1_767_225_600;
/// How far masters' clocks may drift from real time, in parts per million: within the
/// library's default drift factor (1 %).
const DRIFT_PPM: u64 = 5_000;

/// Runs one seed.
pub fn run(config: &Config) -> Outcome {
    let mut rng = SeedRng::new(config.seed);
    let world = Rc::new(seams::SimWorld::new(rng.next_u64()));
    let _world = quorumlock::sim::enter(Rc::clone(&world) as Rc<dyn quorumlock::sim::World>);
    let mut sim = turmoil::Builder::new()
        .epoch(UNIX_EPOCH + Duration::from_secs(EPOCH_SECS))
        .simulation_duration(Duration::from_secs(24 * 3600))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::ZERO)
        .max_message_latency(Duration::from_millis(2))
        .tcp_capacity(1 << 16)
        .rng_seed(rng.next_u64())
        .build();
    let history = match History::new() {
        Ok(history) => Rc::new(RefCell::new(history)),
        Err(e) => {
            return Outcome {
                grants: 0,
                scripts: 0,
                violations: Violations::default(),
                trace_hash: String::new(),
                trace_lines: 0,
                tail: Vec::new(),
                first_violations: Vec::new(),
                effects: Default::default(),
                simulated: Duration::ZERO,
                error: Some(format!("{}: {e}", history::TRACE_FILE)),
            }
        }
    };
    let masters: Vec<Rc<Served>> = (0..config.masters)
        .map(|m| {
            let clock = SimClock::at_micros(EPOCH_SECS * 1_000_000);
            let master = SimMaster::new(rng.next_u64(), clock, host::PORT)
                .expect("Lua state for a simulated master");
            let served = Rc::new(Served::new(master, EPOCH_SECS * 1_000_000));
            let drift = i64::try_from(rng.next_u64() % (2 * DRIFT_PPM + 1)).unwrap_or(0);
            served.drift_ppm.set(drift - DRIFT_PPM as i64);
            if rng.one_in(2) {
                // Durable: restart protection must still quarantine it, since a restart may
                // be a restore from an older backup.
                let mut master = served.master.borrow_mut();
                master.set_config("appendonly", "yes");
                master.set_config("appendfsync", "always");
            }
            let software = Rc::clone(&served);
            sim.host(format!("m{m}"), move || host::serve(Rc::clone(&software)));
            served
        })
        .collect();
    let stop_at = config.faulty_for;
    let client = |index: usize, workers: usize, seed: u64| Client {
        index,
        clients: config.clients,
        masters: config.masters,
        served: masters.clone(),
        workers,
        stop_at,
        mutant: config.mutant.clone(),
        restart_protection: config.beyond != Some(beyond::Beyond::UnprotectedRestarts),
        seed,
        world: Rc::clone(&world),
        history: Rc::clone(&history),
    };
    for c in 0..config.clients {
        let client = client(c, config.workers, rng.next_u64());
        sim.client(format!("c{c}"), client.run());
    }
    let mut audit = lifetime::KeyAudit::new(masters.clone(), Rc::clone(&world));
    let mut intents = intent::IntentAudit::new(masters.clone());
    let mut nemesis = Nemesis::new(
        rng.next_u64(),
        Rc::clone(&world),
        masters.clone(),
        config.clients,
        config.beyond,
        config.faults.as_deref(),
    );
    // Drawn after the nemesis's seed, so that adding the flood moved no fault.
    let flood = client(config.clients, 0, rng.next_u64());
    let flood_rng = SeedRng::new(flood.seed);
    sim.client(flood::HOST, flood::run(Rc::new(flood), flood_rng));
    let probe = client(config.clients + 1, 0, rng.next_u64());
    let probe_rng = SeedRng::new(probe.seed);
    sim.client(handoff::HOST, handoff::run(Rc::new(probe), probe_rng));
    let mut error = None;
    loop {
        let now = sim.elapsed();
        nemesis.step(&mut sim, now, stop_at, &mut history.borrow_mut());
        audit.step(now, &mut history.borrow_mut());
        intents.step(now, &mut history.borrow_mut());
        match sim.step() {
            Ok(false) => {}
            Ok(true) => break,
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    let simulated = sim.elapsed();
    drop(sim);
    audit.finish(simulated, &mut history.borrow_mut());
    let mut history = history.borrow_mut();
    let paused = &mut *history;
    let outlived = match config.beyond {
        Some(beyond::Beyond::PausedHolders) => 0,
        _ => checker::cap_paused(&mut paused.holds, &mut paused.slot_runs, &paused.pauses),
    };
    if outlived > 0 {
        *history
            .effects
            .entry("pause-outlived-validity")
            .or_default() += outlived;
    }
    for served in &masters {
        let mut conns = served.conns.borrow_mut();
        for (effect, n) in &conns.effects {
            *history.effects.entry(effect).or_default() += n;
        }
        for (at, what) in std::mem::take(&mut conns.violations) {
            history.violation(at, conns::STALE_AFTER_RECONNECT, format_args!("{what}"));
        }
    }
    let effects: Vec<String> = history
        .effects
        .iter()
        .map(|(effect, n)| format!("{effect}={n}"))
        .collect();
    history.event(
        simulated,
        format_args!("faults took effect [{}]", effects.join(" ")),
    );
    let limits = Limits {
        permits: workload::PERMITS,
        readers: quorumlock::defaults::RW_READERS,
    };
    let mut violations = checker::check(&history.holds, limits);
    // A retried slot runs again by design: its attempts are judged apart.
    let (retried, once): (Vec<_>, Vec<_>) = history
        .slot_runs
        .iter()
        .cloned()
        .partition(|run| run.checker == scheduled::RETRY_OVERLAP);
    // Each slot at most once while its record is kept: the fleet's jobs' records longer.
    let (fleet, alone): (Vec<_>, Vec<_>) = once
        .iter()
        .cloned()
        .partition(|run| scheduled::fleet_once(&run.slot));
    checker::slots_at_most_once(&alone, slots::RETENTION, &mut violations);
    checker::slots_at_most_once(&fleet, scheduled::FLEET_RETENTION, &mut violations);
    checker::runs_apart(
        &once,
        scheduled::FORBID_JOB,
        &history.pauses,
        &mut violations,
    );
    checker::retries(
        &retried,
        scheduled::RETRY_JOB,
        scheduled::RETRY_ATTEMPTS,
        &mut violations,
    );
    for (checker, n) in &history.seen {
        *violations.entry(checker).or_default() += n;
    }
    if !history.dead.is_empty() {
        violations.insert(workload::LIVENESS, history.dead.len() as u64);
    }
    let scripts = masters
        .iter()
        .map(|m| m.master.borrow().scripts_run())
        .sum();
    Outcome {
        grants: history.grants,
        scripts,
        violations,
        trace_hash: history.trace_hash(),
        trace_lines: history.lines(),
        tail: history.tail().map(str::to_owned).collect(),
        first_violations: history.first_violations.clone(),
        effects: history.effects.clone(),
        simulated,
        error,
    }
}
