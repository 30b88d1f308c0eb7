//! The play of a random run: every client loops on its own while the generator's steps go
//! through the nemesis, and a watcher continues clients that paused themselves after a grant
//! (Kleppmann's pause, after more than a TTL) and starts again clients that crashed while
//! holding.

use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use serde_json::json;

use crate::client::{Command, CycleSpec};
use crate::env::{Env, Error};
use crate::generator::{self, Mix, Shape};
use crate::key_sampler::KeySampler;
use crate::nemesis::Verb;
use crate::scenario::{RandomFault, Script};

/// The mix of a random script (`None` for a scripted one).
pub fn mix(script: Script) -> Option<Mix> {
    match script {
        Script::Random(fault) => Some(Mix::Single(fault)),
        Script::Composed => Some(Mix::Composed),
        _ => None,
    }
}

/// The loops each client process of a composed run runs at once.
const WORKERS: usize = 4;

/// How long a fault stays on at least: a fault needs traffic to show that it took effect.
const FAULT_PROOF_TIME: Duration = Duration::from_secs(1);

/// Clients stopped by themselves, and when to continue them.
struct Watch {
    paused: Vec<(usize, Instant)>,
    /// The resume times' randomness, apart from the generator's: how many clients pause
    /// themselves depends on timing, and drawing for them from the run's randomness made the
    /// fault schedule after the first such pause differ from one replay of a seed to the next.
    rng: rand::rngs::StdRng,
}

/// Plays a random run for `duration`: loops, fault steps until 3 s before the end, a heal,
/// and the loops' end.
///
/// # Errors
///
/// When a fault cannot be injected or lifted, or a client does not finish.
pub async fn play(env: &mut Env, duration: Duration, mix: Mix) -> Result<(), Error> {
    let ttl_ms = env.sc.ttl_ms;
    let composed = mix == Mix::Composed;
    let spec = CycleSpec {
        acquire_deadline_ms: 2000,
        // Composed runs hold briefly on more resources: many grants under fault.
        sleep_ms: if composed { ttl_ms / 100 } else { ttl_ms / 10 },
        min_remaining_ms: Some(ttl_ms / 2),
        resources: if composed {
            env.sc.resources()
        } else {
            Vec::new()
        },
        mix: composed,
        // Per client process, on average: the rare events that hold a client or a lock up for
        // about a TTL come at a fixed pace whatever the cycle rate (see `client::happens`),
        // each several times in a 30 s run of six clients.
        pause_after_grant_every_ms: if composed { 40_000 } else { 0 },
        crash_while_holding_every_ms: if composed { 60_000 } else { 0 },
        long_hold_every_ms: if composed { 8_000 } else { 0 },
        late_extend_every_ms: if composed { 10_000 } else { 0 },
        // Several loops per client process: one that waits for a lock held long, or sits out
        // a fault, no longer idles the whole client.
        workers: if composed { WORKERS } else { 1 },
        ..env.spec("r")
    };
    let loops_end = Instant::now() + duration;
    // Keys a failed round leaves during a fault expire before the faults lift: read them
    // while the faults come and go.
    let sampler = KeySampler::start(env.masters.ports(), env.resource_keys());
    for c in 0..env.clients.len() {
        env.clients[c]
            .send(&Command::Loop {
                duration_ms: ms(duration),
                spec: spec.clone(),
            })
            .await?;
    }
    let shape = Shape {
        nodes: env.masters.len(),
        clients: env.clients.len(),
        ttl: env.ttl(),
        persistence: (0..env.masters.len())
            .map(|n| env.masters.persistence(n))
            .collect(),
        // Checked before the run started (a composed run is skipped without them).
        iptables: composed,
        loss: composed,
        // Half the composed runs go without clock faults, so that their claims are checked
        // strictly (near a clock fault an overlap is outside Redlock's model).
        clocks: env.nemesis.clocks.is_some() && (!composed || env.rng.random_bool(0.5)),
    };
    let mut watch = Watch {
        paused: Vec::new(),
        rng: rand::rngs::StdRng::seed_from_u64(env.rng.random()),
    };
    // Every fault is lifted, and the heal recorded, at least 3 s before the loops end, so that
    // the clients owe (and can show) liveness after it: the last step is cut short, and a
    // composed run leaves room for a delayed restart.
    let margin = Duration::from_secs(3)
        + if composed {
            crate::nemesis::restart_delay(env.ttl())
        } else {
            Duration::ZERO
        };
    let faults_until = Instant::now() + duration.saturating_sub(margin);
    // A fault needs a second to show it took effect (traffic it cut or delayed).
    while mix != Mix::Single(RandomFault::None)
        && faults_until.saturating_duration_since(Instant::now()) >= FAULT_PROOF_TIME
    {
        let step = generator::step(&mut env.rng, mix, &shape);
        // A client that just crashed itself is started again first (and a master due back,
        // before the step samples them): a pause aimed at its number must stop a live process,
        // not the zombie of its old one.
        watch_for(env, &mut watch, Duration::ZERO, &spec, loops_end).await?;
        // Starting a crashed client again takes a while: a step that would now be cut to
        // less than the second its faults need to show an effect is not begun (a delay
        // injected just before the faults' end crosses no traffic, and its unproven fault
        // would fail the run).
        if faults_until.saturating_duration_since(Instant::now()) < FAULT_PROOF_TIME {
            break;
        }
        if composed {
            env.with_nemesis(|n, t| {
                n.begin_step(t, &step.faults);
                Ok(())
            })?;
        }
        for fault in &step.faults {
            env.inject(fault)?;
        }
        let labels: Vec<String> = step.faults.iter().map(|f| f.label()).collect();
        env.phase(&labels.join(", "));
        // Injecting can take seconds (a clock fault's read-back under packet loss just
        // injected): every fault still gets the second it needs to show an effect, even if the
        // step then ends up to a second past `faults_until` (the margin after it is 3 s and a
        // delayed restart, above what liveness needs).
        let left = faults_until.saturating_duration_since(Instant::now());
        let hold = step.hold.min(left).max(FAULT_PROOF_TIME);
        watch_for(env, &mut watch, hold, &spec, loops_end).await?;
        env.with_nemesis(|n, t| n.end_step(t))?;
        env.phase("quiet");
        let left = faults_until.saturating_duration_since(Instant::now());
        watch_for(env, &mut watch, step.quiet.min(left), &spec, loops_end).await?;
    }
    env.heal()?;
    env.phase("clients finishing");
    // The loops run for the whole duration; the wait below covers only their last cycle.
    let rest = loops_end.saturating_duration_since(Instant::now());
    watch_for(env, &mut watch, rest, &spec, loops_end).await?;
    for (c, _) in std::mem::take(&mut watch.paused) {
        env.clients[c].signal(nix::sys::signal::Signal::SIGCONT);
        env.nemesis.record(Verb::ResumeClient, json!({"client": c}));
    }
    // A client may still stop itself after a grant until its loop ends, after the watcher's
    // last look: continue any that did while waiting for the loops to finish.
    let deadline = Instant::now() + env.ttl() * 3 + Duration::from_secs(10);
    for c in 0..env.clients.len() {
        loop {
            for other in 0..env.clients.len() {
                if env.clients[other].is_stopped() {
                    env.clients[other].signal(nix::sys::signal::Signal::SIGCONT);
                    env.nemesis
                        .record(Verb::ResumeClient, json!({"client": other, "at": "end"}));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let step = left.min(Duration::from_millis(200));
            match tokio::time::timeout(step, env.clients[c].wait("done", step)).await {
                Ok(Ok(_)) => break,
                // It crashed while holding in its last cycles: its loop is over too.
                _ if env.clients[c].exited() => break,
                _ if Instant::now() >= deadline => {
                    return Err(format!("client {c} sent no done before the deadline").into());
                }
                _ => {}
            }
        }
    }
    env.samples = sampler.stop();
    Ok(())
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Waits `how_long`, every 50 ms continuing clients whose own pause has lasted past the TTL
/// and starting again clients that crashed (each recorded, the pause with its proof).
async fn watch_for(
    env: &mut Env,
    watch: &mut Watch,
    how_long: Duration,
    spec: &CycleSpec,
    loops_end: Instant,
) -> Result<(), Error> {
    let until = Instant::now() + how_long;
    loop {
        env.with_nemesis(|n, t| n.restart_due(t))?;
        let now = Instant::now();
        let mut due = Vec::new();
        watch.paused.retain(|&(c, at)| {
            let keep = at > now;
            if !keep {
                due.push(c);
            }
            keep
        });
        for c in due {
            env.clients[c].signal(nix::sys::signal::Signal::SIGCONT);
            env.nemesis.record(Verb::ResumeClient, json!({"client": c}));
        }
        for c in 0..env.clients.len() {
            if env.nemesis.stops(c) || watch.paused.iter().any(|&(p, _)| p == c) {
                continue;
            }
            if env.clients[c].is_stopped() {
                // Mostly longer than the TTL (the lock moves on before it continues), sometimes
                // ending just before or after its validity does.
                let ttl = env.ttl();
                let resume_at = Instant::now()
                    + ttl.mul_f64(watch.rng.random_range(0.8..1.0))
                    + Duration::from_millis(watch.rng.random_range(0..400));
                watch.paused.push((c, resume_at));
                let check = crate::evidence::process_stopped(env.clients[c].pid);
                env.nemesis
                    .evidence
                    .record(format!("client {c} paused itself after a grant"), check);
                env.nemesis.record(
                    Verb::PauseClient,
                    json!({"client": c, "how": "itself, after a grant"}),
                );
            } else if env.clients[c].exited() {
                env.nemesis
                    .record(Verb::CrashClient, json!({"client": c, "restarted": true}));
                env.respawn(c).await?;
                // Not waiting for its warm-up (which may fail under a fault, and would hold up
                // the schedule): it reads the loop command once warm, and loops all the same.
                let left = loops_end.saturating_duration_since(Instant::now());
                env.clients[c]
                    .send(&Command::Loop {
                        duration_ms: ms(left),
                        spec: spec.clone(),
                    })
                    .await?;
            }
        }
        if Instant::now() >= until {
            return Ok(());
        }
        tokio::time::sleep(
            Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())),
        )
        .await;
    }
}
