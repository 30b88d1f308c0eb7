#!/usr/bin/env bash
# Runs N independent local redis-server masters by hand, for trying quorumlock out.
#
#   scripts/masters.sh start N [base-port]   # masters on base-port .. base-port+N-1 (default 7001)
#   scripts/masters.sh stop  N [base-port]
#   scripts/masters.sh urls  N [base-port]   # prints the comma-separated node URLs
#
# Data and logs live under target/masters/<port>/. Persistence is off (these are for trying
# things out); see the crate docs on restarts without data.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 2 ]] || usage
action=$1
count=$2
base=${3:-7001}
[[ $count =~ ^[0-9]+$ && $count -ge 1 ]] || { echo "N must be a positive integer, got '$count'" >&2; exit 2; }
[[ $base =~ ^[0-9]+$ && $base -ge 1 && $((base + count - 1)) -le 65535 ]] || { echo "base-port must leave room for $count ports, got '$base'" >&2; exit 2; }

case $action in
start)
    scripts/install-deps.sh
    for ((i = 0; i < count; i++)); do
        port=$((base + i))
        dir=target/masters/$port
        mkdir -p "$dir"
        if [[ -f $dir/redis.pid ]] && kill -0 "$(cat "$dir/redis.pid")" 2>/dev/null; then
            echo "master on port $port already running (pid $(cat "$dir/redis.pid"))"
            continue
        fi
        redis-server --port "$port" --bind 127.0.0.1 --dir "$PWD/$dir" --daemonize yes \
            --pidfile "$PWD/$dir/redis.pid" --logfile "$PWD/$dir/redis.log" \
            --save "" --appendonly no --protected-mode no
        for _ in $(seq 100); do
            redis-cli -p "$port" ping >/dev/null 2>&1 && break
            sleep 0.05
        done
        redis-cli -p "$port" ping >/dev/null 2>&1 || { echo "master on port $port did not start; see $dir/redis.log" >&2; exit 1; }
        echo "master on port $port (pid $(cat "$dir/redis.pid"))"
    done
    "$0" urls "$count" "$base"
    ;;
stop)
    for ((i = 0; i < count; i++)); do
        port=$((base + i))
        pidfile=target/masters/$port/redis.pid
        if [[ -f $pidfile ]]; then
            pid=$(cat "$pidfile")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
            kill -9 "$pid" 2>/dev/null || true
            rm -f "$pidfile"
            echo "stopped master on port $port"
        fi
    done
    ;;
urls)
    urls=()
    for ((i = 0; i < count; i++)); do urls+=("redis://127.0.0.1:$((base + i))"); done
    (IFS=,; echo "${urls[*]}")
    ;;
*) usage ;;
esac
