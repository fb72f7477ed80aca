#!/usr/bin/env bash
# tollgate against limitador (Kuadrant's rate limiter, the library inside
# limitador-server), side by side in one run (BENCHMARKS.md, "tollgate
# against limitador"):
#
# 1. the in-memory cores, criterion (peers/limitador/benches/in_memory.rs):
#    tollgate's token bucket and sliding log against limitador's fixed
#    window, 1,000 and 100,000 clients, ROUNDS rounds, medians and ratios;
# 2. the Redis stores on one private redis-server (never the shared one on
#    6379), under the same concurrent load (peers/limitador/src/bin/
#    redis_peers.rs): decisions/s, p50/p99, Redis calls per decision, and
#    the requests allowed beyond the limit.
#
#   scripts/bench-limitador.sh
#   ROUNDS=5 CALLS=200000 scripts/bench-limitador.sh
#   REDIS_CPUS=1 CLIENT_CPUS=0 scripts/bench-limitador.sh   # Redis on a core of its own
#
# peers/limitador is a crate of its own, outside the workspace, so that
# limitador and RocksDB (which limitador's Redis store does not compile
# without) are built here only, never by CI. RocksDB's bindings want
# libclang: installed with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench/on-cpus.sh
. scripts/bench/on-cpus.sh

ROUNDS=${ROUNDS:-3}
MEASUREMENT=${MEASUREMENT:-3}
CALLS=${CALLS:-100000}
TASKS=${TASKS:-64}
REDIS_PORT=${REDIS_PORT:-16590}
REDIS_CPUS=${REDIS_CPUS:-}
CLIENT_CPUS=${CLIENT_CPUS:-}
PEERS=peers/limitador

command -v redis-server >/dev/null || { echo "redis-server is missing" >&2; exit 1; }
if ! ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1; then
  apt-get install -y libclang-dev >&2
fi
(cd "$PEERS" && cargo build --release --bins --benches >&2)

REDIS_PID=
WORK=$(mktemp -d)
cleanup() {
  [ -z "$REDIS_PID" ] || { kill -KILL "$REDIS_PID" 2>/dev/null; wait "$REDIS_PID" 2>/dev/null || true; }
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "== in memory: criterion medians (ns per decision), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
median_ns() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' "$PEERS/target/criterion/$1/new/estimates.json"; }
RESULTS=$WORK/results
for round in $(seq "$ROUNDS"); do
  (cd "$PEERS" && cargo bench -q --bench in_memory -- --warm-up-time 1 \
    --measurement-time "$MEASUREMENT" --noplot >/dev/null 2>&1)
  for clients in 1k-clients 100k-clients; do
    for subject in tollgate-token-bucket tollgate-sliding-window limitador-fixed-window; do
      ns=$(median_ns "single-thread_$clients/$subject")
      echo "$clients $subject $ns" >>"$RESULTS"
    done
  done
  echo "round $round done, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
done
python3 - "$RESULTS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    clients, subject, ns = line.split()
    rows.setdefault((clients, subject), []).append(float(ns))
for (clients, subject), v in rows.items():
    print(f"  {clients:13} {subject:25} {statistics.median(v):9.1f} ns   rounds: {' / '.join(f'{x:.1f}' for x in v)}")
for clients in ("1k-clients", "100k-clients"):
    lim = statistics.median(rows[(clients, "limitador-fixed-window")])
    for subject in ("tollgate-token-bucket", "tollgate-sliding-window"):
        mine = statistics.median(rows[(clients, subject)])
        print(f"  {clients}: {subject} decides {lim / mine:.1f}x as many per second as limitador")
PY

echo "== on Redis (a private redis-server on port $REDIS_PORT), $TASKS callers, $CALLS decisions a run"
(on_cpus "$REDIS_CPUS" redis-server --port "$REDIS_PORT" --save "" --appendonly no --dir "$WORK" \
  >"$WORK/redis.log" 2>&1) &
REDIS_PID=$!
for _ in $(seq 100); do
  redis-cli -p "$REDIS_PORT" PING 2>/dev/null | grep -q PONG && break
  sleep 0.05
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
(on_cpus "$CLIENT_CPUS" "$PEERS/target/release/redis_peers" "redis://127.0.0.1:$REDIS_PORT" \
  "$ROUNDS" "$CALLS" "$TASKS")
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
