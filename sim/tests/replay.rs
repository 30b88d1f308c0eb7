//! The simulation replays: one seed, run twice, gives the same event trace, byte for byte. Both
//! tests need the simulation's own build (`--cfg tokio_unstable`, see `scripts/sim.sh`):
//! `RUSTFLAGS="--cfg tokio_unstable --cfg quorumlock_mutants" CARGO_TARGET_DIR=target/sim
//! cargo test --release -p quorumlock-sim --test replay`.

use std::time::Duration;

use quorumlock_sim::world::{run, Config};

/// Two runs of one seed give one trace hash, with faults, grants and no violation; another seed
/// gives another trace. Without a seeded tokio, every runtime draws its generator afresh, even
/// within one process (see [`one_seed_replays_across_processes`]).
#[test]
#[cfg_attr(
    not(tokio_unstable),
    ignore = "needs --cfg tokio_unstable, as scripts/sim.sh builds"
)]
fn one_seed_replays_byte_for_byte() {
    let config = |seed| Config {
        seed,
        masters: 3,
        clients: 2,
        workers: 4,
        faulty_for: Duration::from_secs(2),
        mutant: None,
        beyond: None,
        faults: None,
    };
    let first = run(&config(11));
    let again = run(&config(11));
    assert!(
        first.grants > 50,
        "too few grants to prove anything: {first:?}"
    );
    assert!(first.violations.is_empty(), "{first:?}");
    assert_eq!(first.trace_hash, again.trace_hash);
    assert_eq!(first.trace_lines, again.trace_lines);
    assert_eq!(first.grants, again.grants);
    assert_ne!(first.trace_hash, run(&config(12)).trace_hash);
}

/// The trace hash printed by one process running `seed` for `seconds` of faulty time.
fn hash_in_a_process(seed: &str, seconds: &str) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock-sim"))
        .args(["--seed", seed, "--seconds", seconds])
        .output()
        .expect("the simulation binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let line = stdout
        .lines()
        .find(|line| line.starts_with("seed "))
        .unwrap_or_else(|| panic!("no seed line in {stdout}"));
    line.split(" trace ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no trace hash in {line}"))
        .to_owned()
}

/// Two processes running one seed give one trace hash. Each process seeds std's hashers and
/// tokio's runtime generator (`select!` branch order, the order a watch channel wakes its
/// receivers) afresh, so a run long enough to meet those paths shows what in-process replays
/// cannot. Tokio takes a seed for its generator only when built with `--cfg tokio_unstable`, as
/// `scripts/sim.sh` builds the simulation; without it this cannot pass.
#[test]
#[cfg_attr(
    not(tokio_unstable),
    ignore = "needs --cfg tokio_unstable, as scripts/sim.sh builds"
)]
fn one_seed_replays_across_processes() {
    let (seed, seconds) = ("7", "10");
    let first = std::thread::spawn(move || hash_in_a_process(seed, seconds));
    let again = hash_in_a_process(seed, seconds);
    assert_eq!(first.join().expect("first process"), again);
}

/// A seed with stalled connections replays too (which connection, how long, which client sides
/// are reset and when, all from the seed), and the stalls took effect: requests held, stale
/// ones run late, others landing on a master side the library had closed.
#[test]
#[cfg_attr(
    not(tokio_unstable),
    ignore = "needs --cfg tokio_unstable, as scripts/sim.sh builds"
)]
fn a_seed_with_stalls_replays_byte_for_byte() {
    let config = Config {
        seed: 6,
        masters: 3,
        clients: 2,
        workers: 4,
        faulty_for: Duration::from_secs(4),
        mutant: None,
        beyond: None,
        faults: Some(vec!["stall"]),
    };
    let first = run(&config);
    let again = run(&config);
    assert!(first.violations.is_empty(), "{first:?}");
    for effect in [
        "stall-requests-held",
        "stall-client-resets",
        "stall-stale-requests",
        "stall-requests-on-closed",
    ] {
        assert!(
            first.effects.get(effect).is_some_and(|&n| n > 0),
            "{effect}: {:?}",
            first.effects
        );
    }
    assert_eq!(first.trace_hash, again.trace_hash);
    assert_eq!(first.effects, again.effects);
}
