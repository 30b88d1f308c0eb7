//! Shrinking a failing run: smaller runs (less faulty time, fewer clients, workers and
//! masters) that still break one of the checkers the failing run broke, so that its trace is
//! short enough to read.
//!
//! A run is a function of its whole configuration, not only of its seed: with one client
//! fewer, every draw after the first one moves and the run is another run. So a shrink step
//! does not cut events out of the failing trace; it looks for a smaller run that fails the same
//! way, trying the seed and a few after it at each smaller configuration, and keeps the first
//! that does. Greedy: each dimension is cut as far as it goes while runs keep failing, then
//! the next, until no step is taken or the budget of runs is spent.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::world::{self, Config, Outcome};

/// Seeds tried at each smaller configuration: the failing seed and the ones after it.
const SEEDS_PER_STEP: u64 = 4;

/// What shrinking found.
#[derive(Debug)]
pub struct Shrunk {
    /// The smallest failing configuration found (its seed included).
    pub config: Config,
    /// Its run.
    pub outcome: Outcome,
    /// Runs made while shrinking.
    pub runs: u32,
}

impl Shrunk {
    /// The command that replays the shrunk run.
    pub fn command(&self) -> String {
        command(&self.config)
    }
}

/// The `scripts/sim.sh` command that replays `config`.
pub fn command(config: &Config) -> String {
    let mut command = format!(
        "scripts/sim.sh --seed {} --seconds {} --masters {} --clients {} --workers {}",
        config.seed,
        config.faulty_for.as_secs(),
        config.masters,
        config.clients,
        config.workers,
    );
    if let Some(mutant) = &config.mutant {
        command.push_str(&format!(" --mutant {mutant}"));
    }
    if let Some(beyond) = config.beyond {
        command.push_str(&format!(" --beyond {}", beyond.name()));
    }
    if let Some(faults) = &config.faults {
        command.push_str(&format!(" --faults {}", faults.join(",")));
    }
    command
}

/// Shrinks the failing run of `failing`, whose outcome is `failed`, in at most `budget` runs.
/// Returns `None` when no smaller run fails.
pub fn shrink(failing: &Config, failed: &Outcome, budget: u32) -> Option<Shrunk> {
    let broken: BTreeSet<&'static str> = failed.violations.keys().copied().collect();
    let breaks_the_same = |outcome: &Outcome| {
        outcome.error.is_some() && failed.error.is_some()
            || outcome.violations.keys().any(|c| broken.contains(c))
    };
    let mut best: Option<Shrunk> = None;
    let mut runs = 0u32;
    loop {
        let current = best.as_ref().map_or(failing, |b| &b.config);
        let mut stepped = false;
        'candidates: for candidate in smaller(current) {
            for seed in current.seed..current.seed.saturating_add(SEEDS_PER_STEP) {
                if runs >= budget {
                    return best.map(|b| Shrunk { runs, ..b });
                }
                let config = Config {
                    seed,
                    ..candidate.clone()
                };
                let outcome = world::run(&config);
                runs += 1;
                if breaks_the_same(&outcome) {
                    best = Some(Shrunk {
                        config,
                        outcome,
                        runs,
                    });
                    stepped = true;
                    break 'candidates;
                }
            }
        }
        if !stepped {
            return best.map(|b| Shrunk { runs, ..b });
        }
    }
}

/// The configurations one step smaller than `config`, most reducing first: half the faulty
/// time, one client fewer, half the workers, three masters instead of five (an odd count
/// keeps its meaning: fewer than three is not Redlock).
fn smaller(config: &Config) -> Vec<Config> {
    let mut out = Vec::new();
    let seconds = config.faulty_for.as_secs();
    if seconds > 1 {
        out.push(Config {
            faulty_for: Duration::from_secs(seconds / 2),
            ..config.clone()
        });
    }
    if config.clients > 1 {
        out.push(Config {
            clients: config.clients - 1,
            ..config.clone()
        });
    }
    if config.workers > 1 {
        out.push(Config {
            workers: config.workers / 2,
            ..config.clone()
        });
    }
    if config.masters > 3 {
        out.push(Config {
            masters: config.masters - 2,
            ..config.clone()
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config {
            seed: 7,
            masters: 5,
            clients: 4,
            workers: 8,
            faulty_for: Duration::from_secs(20),
            mutant: None,
            beyond: None,
            faults: None,
        }
    }

    #[test]
    fn each_smaller_configuration_cuts_one_dimension() {
        let smaller = smaller(&config());
        let dims: Vec<(u64, usize, usize, usize)> = smaller
            .iter()
            .map(|c| (c.faulty_for.as_secs(), c.clients, c.workers, c.masters))
            .collect();
        assert_eq!(
            dims,
            [(10, 4, 8, 5), (20, 3, 8, 5), (20, 4, 4, 5), (20, 4, 8, 3)]
        );
    }

    #[test]
    fn the_smallest_run_has_nothing_smaller() {
        let tiny = Config {
            masters: 3,
            clients: 1,
            workers: 1,
            faulty_for: Duration::from_secs(1),
            ..config()
        };
        assert!(smaller(&tiny).is_empty());
    }

    #[test]
    fn the_command_replays_every_dimension() {
        let c = Config {
            mutant: Some("zero-drift".into()),
            ..config()
        };
        assert_eq!(
            command(&c),
            "scripts/sim.sh --seed 7 --seconds 20 --masters 5 --clients 4 --workers 8 \
             --mutant zero-drift"
        );
    }
}
