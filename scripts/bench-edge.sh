#!/usr/bin/env bash
# Benchmarks of the Envoy RLS and the proxy (BENCHMARKS.md, the Envoy and proxy section).
# Needs wrk (apt-get install -y wrk). Loopback only; every process it starts
# is stopped by its PID at the end. Usage: scripts/bench-edge.sh [rounds] [seconds]
set -euo pipefail
rounds=${1:-3}
seconds=${2:-5}
cd "$(dirname "$0")/.."
cargo build --release -q -p tollgate-cli -p tollgate-envoy -p tollgate-proxy --examples --bins
bin=target/release
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

"$bin/examples/rls_server" 127.0.0.1:18081 >/dev/null & pids+=($!)
"$bin/examples/hello_upstream" 127.0.0.1:13000 >/dev/null & pids+=($!)
# A limit no benchmark reaches (GCRA state is O(1)): every request is decided and forwarded.
"$bin/tollgate" proxy --upstream http://127.0.0.1:13000 --listen 127.0.0.1:18082 \
    --policy gcra --limit 1000000 --window 1s >/dev/null & pids+=($!)
sleep 1

echo "## RLS over gRPC ($(nproc) cores, $(uptime | sed 's/.*load/load/'))"
for _ in $(seq "$rounds"); do
    "$bin/examples/rls_load" addr=127.0.0.1:18081 connections=4 concurrency=64 seconds="$seconds" keys=10000 | tail -n1
done

echo "## proxy overhead: wrk -t2 -c32 -d${seconds}s, direct then through the proxy, alternating"
for _ in $(seq "$rounds"); do
    for port in 13000 18082; do
        rps=$(wrk -t2 -c32 -d"${seconds}s" --latency "http://127.0.0.1:$port/" |
            awk '/Requests\/sec/ {r=$2} / 50%/ {p50=$2} / 99%/ {p99=$2} END {print r, "p50=" p50, "p99=" p99}')
        echo "port=$port rps=$rps"
    done
done
