#!/usr/bin/env bash
# Runs the deterministic simulation (sim/): the real library on simulated time and network
# against simulated masters running the real Lua scripts, faults from the seed. One line per
# seed (grants, violations by checker, the hash of its event trace), then a summary with grants
# per CPU-minute. Exits non-zero on any violation, or, with --mutant, when no seed caught it.
#
#   scripts/sim.sh                       # seeds 1..10
#   scripts/sim.sh --seed 42             # replay one seed (same trace hash every time)
#   scripts/sim.sh --seeds 100 --from 1000
#   scripts/sim.sh --minutes 30          # fresh seeds until the time is up
#   scripts/sim.sh --mutant minority-quorum --seeds 20   # stops at the first seed that catches it
#   scripts/sim.sh --beyond clock-jump --seeds 5   # a fault outside the model: exit 0 only if it broke
#   scripts/sim.sh --seed 42 --shrink    # a failing seed: find a smaller run that fails the same
#                                        # way, and print the command that replays it
#   more: --seconds T (faulty simulated time per seed, 20), --masters, --clients, --workers,
#   --faults NAME,... (only those faults: hold, isolate, slow-link, master-pause, client-clock,
#   crash, slow-master, quorum-restore, one-way, ring, client-pause, stall)
#
# The simulation is built with `--cfg tokio_unstable`: only then does turmoil seed tokio's
# generator (`select!` branch order, the order a watch channel wakes its receivers), which is
# otherwise drawn afresh in every process, so that a seed replays across processes, not only
# within one. It is built with `--cfg quorumlock_mutants` too, so that `--mutant` can switch
# one on (none is on unless named, as in jepsen-lite). Both flags go to a build of its own,
# target/sim (scripts/test.sh runs the replay test in it), and never reach other builds.
set -euo pipefail
cd "$(dirname "$0")/.."

RUSTFLAGS="--cfg tokio_unstable --cfg quorumlock_mutants" CARGO_TARGET_DIR=target/sim \
    cargo build --locked --release -q -p quorumlock-sim
exec target/sim/release/quorumlock-sim "$@"
