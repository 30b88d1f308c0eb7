#!/usr/bin/env bash
# Installs the system packages the project needs when they are missing (Debian/Ubuntu).
# Safe to run repeatedly: it does nothing when everything is there.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# The TLS tests generate their certificates with it.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)

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
