#!/usr/bin/env bash
# What `[store] replicas_to_ack` costs: `tollgate serve` on a private Redis
# with one replica (both started here, on loopback), POST /v1/check for
# 10,000 clients under wrk, with replicas_to_ack = 0 and = 1, alternating,
# in one run. Prints wrk's report, the server's CPU per request, and the
# master's commands per decision (EVALSHA and WAIT calls, from INFO
# commandstats).
#
#   scripts/bench-replica-ack.sh                   # ROUNDS=2 DURATION=10s CONNECTIONS=64
#   ROUNDS=3 BATCH_MAX=1 scripts/bench-replica-ack.sh   # every decision a call of its own
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
BATCH_MAX=${BATCH_MAX:-64}
BIN=${BIN:-target/release/tollgate}
PORT=18191
MASTER=${MASTER_PORT:-17391}
REPLICA=${REPLICA_PORT:-17392}

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
[ -n "${BIN_BUILT:-}" ] || cargo build --release -p tollgate-cli >&2

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}" "${SERVER:-}"; do [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime + stime
TICK_US=$((1000000 / $(getconf CLK_TCK)))
stat_calls() { # stat_calls NAME: calls of a command on the master so far
  redis-cli -p "$MASTER" INFO commandstats | tr -d '\r' |
    awk -F'[=,:]' -v name="cmdstat_$1" '$1 == name {print $3; found=1} END {if (!found) print 0}'
}

redis-server --port "$MASTER" --save "" --appendonly no --dir "$WORK" \
  --repl-diskless-sync-delay 0 --daemonize no >"$WORK/master.log" 2>&1 &
PIDS+=($!)
redis-server --port "$REPLICA" --save "" --appendonly no --dir "$WORK" \
  --replicaof 127.0.0.1 "$MASTER" --daemonize no >"$WORK/replica.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
  redis-cli -p "$REPLICA" INFO replication 2>/dev/null | grep -q master_link_status:up && break
  sleep 0.1
done
redis-cli -p "$REPLICA" INFO replication | grep -q master_link_status:up ||
  { echo "the replica never got in sync" >&2; exit 1; }

config() { # config ACKS: serve's config file
  cat >"$WORK/acks-$1.toml" <<EOF
listen = ["127.0.0.1:$PORT"]
default_plan = "free"

[store]
url = "redis://127.0.0.1:$MASTER"
batch_max = $BATCH_MAX
replicas_to_ack = $1

[[plans.free]]
name = "1h"
policy = "sliding-window"
limit = 1000000
window = "1h"
EOF
  echo "$WORK/acks-$1.toml"
}

echo "machine: $(nproc) cores; master :$MASTER, replica :$REPLICA; batch_max $BATCH_MAX; $CONNECTIONS connections, $DURATION"
for round in $(seq "$ROUNDS"); do
  for acks in 0 1; do
    echo "-- round $round, replicas_to_ack = $acks, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$BIN" serve --config "$(config "$acks")" >"$WORK/serve.out" 2>"$WORK/serve.err" &
    SERVER=$!
    for _ in $(seq 100); do
      curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
      sleep 0.1
    done
    wrk -t1 -c8 -d2s -s scripts/bench/check.lua "http://127.0.0.1:$PORT" >/dev/null # warm-up
    before=$(cpu_ticks "$SERVER")
    evalsha_before=$(stat_calls evalsha)
    wait_before=$(stat_calls wait)
    wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency -s scripts/bench/check.lua \
      "http://127.0.0.1:$PORT" | tee "$WORK/wrk.out" | grep -E "Requests/sec|^ +(50|99)%|Non-2xx"
    after=$(cpu_ticks "$SERVER")
    requests=$(awk '/requests in/ {print $1}' "$WORK/wrk.out")
    echo "server CPU per request: $(((after - before) * TICK_US / requests)) us (user+system)"
    echo "per decision: EVALSHA $(awk -v a="$(stat_calls evalsha)" -v b="$evalsha_before" -v n="$requests" 'BEGIN {printf "%.3f", (a - b) / n}')," \
      "WAIT $(awk -v a="$(stat_calls wait)" -v b="$wait_before" -v n="$requests" 'BEGIN {printf "%.3f", (a - b) / n}')"
    curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^tollgate_decisions_by_total' | sort || true
    kill -TERM "$SERVER"; wait "$SERVER" || true
    SERVER=
  done
done
