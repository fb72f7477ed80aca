#!/usr/bin/env bash
# Benchmarks `tollgate serve` over HTTP on loopback with keep-alive, using wrk
# (apt-get install -y wrk) as the external load generator beside it.
#
#   scripts/bench-serve.sh            # throughput/latency + memory bound
#   DURATION=20s CONNECTIONS=64 scripts/bench-serve.sh
#   REDIS_URL=redis://127.0.0.1:6380 scripts/bench-serve.sh   # another Redis for the Redis run
#   ONLY=dashboard ROUNDS=3 scripts/bench-serve.sh   # only the dashboard counters' cost (on/off, alternating)
#
# Prints wrk's report for each run and the server's VmRSS from /proc.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-32}
WRK_THREADS=${WRK_THREADS:-1}
DISTINCT_DURATION=${DISTINCT_DURATION:-20s}
BIN=target/release/tollgate
PORT=18181
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
cargo build --release -p tollgate-cli >&2

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime + stime
TICK_US=$((1000000 / $(getconf CLK_TCK)))

measure() { # measure WRK_ARGS...: one wrk run, plus the server's CPU time per request
  local before after requests
  before=$(cpu_ticks "$SERVER")
  wrk "$@" | tee /tmp/tollgate-bench.wrk
  after=$(cpu_ticks "$SERVER")
  requests=$(awk '/requests in/ {print $1}' /tmp/tollgate-bench.wrk)
  echo "server CPU per request: $(( (after - before) * TICK_US / requests )) us (user+system)"
}

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

echo "machine: $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"

dashboard_cost() { # the dashboard's counters on and off, side by side, alternating
  echo "== the dashboard's counters: POST /v1/check, 10,000 clients, [dashboard] enabled = true vs false"
  for round in $(seq "${ROUNDS:-2}"); do
    for state in on off; do
      echo "-- round $round, counters $state (scripts/bench/dashboard-$state.toml), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
      start --config "scripts/bench/dashboard-$state.toml"
      wrk -t1 -c8 -d2s -s scripts/bench/check.lua "http://127.0.0.1:$PORT" >/dev/null # warm-up
      measure -t"$WRK_THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s scripts/bench/check.lua "http://127.0.0.1:$PORT"
      stop
    done
  done
}
if [ "${ONLY:-}" = dashboard ]; then dashboard_cost; exit 0; fi
echo "== decisions: POST /v1/check, embedded default plan (100/s sliding window), 10,000 clients, memory store"
start --listen "127.0.0.1:$PORT"
wrk -t1 -c8 -d3s -s scripts/bench/check.lua "http://127.0.0.1:$PORT" >/dev/null # warm-up
measure -t"$WRK_THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s scripts/bench/check.lua "http://127.0.0.1:$PORT"
echo "server VmRSS after the run: $(rss_kib "$SERVER") KiB"
echo "-- the same with one prebuilt request (one client: mostly rejections; the cheapest load for wrk to generate)"
measure -t"$WRK_THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s scripts/bench/static.lua "http://127.0.0.1:$PORT"
stop

echo
echo "== decisions on the Redis store: POST /v1/check, 10,000 clients, $REDIS_URL (one EVALSHA per decision)"
start --listen "127.0.0.1:$PORT" --redis "$REDIS_URL"
wrk -t1 -c8 -d3s -s scripts/bench/check.lua "http://127.0.0.1:$PORT" >/dev/null # warm-up
measure -t"$WRK_THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s scripts/bench/check.lua "http://127.0.0.1:$PORT"
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^tollgate_decisions_by_total'
stop

echo
echo "== baseline without a decision: GET /healthz (what HTTP alone costs here)"
start --listen "127.0.0.1:$PORT"
measure -t"$WRK_THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "http://127.0.0.1:$PORT/healthz"
stop

echo
echo "== forward auth: GET /v1/auth, X-Client-Id c0..c9999, memory store"
start --listen "127.0.0.1:$PORT"
measure -t"$WRK_THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s scripts/bench/auth.lua "http://127.0.0.1:$PORT"
stop

echo
dashboard_cost

echo
echo "== memory bound: distinct client ids, max_clients = 100000 (scripts/bench/memory.toml)"
start --config scripts/bench/memory.toml
echo "server VmRSS at start: $(rss_kib "$SERVER") KiB"
# Until at least 1,000,000 distinct client ids have been decided.
for round in $(seq 20); do
  wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"$DISTINCT_DURATION" -s scripts/bench/distinct.lua "http://127.0.0.1:$PORT" | grep 'requests in'
  metrics=$(curl -s "http://127.0.0.1:$PORT/metrics")
  decided=$(echo "$metrics" | awk '/^tollgate_requests_total/ {n += $2} END {print n}')
  echo "$metrics" | grep -E '^tollgate_(tracked_clients|clients_dropped_total)'
  echo "after $decided distinct clients: server VmRSS $(rss_kib "$SERVER") KiB"
  [ "$decided" -ge 1000000 ] && break
done
stop
