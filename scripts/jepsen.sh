#!/usr/bin/env bash
# Runs the jepsen-lite matrix against real redis-server processes and prints the table of
# scenario, expected outcome, observed outcome and verdict, then the path of the HTML report
# (target/jepsen-lite/matrix.html). Exits non-zero when a verdict is wrong.
#
#   scripts/jepsen.sh                 # full matrix (longer random runs)
#   scripts/jepsen.sh --quick         # the quick matrix that scripts/test.sh runs
#   scripts/jepsen.sh --seed 42       # replay a seed
#   scripts/jepsen.sh run --scenario client-pause --seed 42   # one scenario
#   scripts/jepsen.sh soak --minutes 30          # composed random runs back to back, N = 1,3,5,7
#   scripts/jepsen.sh soak --minutes 10 --mutation min-token  # seeds until a mutant is caught
#   scripts/jepsen.sh cron --quick [--seed S] [--mutant release-at-end]  # the cron workload alone
#   scripts/jepsen.sh workload --kind election|lock-all|semaphore|rw-lock --quick [--seed S] [--mutant NAME]
#   scripts/jepsen.sh compare [--quick]   # Redlock against etcd, ZooKeeper and PostgreSQL locks:
#                                         # every subject x fault cell and the benchmark, into
#                                         # target/jepsen-lite/compare.{json,html} (quorumlock-compare;
#                                         # --subject/--fault narrow it; about 15 min cold to build)
#
# jepsen-lite is built with `--cfg quorumlock_mutants` (the deliberately broken library variants
# its mutant scenarios run), in a target directory of its own so that the flag never reaches
# other builds.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} == compare ]]; then
    # The comparison is its own crate (its servers' clients take long to build) and needs none
    # of jepsen-lite's mutants: the ordinary release build.
    shift
    scripts/install-deps.sh --compare
    exec cargo run --locked --release -p quorumlock-compare -- all "$@"
fi
scripts/install-deps.sh --jepsen
if [[ ${1:-} == run || ${1:-} == list || ${1:-} == soak || ${1:-} == cron || ${1:-} == workload ]]; then command=(); else command=(matrix); fi
RUSTFLAGS="--cfg quorumlock_mutants" CARGO_TARGET_DIR=target/mutants \
    cargo run --locked --release -p jepsen-lite -- "${command[@]}" "$@"
if [[ ${#command[@]} -gt 0 && " $* " == *" --quick "* ]]; then
    # The cron workload: scheduler workers with skewed clocks under faults.
    RUSTFLAGS="--cfg quorumlock_mutants" CARGO_TARGET_DIR=target/mutants \
        cargo run --locked --release -p jepsen-lite -- cron --quick
    # The election, lock-all, semaphore and rw-lock workloads: fenced leaders, sets, permits
    # and readers/writers under faults (about 35 s each).
    for kind in election lock-all semaphore rw-lock; do
        RUSTFLAGS="--cfg quorumlock_mutants" CARGO_TARGET_DIR=target/mutants \
            cargo run --locked --release -p jepsen-lite -- workload --kind "$kind" --quick
    done
fi
