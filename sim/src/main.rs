//! `quorumlock-sim [--seed S | --seeds N [--from S]] [--minutes M] [--seconds T] [--mutant NAME
//! | --beyond FAULT] [--faults NAME,...] [--shrink]`: runs seeds of the deterministic simulation, one line per seed
//! (grants, violations by checker, the trace hash), then a summary with grants per CPU-minute.
//! Exits non-zero on any violation, or, with `--mutant` (a library mutant) or `--beyond` (a
//! fault outside the model), when no seed broke: those must break. With `--shrink`, a failing
//! seed (or the seed that broke) is shrunk to a smaller run that fails the same way, printed
//! with the command that replays it. `scripts/sim.sh` builds and runs it.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use quorumlock_sim::shrink;
use quorumlock_sim::world::{self, Config, Outcome};

/// `println!`, except that a closed stdout (`quorumlock-sim | head`) ends the process quietly
/// instead of panicking: nobody reads the rest.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(141);
        }
    }};
}

/// Runs a shrink may make (each a whole simulated run, most of them much smaller).
const SHRINK_BUDGET: u32 = 60;

/// CPU time this process used (user + system), from `/proc`; wall time where there is none.
fn cpu_time(started: Instant) -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    match (ticks(11), ticks(12)) {
        // Linux reports in USER_HZ, 100 per second.
        (Some(user), Some(system)) => Duration::from_millis((user + system) * 10),
        _ => started.elapsed(),
    }
}

fn main() -> ExitCode {
    let args = match quorumlock_sim::args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(error) => {
            eprintln!("quorumlock-sim: {error}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let budget = args.minutes.map(|m| Duration::from_secs_f64(m * 60.0));
    let seeds: Box<dyn Iterator<Item = u64>> = if args.seeds.is_empty() {
        Box::new(args.from..=u64::MAX)
    } else {
        Box::new(args.seeds.into_iter())
    };
    let (mut runs, mut grants, mut failing, mut simulated) = (0u64, 0u64, 0u64, Duration::ZERO);
    let mut scripts = 0u64;
    let mut effects = std::collections::BTreeMap::<&str, u64>::new();
    let mut caught = None;
    // A mutant or a fault outside the model must break the lock: a run stops at the first break.
    let must_break = args.config.mutant.is_some() || args.config.beyond.is_some();
    // The runs a shrink makes are not the seeds' runs: their CPU is left out of the rate.
    let mut shrinking = Duration::ZERO;
    for seed in seeds {
        if budget.is_some_and(|b| started.elapsed() >= b) {
            break;
        }
        let config = Config {
            seed,
            ..args.config.clone()
        };
        let outcome = world::run(&config);
        runs += 1;
        grants += outcome.grants;
        scripts += outcome.scripts;
        for (effect, n) in &outcome.effects {
            *effects.entry(effect).or_default() += n;
        }
        simulated += outcome.simulated;
        let violations: Vec<String> = outcome
            .violations
            .iter()
            .map(|(c, n)| format!("{c}={n}"))
            .collect();
        say!(
            "seed {seed}: grants {} violations [{}] trace {} ({} events, {:.1} s simulated){}",
            outcome.grants,
            violations.join(" "),
            outcome.trace_hash,
            outcome.trace_lines,
            outcome.simulated.as_secs_f64(),
            outcome
                .error
                .as_deref()
                .map(|e| format!(" error: {e}"))
                .unwrap_or_default(),
        );
        if !outcome.violations.is_empty() || outcome.error.is_some() {
            failing += 1;
            for line in &outcome.first_violations {
                say!("  {line}");
            }
            if args.shrink {
                let before = cpu_time(started);
                report_shrunk(&config, &outcome);
                shrinking += cpu_time(started).saturating_sub(before);
            } else if !must_break {
                say!(
                    "  last events of seed {seed} (replay: {}; a smaller run: add --shrink):",
                    shrink::command(&config)
                );
                for line in &outcome.tail {
                    say!("    {line}");
                }
            }
            if must_break && caught.is_none() {
                caught = Some((runs, seed, violations.join(" "), outcome.simulated));
                break;
            }
        }
    }
    let cpu = cpu_time(started)
        .saturating_sub(shrinking)
        .max(Duration::from_millis(1));
    let wall = started.elapsed().max(Duration::from_millis(1));
    say!(
        "summary: {runs} seeds, {grants} grants, {failing} failing; {:.0} grants per CPU-minute \
         ({:.1} s CPU); {:.1} simulated s per wall s; {scripts} scripts run by the masters \
         ({:.1} per grant)",
        grants as f64 / cpu.as_secs_f64() * 60.0,
        cpu.as_secs_f64(),
        simulated.as_secs_f64() / wall.as_secs_f64(),
        scripts as f64 / grants.max(1) as f64,
    );
    let effects: Vec<String> = effects.iter().map(|(e, n)| format!("{e}={n}")).collect();
    say!("faults took effect: [{}]", effects.join(" "));
    let expected = match (&args.config.mutant, args.config.beyond) {
        (Some(name), _) => Some(format!("mutant {name}")),
        (None, Some(beyond)) => Some(format!("fault outside the model {}", beyond.name())),
        (None, None) => None,
    };
    match (expected, caught) {
        (Some(what), Some((after, seed, checkers, at))) => {
            say!(
                "{what} caught after {after} seed(s) (seed {seed}, {checkers}, {:.1} s simulated)",
                at.as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        (Some(what), None) => {
            say!("{what} NOT caught in {runs} seed(s)");
            ExitCode::FAILURE
        }
        (None, _) if failing > 0 => ExitCode::FAILURE,
        (None, _) => ExitCode::SUCCESS,
    }
}

/// Shrinks the failing run of `config` and prints the smallest failing run found: its command,
/// violations, first violations and last events.
fn report_shrunk(config: &Config, outcome: &Outcome) {
    say!("  shrinking (at most {SHRINK_BUDGET} runs)...");
    let Some(shrunk) = shrink::shrink(config, outcome, SHRINK_BUDGET) else {
        say!("  no smaller run fails; last events of this one:");
        for line in &outcome.tail {
            say!("    {line}");
        }
        return;
    };
    let violations: Vec<String> = shrunk
        .outcome
        .violations
        .iter()
        .map(|(c, n)| format!("{c}={n}"))
        .collect();
    say!(
        "  shrunk in {} runs: {} ({} events instead of {}, violations [{}])",
        shrunk.runs,
        shrunk.command(),
        shrunk.outcome.trace_lines,
        outcome.trace_lines,
        violations.join(" "),
    );
    for line in &shrunk.outcome.first_violations {
        say!("    {line}");
    }
    say!("  its last events (all of them: QUORUMLOCK_SIM_TRACE=FILE before the command):");
    for line in &shrunk.outcome.tail {
        say!("    {line}");
    }
}
