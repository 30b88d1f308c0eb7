#!/usr/bin/env bash
# The project's test entry point (what CI runs): installs missing system packages, checks
# formatting and lints, and runs every test of the workspace against real redis-server
# processes that the tests start and stop themselves.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --jepsen

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings

echo "== cargo test"
cargo test --workspace --all-features

echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --quiet

echo "== all checks passed"

echo "== jepsen-lite smoke: the quick matrix (real redis-server, scripted faults, mutants; ~4 min)"
cargo run --release -p jepsen-lite -- matrix --quick
echo "== jepsen-lite verdicts all as expected"
