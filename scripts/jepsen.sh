#!/usr/bin/env bash
# Runs the jepsen-lite matrix against real redis-server processes and prints the table of
# scenario, expected outcome, observed outcome and verdict, then the path of the HTML report
# (target/jepsen-lite/matrix.html). Exits non-zero when a verdict is wrong.
#
#   scripts/jepsen.sh                 # full matrix (longer random runs)
#   scripts/jepsen.sh --quick         # the quick matrix that scripts/test.sh runs
#   scripts/jepsen.sh --seed 42       # replay a seed
#   cargo run --release -p jepsen-lite -- run --scenario client-pause --seed 42   # one scenario
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --jepsen
cargo run --release -p jepsen-lite -- matrix "$@"
