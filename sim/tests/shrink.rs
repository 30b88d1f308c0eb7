//! Shrinking finds a smaller run that fails as the failing one did. Needs the simulation's own
//! build (`--cfg tokio_unstable --cfg quorumlock_mutants`, as `scripts/sim.sh` builds): the
//! failing run is a library mutant's.

use std::time::Duration;

use quorumlock_sim::shrink::shrink;
use quorumlock_sim::world::{run, Config};

/// A run of the `zero-drift` mutant breaks `validity`; its shrunk run is smaller in every
/// dimension it could cut, breaks `validity` too, and its trace is a small part of the
/// original's. The shrunk run replays: its command's configuration gives the same trace.
#[test]
#[cfg_attr(
    not(all(tokio_unstable, quorumlock_mutants)),
    ignore = "needs --cfg tokio_unstable --cfg quorumlock_mutants, as scripts/sim.sh builds"
)]
fn a_failing_run_shrinks_to_a_smaller_one_that_fails_the_same_way() {
    let failing = Config {
        seed: 1,
        masters: 3,
        clients: 4,
        workers: 8,
        faulty_for: Duration::from_secs(4),
        mutant: Some("zero-drift".into()),
        beyond: None,
        faults: None,
    };
    let failed = run(&failing);
    assert!(failed.violations.contains_key("validity"), "{failed:?}");
    let shrunk = shrink(&failing, &failed, 40).expect("a smaller run fails too");
    let small = &shrunk.config;
    assert!(
        small.clients < failing.clients
            && small.workers < failing.workers
            && small.faulty_for < failing.faulty_for,
        "not smaller: {small:?}"
    );
    assert!(
        shrunk.outcome.violations.contains_key("validity"),
        "{:?}",
        shrunk.outcome
    );
    assert!(
        shrunk.outcome.trace_lines * 4 < failed.trace_lines,
        "{} lines shrunk to {}",
        failed.trace_lines,
        shrunk.outcome.trace_lines
    );
    assert_eq!(run(small).trace_hash, shrunk.outcome.trace_hash);
}
