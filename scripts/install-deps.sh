#!/usr/bin/env bash
# Installs the system packages the project needs when they are missing (Debian/Ubuntu).
# Safe to run repeatedly: it does nothing when everything is there.
#
#   scripts/install-deps.sh             # redis-server, openssl, protoc (tests and builds)
#   scripts/install-deps.sh --jepsen    # also a C compiler (clock shim) and iptables (jepsen-lite)
#   scripts/install-deps.sh --compare   # also etcd, ZooKeeper (with Java) and PostgreSQL, the
#                                       # servers of the comparison (quorumlock-compare), and
#                                       # iptables (its packet loss and member partitions)
# The flags combine: scripts/install-deps.sh --jepsen --compare.
set -euo pipefail

jepsen=false
compare=false
for arg in "$@"; do
    case "$arg" in
        --jepsen) jepsen=true ;;
        --compare) compare=true ;;
        *) echo "usage: scripts/install-deps.sh [--jepsen] [--compare]" >&2; exit 2 ;;
    esac
done

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# The TLS tests generate their certificates with it.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# scripts/check-cycles.py (the module graph check in test.sh).
command -v python3 >/dev/null 2>&1 || missing+=(python3)
# The etcd client of quorumlock-compare (a workspace member) compiles etcd's gRPC definitions.
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
# ... and imports protobuf's own definitions (descriptor.proto, struct.proto).
[[ -f /usr/include/google/protobuf/descriptor.proto ]] || missing+=(libprotobuf-dev)
if $jepsen; then
    # jepsen-lite builds its clock-fault shim (C) at run time with the system compiler, and its
    # kernel-level partition and packet loss need iptables. Scenarios that lack their tool are
    # reported as skipped, which fails the matrix (unless --allow-skip), never as passed.
    command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
    command -v iptables >/dev/null 2>&1 || missing+=(iptables)
fi
if $compare; then
    # The servers quorumlock-compare's tests and the comparison start themselves (none is run
    # as a service): an etcd cluster, a ZooKeeper ensemble (Java comes with the package) and a
    # PostgreSQL server, run as the package's `postgres` user when we are root.
    command -v etcd >/dev/null 2>&1 || [[ -x /usr/bin/etcd ]] || missing+=(etcd-server)
    [[ -f /usr/share/java/zookeeper.jar ]] || missing+=(zookeeper)
    compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || missing+=(postgresql)
    # Packet loss and the cut between members are iptables rules on loopback.
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

# rust-toolchain.toml pins the toolchain (and so the MSRV). This machine kind cannot download
# toolchains: when the pinned version is not registered under its name but the installed
# stable toolchain is that very version, register it under the pinned name.
# (`rustup toolchain link` refuses version names, so the toolchain directory is linked, as
# this machine kind's image does itself.)
pinned=$(sed -n 's/^channel = "\(.*\)"/\1/p' "$(dirname "$0")/../rust-toolchain.toml")
if command -v rustup >/dev/null 2>&1 \
    && ! RUSTUP_AUTO_INSTALL=0 rustup run "$pinned" rustc --version >/dev/null 2>&1; then
    stable=$(rustup run stable rustc --version 2>/dev/null | awk '{print $2}')
    if [[ $stable == "$pinned" ]]; then
        host=$(rustup run stable rustc -vV | sed -n 's/^host: //p')
        toolchains="${RUSTUP_HOME:-$HOME/.rustup}/toolchains"
        ln -s "stable-$host" "$toolchains/$pinned-$host"
    else
        echo "rust-toolchain.toml wants $pinned; the installed stable is ${stable:-missing}" >&2
        exit 1
    fi
fi
