#!/usr/bin/env bash
# The end-to-end benchmark: quorumlock against a single Redis lock, the rslock and redlock
# crates and a minimal reference Redlock, on local redis-server masters it starts itself.
# Prints a table per section and the targets of the benchmark issue as ratios from this run;
# writes results.csv and SVG charts under target/bench/ (or --out DIR), and the printed tables
# of the last run to target/bench/last-run.txt.
#
#   scripts/bench.sh                    # full run
#   scripts/bench.sh --quick            # smoke run (numbers not meaningful)
#   scripts/bench.sh --only latency --only throughput
#   scripts/bench.sh --only memory --cycles 1000000   # memory over a million cycles
#
# Not part of scripts/test.sh: CI keeps the bench compiling (clippy --workspace) but never
# times it. Numbers on a shared machine are noisy: read ratios within one run.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cargo build --release -p quorumlock-bench
mkdir -p target/bench
target/release/quorumlock-bench "$@" | tee target/bench/last-run.txt
