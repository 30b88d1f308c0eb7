#!/usr/bin/env bash
# Installs the system packages the project needs when they are missing (Debian/Ubuntu).
# Safe to run repeatedly: it does nothing when everything is there.
#
#   scripts/install-deps.sh            # redis-server, openssl (library tests)
#   scripts/install-deps.sh --jepsen   # also a C compiler (clock shim) and iptables (jepsen-lite)
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# The TLS tests generate their certificates with it.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [[ ${1:-} == --jepsen ]]; then
    # jepsen-lite builds its clock-fault shim (C) at run time with the system compiler, and its
    # kernel-level partition and packet loss need iptables. Scenarios that lack their tool are
    # reported as skipped, never as passed.
    command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
    command -v iptables >/dev/null 2>&1 || missing+=(iptables)
fi

if ((${#missing[@]} > 0)); then
    echo "installing: ${missing[*]}" >&2
    SUDO=""
    if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null 2>&1 || {
    echo "cargo not found: install a Rust toolchain (https://rustup.rs)" >&2
    exit 1
}
