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

scripts/install-deps.sh
# The clock-fault shim is C, built at run time with the system compiler; the kernel-level
# partition (late TCP delivery after a heal) needs iptables. Scenarios that lack their tool are
# reported as skipped, never as passed.
missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
if ((${#missing[@]} > 0)); then
    echo "installing: ${missing[*]}" >&2
    SUDO=""
    if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cargo run --release -p jepsen-lite -- matrix "$@"
