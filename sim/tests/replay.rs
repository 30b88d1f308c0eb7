//! The simulation replays: one seed, run twice, gives the same event trace, byte for byte.

use std::time::Duration;

use quorumlock_sim::world::{run, Config};

/// Two runs of one seed give one trace hash, with faults, grants and no violation; another seed
/// gives another trace.
#[test]
fn one_seed_replays_byte_for_byte() {
    let config = |seed| Config {
        seed,
        masters: 3,
        clients: 2,
        workers: 4,
        faulty_for: Duration::from_secs(2),
        mutant: None,
        short_permit_ttls: false,
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
