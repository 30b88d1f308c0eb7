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
#   more: --seconds T (faulty simulated time per seed, 20), --masters, --clients, --workers
#
# A mutant needs the library built with `--cfg quorumlock_mutants`: that build goes to
# target/mutants (as jepsen-lite's), so that the flag never reaches other builds. Runs without
# --mutant use the same build (no mutant is switched on unless named, as in jepsen-lite): one
# release build of the workspace's dependencies instead of two.
set -euo pipefail
cd "$(dirname "$0")/.."

RUSTFLAGS="--cfg quorumlock_mutants" CARGO_TARGET_DIR=target/mutants \
    cargo build --locked --release -q -p quorumlock-sim
exec target/mutants/release/quorumlock-sim "$@"
