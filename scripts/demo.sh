#!/usr/bin/env bash
# The project's main job: builds everything and runs the quickstart demo, which starts five
# local redis-server masters, locks, extends, releases, shows contention and a paused master,
# and stops the masters again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build --workspace --all-features --release
cargo run --release --features testing --example quickstart
