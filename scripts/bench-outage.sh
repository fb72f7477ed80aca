#!/usr/bin/env bash
# A Redis outage under load: `tollgate serve --config` on a private
# redis-server (never the shared one), with wrk (apt-get install -y wrk) as
# the external load generator. For the circuit breaker on (defaults: opens
# after 5 transient failures, probes every 500 ms) and off
# (breaker_failures = 0), side by side in one run:
#   1. Redis up: POST /v1/check, 10,000 clients (baseline);
#   2. Redis killed (SIGKILL by PID): the same load, answered by fail-closed;
#   3. GET /healthz under the same load while Redis is down: the ceiling the
#      outage's answers are compared with (no decision, no store);
#   4. Redis restarted on the same port: the time from "redis-server answers
#      PING" to the first decision by the store (polled every 5 ms).
# For runs 1 and 2 it also prints the server's own view of the decisions, from
# its histogram tollgate_decision_duration_seconds (read before and after the
# run): the share decided within 1 ms and 2 ms, and the bucket holding the
# 99th percentile. wrk's percentiles include the time a request waits for a
# core (wrk, the server and Redis share two); the histogram's do not.
#
#   scripts/bench-outage.sh
#   DURATION=10s CONNECTIONS=32 scripts/bench-outage.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5s}
CONNECTIONS=${CONNECTIONS:-16}
BIN=target/release/tollgate
PORT=18191
REDIS_PORT=${REDIS_PORT:-16391}
WORK=$(mktemp -d)

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server is missing" >&2; exit 1; }
cargo build --release -p tollgate-cli >&2

REDIS=0
SERVER=0
cleanup() {
  kill -TERM "$SERVER" 2>/dev/null || true
  kill -KILL "$REDIS" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

redis_start() {
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$WORK" >"$WORK/redis.log" 2>&1 &
  REDIS=$!
  for _ in $(seq 200); do
    [ "$(redis-cli -p "$REDIS_PORT" PING 2>/dev/null)" = PONG ] && return
    sleep 0.01
  done
  echo "redis-server did not start" >&2; exit 1
}
redis_kill() { kill -KILL "$REDIS"; wait "$REDIS" 2>/dev/null || true; }

server_start() { # server_start CONFIG
  "$BIN" serve --config "$1" --listen "127.0.0.1:$PORT" --grpc-listen 127.0.0.1:0 \
    >"$WORK/serve.out" 2>"$WORK/serve.err" &
  SERVER=$!
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "the server did not start" >&2; cat "$WORK/serve.err" >&2; exit 1
}
server_stop() { kill -TERM "$SERVER"; wait "$SERVER" || true; }

load() { # load LABEL [PATH]: one wrk run, its latency percentiles and rate
  if [ -n "${2:-}" ]; then # a plain GET of PATH
    wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency "http://127.0.0.1:$PORT$2" >"$WORK/wrk.txt"
  else # POST /v1/check for 10,000 clients
    wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency -s scripts/bench/check.lua \
      "http://127.0.0.1:$PORT" >"$WORK/wrk.txt"
  fi
  awk -v label="$1" '
    /Requests\/sec/ {rps = $2}
    /^ +50%/ {p50 = $2} /^ +90%/ {p90 = $2} /^ +99%/ {p99 = $2}
    END {printf "%-34s %10s req/s   p50 %8s   p90 %8s   p99 %8s\n", label, rps, p50, p90, p99}
  ' "$WORK/wrk.txt"
}

histogram() { curl -s "http://127.0.0.1:$PORT/metrics" | grep '^tollgate_decision_duration_seconds_bucket'; }
decisions_in_server() { # decisions_in_server BEFORE AFTER: the histogram's difference, summarised
  awk '
    { match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5); count = $NF }
    FNR == NR { before[le] = count; next }
    { n++; bound[n] = le; cum[n] = count - before[le] }
    END {
      total = cum[n]; p99 = "-"
      for (i = 1; i <= n; i++) {
        if (bound[i] == "0.001") within1 = cum[i]
        if (bound[i] == "0.002") within2 = cum[i]
        if (p99 == "-" && cum[i] >= 0.99 * total) p99 = bound[i]
      }
      printf "%-34s %10d decisions: %.3f%% within 1 ms, %.3f%% within 2 ms, p99 <= %s s\n",
        "  in the server (histogram)", total, 100 * within1 / total, 100 * within2 / total, p99
    }' "$1" "$2"
}

recovery() { # sets RECOVERY_MS: from Redis answering PING to the first store decision
  local start now
  redis_start
  start=$(date +%s%N)
  RECOVERY_MS=never
  for _ in $(seq 2000); do
    if curl -fs -X POST -H 'Content-Type: application/json' \
      -d '{"client":"probe","cost":1}' "http://127.0.0.1:$PORT/v1/check" |
      grep -q '"decided_by":"store"'; then
      now=$(date +%s%N)
      RECOVERY_MS=$(((now - start) / 1000000))
      return
    fi
    sleep 0.005
  done
}

echo "machine: $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for breaker in on off; do
  failures=5
  [ "$breaker" = off ] && failures=0
  cat >"$WORK/config.toml" <<TOML
[[plans.default]]
name = "1s"
policy = "sliding-window"
limit = 100
window = "1s"

[store]
url = "redis://127.0.0.1:$REDIS_PORT"
failure_policy = "fail-closed"
timeout = "100ms"
breaker_failures = $failures
breaker_probe_interval = "500ms"
TOML
  echo "== circuit breaker $breaker (breaker_failures = $failures, probe every 500 ms, timeout 100 ms)"
  redis_start
  server_start "$WORK/config.toml"
  wrk -t1 -c8 -d2s -s scripts/bench/check.lua "http://127.0.0.1:$PORT" >/dev/null # warm-up
  histogram >"$WORK/h0"
  load "redis up"
  histogram >"$WORK/h1"
  decisions_in_server "$WORK/h0" "$WORK/h1"
  redis_kill
  load "redis killed (fail-closed answers)"
  histogram >"$WORK/h2"
  decisions_in_server "$WORK/h1" "$WORK/h2"
  load "GET /healthz (ceiling, redis down)" /healthz
  curl -s "http://127.0.0.1:$PORT/metrics" |
    grep -E '^tollgate_(store_circuit_open|store_short_circuited_total|store_errors_total|decisions_by_total)' |
    grep -v ' 0$' || true
  for i in 1 2 3; do
    recovery
    echo "recovery $i: $RECOVERY_MS ms from Redis back to the first store decision"
    redis_kill
    # let the outage be noticed (and the circuit open) before the next restart
    for _ in $(seq 10); do
      curl -fs -X POST -H 'Content-Type: application/json' -d '{"client":"x","cost":1}' \
        "http://127.0.0.1:$PORT/v1/check" >/dev/null || true
    done
  done
  server_stop
  echo
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
