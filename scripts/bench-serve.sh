#!/usr/bin/env bash
# Benchmarks `tollgate serve` over HTTP on loopback with keep-alive, using wrk
# (apt-get install -y wrk) as the external load generator beside it.
#
#   scripts/bench-serve.sh            # throughput/latency + memory bound
#   DURATION=20s CONNECTIONS=64 scripts/bench-serve.sh
#
# Prints wrk's report for each run and the server's VmRSS from /proc.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-32}
WRK_THREADS=${WRK_THREADS:-1}
DISTINCT_DURATION=${DISTINCT_DURATION:-40s}
BIN=target/release/tollgate
PORT=18181

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
cargo build --release -p tollgate-cli >&2

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

start() { # start ARGS...: runs the server, waits until it answers
  "$BIN" serve "$@" >/tmp/tollgate-bench.out 2>/tmp/tollgate-bench.err &
  SERVER=$!
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "the server did not start" >&2; cat /tmp/tollgate-bench.err >&2; exit 1
}
stop() { kill -TERM "$SERVER"; wait "$SERVER" || true; }
trap 'kill -TERM "${SERVER:-0}" 2>/dev/null || true' EXIT

echo "== decisions: POST /v1/check, embedded default plan (100/s sliding window), 10,000 clients, memory store"
start --listen "127.0.0.1:$PORT"
wrk -t1 -c8 -d3s -s scripts/bench/check.lua "http://127.0.0.1:$PORT" >/dev/null # warm-up
wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s scripts/bench/check.lua "http://127.0.0.1:$PORT"
echo "server VmRSS after the run: $(rss_kib "$SERVER") KiB"
stop

echo
echo "== forward auth: GET /v1/auth, one client id header, memory store"
start --listen "127.0.0.1:$PORT"
wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -H "X-Client-Id: gateway" "http://127.0.0.1:$PORT/v1/auth"
stop

echo
echo "== memory bound: distinct client ids, max_clients = 100000 (scripts/bench/memory.toml)"
start --config scripts/bench/memory.toml
echo "server VmRSS at start: $(rss_kib "$SERVER") KiB"
wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"$DISTINCT_DURATION" -s scripts/bench/distinct.lua "http://127.0.0.1:$PORT"
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^tollgate_(tracked_clients|clients_dropped_total|requests_total)'
echo "server VmRSS after the run: $(rss_kib "$SERVER") KiB"
stop
