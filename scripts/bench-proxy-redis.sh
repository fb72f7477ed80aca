#!/usr/bin/env bash
# `tollgate proxy` on Redis, one binary after the other (a before/after): a
# private redis-server, the hello_upstream example, `tollgate proxy --redis`
# keyed by an X-Client-Id header (10,000 clients in turn, GCRA 1000/s: no
# client reaches its limit, so every request is decided by Redis and
# forwarded), and wrk (one thread, 64 connections). Prints per round and
# binary requests/s, p99 and non-2xx answers, then Redis's EVALSHA count and
# the load average. Loopback only; every process is stopped by its PID.
#
#   flock /tmp/tollgate-bench.lock env BINS="/tmp/before /tmp/after" scripts/bench-proxy-redis.sh
#   env: BINS (target/release/tollgate), ROUNDS (3), DURATION (6s),
#        REDIS_PORT (16399), UPSTREAM_PORT (18301), PROXY_PORT (18302)
set -euo pipefail
cd "$(dirname "$0")/.."
bins=${BINS:-target/release/tollgate}
rounds=${ROUNDS:-3}
duration=${DURATION:-6s}
rport=${REDIS_PORT:-16399}
uport=${UPSTREAM_PORT:-18301}
pport=${PROXY_PORT:-18302}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
cargo build --release -q -p tollgate-proxy --example hello_upstream

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no >/dev/null & pids+=($!)
target/release/examples/hello_upstream "127.0.0.1:$uport" >/dev/null & pids+=($!)
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done

for round in $(seq "$rounds"); do
  for bin in $bins; do
    "$bin" proxy --upstream "http://127.0.0.1:$uport" --listen "127.0.0.1:$pport" \
      --redis "redis://127.0.0.1:$rport" --key header:X-Client-Id \
      --policy gcra --limit 1000 --window 1s >/dev/null 2>&1 &
    proxy=$!
    for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$pport/" && break; sleep 0.1; done
    out=$(wrk -t1 -c64 -d"$duration" --latency -s scripts/bench/client-ids.lua "http://127.0.0.1:$pport/")
    rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
    p99=$(echo "$out" | awk '$1=="99%"{print $2}')
    non2xx=$(echo "$out" | awk '/Non-2xx/{print $4}')
    echo "round $round $bin req/s=$rps p99=$p99 non2xx=${non2xx:-0}"
    kill "$proxy"; wait "$proxy" 2>/dev/null || true
  done
done
redis-cli -p "$rport" info commandstats | grep -E '^cmdstat_evalsha' | tr -d '\r'
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
