//! The command line of `quorumlock-sim` (`scripts/sim.sh`): every flag checked, every wrong
//! value a clear error (never a panic, never a run that does something else than asked).

use std::time::Duration;

use crate::world::beyond::Beyond;
use crate::world::{self, Config};

/// The longest faulty time a seed may have, in seconds: a run is simulated for a day at most
/// (turmoil's `simulation_duration`), and an hour of faults is already far more than a seed
/// needs.
pub const MAX_SECONDS: u64 = 3600;
/// The most masters, clients and workers per client a run may have: each is a turmoil host or
/// task on one thread, and more than these make a seed take hours.
pub const MAX_MASTERS: usize = 15;
/// See [`MAX_MASTERS`].
pub const MAX_CLIENTS: usize = 64;
/// See [`MAX_MASTERS`].
pub const MAX_WORKERS: usize = 256;
/// The longest `--minutes`: a year.
pub const MAX_MINUTES: f64 = 525_600.0;

/// What to run.
#[derive(Debug, Clone)]
pub struct Args {
    /// The seeds to run, in order; empty with `--minutes` alone (seeds from `from` on).
    pub seeds: Vec<u64>,
    /// How long to keep running fresh seeds, if bounded by time.
    pub minutes: Option<f64>,
    /// The first seed of a batch.
    pub from: u64,
    /// Whether a failing seed is shrunk.
    pub shrink: bool,
    /// Every run's configuration but its seed.
    pub config: Config,
}

/// Parses the arguments after the program's name.
///
/// # Errors
///
/// A message naming the flag and what is wrong with its value.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut args = args.into_iter();
    let (mut seed, mut count, mut from, mut minutes) = (None, None, None, None);
    let mut shrink = false;
    let mut config = Config {
        seed: 0,
        masters: 3,
        clients: 4,
        workers: 8,
        faulty_for: Duration::from_secs(20),
        mutant: None,
        beyond: None,
        faults: None,
    };
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        let within = |v: String, min: u64, max: u64| match v.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            Ok(n) => Err(format!("{flag} {n}: must be from {min} to {max}")),
            Err(e) => Err(format!("{flag} {v:?}: {e}")),
        };
        let number = |v: String, max: u64| within(v, 1, max);
        match flag.as_str() {
            "--seed" => seed = Some(within(value()?, 0, u64::MAX)?),
            "--seeds" => count = Some(number(value()?, u64::MAX)?),
            "--from" => from = Some(within(value()?, 0, u64::MAX)?),
            "--minutes" => {
                let v = value()?;
                let m = v
                    .parse::<f64>()
                    .map_err(|e| format!("--minutes {v:?}: {e}"))?;
                if !(m > 0.0 && m <= MAX_MINUTES) {
                    return Err(format!(
                        "--minutes {v}: must be above 0 and at most {MAX_MINUTES}"
                    ));
                }
                minutes = Some(m);
            }
            "--seconds" => config.faulty_for = Duration::from_secs(number(value()?, MAX_SECONDS)?),
            "--masters" => config.masters = number(value()?, MAX_MASTERS as u64)? as usize,
            "--clients" => config.clients = number(value()?, MAX_CLIENTS as u64)? as usize,
            "--workers" => config.workers = number(value()?, MAX_WORKERS as u64)? as usize,
            "--shrink" => shrink = true,
            "--beyond" => config.beyond = Some(Beyond::by_name(&value()?)?),
            "--faults" => config.faults = Some(world::nemesis::faults_by_name(&value()?)?),
            "--mutant" => {
                let name = value()?;
                world::mutants::by_name(&name)?;
                config.mutant = Some(name);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if config.mutant.is_some() && config.beyond.is_some() {
        return Err("--mutant and --beyond each expect a break of their own: one at a time".into());
    }
    if seed.is_some() && (count.is_some() || from.is_some() || minutes.is_some()) {
        return Err("--seed runs one seed: not with --seeds, --from or --minutes".into());
    }
    let from = from.unwrap_or(1);
    let batch = |n: u64| match from.checked_add(n - 1) {
        Some(last) => Ok((from..=last).collect()),
        None => Err(format!(
            "--from {from} with {n} seeds runs past the last seed, {}",
            u64::MAX
        )),
    };
    let seeds = match (seed, count, minutes) {
        (Some(seed), _, _) => vec![seed],
        (None, Some(n), _) => batch(n)?,
        // Seeds from `from` on until the time runs out.
        (None, None, Some(_)) => Vec::new(),
        (None, None, None) => batch(10)?,
    };
    Ok(Args {
        seeds,
        minutes,
        from,
        shrink,
        config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(line: &str) -> Result<Args, String> {
        parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn defaults_and_batches() {
        let args = parse_str("").expect("defaults");
        assert_eq!(args.seeds, (1..=10).collect::<Vec<_>>());
        assert_eq!(
            parse_str("--seeds 3 --from 7").expect("a batch").seeds,
            vec![7, 8, 9]
        );
        assert_eq!(parse_str("--seed 0").expect("seed 0").seeds, vec![0]);
        let last = u64::MAX.to_string();
        assert_eq!(
            parse_str(&format!("--seeds 1 --from {last}"))
                .expect("the last seed")
                .seeds,
            vec![u64::MAX]
        );
        assert!(parse_str("--minutes 0.5")
            .expect("minutes")
            .seeds
            .is_empty());
    }

    #[test]
    fn wrong_values_are_errors() {
        let huge = "99999999999999999999999";
        let last = u64::MAX.to_string();
        for line in [
            "--seeds 0",
            "--seeds -1",
            &format!("--seeds {huge}"),
            "--seconds 0",
            "--seconds -5",
            "--seconds 99999999999",
            "--masters 0",
            "--masters 100000",
            "--clients 0",
            "--clients 100000",
            "--workers 0",
            "--workers 1000000",
            "--minutes 0",
            "--minutes -1",
            "--minutes nan",
            "--minutes inf",
            "--minutes 1e300",
            "--from -3",
            &format!("--from {last}"),
            &format!("--seeds 2 --from {last}"),
            "--seed 1 --seeds 3",
            "--seed 1 --minutes 1",
            "--seed abc",
            "--seed",
            "--mutant nope",
            "--beyond nope",
            "--faults ring,nope",
            "--faults",
            "--bogus",
        ] {
            let error = parse_str(line).err();
            assert!(error.is_some(), "{line:?} was accepted");
        }
    }
}
