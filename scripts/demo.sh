#!/usr/bin/env bash
# The project's main job: installs what is missing, builds the library and runs the quickstart
# demo, which starts five local redis-server masters, locks, extends, releases, shows contention,
# a paused master and a majority down, and stops the masters again. The README's tour lists the
# other examples.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo run --locked --release --example quickstart
